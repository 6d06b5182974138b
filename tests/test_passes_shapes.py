"""Shape folding: Shape start/end, Gather/Slice of a shape, Reshape targets, symbolic dims kept
symbolic, declared value_info never trusted; a hypothesis property test against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine

INT64 = TensorProto.INT64


def optimized(model, passes=("fold_shapes",)):
    result = onnxrefine.optimize(model, list(passes))
    onnx.checker.check_model(result, full_check=True)
    return result


def producers(model: onnx.ModelProto) -> dict[str, str]:
    return {out: node.op_type for node in model.graph.node for out in node.output}


def test_shape_with_start_and_end_folds_the_right_dims():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
             helper.make_node("Shape", ["x"], ["t"], start=-2)]
    model = make_model(nodes, [value_info("x", shape=["n", 3, 4, 5])],
                       [value_info("s", INT64, [2]), value_info("t", INT64, [2])], opset=18)
    result = optimized(model)
    assert op_types(result) == []
    x = np.zeros((7, 3, 4, 5), np.float32)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))
    assert run(result, {"x": x})[0].tolist() == [3, 4]


def test_symbolic_dim_is_never_folded():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Shape", ["x"], ["h"], end=1)]
    model = make_model(nodes, [value_info("x", shape=["batch", 3])],
                       [value_info("s", INT64, [2]), value_info("n", INT64, []), value_info("h", INT64, [1])], opset=18)
    result = optimized(model)
    assert op_types(result) == ["Shape", "Size", "Shape"]
    for batch in (1, 5):
        x = np.zeros((batch, 3), np.float32)
        assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def test_slice_after_shape_with_start_attribute():
    # onnxoptimizer's eliminate_slice_after_shape reads Shape(x, start=1)[0:1] as dim 0 of x.
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1),
             helper.make_node("Slice", ["s", "zero", "one"], ["d"])]
    model = make_model(nodes, [value_info("x", shape=["n", 6, 7])], [value_info("d", INT64, [1])],
                       [tensor("zero", np.array([0], np.int64)), tensor("one", np.array([1], np.int64))], opset=18)
    for passes in (("fold_shapes",), ("eliminate_slice_after_shape",)):
        result = optimized(model, passes)
        assert "Slice" not in op_types(result)
        x = np.zeros((2, 6, 7), np.float32)
        assert run(result, {"x": x})[0].tolist() == [6] == run(model, {"x": x})[0].tolist()


def test_gather_of_shape_with_negative_index_through_an_operator():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "idx"], ["g"], axis=0)]
    model = make_model(nodes, [value_info("x", shape=["n", 3, 8])], [value_info("g", INT64, [])],
                       [tensor("idx", np.array(-1, np.int64))])
    for passes in (("fold_shapes",), ("eliminate_shape_gather",)):
        result = optimized(model, passes)
        assert "Gather" not in op_types(result)
        x = np.zeros((2, 3, 8), np.float32)
        assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def test_reshape_target_from_shapes_becomes_constant_with_copied_symbolic_dims():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["batch_seq"]),
        helper.make_node("Concat", ["batch_seq", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", shape=["b", "s", 12])], [value_info("y", shape=["b", "s", 3, 4])],
                       [tensor("zero", np.array([0], np.int64)), tensor("two", np.array([2], np.int64)),
                        tensor("heads", np.array([3, 4], np.int64))])
    result = optimized(model, ("fold_shapes", "eliminate_deadend", "eliminate_unused_initializer"))
    assert op_types(result) == ["Relu", "Reshape"]
    target = {i.name: onnx.numpy_helper.to_array(i) for i in result.graph.initializer}
    assert [v.tolist() for v in target.values()] == [[0, 0, 3, 4]]
    for shape in ((1, 1, 12), (2, 5, 12), (3, 0, 12)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def test_reshape_target_not_rewritten_with_allowzero():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)]
    model = make_model(nodes, [value_info("x", shape=["b", 3])], [value_info("y", shape=["b", 3])], opset=18)
    result = optimized(model)
    assert op_types(result) == ["Shape", "Reshape"]


def test_declared_value_info_is_not_trusted():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"])]
    model = make_model(nodes, [value_info("x", shape=["n", 3])], [value_info("s", INT64, [2])])
    model.graph.value_info.append(value_info("r", shape=[2, 3]))  # a lie about the batch size
    result = optimized(model)
    assert op_types(result) == ["Relu", "Shape"]
    x = np.zeros((5, 3), np.float32)
    assert run(result, {"x": x})[0].tolist() == [5, 3]


def test_initializer_input_with_symbolic_declared_shape_is_not_folded():
    # "w" may be fed with any leading dim; only the dims both declared and stored agree on count
    nodes = [helper.make_node("Shape", ["w"], ["s"])]
    model = make_model(nodes, [value_info("w", shape=["k", 2])], [value_info("s", INT64, [2])],
                       [tensor("w", np.zeros((3, 2), np.float32))])
    result = optimized(model)
    assert op_types(result) == ["Shape"]
    assert run(result, {"w": np.zeros((4, 2), np.float32)})[0].tolist() == [4, 2]


def test_shape_folding_inside_if_branch_reads_outer_static_shape():
    then_graph = helper.make_graph([helper.make_node("Shape", ["x"], ["t"])], "then", [], [value_info("t", INT64, [2])])
    else_graph = helper.make_graph([helper.make_node("Shape", ["x"], ["e"], start=1)], "else", [],
                                   [value_info("e", INT64, [1])])
    nodes = [helper.make_node("If", ["cond"], ["o"], then_branch=then_graph, else_branch=else_graph)]
    model = make_model(nodes, [value_info("x", shape=[2, 3]), value_info("cond", TensorProto.BOOL, [])],
                       [value_info("o", INT64, ["k"])], opset=18)
    result = optimized(model)
    branches = {a.name: a.g for a in result.graph.node[0].attribute}
    assert [n.op_type for n in branches["then_branch"].node] == []
    for cond in (True, False):
        feeds = {"x": np.zeros((2, 3), np.float32), "cond": np.array(cond)}
        assert_bit_identical(run(model, feeds), run(result, feeds))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    symbolic=st.lists(st.booleans(), min_size=5, max_size=5),
    start=st.one_of(st.none(), st.integers(-7, 7)),
    end=st.one_of(st.none(), st.integers(-7, 7)),
    index=st.integers(-5, 4),
)
def test_property_shape_start_end_and_gather_match_onnxruntime(dims, symbolic, start, end, index):
    rank = len(dims)
    index = max(-rank, min(index, rank - 1))
    declared = [f"d{i}" if symbolic[i] else d for i, d in enumerate(dims)]
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], **attrs),
        helper.make_node("Shape", ["x"], ["full"]),
        helper.make_node("Gather", ["full", "idx"], ["g"], axis=0),
    ]
    model = make_model(nodes, [value_info("x", shape=declared)],
                       [value_info("s", INT64, ["k"]), value_info("g", INT64, [])],
                       [tensor("idx", np.array(index, np.int64))], opset=18)
    result = optimized(model)
    x = np.zeros(dims, np.float32)
    expected = run(model, {"x": x})
    assert_bit_identical(expected, run(result, {"x": x}))
    made = producers(result)
    # folded exactly when every dim it reads is static
    lo, hi = _clamped(start, end, rank)
    assert (made.get("s") is None) == all(not symbolic[i] for i in range(lo, hi))
    assert (made.get("g") is None) == (not symbolic[index % rank])
    # a symbolic dim never turns into a number: a different feed still agrees
    if any(symbolic[:rank]):
        other = np.zeros([d + 1 if symbolic[i] else d for i, d in enumerate(dims)], np.float32)
        assert_bit_identical(run(model, {"x": other}), run(result, {"x": other}))


def _clamped(start, end, rank):
    lo = 0 if start is None else (start + rank if start < 0 else start)
    hi = rank if end is None else (end + rank if end < 0 else end)
    lo, hi = min(max(lo, 0), rank), min(max(hi, 0), rank)
    return lo, max(lo, hi)


@pytest.mark.parametrize("passes", [("eliminate_shape_op",), ("fold_shapes",)])
def test_eliminate_shape_op_on_static_input(passes):
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"])]
    model = make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("s", INT64, [2]), value_info("n", INT64, [])])
    result = optimized(model, passes)
    assert op_types(result) == []
    x = np.zeros((2, 3), np.float32)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))
