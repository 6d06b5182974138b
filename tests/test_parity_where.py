"""Equal of a dim and a negative int folds (a dim is never negative); a Where whose constant
condition is uniform selects its operand. Together: Expand's Where(Equal(shape, -1), 1, shape)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, op_types, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass, special_floats

from onnxrefine.api import optimize_with_report
from onnxrefine.passes.registry import get_pass
from onnxrefine.passes.where import SELECT_CONSTANT_WHERE
from onnxrefine.rewrite.rule import EXACT

PASSES = ["fold_shapes", "eliminate_where_with_constant_condition", "eliminate_deadend"]


def expand_target(compare_with):
    """x [batch, 4] -> Where(Equal(Shape(x), compare_with), 1, Shape(x))."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Equal", ["s", "k"], ["e"]),
             helper.make_node("Where", ["e", "one", "s"], ["w"])]
    inits = [tensor("k", np.array(compare_with, np.int64)), tensor("one", np.array(1, np.int64))]
    return make_model(nodes, [value_info("x", shape=["batch", 4])], [value_info("w", TensorProto.INT64, [2])], inits)


def feeds(batch=3):
    return [{"x": special_floats((batch, 4), seed=s)} for s in range(2)]


def test_classes():
    assert get_pass("eliminate_where_with_constant_condition").kind == EXACT
    assert SELECT_CONSTANT_WHERE.kind == EXACT
    assert get_pass("fold_shapes").kind == EXACT


def test_expand_target_reduces_to_the_shape():
    optimized = check_pass(expand_target([-1, -1]), PASSES, feeds(3) + feeds(1))
    assert op_types(optimized) == ["Shape"]


@pytest.mark.parametrize("value", [3, 0])
def test_equal_to_a_non_negative_int_stays(value):
    # batch may be 3 (or 0): nothing says Equal is false; with batch 3 (0) it is true at run time.
    model = expand_target([value, -1])
    optimized = check_pass(model, PASSES, feeds(3) + feeds(0), changed=False)
    assert "Equal" in op_types(optimized)


def where_model(condition, a_shape, b_shape, dtype=TensorProto.INT64):
    nodes = [helper.make_node("Where", ["c", "a", "b"], ["w"]), helper.make_node("Neg", ["w"], ["y"])]
    inits = [tensor("c", np.array(condition, bool))]
    return make_model(nodes, [value_info("a", dtype, a_shape), value_info("b", dtype, b_shape)],
                      [value_info("y", dtype, None)], inits)


def where_feeds(a_shape, b_shape, dtype=np.int64):
    if dtype == np.int64:
        rng = np.random.default_rng(0)
        return [{"a": rng.integers(-5, 5, a_shape), "b": rng.integers(-5, 5, b_shape)}]
    return [{"a": special_floats(tuple(a_shape), seed=1), "b": special_floats(tuple(b_shape), seed=2)}]


def test_uniform_conditions_select():
    for condition, expected_input in (([[True] * 4] * 2, "a"), ([[False] * 4] * 2, "b")):
        model = where_model(condition, [2, 4], [2, 4])
        optimized = check_pass(model, "eliminate_where_with_constant_condition", where_feeds([2, 4], [2, 4]))
        assert op_types(optimized) == ["Neg"]
        assert optimized.graph.node[0].input[0] == expected_input


@pytest.mark.parametrize("condition, a_shape, b_shape, why", [
    ([True, False, True, True], [4], [4], "mixed condition"),
    ([[True] * 4] * 2, [4], [2, 4], "a is broadcast to [2, 4]"),
    ([[False]] * 2, [2, 4], [1, 4], "b is broadcast along axis 0"),
])
def test_where_refused(condition, a_shape, b_shape, why):
    model = where_model(condition, a_shape, b_shape)
    check_pass(model, "eliminate_where_with_constant_condition", where_feeds(a_shape, b_shape), changed=False)
    assert_uncertified_refusal(model, why)


def test_float_where_refused():
    """onnxruntime's float Where returns +0.0 where it selects -0.0: selecting the operand directly
    would keep the -0.0 (the per-rewrite certificate found this)."""
    model = where_model([[True] * 4] * 2, [2, 4], [2, 4], TensorProto.FLOAT)
    check_pass(model, "eliminate_where_with_constant_condition", where_feeds([2, 4], [2, 4], np.float32),
               changed=False)
    assert_uncertified_refusal(model, "float")


def assert_uncertified_refusal(model, why):
    uncertified, report = optimize_with_report(model, ["eliminate_where_with_constant_condition"], certify=False)
    assert op_types(uncertified) == ["Where", "Neg"], why
    assert report.log.refusal_counts() == {"eliminate_where_with_constant_condition": 1}
