"""One test per guard of the no-op eliminations (passes/noop.py), Cast chains (passes/precision.py),
Where rewrites (passes/where.py, cleanup.rewrite_where) and Transpose/Reshape rewrites
(passes/transposes.py). Each model reaches exactly that guard; the test asserts the guard's id and,
where onnxruntime runs the model, bit-identical outputs afterwards."""

from __future__ import annotations

import numpy as np
from guardutil import expect_guard
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper

import onnxrefine

F, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def model_of(nodes, inputs, inits=(), *, out_dtype=F, outputs=("y",), opset=17, custom=False):
    model = make_model(nodes, inputs, [value_info(o, out_dtype, None) for o in outputs], inits, opset=opset)
    if custom:
        model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def x(shape, dtype=F, name="x"):
    return value_info(name, dtype, shape)


def i64(name, values):
    return tensor(name, np.array(values, np.int64))


def mystery(out="m", src="x"):
    """A custom-domain op: no trusted fact gives its output's element type or shape."""
    return node("Mystery", [src], [out], domain="com.example")


# --- Cast / CastLike / Cast chains --------------------------------------------------------------


def test_cast_input_type_unknown():
    model = model_of([mystery(), node("Cast", ["m"], ["y"], to=F)], [x([2])], custom=True)
    expect_guard(model, "eliminate_nop_cast", "cast.dtype_unknown")


def test_castlike_target_type_unknown():
    model = model_of([mystery("like"), node("CastLike", ["x", "like"], ["y"])], [x([2])], custom=True)
    expect_guard(model, "eliminate_nop_cast", "cast.castlike_target_unknown")


def test_cast_chain_through_a_narrower_type():
    nodes = [node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16), node("Cast", ["h"], ["y"], to=F)]
    model = model_of(nodes, [x([4])])
    expect_guard(model, "eliminate_exact_cast_chain", "cast_chain.inexact",
                 {"x": np.array([1.0001, 1e6, 3e-8, -0.0], np.float32)})


# --- Dropout / Flatten / Split ----------------------------------------------------------------------


def test_dropout_before_opset_7_without_is_test():
    expect_guard(model_of([node("Dropout", ["x"], ["y"])], [x([2, 3])], opset=6), "eliminate_nop_dropout",
                 "dropout.is_test")


def test_dropout_training_mode_not_constant():
    model = model_of([node("Dropout", ["x", "r", "t"], ["y"])], [x([2, 3]), x([], BOOL, "t")],
                     [tensor("r", np.array(0.5, np.float32))])
    expect_guard(model, "eliminate_nop_dropout", "dropout.training_not_constant",
                 {"x": rand(2, 3), "t": np.array(False)})


def test_dropout_training_mode():
    model = model_of([node("Dropout", ["x", "r", "t"], ["y"])], [x([2, 3])],
                     [tensor("r", np.array(0.5, np.float32)), tensor("t", np.array(True))])
    expect_guard(model, "eliminate_nop_dropout", "dropout.training")


def test_dropout_mask_read():
    model = model_of([node("Dropout", ["x"], ["y", "mask"])], [x([2, 3])], outputs=("y",))
    model.graph.output.append(value_info("mask", BOOL, [2, 3]))
    expect_guard(model, "eliminate_nop_dropout", "dropout.mask_read", {"x": rand(2, 3)})


def test_flatten_input_rank_unknown():
    expect_guard(model_of([node("Flatten", ["x"], ["y"])], [x(None)]), "eliminate_nop_flatten",
                 "noop.rank_unknown", {"x": rand(2, 3, 4)})


def test_flatten_input_not_2d():
    expect_guard(model_of([node("Flatten", ["x"], ["y"])], [x([2, 3, 4])]), "eliminate_nop_flatten",
                 "flatten.not_2d", {"x": rand(2, 3, 4)})


def test_split_axis_length_unknown():
    model = model_of([node("Split", ["x", "s"], ["y"], axis=0)], [x(None)], [i64("s", [3])])
    expect_guard(model, "eliminate_nop_split", "split.axis_unknown", {"x": rand(3, 2)})


