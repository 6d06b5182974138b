"""eliminate_reshape_around_elementwise: Reshape -> elementwise region -> Reshape back to the first
input's shape loses both Reshapes (GPT-2's GELU between Conv1D layers). Each guard has a case."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, op_types, tensor, value_info
from onnx import helper
from passutil import check_pass, special_floats

from onnxrefine.api import optimize_with_report
from onnxrefine.passes.registry import get_pass
from onnxrefine.rewrite.rule import EXACT

RULE = "eliminate_reshape_around_elementwise"


def gelu_between_reshapes(x_shape=(6, 8), mid=(1, 6, 8), back=(-1, 8), half=np.float32(0.5), extra=None,
                          region_output=False):
    """x -> Reshape(mid) -> tanh-GELU-like region -> Reshape(back)."""
    nodes = [
        helper.make_node("Reshape", ["x", "mid"], ["r"]),
        helper.make_node("Mul", ["r", "half"], ["a"]),
        helper.make_node("Pow", ["r", "three"], ["p"]),
        helper.make_node("Add", ["r", "p"], ["s"]),
        helper.make_node("Tanh", ["s"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["u"]),
        helper.make_node("Mul", ["a", "u"], ["g"]),
        helper.make_node("Reshape", ["g", "back"], ["y"]),
    ]
    inits = [tensor("mid", np.array(mid, np.int64)), tensor("back", np.array(back, np.int64)),
             tensor("half", np.asarray(half, np.float32)), tensor("three", np.array(3.0, np.float32)),
             tensor("one", np.array(1.0, np.float32))]
    outputs = [value_info("y")]
    if extra is not None:
        nodes.append(helper.make_node("Neg", [extra], ["z"]))
        outputs.append(value_info("z"))
    if region_output:
        outputs.append(value_info("t"))
    return make_model(nodes, [value_info("x", shape=list(x_shape))], outputs, inits)


def feeds(shape=(6, 8)):
    return [{"x": special_floats(shape, seed=s)} for s in range(3)]


def test_class_is_exact():
    assert get_pass(RULE).kind == EXACT


def test_both_reshapes_go_and_outputs_stay_bit_identical():
    model = gelu_between_reshapes()
    optimized = check_pass(model, RULE, feeds())
    assert "Reshape" not in op_types(optimized)
    assert len(optimized.graph.node) == len(model.graph.node) - 2


@pytest.mark.parametrize("kwargs, why", [
    ({"x_shape": (8, 6), "half": np.linspace(0, 1, 8, dtype=np.float32), "mid": (6, 8), "back": (8, 6)},
     "a constant with more than one element pairs with other elements (here: no longer broadcasts)"),
    ({"back": (2, 24)}, "the second Reshape does not return to x's shape"),
    ({"extra": "r"}, "the first Reshape's output is read outside the region"),
    ({"extra": "a"}, "a region value is read outside the region"),
    ({"region_output": True}, "a region value is a graph output"),
    ({"half": np.full((1, 1, 1, 1), 0.5, np.float32)}, "a rank-4 scalar broadcasts x to rank 4"),
])
def test_guards(kwargs, why):
    model = gelu_between_reshapes(**kwargs)
    optimized = check_pass(model, RULE, feeds(kwargs.get("x_shape", (6, 8))), changed=False)
    assert op_types(optimized).count("Reshape") == 2, why
    _, report = optimize_with_report(model, [RULE], certify=False)
    assert report.log.refusal_counts().get(RULE, 0) == 1, why


def test_transposing_constant_is_refused_even_when_shapes_return():
    """A per-position constant ([1, 6, 8] here) would pair with other elements if the data were
    laid out differently; it is refused even though the Reshapes return to x's shape."""
    model = gelu_between_reshapes(half=special_floats((1, 6, 8), seed=9))
    check_pass(model, RULE, feeds(), changed=False)


def test_symbolic_shapes_refused():
    model = gelu_between_reshapes(x_shape=("n", 8), mid=(1, -1, 8))
    check_pass(model, RULE, feeds((6, 8)), changed=False)
    uncertified, _ = optimize_with_report(model, [RULE], certify=False)
    assert op_types(uncertified).count("Reshape") == 2
