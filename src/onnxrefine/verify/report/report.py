"""The verification report: per-output findings, notes and JSON output (cli/verify_output.py prints it)."""

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
    worst_elements: list = field(default_factory=list)  # judge.verdict.Judgement.worst_elements
    notes: list = field(default_factory=list)
    # rule name (rules.RULES) -> differing elements it explained, over all input sets
    excused: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return json_safe(dict(self.__dict__))


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
        return json_safe({
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


def json_safe(value):
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value