def test_split_not_the_whole_axis():
    model = model_of([node("Split", ["x", "s"], ["y"], axis=0)], [x([3, 2])], [i64("s", [2])])
    expect_guard(model, "eliminate_nop_split", "split.not_whole")


# --- Expand -----------------------------------------------------------------------------------------


def _expand(x_shape, target):
    return model_of([node("Expand", ["x", "s"], ["y"])], [x(x_shape)], [i64("s", target)])


def test_expand_ones_raise_the_rank():
    expect_guard(_expand([3], [1, 1]), "eliminate_nop_expand", "expand.ones_raise_rank", {"x": rand(3)})


def test_expand_input_shape_unknown():
    expect_guard(_expand(None, [2, 3]), "eliminate_nop_expand", "expand.shape_unknown", {"x": rand(2, 3)})


def test_expand_raises_the_rank():
    expect_guard(_expand([3], [2, 3]), "eliminate_nop_expand", "expand.raise_rank", {"x": rand(3)})


def test_expand_may_broadcast_a_symbolic_dim():
    expect_guard(_expand(["N", 3], [2, 3]), "eliminate_nop_expand", "expand.broadcasts", {"x": rand(1, 3)})


# --- Reshape ---------------------------------------------------------------------------------------


def test_reshape_to_another_shape():
    model = model_of([node("Reshape", ["x", "s"], ["y"])], [x([2, 3])], [i64("s", [3, 2])])
    expect_guard(model, "eliminate_nop_reshape", "reshape.not_same_shape", {"x": rand(2, 3)})


def test_reshape_chain_outer_zero_copies_from_another_input():
    # The middle shape comes from a run-time target: which dim the 0 copies is not known.
    nodes = [node("Reshape", ["x", "s1"], ["r"]), node("Reshape", ["r", "s2"], ["y"])]
    model = model_of(nodes, [x([2, 3, 4]), value_info("s1", TensorProto.INT64, [2])], [i64("s2", [0, -1])])
    expect_guard(model, "eliminate_consecutive_idempotent_ops", "reshape_chain.zero_copy",
                 {"x": rand(2, 3, 4), "s1": np.array([6, 4], np.int64)})


def test_a_reshape_chain_with_a_computed_outer_target_is_kept_where_collapsing_it_changes_the_shape():
    # onnxslim collapses Reshape(Reshape(x, a), b) into Reshape(x, b) whenever b is computed (llama's
    # attention mask, b = Shape(...)), but a 0 in b copies a dim of the inner Reshape's output, not
    # of x: with b = [0, -1] at run time the chain gives [2, 3] and the collapsed Reshape [3, 2].
    chain = [node("Reshape", ["x", "a"], ["r"]), node("Reshape", ["r", "b"], ["y"])]
    inputs = [x([3, 2]), value_info("b", TensorProto.INT64, [2])]
    model = model_of(chain, inputs, [i64("a", [2, 3])])
    collapsed = model_of([node("Reshape", ["x", "b"], ["y"])], inputs)
    feeds = {"x": rand(3, 2), "b": np.array([0, -1], np.int64)}
    assert run(model, feeds)[0].shape == (2, 3) and run(collapsed, feeds)[0].shape == (3, 2)
    optimized = onnxrefine.optimize(model)
    assert [n.op_type for n in optimized.graph.node] == ["Reshape", "Reshape"]
    assert run(optimized, feeds)[0].shape == (2, 3)


# --- x op unit ---------------------------------------------------------------------------------------


def _unit(op, constant, x_shape=(3,), x_dtype=F):
    # x is negated first: a graph output may not become an alias of a graph input (driver.output_alias).
    return model_of([node("Neg", ["x"], ["t"]), node(op, ["t", "c"], ["y"])],
                    [x(list(x_shape) if x_shape is not None else None, x_dtype)], [tensor("c", constant)])


SIGNED = {"x": np.array([-0.0, 0.0, 1.5], np.float32)}


def test_unit_add_positive_zero():
    expect_guard(_unit("Add", np.zeros(3, np.float32)), "eliminate_nop_with_unit", "identity_arith.add_zero_sign",
                 SIGNED)


def test_unit_sub_negative_zero():
    expect_guard(_unit("Sub", np.full(3, -0.0, np.float32)), "eliminate_nop_with_unit",
                 "identity_arith.sub_negative_zero", SIGNED)


