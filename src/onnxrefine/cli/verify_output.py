"""What `onnxrefine verify` prints: the per-output table (and the deployment section's), the notes,
the worst intermediate values and the line naming the first bad value.

Through cli/output.py: on a terminal the tables leave out their optional columns (least useful
first) before a name would be split or a header shrunk; in a pipe every row and note is one whole
line.
"""

from __future__ import annotations

from onnxrefine.cli.output import Col, fitted_table
from onnxrefine.plain import plain
from onnxrefine.verify.judge import EXACT, MISMATCH, ROUNDING, UNSTABLE
from onnxrefine.verify.report import OutputReport, VerificationReport, worst_values

_STYLES = {EXACT: "green", ROUNDING: "cyan", UNSTABLE: "yellow", MISMATCH: "bold red"}

# The verdict and how many elements differ always show; the statistics behind them go first.
OUTPUT_COLUMNS = (Col("output", name=True), Col("verdict", name=True), Col("max_abs", "right", drop=5),
                  Col("max_rel", "right", drop=2), Col("max ulp", "right", drop=6), Col("p99 ulp", "right", drop=1),
                  Col("differing", "right"), Col("orig err vs f64", "right", drop=3),
                  Col("cand err vs f64", "right", drop=4))
VALUE_COLUMNS = (Col("value", name=True), Col("op", name=True), Col("verdict", name=True),
                 Col("max_abs", "right", drop=3), Col("max ulp", "right", drop=4), Col("unexplained", "right"),
                 Col("orig err vs f64", "right", drop=1), Col("cand err vs f64", "right", drop=2))


def format_number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if value == 0:
        return "0"
    return f"{value:.3g}"


def _verdict(verdict: str):
    return plain(verdict, _STYLES.get(verdict, ""))


def _line(console, text: str) -> None:
    console.print(plain(text), highlight=False)


def render_table(report: VerificationReport, console) -> None:
    """The per-output table (and the deployment section's, when there is one), the notes and the
    localisation."""
    _render_outputs(report.outputs, "onnxrefine verify", console)
    if report.deployment:
        settings = report.settings.get("deployment") or {}
        _line(console, f"deployment: level {settings.get('level', '?')}, "
                       f"{', '.join(settings.get('providers', []))} (original and candidate both so run)")
        _render_outputs(report.deployment, None, console)
    for note in report.notes:
        _line(console, f"note: {note}")
    render_localisation(report, console)


def _render_outputs(outputs, title: str | None, console) -> None:
    rows = []
    for out in outputs:
        comp = out.comparison
        rows.append((plain(out.name), _verdict(out.verdict), format_number(comp.get("max_abs")),
                     format_number(comp.get("max_rel")), format_number(comp.get("max_ulp")),
                     format_number(comp.get("p99_ulp")), f"{comp.get('differing', out.differing)}/{comp.get('size', 0)}",
                     format_number(out.orig_err_max) if out.reference == "float64" else _no_ref(out),
                     format_number(out.cand_err_max) if out.reference == "float64" else _no_ref(out)))
    console.print(fitted_table(console, title, OUTPUT_COLUMNS, rows))
    for out in outputs:
        for note in out.notes:
            _line(console, f"  {out.name}: {note}")


def render_localisation(report: VerificationReport, console) -> None:
    """The worst intermediates and the one line that names the first bad value."""
    section = report.localisation
    if not section:
        return
    rows = [(plain(row["name"]), plain(row["op"]), _verdict(row["verdict"]), format_number(row.get("max_abs")),
             format_number(row.get("max_ulp")), f"{row.get('unexplained', 0)}/{row.get('size', 0)}",
             format_number(row.get("orig_err_max")), format_number(row.get("cand_err_max")))
            for row in worst_values(section)]
    if rows:
        console.print(fitted_table(console, "intermediate values (worst first)", VALUE_COLUMNS, rows))
    status = section.get("status", "")
    if "checked" not in section:
        _line(console, f"localisation: {status}")
        return
    _line(console, f"localisation: {status}; {section.get('checked', 0)} intermediate value(s) judged "
                   f"({section.get('paired_by_role', 0)} paired by role), "
                   f"{section.get('identical_computation', 0)} computed identically, "
                   f"{len(section.get('not_comparable') or {})} not comparable"
                   f" ({format_number(section.get('seconds'))}s)")
    for note in section.get("notes", []):
        _line(console, f"note: {note}")
    first = section.get("first_bad")
    if first:
        _line(console, f"first bad value: {first['description']}")
    elif status == "done":
        _line(console, "first bad value: none")


def _no_ref(out: OutputReport) -> str:
    return "no f64 ref" if out.reference == "no float64 reference" else "-"
