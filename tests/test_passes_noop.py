"""No-op elimination passes: each removes what it should, bit-identically, and refuses its traps."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from passutil import assert_bit_identical, check_pass, optimize, special_floats

import onnxrefine
from onnxrefine.passes.registry import get_pass
from onnxrefine.rewrite.rule import EXACT

F = TensorProto.FLOAT
NOP_PASSES = [
    "eliminate_identity", "eliminate_nop_cast", "eliminate_nop_dropout", "eliminate_nop_flatten",
    "eliminate_nop_pad", "eliminate_nop_concat", "eliminate_nop_split", "eliminate_nop_expand",
    "eliminate_nop_transpose", "eliminate_nop_reshape", "eliminate_nop_with_unit",
    "eliminate_nop_monotone_argmax", "eliminate_consecutive_idempotent_ops",
]


def unary_model(nodes, shape=(2, 3), out_shape=None, dtype=F, out_dtype=None, inits=(), opset=17):
    """x -> relu (so the output is never the raw input) -> nodes -> y."""
    head = helper.make_node("Relu", ["x"], ["r"])
    return make_model(
        [head, *nodes], [value_info("x", dtype, list(shape))],
        [value_info("y", out_dtype or dtype, None if out_shape is None else list(out_shape))],
        list(inits), opset=opset,
    )


def feeds(shape=(2, 3), dtype=np.float32, seed=0):
    return [{"x": special_floats(shape, dtype, seed)}, {"x": np.full(shape, -0.0, dtype)}]


def test_every_nop_pass_is_registered_exact():
    for name in NOP_PASSES:
        spec = get_pass(name)
        assert spec.kind == EXACT and spec.default


# --- identity, concat, split, dropout --------------------------------------------------------


def test_identity_removed():
    model = unary_model([helper.make_node("Identity", ["r"], ["i"]), helper.make_node("Neg", ["i"], ["y"])])
    optimized = check_pass(model, "eliminate_identity", feeds())
    assert "Identity" not in op_types(optimized)


def test_identity_between_graph_input_and_output_kept_valid():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [value_info("x", F, [2])], [value_info("y", F, [2])])
    optimized = check_pass(model, NOP_PASSES, [{"x": np.array([1.0, -0.0], np.float32)}], changed=False)
    assert [o.name for o in optimized.graph.output] == ["y"]


def test_identity_output_and_consumer_output_both_graph_outputs():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("a", F, [2]), value_info("y", F, [2])])
    optimized = check_pass(model, "eliminate_identity", [{"x": np.array([1.0, -2.0], np.float32)}], changed=False)
    assert {o.name for o in optimized.graph.output} == {"a", "y"}


def test_identity_in_if_branch_returning_outer_value_is_kept_valid():
    then_graph = helper.make_graph([helper.make_node("Identity", ["r"], ["t"])], "then", [], [value_info("t", F, None)])
    else_graph = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [], [value_info("e", F, None)])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph),
    ]
    model = make_model(nodes, [value_info("x", F, [2]), value_info("c", TensorProto.BOOL, [])], [value_info("y", F, None)])
    optimized = optimize(model, "eliminate_identity")
    assert [n.op_type for n in optimized.graph.node] == ["Relu", "If"]
    assert optimized.graph.node[0].output[0] == "r"
    for cond in (True, False):
        f = {"x": np.array([1.0, -2.0], np.float32), "c": np.array(cond)}
        assert_bit_identical(run(model, f), run(optimized, f))


def test_identity_inside_function_removed():
    fn = helper.make_function(
        "local", "F", ["a"], ["b"],
        [helper.make_node("Identity", ["a"], ["t"]), helper.make_node("Neg", ["t"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    model = make_model([helper.make_node("F", ["x"], ["y"], domain="local")], [value_info("x", F, [2])],
                       [value_info("y", F, [2])], functions=[fn])
    model.opset_import.append(helper.make_opsetid("local", 1))
    optimized = optimize(model, "eliminate_identity")
    assert [n.op_type for n in optimized.functions[0].node] == ["Neg"]
    f = {"x": np.array([1.0, -0.0], np.float32)}
    assert_bit_identical(run(model, f), run(optimized, f))


def test_single_input_concat_removed():
    model = unary_model([helper.make_node("Concat", ["r"], ["c"], axis=1), helper.make_node("Neg", ["c"], ["y"])])
    assert "Concat" not in op_types(check_pass(model, "eliminate_nop_concat", feeds()))


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_single_output_split_removed(opset):
    attrs = {"num_outputs": 1} if opset >= 18 else {}
    model = unary_model([helper.make_node("Split", ["r"], ["s"], axis=1, **attrs), helper.make_node("Neg", ["s"], ["y"])],
                        opset=opset)
    assert "Split" not in op_types(check_pass(model, "eliminate_nop_split", feeds()))


def test_single_output_split_with_explicit_whole_axis():
    model = unary_model([helper.make_node("Split", ["r", "sp"], ["s"], axis=-1), helper.make_node("Neg", ["s"], ["y"])],
                        inits=[tensor("sp", np.array([3], np.int64))])
    assert "Split" not in op_types(check_pass(model, "eliminate_nop_split", feeds()))


def test_split_with_unknown_axis_length_kept():
    nodes = [helper.make_node("Split", ["x", "sp"], ["s"], axis=0), helper.make_node("Neg", ["s"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["N"])], [value_info("y", F, None)], [tensor("sp", np.array([3], np.int64))])
    assert "Split" in op_types(optimize(model, "eliminate_nop_split"))


@pytest.mark.parametrize("opset", [7, 12, 13])
def test_inference_dropout_removed(opset):
    model = unary_model([helper.make_node("Dropout", ["r"], ["d"], ratio=0.5) if opset < 12 else
                         helper.make_node("Dropout", ["r", "ratio"], ["d"]), helper.make_node("Neg", ["d"], ["y"])],
                        inits=[] if opset < 12 else [tensor("ratio", np.array(0.5, np.float32))], opset=opset)
    assert "Dropout" not in op_types(check_pass(model, "eliminate_nop_dropout", feeds()))


def test_dropout_with_constant_false_training_mode_removed():
    model = unary_model([helper.make_node("Dropout", ["r", "", "t"], ["d"]), helper.make_node("Neg", ["d"], ["y"])],
                        inits=[tensor("t", np.array(False))])
    assert "Dropout" not in op_types(check_pass(model, "eliminate_nop_dropout", feeds()))


def test_dropout_in_training_mode_kept():
    for training in (tensor("t", np.array(True)), None):
        inits = [tensor("ratio", np.array(0.0, np.float32))] + ([training] if training is not None else [])
        nodes = [helper.make_node("Dropout", ["r", "ratio", "t"], ["d"]), helper.make_node("Neg", ["d"], ["y"])]
        inputs = [value_info("x", F, [2, 3])] + ([] if training is not None else [value_info("t", TensorProto.BOOL, [])])
        model = make_model([helper.make_node("Relu", ["x"], ["r"]), *nodes], inputs, [value_info("y", F, None)], inits)
        assert "Dropout" in op_types(optimize(model, "eliminate_nop_dropout"))


def test_dropout_with_used_mask_kept():
    nodes = [helper.make_node("Dropout", ["r"], ["d", "mask"]), helper.make_node("Neg", ["d"], ["y"])]
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), *nodes], [value_info("x", F, [2])],
                       [value_info("y", F, None), value_info("mask", TensorProto.BOOL, None)])
    assert "Dropout" in op_types(optimize(model, "eliminate_nop_dropout"))


def test_old_dropout_without_is_test_kept():
    model = unary_model([helper.make_node("Dropout", ["r"], ["d"]), helper.make_node("Neg", ["d"], ["y"])], opset=6)
    optimized = onnxrefine.optimize(model, ["eliminate_nop_dropout"])
    assert "Dropout" in op_types(optimized)


# --- cast -------------------------------------------------------------------------------------


def test_same_type_cast_removed():
    model = unary_model([helper.make_node("Cast", ["r"], ["c"], to=F), helper.make_node("Neg", ["c"], ["y"])])
    assert "Cast" not in op_types(check_pass(model, "eliminate_nop_cast", feeds()))


def test_same_type_cast_after_cast_removed_but_lossy_chain_kept():
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.INT32),
        helper.make_node("Cast", ["a"], ["b"], to=F),
        helper.make_node("Cast", ["b"], ["c"], to=F),  # the only no-op here
        helper.make_node("Cast", ["c"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["y"], to=F),
    ]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, None)])
    x = {"x": np.array([1.7, -2.5, 65519.0, 1e-8], np.float32)}
    optimized = check_pass(model, NOP_PASSES, [x])
    assert op_types(optimized) == ["Cast"] * 4


def test_cast_of_untrusted_value_info_kept():
    # The declared value_info says 'a' is float; it is int32 in truth. The Cast must stay.
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.INT32), helper.make_node("Abs", ["a"], ["b"]),
             helper.make_node("Cast", ["b"], ["y"], to=F)]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, None)])
    model.graph.value_info.append(value_info("b", F, [2]))
    assert op_types(onnxrefine.optimize(model, ["eliminate_nop_cast"])) == ["Cast", "Abs", "Cast"]


def test_cast_of_subgraph_input_with_unknown_type_kept():
    fn = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Cast", ["a"], ["b"], to=F)],
                              [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("F", ["x"], ["y"], domain="local")], [value_info("x", TensorProto.INT32, [2])],
                       [value_info("y", F, [2])], functions=[fn])
    model.opset_import.append(helper.make_opsetid("local", 1))
    optimized = optimize(model, "eliminate_nop_cast")
    assert [n.op_type for n in optimized.functions[0].node] == ["Cast"]


def test_cast_like_same_type_removed():
    model = unary_model([helper.make_node("CastLike", ["r", "like"], ["c"]), helper.make_node("Neg", ["c"], ["y"])],
                        inits=[tensor("like", np.array([1.0], np.float32))])
    assert "CastLike" not in op_types(check_pass(model, "eliminate_nop_cast", feeds()))


# --- flatten, pad, expand, transpose, reshape ------------------------------------------------


def test_flatten_of_matrix_removed_and_of_3d_kept():
    model = unary_model([helper.make_node("Flatten", ["r"], ["f"], axis=1), helper.make_node("Neg", ["f"], ["y"])])
    assert "Flatten" not in op_types(check_pass(model, "eliminate_nop_flatten", feeds()))
    model3 = unary_model([helper.make_node("Flatten", ["r"], ["f"], axis=1), helper.make_node("Neg", ["f"], ["y"])],
                         shape=(2, 3, 1))
    assert "Flatten" in op_types(optimize(model3, "eliminate_nop_flatten"))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_zero_pad_removed(mode):
    model = unary_model([helper.make_node("Pad", ["r", "p"], ["q"], mode=mode), helper.make_node("Neg", ["q"], ["y"])],
                        inits=[tensor("p", np.zeros(4, np.int64))])
    assert "Pad" not in op_types(check_pass(model, "eliminate_nop_pad", feeds()))


def test_zero_pad_attribute_form_removed_and_nonzero_kept():
    model = unary_model([helper.make_node("Pad", ["r"], ["q"], pads=[0, 0, 0, 0]), helper.make_node("Neg", ["q"], ["y"])],
                        opset=10)
    assert "Pad" not in op_types(check_pass(model, "eliminate_nop_pad", feeds()))
    model = unary_model([helper.make_node("Pad", ["r"], ["q"], pads=[0, 1, 0, 0]), helper.make_node("Neg", ["q"], ["y"])],
                        opset=10)
    assert "Pad" in op_types(optimize(model, "eliminate_nop_pad"))


def test_unit_expand_removed_and_rank_raising_kept():
    model = unary_model([helper.make_node("Expand", ["r", "s"], ["e"]), helper.make_node("Neg", ["e"], ["y"])],
                        inits=[tensor("s", np.array([1, 1], np.int64))])
    assert "Expand" not in op_types(check_pass(model, "eliminate_nop_expand", feeds()))
    model = unary_model([helper.make_node("Expand", ["r", "s"], ["e"]), helper.make_node("Neg", ["e"], ["y"])],
                        inits=[tensor("s", np.array([1, 1, 1], np.int64))])
    assert "Expand" in op_types(check_pass(model, "eliminate_nop_expand", feeds(), changed=False))


def test_identity_transpose_removed_and_real_one_kept():
    model = unary_model([helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1]), helper.make_node("Neg", ["t"], ["y"])])
    assert "Transpose" not in op_types(check_pass(model, "eliminate_nop_transpose", feeds()))
    model = unary_model([helper.make_node("Transpose", ["r"], ["t"]), helper.make_node("Neg", ["t"], ["y"])])
    assert "Transpose" in op_types(optimize(model, "eliminate_nop_transpose"))


@pytest.mark.parametrize("target", [[2, 3], [0, 3], [2, -1], [0, 0], [-1, 3]])
def test_same_shape_reshape_removed(target):
    model = unary_model([helper.make_node("Reshape", ["r", "s"], ["t"]), helper.make_node("Neg", ["t"], ["y"])],
                        inits=[tensor("s", np.array(target, np.int64))])
    assert "Reshape" not in op_types(check_pass(model, "eliminate_nop_reshape", feeds()))


@pytest.mark.parametrize("target", [[3, 2], [6], [1, 2, 3]])
def test_shape_changing_reshape_kept(target):
    model = unary_model([helper.make_node("Reshape", ["r", "s"], ["t"]), helper.make_node("Neg", ["t"], ["y"])],
                        inits=[tensor("s", np.array(target, np.int64))])
    assert "Reshape" in op_types(check_pass(model, "eliminate_nop_reshape", feeds(), changed=False))


def test_reshape_with_untrusted_value_info_shape_kept():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["t"]),
             helper.make_node("Neg", ["t"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["N", 3])], [value_info("y", F, None)],
                       [tensor("s", np.array([2, 3], np.int64))])
    model.graph.value_info.append(value_info("r", F, [2, 3]))  # a lie the pass must not believe
    assert "Reshape" in op_types(optimize(model, "eliminate_nop_reshape"))


def test_reshape_minus_one_next_to_possibly_zero_dim_kept():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["t"]), helper.make_node("Neg", ["t"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["N", 3])], [value_info("y", F, None)],
                       [tensor("s", np.array([0, -1], np.int64))])
    assert "Reshape" in op_types(optimize(model, "eliminate_nop_reshape"))


# --- with unit -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, constant",
    [("Mul", 1.0), ("Div", 1.0), ("Pow", 1.0), ("Sub", 0.0), ("Add", -0.0)],
)
def test_float_unit_removed(op, constant):
    model = unary_model([helper.make_node("Neg", ["x"], ["n"]), helper.make_node(op, ["n", "c"], ["y"])],
                        inits=[tensor("c", np.array([constant], np.float32))])
    model.graph.node.pop(0)  # no Relu: feed -0.0, NaN and inf straight through
    optimized = check_pass(model, "eliminate_nop_with_unit", feeds())
    assert op not in op_types(optimized)


def test_commuted_unit_removed():
    model = unary_model([helper.make_node("Mul", ["c", "r"], ["m"]), helper.make_node("Neg", ["m"], ["y"])],
                        inits=[tensor("c", np.ones((1, 3), np.float32))])
    assert "Mul" not in op_types(check_pass(model, "eliminate_nop_with_unit", feeds()))


def test_float_add_positive_zero_kept():
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Add", ["n", "c"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, None)], [tensor("c", np.array(0.0, np.float32))])
    optimized = optimize(model, "eliminate_nop_with_unit")
    assert "Add" in op_types(optimized)
    x = {"x": np.array([0.0, 1.0], np.float32)}  # -x = -0.0; -0.0 + 0.0 = +0.0
    assert np.signbit(run(model, x)[0][0]) == np.signbit(run(optimized, x)[0][0]) == False  # noqa: E712


def test_float_sub_negative_zero_kept():
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Sub", ["n", "c"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, None)], [tensor("c", np.array(-0.0, np.float32))])
    assert "Sub" in op_types(optimize(model, "eliminate_nop_with_unit"))


@pytest.mark.parametrize("op, constant, dtype", [("Add", 0, np.int64), ("Sub", 0, np.int32), ("Mul", 1, np.int64),
                                                 ("And", True, np.bool_), ("Or", False, np.bool_)])
def test_integer_and_bool_units_removed(op, constant, dtype):
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    head = helper.make_node("Not" if dtype == np.bool_ else "Abs", ["x"], ["r"])
    model = make_model([head, helper.make_node(op, ["r", "c"], ["y"])], [value_info("x", onnx_type, [3])],
                       [value_info("y", onnx_type, None)], [tensor("c", np.array([constant], dtype))])
    x = {"x": np.array([1, 0, 1]).astype(dtype)}
    assert op not in op_types(check_pass(model, "eliminate_nop_with_unit", [x]))


@pytest.mark.parametrize("x_shape, const_shape", [((2, 3), (2, 2, 3)), ((2, 1), (1, 3))])
def test_unit_that_broadcasts_up_kept(x_shape, const_shape):
    model = unary_model([helper.make_node("Mul", ["r", "c"], ["y"])], shape=x_shape,
                        inits=[tensor("c", np.ones(const_shape, np.float32))])
    assert "Mul" in op_types(check_pass(model, "eliminate_nop_with_unit", feeds(x_shape), changed=False))


def test_unit_with_unknown_dims_kept():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "c"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["N", 1])], [value_info("y", F, None)], [tensor("c", np.ones((3,), np.float32))])
    assert "Mul" in op_types(optimize(model, "eliminate_nop_with_unit"))


def test_unit_whose_output_aliases_graph_input_kept_valid():
    model = make_model([helper.make_node("Mul", ["x", "c"], ["y"])], [value_info("x", F, [2])], [value_info("y", F, [2])],
                       [tensor("c", np.array(1.0, np.float32))])
    check_pass(model, NOP_PASSES, feeds((2,)), changed=False)


# --- monotone argmax -------------------------------------------------------------------------


@pytest.mark.parametrize("arg, last", [("ArgMax", 0), ("ArgMax", 1), ("ArgMin", 0), ("ArgMin", 1)])
def test_argmax_of_neg_becomes_argmin(arg, last):
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node(arg, ["n"], ["y"], axis=1, select_last_index=last)]
    model = make_model(nodes, [value_info("x", F, [4, 9])], [value_info("y", TensorProto.INT64, None)])
    rng = np.random.default_rng(1)
    ties = {"x": rng.choice(np.array([1.0, 2.0, -0.0, 0.0, np.nan, np.inf], np.float32), (4, 9))}
    optimized = check_pass(model, "eliminate_nop_monotone_argmax", feeds((4, 9)) + [ties])
    assert op_types(optimized) == [("ArgMin" if arg == "ArgMax" else "ArgMax")]


def test_argmax_of_widening_cast_removed():
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.DOUBLE), helper.make_node("ArgMax", ["c"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [7])], [value_info("y", TensorProto.INT64, None)])
    assert op_types(check_pass(model, "eliminate_nop_monotone_argmax", feeds((7,)))) == ["ArgMax"]


def test_argmax_of_narrowing_cast_kept():
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT16), helper.make_node("ArgMax", ["c"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", TensorProto.INT64, None)])
    assert "Cast" in op_types(check_pass(model, "eliminate_nop_monotone_argmax", [{"x": np.array([1.0, 1.0001], np.float32)}],
                                         changed=False))


@pytest.mark.parametrize("f", ["Exp", "Sigmoid", "Tanh", "Log", "Sqrt", "Relu", "Softmax"])
def test_argmax_of_tie_making_function_kept(f):
    nodes = [helper.make_node(f, ["x"], ["e"]), helper.make_node("ArgMax", ["e"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [3])], [value_info("y", TensorProto.INT64, None)])
    big = {"x": np.array([100.0, 200.0, 150.0], np.float32)}  # Exp overflows all three to inf
    optimized = check_pass(model, "eliminate_nop_monotone_argmax", [big], changed=False)
    assert f in op_types(optimized)
    report = onnxrefine.optimize_with_report(model, ["eliminate_nop_monotone_argmax"])[1]
    assert report.log.refused


def test_argmax_of_integer_neg_kept():
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("ArgMax", ["n"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", TensorProto.INT32, [2])], [value_info("y", TensorProto.INT64, None)])
    x = {"x": np.array([np.iinfo(np.int32).min, 0], np.int32)}
    check_pass(model, "eliminate_nop_monotone_argmax", [x], changed=False)


# --- idempotent chains -----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Relu", "Ceil", "Floor", "Round", "Abs"])
def test_idempotent_chain_collapsed(op):
    nodes = [helper.make_node(op, ["x"], ["a"]), helper.make_node(op, ["a"], ["b"]), helper.make_node(op, ["b"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, None)])
    x = [{"x": special_floats((2, 3), seed=s) * 3} for s in range(3)]
    assert op_types(check_pass(model, "eliminate_consecutive_idempotent_ops", x)) == [op]


def test_reshape_chain_collapsed():
    nodes = [helper.make_node("Reshape", ["x", "a"], ["r"]), helper.make_node("Reshape", ["r", "b"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [4, 6])], [value_info("y", F, None)],
                       [tensor("a", np.array([6, 4], np.int64)), tensor("b", np.array([3, -1], np.int64))])
    assert op_types(check_pass(model, "eliminate_consecutive_idempotent_ops", feeds((4, 6)))) == ["Reshape"]


def test_reshape_chain_with_zero_copy_collapses_with_the_copied_dim_written_out():
    # Reshape(Reshape(x, [6, 4]), [0, -1]) is [6, 4]; Reshape(x, [0, -1]) would be [4, 6]: the 0
    # copies the middle's 6, which the collapsed Reshape writes out.
    nodes = [helper.make_node("Reshape", ["x", "a"], ["r"]), helper.make_node("Reshape", ["r", "b"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [4, 6])], [value_info("y", F, None)],
                       [tensor("a", np.array([6, 4], np.int64)), tensor("b", np.array([0, -1], np.int64))])
    optimized = check_pass(model, "eliminate_consecutive_idempotent_ops", feeds((4, 6)), changed=None)
    assert len(optimized.graph.node) == 1
    assert run(optimized, feeds((4, 6))[0])[0].shape == (6, 4)


def test_reshape_chain_with_allowzero_collapsed():
    nodes = [helper.make_node("Reshape", ["x", "a"], ["r"], allowzero=1),
             helper.make_node("Reshape", ["r", "b"], ["y"], allowzero=1)]
    model = make_model(nodes, [value_info("x", F, [0, 6])], [value_info("y", F, None)],
                       [tensor("a", np.array([6, 0], np.int64)), tensor("b", np.array([0, 3], np.int64))], opset=14)
    optimized = check_pass(model, "eliminate_consecutive_idempotent_ops", [{"x": np.zeros((0, 6), np.float32)}])
    assert op_types(optimized) == ["Reshape"]


def test_flatten_chain_to_axis_zero_collapsed():
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=2), helper.make_node("Flatten", ["f"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [2, 3, 4])], [value_info("y", F, None)])
    assert op_types(check_pass(model, "eliminate_consecutive_idempotent_ops", feeds((2, 3, 4)))) == ["Flatten"]


def test_idempotent_chain_with_shared_inner_keeps_inner():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["a"], ["c"])]
    model = make_model(nodes, [value_info("x", F, [3])], [value_info("b", F, None), value_info("c", F, None)])
    optimized = check_pass(model, "eliminate_consecutive_idempotent_ops", feeds((3,)))
    assert op_types(optimized) == ["Relu", "Neg"]
    assert [o.name for o in optimized.graph.output] == ["b", "c"]


# --- property test: reshape no-op detection over shapes ---------------------------------------


@settings(deadline=None, max_examples=30)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_reshape_nop_property(shape, data):
    choices = [st.sampled_from([d, 0, -1]) for d in shape]
    target = [data.draw(c) for c in choices]
    while target.count(-1) > 1:
        target[target.index(-1)] = shape[target.index(-1)]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["t"]),
             helper.make_node("Neg", ["t"], ["y"])]
    model = make_model(nodes, [value_info("x", F, shape)], [value_info("y", F, None)],
                       [tensor("s", np.array(target, np.int64))])
    optimized = optimize(model, *NOP_PASSES)
    assert "Reshape" not in op_types(optimized)
    x = {"x": special_floats(tuple(shape), seed=len(shape))}
    assert_bit_identical(run(model, x), run(optimized, x))


def test_optimized_models_are_valid_onnx():
    model = unary_model([helper.make_node("Identity", ["r"], ["i"]), helper.make_node("Cast", ["i"], ["y"], to=F)])
    onnx.checker.check_model(optimize(model, *NOP_PASSES), full_check=True)


@settings(deadline=None, max_examples=30)
@given(data=st.data())
def test_reshape_chain_property(data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    total = int(np.prod(shape))
    middle = [total] if data.draw(st.booleans()) else [d for d in shape][::-1]
    outer_dims = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    if int(np.prod(outer_dims)) != total:
        outer_dims = [total]
    outer = list(outer_dims)
    if data.draw(st.booleans()):
        outer[data.draw(st.integers(0, len(outer) - 1))] = -1
    if len(outer) <= len(middle) and data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(outer) - 1))
        if outer[position] != -1 and middle[position] == outer[position]:
            outer[position] = 0  # copies the middle dim: the collapsed Reshape must write that dim out
    nodes = [helper.make_node("Reshape", ["x", "a"], ["r"]), helper.make_node("Reshape", ["r", "b"], ["t"]),
             helper.make_node("Neg", ["t"], ["y"])]
    model = make_model(nodes, [value_info("x", F, shape)], [value_info("y", F, None)],
                       [tensor("a", np.array(middle, np.int64)), tensor("b", np.array(outer, np.int64))])
    optimized = optimize(model, "eliminate_consecutive_idempotent_ops")
    # The middle shape is a constant here: a 0 copying one of its dims is written out as that dim.
    assert op_types(optimized).count("Reshape") == 1
    x = {"x": special_floats(tuple(shape), seed=total)}
    assert_bit_identical(run(model, x), run(optimized, x))
