"""transpose_to_reshape: a Transpose that only moves size-1 axes becomes a Reshape (SSD heads at
1x1 resolution), then merges with the Reshapes around it. Every guard has a case it must refuse."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import make_model, op_types, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass, optimize, special_floats

import onnxrefine
from onnxrefine.api import optimize_with_report
from onnxrefine.passes.registry import get_pass
from onnxrefine.passes.transposes import RESHAPE_THROUGH_TRANSPOSE, TRANSPOSE_TO_RESHAPE, through_transpose
from onnxrefine.rewrite.rule import EXACT


def transpose_model(shape, perm, out_shape=None):
    node = helper.make_node("Transpose", ["x"], ["y"], perm=perm)
    return make_model([node], [value_info("x", shape=shape)], [value_info("y", shape=out_shape)])


def feeds(shape, seed=0):
    return {"x": special_floats(tuple(shape), seed=seed)}


def test_rule_class_is_exact():
    assert get_pass("transpose_to_reshape").kind == EXACT
    assert TRANSPOSE_TO_RESHAPE.kind == EXACT
    assert "transpose_to_reshape" in onnxrefine.api.resolve_passes(None)


def test_unit_axes_moved_becomes_reshape():
    model = transpose_model([1, 6, 4, 1, 1], [0, 3, 4, 1, 2], [1, 1, 1, 6, 4])
    optimized = check_pass(model, "transpose_to_reshape", [feeds([1, 6, 4, 1, 1], s) for s in range(3)])
    assert op_types(optimized) == ["Reshape"]


@pytest.mark.parametrize("shape, perm, runtime", [
    (["n", 1, 8], [0, 2, 1], [3, 1, 8]),  # symbolic dim on its own axis: copied with 0
    ([1, "s", 5], [1, 0, 2], [1, 7, 5]),  # one moved symbolic dim: -1
])
def test_symbolic_dims(shape, perm, runtime):
    model = transpose_model(shape, perm)
    optimized = check_pass(model, "transpose_to_reshape", [feeds(runtime, s) for s in range(2)])
    assert op_types(optimized) == ["Reshape"]


@pytest.mark.parametrize("shape, perm, runtime", [
    ([2, 1, 3], [2, 1, 0], [2, 1, 3]),  # the guard on order: 2 and 3 swap, data moves
    (["a", 3], [1, 0], [2, 3]),  # a symbolic dim may be longer than 1
    ([0, 1, 3], [1, 0, 2], [0, 1, 3]),  # empty: target [1, 0, 3] would copy dim 1 (=1), not 0
    (["a", 1, "b"], [0, 2, 1], [0, 1, 3]),  # a copied dim next to a -1: ambiguous when a is 0
])
def test_refused(shape, perm, runtime):
    model = transpose_model(shape, perm)
    optimized = check_pass(model, "transpose_to_reshape", [feeds(runtime)], changed=False)
    assert op_types(optimized) == ["Transpose"]
    # The guard itself refuses (not only the per-rewrite certificate, which is off here).
    uncertified, report = optimize_with_report(model, ["transpose_to_reshape"], certify=False)
    assert op_types(uncertified) == ["Transpose"]
    assert report.log.refusal_counts() == {"transpose_to_reshape": 1}


def test_unknown_shape_refused():
    """Reshape to a fed target: nothing trusted says which axes have size 1."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1])]
    model = make_model(nodes, [value_info("x", shape=[2, 3]), value_info("s", TensorProto.INT64, [3])],
                       [value_info("y", shape=[None, None, None])])
    inputs = {"x": special_floats((2, 3)), "s": np.array([6, 1, 1], np.int64)}
    optimized = check_pass(model, "transpose_to_reshape", [inputs], changed=False)
    assert op_types(optimized) == ["Reshape", "Transpose"]