def test_unit_constant_of_another_type():
    expect_guard(_unit("Mul", np.ones(3, np.float64)), "eliminate_nop_with_unit", "identity_arith.dtype")


def test_unit_input_rank_unknown():
    expect_guard(_unit("Mul", np.ones(3, np.float32), x_shape=None), "eliminate_nop_with_unit",
                 "identity_arith.rank_unknown", {"x": rand(3)})


def test_unit_constant_raises_the_rank():
    expect_guard(_unit("Mul", np.ones((2, 3), np.float32)), "eliminate_nop_with_unit", "identity_arith.raise_rank",
                 {"x": rand(3)})


def test_unit_constant_broadcasts_a_dim():
    expect_guard(_unit("Mul", np.ones((2, 3), np.float32), x_shape=(1, 3)), "eliminate_nop_with_unit",
                 "identity_arith.broadcasts", {"x": rand(1, 3)})


# --- ArgMax of a monotone function -----------------------------------------------------------------


def _argmax(f_nodes, inputs, custom=False):
    return model_of([*f_nodes, node("ArgMax", ["f"], ["y"], axis=0)], inputs, out_dtype=I64, custom=custom)


def test_argmax_of_a_tie_maker():
    x_value = np.array([100.0, 100.5, -3.0], np.float32)  # Exp overflows both to inf: a tie
    expect_guard(_argmax([node("Exp", ["x"], ["f"])], [x([3])]), "eliminate_nop_monotone_argmax",
                 "monotone_arg.tie_maker", {"x": x_value})


def test_argmax_of_neg_of_unknown_type():
    model = _argmax([mystery(), node("Neg", ["m"], ["f"])], [x([3])], custom=True)
    expect_guard(model, "eliminate_nop_monotone_argmax", "monotone_arg.dtype_unknown")


def test_argmax_of_integer_neg():
    value = np.array([np.iinfo(np.int32).min, 5, -7], np.int32)  # -INT_MIN wraps to INT_MIN
    expect_guard(_argmax([node("Neg", ["x"], ["f"])], [x([3], I32)]), "eliminate_nop_monotone_argmax",
                 "monotone_arg.integer_neg", {"x": value})


def test_argmax_of_a_narrowing_cast():
    value = np.array([1.0001, 1.0002, 0.5], np.float32)  # both round to one float16
    expect_guard(_argmax([node("Cast", ["x"], ["f"], to=TensorProto.FLOAT16)], [x([3])]),
                 "eliminate_nop_monotone_argmax", "monotone_arg.cast", {"x": value})


# --- Where ----------------------------------------------------------------------------------------------


def test_rewrite_where_branch_type_unknown():
    nodes = [mystery("a"), mystery("b"), node("Not", ["c"], ["nc"]), node("Where", ["nc", "a", "b"], ["y"])]
    model = model_of(nodes, [x([3]), x([3], BOOL, "c")], custom=True)
    expect_guard(model, "rewrite_where", "where_swap.dtype_unknown")


def test_rewrite_where_float_branches():
    nodes = [node("Not", ["c"], ["nc"]), node("Where", ["nc", "x", "b"], ["y"])]
    model = model_of(nodes, [x([3]), x([3], BOOL, "c"), x([3], F, "b")])
    feeds = {"x": np.array([-0.0, 1.0, -0.0], np.float32), "c": np.array([False, True, True]),
             "b": np.array([-0.0, -0.0, 2.0], np.float32)}
    expect_guard(model, "rewrite_where", "where_swap.float", feeds)


def _where(condition, a_shape, b_shape, dtype=I64):
    # a is negated first: a graph output may not become an alias of a graph input (driver.output_alias).
    nodes = [node("Neg", ["a"], ["na"]), node("Where", ["c", "na", "b"], ["y"])]
    return model_of(nodes, [x(a_shape, dtype, "a"), x(b_shape, dtype, "b")], [tensor("c", condition)], out_dtype=dtype)


def _ab(a_shape, b_shape, dtype=np.int64):
    return {"a": np.arange(int(np.prod(a_shape)), dtype=dtype).reshape(a_shape),
            "b": -np.arange(int(np.prod(b_shape)), dtype=dtype).reshape(b_shape)}


