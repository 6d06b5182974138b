"""fold_constants and extract_constant_to_initializer: bit-identical to onnxruntime, and the guards."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.passes import folding

FOLD = ["fold_constants"]


def optimized(model, passes=FOLD, **options):
    result, report = onnxrefine.optimize_with_report(model, passes, **options)
    onnx.checker.check_model(result, full_check=True)
    return result, report


def _attribute(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_chain_folds_bit_identical(dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 4)).astype(dtype)
    v = (rng.random(4) + 0.5).astype(dtype)
    nodes = [
        helper.make_node("Constant", [], ["k"], value=tensor("kv", np.array(1e-3, dtype))),
        helper.make_node("Add", ["v", "k"], ["vk"]),
        helper.make_node("Sqrt", ["vk"], ["s"]),
        helper.make_node("Div", ["w", "s"], ["ws"]),
        helper.make_node("Transpose", ["ws"], ["wt"]),
        helper.make_node("MatMul", ["wt", "w"], ["ww"]),
        helper.make_node("MatMul", ["x", "ww"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", elem, [3, 4])], [value_info("y", elem, [3, 4])],
                       [tensor("w", w), tensor("v", v)])
    result, _ = optimized(model)
    assert op_types(result) == ["MatMul"]
    x = rng.standard_normal((3, 4)).astype(dtype)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def test_float16_arithmetic_that_runs_through_casts_is_not_folded():
    # onnxruntime's CPU float16 Add/MatMul run in float32 between inserted Casts, and it drops the
    # Cast pair between two such nodes: folding one would round a value the runtime keeps in float32.
    w = np.array([[1.001, 2.003], [3.007, -0.3]], np.float16)
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"]),
        helper.make_node("Add", ["wt", "w"], ["ww"]),
        helper.make_node("MatMul", ["ww", "w"], ["w3"]),
        helper.make_node("MatMul", ["x", "w3"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT16, [2, 2])],
                       [value_info("y", TensorProto.FLOAT16, [2, 2])], [tensor("w", w)])
    result, report = optimized(model)
    assert op_types(result) == ["Add", "MatMul", "MatMul"]  # Transpose runs natively: folded
    assert "fold.float16_via_float32" in report.log.refusal_guards("fold_constants")
    x = np.array([[0.3, -1.7], [2.2, 0.01]], np.float16)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def test_integer_and_shape_ops_fold():
    nodes = [
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["r2"]),
        helper.make_node("Cast", ["r2"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "rf"], ["y"]),
    ]
    model = make_model(
        nodes, [value_info("x", shape=[2, 3])], [value_info("y", shape=[2, 3])],
        [tensor("start", np.array(0, np.int64)), tensor("limit", np.array(6, np.int64)),
         tensor("delta", np.array(1, np.int64)), tensor("shape", np.array([2, 3], np.int64))],
    )
    result, _ = optimized(model)
    assert op_types(result) == ["Add"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def _never_evaluate(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the node was evaluated")

    import onnxruntime  # folding imports it where it makes a session

    monkeypatch.setattr(onnxruntime, "InferenceSession", fail)


def test_huge_constant_of_shape_left_alone_without_evaluating(monkeypatch):
    _never_evaluate(monkeypatch)
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["z"], value=tensor("one", np.array([1.0], np.float32))),
        helper.make_node("ReduceSum", ["z"], ["y"], keepdims=0),
    ]
    model = make_model(nodes, [], [value_info("y", shape=[])], [tensor("shape", np.array([1 << 20, 1 << 20], np.int64))])
    result, report = optimized(model)
    assert op_types(result) == ["ConstantOfShape", "ReduceSum"]
    assert "fold.size_cap" in report.log.refusal_guards("fold_constants")


def test_huge_tile_and_expand_left_alone_without_evaluating(monkeypatch):
    _never_evaluate(monkeypatch)
    nodes = [
        helper.make_node("Tile", ["c", "repeats"], ["t"]),
        helper.make_node("Expand", ["c1", "big"], ["e"]),
        helper.make_node("Add", ["t", "x"], ["y1"]),
        helper.make_node("Add", ["e", "x"], ["y2"]),
    ]
    model = make_model(
        nodes, [value_info("x", shape=[1, 1])], [value_info("y1"), value_info("y2")],
        [tensor("c", np.ones((2, 2), np.float32)), tensor("c1", np.ones((1, 1), np.float32)),
         tensor("repeats", np.array([50000, 50000], np.int64)),
         tensor("big", np.array([100000, 100000], np.int64))],
    )
    result, report = onnxrefine.optimize_with_report(model, FOLD)
    assert sorted(op_types(result)) == ["Add", "Add", "Expand", "Tile"]
    assert [r.guard for r in report.log.refused.values() if r.rule == "fold_constants"] == ["fold.size_cap"] * 2


def test_per_tensor_cap_is_configurable():
    nodes = [helper.make_node("Tile", ["c", "repeats"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[64, 64])], [value_info("y", shape=[64, 64])],
                       [tensor("c", np.ones((1, 1), np.float32)), tensor("repeats", np.array([64, 64], np.int64))])
    small, _ = optimized(model, per_tensor_bytes=1024)
    assert "Tile" in op_types(small)
    large, _ = optimized(model)
    assert "Tile" not in op_types(large)


@pytest.mark.parametrize(
    "op, dtype, a, b",
    [("Mul", np.float32, 3e38, 10.0), ("Exp", np.float32, 100.0, None), ("Pow", np.float32, 1e30, 2.0),
     ("Mul", np.float64, 1e300, 1e300)],
)
def test_float_overflow_is_not_folded(op, dtype, a, b):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = ["a"] if b is None else ["a", "b"]
    inits = [tensor("a", np.array([a], dtype))] + ([] if b is None else [tensor("b", np.array([b], dtype))])
    nodes = [helper.make_node(op, inputs, ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    model = make_model(nodes, [value_info("x", elem, [1])], [value_info("y", elem, [1])], inits)
    result, report = optimized(model)
    assert op in op_types(result)
    assert "fold.nonfinite" in report.log.refusal_guards("fold_constants")


def test_inf_input_still_folds():
    # inf in, inf out is what the runtime computes too: no overflow happened in the fold
    nodes = [helper.make_node("Mul", ["a", "b"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[2])], [value_info("y", shape=[2])],
                       [tensor("a", np.array([np.inf, 1.0], np.float32)), tensor("b", np.array([2.0, 3.0], np.float32))])
    result, _ = optimized(model)
    assert op_types(result) == ["Add"]
    x = np.array([1.0, 2.0], np.float32)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike", "Bernoulli"])
def test_random_ops_are_never_folded(op):
    nodes = [helper.make_node(op, ["c"], ["r"], seed=1.0), helper.make_node("Add", ["x", "r"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[4])], [value_info("y", shape=[4])],
                       [tensor("c", np.full(4, 0.5, np.float32))])
    result, _ = optimized(model)
    assert op in op_types(result)


def test_random_source_without_inputs_is_kept():
    nodes = [helper.make_node("RandomUniform", [], ["r"], shape=[4], seed=2.0),
             helper.make_node("Mul", ["r", "two"], ["y"])]
    model = make_model(nodes, [], [value_info("y", shape=[4])], [tensor("two", np.full(4, 2.0, np.float32))])
    result, _ = optimized(model)
    assert op_types(result) == ["RandomUniform", "Mul"]


def test_folded_graph_output_keeps_its_name():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    model = make_model(nodes, [value_info("x", shape=[2])], [value_info("y", shape=[2]), value_info("z", shape=[2])],
                       [tensor("a", np.array([1.0, -2.0], np.float32)), tensor("b", np.array([0.5, 0.25], np.float32))])
    result, _ = optimized(model)
    assert [o.name for o in result.graph.output] == ["y", "z"]
    assert op_types(result) == ["Relu"]
    x = np.array([1.0, -1.0], np.float32)
    assert_bit_identical(run(model, {"x": x}), run(result, {"x": x}))


def test_initializer_that_is_a_graph_input_is_not_a_constant():
    nodes = [helper.make_node("Mul", ["w", "w"], ["w2"]), helper.make_node("Add", ["x", "w2"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[2]), value_info("w", shape=[2])], [value_info("y", shape=[2])],
                       [tensor("w", np.array([1.0, 2.0], np.float32))])
    result, _ = optimized(model)
    assert op_types(result) == ["Mul", "Add"]


def test_folds_inside_if_branches_and_functions():
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["c", "c"], ["cc"]), helper.make_node("Add", ["x", "cc"], ["t"])],
        "then", [], [value_info("t", shape=[2])])
    else_graph = helper.make_graph([helper.make_node("Sub", ["x", "c"], ["e"])], "else", [], [value_info("e", shape=[2])])
    function = helper.make_function(
        "local", "Scale", ["u"], ["v"],
        [helper.make_node("Constant", [], ["k"], value_floats=[2.0, 3.0]),
         helper.make_node("Constant", [], ["one"], value_float=1.0),
         helper.make_node("Add", ["k", "one"], ["k1"]),
         helper.make_node("Mul", ["u", "k1"], ["v"])],
        [helper.make_opsetid("", 17)],
    )
    nodes = [helper.make_node("If", ["cond"], ["o"], then_branch=then_graph, else_branch=else_graph),
             helper.make_node("Scale", ["o"], ["y"], domain="local")]
    model = make_model(nodes, [value_info("x", shape=[2]), value_info("cond", TensorProto.BOOL, [])],
                       [value_info("y", shape=[2])], [tensor("c", np.array([1.5, -2.5], np.float32))],
                       functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    result, _ = optimized(model)
    branch = _attribute(result.graph.node[0], "then_branch")
    assert [n.op_type for n in branch.node] == ["Add"]
    assert len(branch.initializer) == 1
    assert [n.op_type for n in result.functions[0].node] == ["Constant", "Mul"]
    x = np.array([0.1, 0.2], np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        assert_bit_identical(run(model, feeds), run(result, feeds))


def test_extract_constant_to_initializer():
    then_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["tc"], value=tensor("tcv", np.array([3.0, 4.0], np.float32))),
         helper.make_node("Add", ["x", "tc"], ["t"])], "then", [], [value_info("t", shape=[2])])
    else_graph = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [value_info("e", shape=[2])])
    nodes = [
        helper.make_node("Constant", [], ["c"], value_ints=[1, 2]),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "cf"], ["y"]),
        helper.make_node("Constant", [], ["z"], value=tensor("zv", np.array([7.0], np.float32))),
        helper.make_node("If", ["cond"], ["o"], then_branch=then_graph, else_branch=else_graph),
    ]
    model = make_model(nodes, [value_info("x", shape=[2]), value_info("cond", TensorProto.BOOL, [])],
                       [value_info("y", shape=[2]), value_info("z", shape=[1]), value_info("o", shape=[2])])
    result, _ = optimized(model, ["extract_constant_to_initializer"])
    assert op_types(result) == ["Cast", "Add", "If"]
    assert {i.name for i in result.graph.initializer} == {"c", "z"}
    assert [o.name for o in result.graph.output] == ["y", "z", "o"]
    assert [n.op_type for n in _attribute(result.graph.node[2], "then_branch").node] == ["Add"]
    x = np.array([0.5, 1.5], np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        assert_bit_identical(run(model, feeds), run(result, feeds))