def ssd_head():
    """Conv -> Reshape -> Transpose -> Reshape at 1x1, as torchvision's SSD heads export."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Reshape", ["c", "s1"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 3, 4, 1, 2]),
        helper.make_node("Reshape", ["t", "s2"], ["y"]),
    ]
    inits = [tensor("w", rng.standard_normal((24, 8, 1, 1)).astype(np.float32)),
             tensor("s1", np.array([1, -1, 4, 1, 1], np.int64)), tensor("s2", np.array([1, -1, 4], np.int64))]
    return make_model(nodes, [value_info("x", shape=[1, 8, 1, 1])], [value_info("y", shape=[1, 6, 4])], inits)


def test_ssd_head_collapses_to_one_reshape_and_matches_ort_at_both_levels():
    model = ssd_head()
    optimized = onnxrefine.optimize(model)  # the default pipeline, certificates on
    assert op_types(optimized) == ["Conv", "Reshape"]
    x = special_floats((1, 8, 1, 1))
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        expected, actual = (ort.InferenceSession(m.SerializeToString(), options,
                                                 providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                            for m in (model, optimized))
        assert np.array_equal(expected, actual, equal_nan=True)


# --- merge_reshape_unit_axes / reshape_through_transpose -----------------------------------------

def chain_model(x_shape, steps, out_shape=None):
    """x -> each (op, attrs/target) in turn; Reshape targets and Unsqueeze/Squeeze axes as constants."""
    nodes, inits, current = [], [], "x"
    for index, (op, arg, *attrs) in enumerate(steps):
        out = f"v{index}"
        if op == "Reshape" or op in ("Unsqueeze", "Squeeze"):
            inits.append(tensor(f"c{index}", np.array(arg, np.int64)))
            nodes.append(helper.make_node(op, [current, f"c{index}"], [out], **(attrs[0] if attrs else {})))
        else:
            nodes.append(helper.make_node(op, [current], [out], **arg))
        current = out
    nodes.append(helper.make_node("Identity", [current], ["y"]))
    return make_model(nodes, [value_info("x", shape=x_shape)], [value_info("y", shape=out_shape)], inits)


def assert_rule_refuses(model, rule):
    uncertified, report = optimize_with_report(model, [rule], certify=False)
    assert op_types(uncertified) == op_types(model)
    assert report.log.refusal_counts().get(rule, 0) >= 1


@pytest.mark.parametrize("outer", [("Unsqueeze", [0]), ("Squeeze", [1]), ("Flatten", {"axis": 2})])
def test_reshape_then_unit_axes_op_is_one_reshape(outer):
    model = chain_model([2, 12], [("Reshape", [2, 1, 3, 4]), outer])
    optimized = check_pass(model, ["merge_reshape_unit_axes", "eliminate_identity"],
                           [feeds([2, 12], s) for s in range(2)])
    assert op_types(optimized) == ["Reshape"]
    assert get_pass("merge_reshape_unit_axes").kind == EXACT


@pytest.mark.parametrize("x_shape, runtime", [
    (["n", 12], [2, 12]),  # the final shape is not static
    ([0, 12], [0, 12]),  # empty: a 0 in the merged target would copy a dim (allowzero=0)
])
def test_merge_reshape_unit_axes_refused(x_shape, runtime):
    model = chain_model(x_shape, [("Reshape", [-1, 1, 3, 4]), ("Unsqueeze", [0])])
    check_pass(model, ["merge_reshape_unit_axes"], [feeds(runtime)], changed=False)
    assert_rule_refuses(model, "merge_reshape_unit_axes")


def attention_split(x_shape, heads_target, out_target, allowzero=0):
    """Reshape -> Transpose -> Reshape as a ViT's attention splits heads."""
    return chain_model(x_shape, [("Reshape", heads_target, {"allowzero": allowzero}),
                                 ("Transpose", {"perm": [1, 0, 2]}),
                                 ("Reshape", out_target, {"allowzero": allowzero})])


def test_reshape_through_transpose_matches_ort_and_saves_a_node():
    model = attention_split([7, 1, 24], [7, 4, 6], [1, 4, 7, 6])
    optimized = check_pass(model, ["reshape_through_transpose", "eliminate_identity"],
                           [feeds([7, 1, 24], s) for s in range(3)])
    assert op_types(optimized) == ["Reshape", "Transpose"]
    assert get_pass("reshape_through_transpose").kind == EXACT
    assert RESHAPE_THROUGH_TRANSPOSE.kind == EXACT


@pytest.mark.parametrize("x_shape, out_target, runtime", [
    ([7, 1, 24], [4, 42], [7, 1, 24]),  # the last Reshape merges axes: not only size-1 axes
    ([7, 1, 24], [1, 4, 6, 7], [7, 1, 24]),  # size-1 axes fine, but 6 and 7 swap: data moves
    (["s", 1, 24], [1, 4, -1, 6], [7, 1, 24]),  # shapes not static
    ([0, 1, 24], [1, 4, 0, 6], [0, 1, 24]),  # empty
])
def test_reshape_through_transpose_refused(x_shape, out_target, runtime):
    empty = 0 in x_shape
    model = attention_split(x_shape, [0, 4, 6] if empty else [-1, 4, 6], out_target, allowzero=int(empty))
    check_pass(model, ["reshape_through_transpose"], [feeds(runtime)], changed=False)
    assert_rule_refuses(model, "reshape_through_transpose")


@pytest.mark.parametrize("middle, perm, target", [
    ([197, 12, 64], [1, 0, 2], [1, 12, 197, 64]),
    ([2, 3, 1, 4], [3, 0, 2, 1], [4, 1, 2, 3]),
    ([5, 1, 1, 6], [0, 3, 1, 2], [5, 6, 1, 1, 1]),
    ([3, 1, 2], [2, 1, 0], [2, 3]),
])
def test_through_transpose_arithmetic(middle, perm, target):
    reshape, order = through_transpose(middle, perm, target)
    x = np.arange(np.prod(middle)).reshape(middle)
    assert np.array_equal(x.transpose(perm).reshape(target), x.reshape(reshape).transpose(order))