def test_where_condition_empty():
    expect_guard(_where(np.zeros(0, bool), [0], [0]), "eliminate_where_with_constant_condition",
                 "where_const.condition", _ab([0], [0]))


def test_where_condition_mixed():
    expect_guard(_where(np.array([True, False]), [2], [2]), "eliminate_where_with_constant_condition",
                 "where_const.mixed", _ab([2], [2]))


def test_where_operand_shape_unknown():
    expect_guard(_where(np.array([True, True]), None, [2]), "eliminate_where_with_constant_condition",
                 "where_const.shape_unknown", _ab([2], [2]))


def test_where_operands_do_not_broadcast():
    # Operands of 2 and 3 elements: malformed (onnxruntime rejects it), and kept.
    expect_guard(_where(np.array([True]), [2], [3]), "eliminate_where_with_constant_condition",
                 "where_const.broadcast")


def test_where_selected_operand_is_broadcast():
    expect_guard(_where(np.array([True, True, True]), [1], [3]), "eliminate_where_with_constant_condition",
                 "where_const.selected_broadcast", _ab([1], [3]))


def test_where_float_selection():
    model = _where(np.array([True, True]), [2], [2], dtype=F)
    feeds = {"a": np.array([0.0, 1.0], np.float32), "b": np.array([2.0, 3.0], np.float32)}  # selects -0.0
    expect_guard(model, "eliminate_where_with_constant_condition", "where_const.float", feeds)


# --- Transpose -> Reshape ------------------------------------------------------------------------------


def _transpose(x_shape, perm):
    return model_of([node("Transpose", ["x"], ["y"], perm=perm)], [x(x_shape)])


def test_transpose_to_reshape_perm_of_another_rank():
    expect_guard(_transpose([2, 3, 4], [1, 0]), "transpose_to_reshape", "transpose_reshape.perm_rank")


def test_transpose_to_reshape_empty_tensor():
    expect_guard(_transpose([1, 0], [1, 0]), "transpose_to_reshape", "transpose_reshape.empty",
                 {"x": np.zeros((1, 0), np.float32)})


def test_transpose_to_reshape_moves_data():
    expect_guard(_transpose([2, 3], [1, 0]), "transpose_to_reshape", "transpose_reshape.reorders", {"x": rand(2, 3)})


def test_transpose_to_reshape_two_moved_symbolic_dims():
    expect_guard(_transpose(["N", "M", 1], [2, 0, 1]), "transpose_to_reshape", "transpose_reshape.symbolic_dims",
                 {"x": rand(2, 3, 1)})


def test_transpose_to_reshape_shape_unknown():
    expect_guard(_transpose(None, [1, 0]), "transpose_to_reshape", "transpose_reshape.shape_unknown",
                 {"x": rand(2, 3)})


def _reshape_transpose(x_shape, middle, perm, target):
    nodes = [node("Reshape", ["x", "s0"], ["r0"]), node("Transpose", ["r0"], ["t"], perm=perm),
             node("Reshape", ["t", "s"], ["y"])]
    return model_of(nodes, [x(x_shape)], [i64("s0", middle), i64("s", target)])


def test_reshape_through_transpose_shape_not_static():
    model = _reshape_transpose(None, [2, -1], [1, 0], [3, 2])
    expect_guard(model, "reshape_through_transpose", "reshape_transpose.shape_not_static", {"x": rand(6)})


def test_reshape_through_transpose_empty():
    model = _reshape_transpose([2, 0], [2, 0], [1, 0], [0, 2])
    expect_guard(model, "reshape_through_transpose", "reshape_transpose.empty", {"x": np.zeros((2, 0), np.float32)})


def test_reshape_through_transpose_perm_of_another_rank():
    model = _reshape_transpose([6], [2, 3], [2, 1, 0], [3, 2])
    expect_guard(model, "reshape_through_transpose", "reshape_transpose.perm_rank")


def test_reshape_through_transpose_merging_axes():
    model = _reshape_transpose([6], [2, 3], [1, 0], [6])
    expect_guard(model, "reshape_through_transpose", "reshape_transpose.not_unit_axes", {"x": rand(6)})
