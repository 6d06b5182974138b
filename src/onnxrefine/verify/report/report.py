"""The verification report: per-output findings, notes, JSON output and the terminal table."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from onnxrefine.atomic import write_atomic
from onnxrefine.verify.judge import EXACT, MISMATCH, ROUNDING, UNSTABLE, VERDICTS, worst
from onnxrefine.verify.report.html import render_html, worst_values

__all__ = ["EXACT", "ROUNDING", "UNSTABLE", "MISMATCH", "VERDICTS", "OutputReport",
           "VerificationReport", "write_atomic"]


@dataclass
class OutputReport:
    name: str
    verdict: str
    dtype: str
    shape: list
    candidate_shape: list
    candidate_dtype: str
    comparison: dict  # compare.Comparison.to_dict(), merged over the ordinary input sets
    comparison_extreme: dict = field(default_factory=dict)  # the same over extreme-magnitude sets
    differing: int = 0
    unexplained: int = 0
    unstable_positions: int = 0
    orig_err_max: float | None = None  # max |original - float64 reference|
    cand_err_max: float | None = None  # max |candidate - float64 reference|
    reference: str = "none"  # "float64", "no float64 reference", "not needed"
    bound: dict = field(default_factory=dict)
    scatter: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return _json_safe(dict(self.__dict__))


@dataclass
class VerificationReport:
    verdict: str
    outputs: list  # OutputReport, in the original's output order
    notes: list = field(default_factory=list)
    input_sets: list = field(default_factory=list)  # labels of the sets used
    settings: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    # OutputReport per output, candidate vs original both run under the deployment settings.
    deployment: list = field(default_factory=list)
    # Layer-wise localisation (localize/layerwise.py): None when not run; else its section, with
    # "first_bad" (the first intermediate judged mismatch, in the original's topological order).
    localisation: dict | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict in (EXACT, ROUNDING) else 1

    @property
    def failing_outputs(self) -> list:
        failing = [out.name for out in self.outputs if out.verdict in (UNSTABLE, MISMATCH)]
        return failing + [f"{out.name} (deployment)" for out in self.deployment
                          if out.verdict in (UNSTABLE, MISMATCH) and out.name not in failing]

    def to_dict(self) -> dict:
        return _json_safe({
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "outputs": [out.to_dict() for out in self.outputs],
            "deployment": [out.to_dict() for out in self.deployment],
            "notes": list(self.notes),
            "input_sets": list(self.input_sets),
            "settings": dict(self.settings),
            "timings": dict(self.timings),
            "localisation": self.localisation,
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def write_json(self, path) -> None:
        write_atomic(path, self.to_json() + "\n")

    def write_html(self, path) -> None:
        write_atomic(path, render_html(self))

    @property
    def first_bad_value(self) -> dict | None:
        return (self.localisation or {}).get("first_bad")

    @staticmethod
    def overall(outputs, localisation: dict | None = None) -> str:
        """The worst output verdict; an intermediate judged mismatch makes it a mismatch (a bad
        fold deep inside a network can hide in the output's rounding bound). An unstable
        intermediate does not: the outputs' own controls decide what instability reaches them."""
        verdict = worst(out.verdict for out in outputs)
        if localisation and localisation.get("first_bad"):
            verdict = worst([verdict, MISMATCH])
        return verdict


def _json_safe(value):
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def format_number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if value == 0:
        return "0"
    return f"{value:.3g}"


def render_table(report: VerificationReport, console) -> None:
    """Print the per-output table with rich (and the deployment section's, when there is one)."""
    _render_outputs(report.outputs, "onnxrefine verify", console)
    if report.deployment:
        settings = report.settings.get("deployment") or {}
        title = (f"deployment: level {settings.get('level', '?')}, "
                 f"{', '.join(settings.get('providers', []))} (original and candidate both so run)")
        _render_outputs(report.deployment, title, console)
    for note in report.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    render_localisation(report, console)


def _render_outputs(outputs, title: str, console) -> None:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in ("output", "verdict", "max_abs", "max_rel", "max ulp", "p99 ulp", "differing",
                   "orig err vs f64", "cand err vs f64"):
        table.add_column(column, justify="left" if column in ("output", "verdict") else "right")
    styles = {EXACT: "green", ROUNDING: "cyan", UNSTABLE: "yellow", MISMATCH: "bold red"}
    for out in outputs:
        comp = out.comparison
        table.add_row(
            _plain(out.name),
            f"[{styles[out.verdict]}]{out.verdict}[/]",
            format_number(comp.get("max_abs")),
            format_number(comp.get("max_rel")),
            format_number(comp.get("max_ulp")),
            format_number(comp.get("p99_ulp")),
            f"{comp.get('differing', out.differing)}/{comp.get('size', 0)}",
            format_number(out.orig_err_max) if out.reference == "float64" else _no_ref(out),
            format_number(out.cand_err_max) if out.reference == "float64" else _no_ref(out),
        )
    console.print(table)
    for out in outputs:
        for note in out.notes:
            console.print(f"  {out.name}: {note}", markup=False, highlight=False)


def _plain(name):
    """A name from a model as a plain-text cell: never rich markup (`[/]` is a valid name)."""
    from onnxrefine.plain import plain

    return plain(name)


def render_localisation(report: VerificationReport, console) -> None:
    """The worst intermediates and the one line that names the first bad value."""
    section = report.localisation
    if not section:
        return
    from rich.table import Table

    rows = worst_values(section)
    if rows:
        table = Table(title="intermediate values (worst first)")
        for column in ("value", "op", "verdict", "max_abs", "max ulp", "unexplained",
                       "orig err vs f64", "cand err vs f64"):
            table.add_column(column, justify="left" if column in ("value", "op", "verdict") else "right")
        styles = {EXACT: "green", ROUNDING: "cyan", UNSTABLE: "yellow", MISMATCH: "bold red"}
        for row in rows:
            table.add_row(_plain(row["name"]), _plain(row["op"]), f"[{styles.get(row['verdict'], '')}]{row['verdict']}[/]",
                          format_number(row.get("max_abs")), format_number(row.get("max_ulp")),
                          f"{row.get('unexplained', 0)}/{row.get('size', 0)}",
                          format_number(row.get("orig_err_max")), format_number(row.get("cand_err_max")))
        console.print(table)
    status = section.get("status", "")
    if "checked" not in section:
        console.print(f"localisation: {status}", markup=False, highlight=False)
        return
    summary = (f"localisation: {status}; {section.get('checked', 0)} intermediate value(s) judged "
               f"({section.get('paired_by_role', 0)} paired by role), "
               f"{section.get('identical_computation', 0)} computed identically, "
               f"{len(section.get('not_comparable') or {})} not comparable"
               f" ({format_number(section.get('seconds'))}s)")
    console.print(summary, markup=False, highlight=False)
    for note in section.get("notes", []):
        console.print(f"note: {note}", markup=False, highlight=False)
    first = section.get("first_bad")
    if first:
        console.print(f"first bad value: {first['description']}", markup=False, highlight=False, soft_wrap=True)
    elif status == "done":
        console.print("first bad value: none", markup=False, highlight=False)


def _no_ref(out: OutputReport) -> str:
    return "no f64 ref" if out.reference == "no float64 reference" else "-"
