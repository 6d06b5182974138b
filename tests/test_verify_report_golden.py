"""A verify report's JSON, pinned: the refactor of verify_models into VerificationSession must leave every key and value of the report as it was, with and without the float64
reference. The golden files were written by the code before that refactor
(tests/data/verify_report_golden_*.json); only timings are left out (they vary run to run). They were
rewritten once, deliberately, when generated inputs gained the sets that reach the graph's branches
(verify/branches.py: two threshold sets for the Relu kink and the comparison's constant); every
verdict stayed as it was. Later, every output row and localised value gained
`excused` (which rule explained how many differing elements) and `worst_elements`, and each
rounding bound `derived` (whether the derived per-element bound judges the candidate); nothing else
changed. Without the reference, localisation's run count rose from 24 to 40 when the fallback rule
stopped lending every element the output's RMS: intermediates that rounding explains only with the
original's sensitivity now get their perturbation runs; every verdict stayed as it was. The run
settings then gained `prepacking` (strict runs do not prepack weights: verify/ort/settings.py);
nothing else changed.

The model is elementwise IEEE arithmetic only (Mul, Add, Div, Relu, Greater: each correctly rounded
in every onnxruntime build), so the figures do not depend on the machine's SIMD paths.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import verify_models
from onnxrefine.verify.session import DECLINING_REFERENCE

DATA = pathlib.Path(__file__).resolve().parent / "data"
F = TensorProto.FLOAT


def golden_pair():
    """(x*a)*b + c / d vs x*(a*b) + c*(1/d): rounding; Relu and the comparison are unchanged."""
    a, b, c, d = (np.float32(v) for v in (1.1, 3.3, 0.7, 3.0))
    consts = [tensor("a", a), tensor("b", b), tensor("c", c), tensor("d", d), tensor("ab", a * b),
              tensor("rd", np.float32(1.0) / d)]
    shared = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Greater", ["x", "c"], ["g"])]
    outputs = [value_info("y", F, [2, 3]), value_info("r", F, [2, 3]), value_info("g", TensorProto.BOOL, [2, 3])]
    inputs = [value_info("x", F, [2, 3])]
    original = make_model([helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Mul", ["xa", "b"], ["p"]),
                           helper.make_node("Div", ["c", "d"], ["q"]), helper.make_node("Add", ["p", "q"], ["y"]),
                           *shared], inputs, outputs, consts)
    candidate = make_model([helper.make_node("Mul", ["x", "ab"], ["p"]), helper.make_node("Mul", ["c", "rd"], ["q"]),
                            helper.make_node("Add", ["p", "q"], ["y"]), *shared], inputs, outputs, consts)
    return original, candidate


def stable_dict(report) -> dict:
    result = json.loads(report.to_json())
    result.pop("timings")
    if result.get("localisation"):
        result["localisation"].pop("seconds", None)
    return result


def report_for(mode: str):
    original, candidate = golden_pair()
    kwargs = {"reference": DECLINING_REFERENCE} if mode == "fallback" else {}
    return verify_models(original, candidate, trials=2, seed=3, **kwargs)


@pytest.mark.parametrize("mode", ["float64", "fallback"])
def test_verify_report_json_is_unchanged(mode):
    expected = json.loads((DATA / f"verify_report_golden_{mode}.json").read_text())
    assert stable_dict(report_for(mode)) == expected
