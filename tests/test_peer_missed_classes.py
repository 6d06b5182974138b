"""The peers' wins onnxrefine missed: Sign idempotent, Clip/Relu chains, Flatten of a row, whole
Slices, empty Concat inputs. Exact rewrites: bit-identical in onnxruntime (NaN, infinities and
signed zeros in the inputs); each guard refuses its edge case."""

from __future__ import annotations

import numpy as np
import pytest
from guardutil import expect_guard
from helpers import make_model, op_types, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass, special_floats

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def feeds(shape, dtype=np.float32):
    scaled = (special_floats(shape, seed=1) * 4).astype(dtype)  # past the bounds too
    return [{"x": special_floats(shape, dtype)}, {"x": scaled}, {"x": np.full(shape, -0.0, dtype)}]


def unary_chain(ops, shape=(2, 8), bounds=(), tail="Neg", dtype=F, opset=17):
    """x -> ops[0] -> ops[1] ... -> Neg -> y; `bounds` gives each Clip's (min, max) (None: absent)."""
    nodes, inits, prev = [], [], "x"
    bounds = list(bounds)
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    for i, op in enumerate(ops):
        inputs = [prev]
        if op == "Clip":
            low, high = bounds.pop(0)
            for value, name in ((low, f"lo{i}"), (high, f"hi{i}")):
                if value is None:
                    inputs.append("")
                else:
                    inits.append(tensor(name, np.array(value, np_dtype)))
                    inputs.append(name)
            while inputs[-1] == "":
                inputs.pop()
        nodes.append(helper.make_node(op, inputs, [f"v{i}"], name=f"n{i}"))
        prev = f"v{i}"
    nodes.append(helper.make_node(tail, [prev], ["y"]))
    return make_model(nodes, [value_info("x", dtype, list(shape))], [value_info("y", dtype, list(shape))], inits,
                      opset=opset)


PASS = "eliminate_consecutive_idempotent_ops"


def test_sign_of_sign():
    optimized = check_pass(unary_chain(["Sign", "Sign"]), PASS, feeds((2, 8)))
    assert op_types(optimized) == ["Sign", "Neg"]


@pytest.mark.parametrize("ops, bounds, expected", [
    (["Relu", "Clip"], [(None, 6.0)], (0.0, 6.0)),
    (["Relu", "Clip"], [(-1.0, 6.0)], (0.0, 6.0)),
    (["Clip", "Relu"], [(-1.0, 6.0)], (0.0, 6.0)),
    (["Clip", "Relu"], [(2.0, None)], (2.0, None)),
    (["Clip", "Clip"], [(-3.0, 2.0), (-1.0, 5.0)], (-1.0, 2.0)),
    (["Clip", "Clip"], [(None, 2.0), (-1.0, None)], (-1.0, 2.0)),
    (["Clip", "Clip"], [(None, None), (None, 1.0)], (None, 1.0)),
])
def test_clamp_chains_merge_into_one_clip(ops, bounds, expected):
    model = unary_chain(ops, bounds=bounds)
    optimized = check_pass(model, PASS, feeds((2, 8)))
    assert op_types(optimized) == ["Clip", "Neg"]
    clip = optimized.graph.node[0]
    values = {i.name: float(np.asarray(helper.tensor_dtype_to_np_dtype(i.data_type).type(0)) + _value(i))
              for i in optimized.graph.initializer}
    got = tuple(values[name] if name else None for name in list(clip.input[1:]) + [""] * (3 - len(clip.input)))
    assert got == expected
    assert clip.name == "n1" and clip.output[0] == "v1"  # the Clip it replaces: name and value kept


def _value(init) -> float:
    from onnx import numpy_helper
    return float(numpy_helper.to_array(init))


def test_integer_clamp_chain():
    model = unary_chain(["Clip", "Clip"], bounds=[(-5, 3), (-2, 10)], dtype=TensorProto.INT32)
    x = {"x": RNG.integers(-20, 20, (2, 8)).astype(np.int32)}
    optimized = check_pass(model, PASS, [x])
    assert op_types(optimized) == ["Clip", "Neg"]


def test_clamps_that_do_not_meet_stay():
    """Clip to [-3, -1] then to [2, 5] is the constant 2, not a clamp (onnxscript makes it Clip(x, 2, -1): -1)."""
    expect_guard(unary_chain(["Clip", "Clip"], bounds=[(-3.0, -1.0), (2.0, 5.0)]), [PASS], "clip_chain.disjoint",
                 feeds((2, 8))[0])


def test_relu_after_a_negative_clip_stays():
    """All zeros, not a clamp (onnxscript makes it Clip(x, 0, -1): -1)."""
    expect_guard(unary_chain(["Clip", "Relu"], bounds=[(-3.0, -1.0)]), [PASS], "clip_chain.disjoint", feeds((2, 8))[0])


def test_clip_with_a_nan_bound_stays():
    expect_guard(unary_chain(["Relu", "Clip"], bounds=[(np.nan, 6.0)]), [PASS], "clip_chain.nan_bound", feeds((2, 8))[0])


def test_clip_with_min_above_max_stays():
    expect_guard(unary_chain(["Relu", "Clip"], bounds=[(6.0, 1.0)]), [PASS], "clip_chain.empty_range",
                 feeds((2, 8))[0])


def test_clip_with_a_computed_bound_stays():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Abs", ["m"], ["hi"]),
             helper.make_node("Clip", ["r", "", "hi"], ["c"]), helper.make_node("Neg", ["c"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [4]), value_info("m", F, [])], [value_info("y", F, [4])])
    expect_guard(model, [PASS], "clip_chain.bounds", {"x": special_floats((4,)), "m": np.array(2.0, np.float32)})


def test_clip_before_opset_11_stays():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Clip", ["r"], ["c"], max=6.0),
             helper.make_node("Neg", ["c"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4])], opset=10)
    expect_guard(model, [PASS], "clip_chain.opset", {"x": special_floats((4,))})


def test_clamp_chain_of_unknown_element_type_stays():
    """The merged bounds are constants of x's element type: unknown (a custom op's output), refused."""
    nodes = [helper.make_node("Foo", ["x"], ["f"], domain="custom.x"), helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Clip", ["r", "lo"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4])],
                       [tensor("lo", np.array(1.0, np.float32))])
    model.opset_import.append(helper.make_opsetid("custom.x", 1))
    expect_guard(model, [PASS], "clip_chain.dtype")


# --- Flatten of a row -------------------------------------------------------------------------


@pytest.mark.parametrize("shape, axis", [((1, 6), 0), ((6, 1), 2), ((1, 6), -2)])
def test_flatten_of_a_row_or_column_goes(shape, axis):
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=axis), helper.make_node("Neg", ["f"], ["y"])]
    model = make_model(nodes, [value_info("x", F, list(shape))], [value_info("y", F, None)])
    optimized = check_pass(model, "eliminate_nop_flatten", feeds(shape))
    assert op_types(optimized) == ["Neg"]


def test_flatten_axis_0_of_a_matrix_stays():
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=0), helper.make_node("Neg", ["f"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["n", 6])], [value_info("y", F, None)])
    expect_guard(model, ["eliminate_nop_flatten"], "flatten_row.dim_not_one", {"x": special_floats((3, 6))})


# --- whole Slices ---------------------------------------------------------------------------------


def slice_model(shape, starts, ends, axes=None, steps=None, x_shape=None):
    inputs = ["x", "s", "e"] + (["a"] if axes is not None else []) + (["st"] if steps is not None else [])
    if steps is not None and axes is None:
        raise ValueError("steps need axes here")
    inits = [tensor("s", np.array(starts, np.int64)), tensor("e", np.array(ends, np.int64))]
    inits += [tensor("a", np.array(axes, np.int64))] if axes is not None else []
    inits += [tensor("st", np.array(steps, np.int64))] if steps is not None else []
    nodes = [helper.make_node("Slice", inputs, ["sl"]), helper.make_node("Neg", ["sl"], ["y"])]
    return make_model(nodes, [value_info("x", F, list(x_shape or shape))], [value_info("y", F, None)], inits)


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([0], [2**63 - 1], [1], None), ([0, -10], [4, 100], [0, 1], [1, 1]), ([-4], [4], [0], None),
])
def test_whole_slices_go(starts, ends, axes, steps):
    optimized = check_pass(slice_model((4, 3), starts, ends, axes, steps), "eliminate_nop_slice", feeds((4, 3)))
    assert op_types(optimized) == ["Neg"]


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [4], [0], None), ([0], [3], [0], None), ([0], [4], [0], [2]), ([-1], [-5], [0], [-1]),
])
def test_partial_slices_stay(starts, ends, axes, steps):
    model = slice_model((4, 3), starts, ends, axes, steps)
    check_pass(model, "eliminate_nop_slice", feeds((4, 3)), changed=False)


def test_whole_slice_of_an_unknown_dim_stays():
    expect_guard(slice_model((4, 3), [0], [4], [0], x_shape=["n", 3]), ["eliminate_nop_slice"],
                 "nop_slice.end_dim_unknown", {"x": special_floats((4, 3))})
    expect_guard(slice_model((4, 3), [-4], [2**62], [0], x_shape=["n", 3]), ["eliminate_nop_slice"],
                 "nop_slice.start_dim_unknown", {"x": special_floats((4, 3))})


# --- empty Concat inputs --------------------------------------------------------------------------


def concat_model(shapes, axis=0, out_shape=None):
    names = [f"x{i}" for i in range(len(shapes))]
    nodes = [helper.make_node("Concat", names, ["c"], axis=axis, name="concat"), helper.make_node("Neg", ["c"], ["y"])]
    return make_model(nodes, [value_info(n, F, list(s)) for n, s in zip(names, shapes)], [value_info("y", F, out_shape)])


def concat_feeds(shapes):
    return [{f"x{i}": special_floats(tuple(s), seed=i) for i, s in enumerate(shapes)}]


def test_empty_concat_inputs_are_dropped():
    shapes = [(2, 3), (0, 3), (1, 3)]
    optimized = check_pass(concat_model(shapes), "eliminate_nop_concat", concat_feeds(shapes), changed=None)
    assert op_types(optimized) == ["Concat", "Neg"] and list(optimized.graph.node[0].input) == ["x0", "x2"]
    assert optimized.graph.node[0].name == "concat"


def test_concat_of_one_input_and_empties_is_that_input():
    shapes = [(2, 0), (2, 3)]
    optimized = check_pass(concat_model(shapes, axis=-1), "eliminate_nop_concat", concat_feeds(shapes))
    assert op_types(optimized) == ["Neg"]


def test_empty_input_with_unknown_other_dims_stays():
    """Dropping it would turn onnxruntime's shape mismatch error into a result."""
    shapes = [(2, 3), (0, "k")]
    expect_guard(concat_model(shapes), ["eliminate_nop_concat"], "concat_empty.other_dims",
                 {"x0": special_floats((2, 3)), "x1": np.zeros((0, 3), np.float32)})


# --- other readers: only one input repointed ------------------------------------------------------


def test_transposes_composing_to_identity_read_x_though_the_inner_one_is_shared():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("Transpose", ["t"], ["u"], perm=[1, 0]),
             helper.make_node("Neg", ["u"], ["y"]), helper.make_node("Abs", ["t"], ["z"])]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, [2, 3]), value_info("z", F, [3, 2])])
    optimized = check_pass(model, "fuse_consecutive_transposes", feeds((2, 3)))
    assert op_types(optimized) == ["Transpose", "Neg", "Abs"] and list(optimized.graph.node[1].input) == ["x"]


def test_concat_into_reshape_with_a_shared_concat():
    nodes = [helper.make_node("Concat", ["a", "b"], ["s"], axis=0), helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Neg", ["r"], ["y"]), helper.make_node("Identity", ["s"], ["z"])]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, [3, 2]), value_info("z", TensorProto.INT64, [2])],
                       [tensor("a", np.array([3], np.int64)), tensor("b", np.array([2], np.int64))])
    optimized = check_pass(model, "fuse_concat_into_reshape", feeds((2, 3)), changed=None)
    reshape = next(n for n in optimized.graph.node if n.op_type == "Reshape")
    assert reshape.input[1] != "s" and any(n.op_type == "Concat" for n in optimized.graph.node)


# --- an Expand before a broadcasting binary op ----------------------------------------------------


def expand_add(x_shape, target, y_shape, op="Add", expand_second=False):
    operands = ["y", "e"] if expand_second else ["e", "y"]
    nodes = [helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node(op, operands, ["o"], name="op"),
             helper.make_node("Neg", ["o"], ["out"])]
    return make_model(nodes, [value_info("x", F, list(x_shape)), value_info("y", F, list(y_shape))],
                      [value_info("out", F, None)], [tensor("s", np.array(target, np.int64))])


def expand_feeds(x_shape, y_shape):
    return [{"x": special_floats(tuple(x_shape), seed=2), "y": special_floats(tuple(y_shape), seed=3)}]


@pytest.mark.parametrize("op, expand_second", [("Add", False), ("Sub", True), ("Div", False)])
def test_expand_the_op_would_broadcast_anyway_goes(op, expand_second):
    model = expand_add((1, 3), (4, 3), (4, 3), op, expand_second)
    optimized = check_pass(model, "eliminate_nop_expand", expand_feeds((1, 3), (4, 3)))
    assert op_types(optimized) == [op, "Neg"] and optimized.graph.node[0].name == "op"


def test_expand_that_widens_the_output_stays():
    expect_guard(expand_add((1, 3), (4, 3), (1, 3)), ["eliminate_nop_expand"], "expand_broadcast.shape_changes",
                 expand_feeds((1, 3), (1, 3))[0])


def test_expand_of_an_unknown_shape_stays():
    expect_guard(expand_add(("n", 3), (4, 3), (4, 3)), ["eliminate_nop_expand"], "expand_broadcast.shape_unknown",
                 expand_feeds((1, 3), (4, 3))[0])


# --- a Cast of a ConstantOfShape ------------------------------------------------------------------


def fill_cast(value, dtype, to, like=False):
    fill = helper.make_tensor("v", dtype, [1], [value])
    cast = (helper.make_node("CastLike", ["c", "l"], ["k"], name="cast") if like
            else helper.make_node("Cast", ["c"], ["k"], to=to, name="cast"))
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["c"], value=fill),
             cast, helper.make_node("Identity", ["k"], ["y"])]
    inputs = [value_info("x", F, ["n", 3])] + ([value_info("l", to, [1])] if like else [])
    return make_model(nodes, inputs, [value_info("y", to, None)])


@pytest.mark.parametrize("value, dtype, to, like", [
    (1.0, F, TensorProto.INT64, False), (-3, TensorProto.INT64, F, False), (0.5, F, TensorProto.FLOAT16, True),
    (float("-inf"), F, TensorProto.DOUBLE, False), (1.0, F, TensorProto.BOOL, False),
])
def test_cast_of_a_fill_becomes_the_fill(value, dtype, to, like):
    model = fill_cast(value, dtype, to, like)
    feeds_ = {"x": np.zeros((2, 3), np.float32)} | ({"l": np.zeros(1, helper.tensor_dtype_to_np_dtype(to))} if like else {})
    optimized = check_pass(model, "fuse_cast_into_constant_of_shape", [feeds_])
    assert op_types(optimized)[-2:] == ["ConstantOfShape", "Identity"] and "Cast" not in op_types(optimized)


@pytest.mark.parametrize("value, dtype, to", [(0.1, F, TensorProto.FLOAT16), (2.5, F, TensorProto.INT32),
                                              (300, TensorProto.INT64, TensorProto.INT8), (2.0, F, TensorProto.BOOL)])
def test_cast_of_a_fill_that_rounds_or_wraps_stays(value, dtype, to):
    expect_guard(fill_cast(value, dtype, to), ["fuse_cast_into_constant_of_shape"], "fill_cast.inexact",
                 {"x": np.zeros((2, 3), np.float32)})


def test_cast_of_a_fill_to_a_type_constant_of_shape_does_not_make_stays():
    expect_guard(fill_cast(1.0, F, TensorProto.STRING), ["fuse_cast_into_constant_of_shape"], "fill_cast.dtype",
                 {"x": np.zeros((2, 3), np.float32)})


# --- ConvTranspose followed by a constant Mul or Add ----------------------------------------------


def conv_transpose(op, constant, group=2, bias=True, c_in=4, c_out_per_group=3):
    w = RNG.standard_normal((c_in, c_out_per_group, 3, 3)).astype(np.float32)
    inits = [tensor("w", w), tensor("c", constant.astype(np.float32))]
    inputs = ["x", "w"]
    if bias:
        inits.append(tensor("b", RNG.standard_normal(group * c_out_per_group).astype(np.float32)))
        inputs.append("b")
    nodes = [helper.make_node("ConvTranspose", inputs, ["t"], group=group, strides=[2, 2], name="deconv"),
             helper.make_node(op, ["t", "c"], ["y"], name="op")]
    return make_model(nodes, [value_info("x", F, [1, c_in, 4, 4])], [value_info("y", F, None)], inits)


@pytest.mark.parametrize("op, bias", [("Mul", True), ("Mul", False), ("Add", True), ("Add", False)])
def test_conv_transpose_absorbs_a_per_channel_constant(op, bias):
    constant = RNG.uniform(0.5, 2.0, (1, 6, 1, 1))
    model = conv_transpose(op, constant, bias=bias)
    pass_name = "fuse_mul_into_conv" if op == "Mul" else "fuse_add_bias_into_conv"
    x = [{"x": RNG.standard_normal((1, 4, 4, 4)).astype(np.float32)}]
    optimized = check_pass(model, pass_name, x, exact=False, rtol=1e-5, atol=1e-5)
    assert op_types(optimized) == ["ConvTranspose"] and optimized.graph.node[0].name == "op"


def test_conv_transpose_constant_varying_off_the_channel_axis_stays():
    model = conv_transpose("Add", RNG.standard_normal((1, 6, 1, 9)))
    expect_guard(model, ["fuse_add_bias_into_conv"], "conv_transpose_affine.non_channel",
                 {"x": RNG.standard_normal((1, 4, 4, 4)).astype(np.float32)})


def test_conv_transpose_group_not_dividing_stays():
    model = conv_transpose("Mul", np.ones((1, 9, 1, 1)), group=3, c_in=4, c_out_per_group=3)
    expect_guard(model, ["fuse_mul_into_conv"], "conv_transpose_affine.group")


# --- a size-1-moving Transpose into the Reshape after it; Reshape chains copying the same dim -----


def transpose_reshape(x_shape, perm, target, feed_shape):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm), helper.make_node("Reshape", ["t", "s"], ["r"], name="reshape"),
             helper.make_node("Neg", ["r"], ["y"])]
    model = make_model(nodes, [value_info("x", F, list(x_shape))], [value_info("y", F, None)],
                       [tensor("s", np.array(target, np.int64))])
    return model, [{"x": special_floats(tuple(feed_shape))}, {"x": np.zeros((0,) + tuple(feed_shape[1:]), np.float32)}]


def test_transpose_of_unit_axes_goes_into_the_reshape_after_it():
    """The SSD head at 1x1 with a dynamic batch: [n, a, 4, 1, 1] -> perm 0,3,4,1,2 -> Reshape [0, -1, 4]
    (also on an empty batch, which transpose_to_reshape's own target could not be written for)."""
    model, feed = transpose_reshape(["n", "a", 4, 1, 1], [0, 3, 4, 1, 2], [0, -1, 4], (2, 6, 4, 1, 1))
    optimized = check_pass(model, "transpose_to_reshape", feed[:1])
    assert op_types(optimized) == ["Reshape", "Neg"] and optimized.graph.node[0].name == "reshape"


def test_transpose_that_reorders_stays_before_the_reshape():
    model, feed = transpose_reshape(["n", 6, 4, 1, 1], [0, 2, 1, 3, 4], [0, -1], (2, 6, 4, 1, 1))
    expect_guard(model, ["transpose_to_reshape"], "transpose_into_reshape.reorders", feed[0])


def test_transpose_into_a_reshape_copying_a_moved_dim_stays():
    model, feed = transpose_reshape(["b", "a", 1], [0, 2, 1], [0, 0, -1], (2, 6, 1))
    expect_guard(model, ["transpose_to_reshape"], "transpose_into_reshape.copied_dim", feed[0])


def test_transpose_into_a_computed_reshape_target_stays():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), helper.make_node("Reshape", ["t", "s"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["b", "a", 1]), value_info("s", TensorProto.INT64, [1])],
                       [value_info("y", F, None)])
    expect_guard(model, ["transpose_to_reshape"], "transpose_into_reshape.target",
                 {"x": special_floats((2, 6, 1)), "s": np.array([12], np.int64)})


def test_transpose_into_reshape_of_an_unknown_shape_stays():
    from guardutil import expect_refused
    from onnxrefine.passes.transposes import transpose_into_reshape
    from types import SimpleNamespace
    from onnxrefine.ir import io
    model, _ = transpose_reshape([2, 3], [1, 0], [6], (2, 3))
    ir_model = io.proto_to_ir(model)
    transpose, reshape = list(ir_model.graph)[:2]
    facts = SimpleNamespace(symbolic_shape=lambda value: None)
    ctx = SimpleNamespace(facts=facts)
    found = {"t": transpose, "reshape": reshape, "x": transpose.inputs[0], "s": reshape.inputs[1]}
    expect_refused("transpose_into_reshape.shape_unknown", transpose_into_reshape, found, ctx)


def test_reshape_chain_copying_the_same_dim_collapses():
    nodes = [helper.make_node("Reshape", ["x", "a"], ["r1"]), helper.make_node("Reshape", ["r1", "b"], ["r2"]),
             helper.make_node("Neg", ["r2"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["n", 24, 1, 1])], [value_info("y", F, None)],
                       [tensor("a", np.array([0, -1, 4, 1, 1], np.int64)), tensor("b", np.array([0, -1, 4], np.int64))])
    optimized = check_pass(model, "eliminate_consecutive_idempotent_ops", [{"x": special_floats((2, 24, 1, 1))}])
    assert op_types(optimized) == ["Reshape", "Neg"]


# --- CastLike of a constant -----------------------------------------------------------------------


def test_cast_like_of_a_constant_folds():
    nodes = [helper.make_node("CastLike", ["c", "x"], ["cl"], name="castlike"), helper.make_node("Add", ["x", "cl"], ["y"])]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT16, [2])], [value_info("y", TensorProto.FLOAT16, None)],
                       [tensor("c", np.array([1.5, 0.1], np.float32))])
    optimized = check_pass(model, ["cast_like_to_cast", "fold_constants"], [{"x": np.array([2.0, -0.0], np.float16)}])
    assert op_types(optimized) == ["Add"] and [i.name for i in optimized.graph.initializer] == ["cl"]


def test_cast_like_of_an_unknown_type_stays():
    nodes = [helper.make_node("Foo", ["x"], ["f"], domain="custom.x"), helper.make_node("CastLike", ["c", "f"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, [2])], [tensor("c", np.ones(2, np.float32))])
    model.opset_import.append(helper.make_opsetid("custom.x", 1))
    expect_guard(model, ["cast_like_to_cast"], "cast_like.type_unknown")


# --- Pad into ConvInteger and into a Conv with auto_pad=VALID -------------------------------------


def pad_conv_integer(zero_point, fill):
    w = np.ones((1, 1, 3, 3), np.uint8)
    conv_inputs = ["xp", "w"] + (["zp"] if zero_point is not None else [])
    inits = [tensor("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), tensor("v", np.array(fill, np.uint8)),
             tensor("w", w)] + ([tensor("zp", np.array(zero_point, np.uint8))] if zero_point is not None else [])
    nodes = [helper.make_node("Pad", ["x", "p", "v"], ["xp"]),
             helper.make_node("ConvInteger", conv_inputs, ["y"], name="conv")]
    return make_model(nodes, [value_info("x", TensorProto.UINT8, [1, 1, 4, 4])], [value_info("y", TensorProto.INT32, None)],
                      inits, opset=13)


X_U8 = {"x": np.random.default_rng(5).integers(0, 255, (1, 1, 4, 4)).astype(np.uint8)}


@pytest.mark.parametrize("zero_point, fill", [(None, 0), (0, 0), (5, 5)])
def test_pad_of_the_zero_point_folds_into_conv_integer(zero_point, fill):
    optimized = check_pass(pad_conv_integer(zero_point, fill), "fuse_pad_into_conv", [X_U8])
    assert op_types(optimized) == ["ConvInteger"]


def test_pad_of_zero_before_a_conv_integer_with_another_zero_point_stays():
    """onnxruntime pads ConvInteger with x_zero_point: a Pad of 0 there is not its padding (onnxscript folds it)."""
    expect_guard(pad_conv_integer(5, 0), ["fuse_pad_into_conv"], "pad_conv_integer.fill", X_U8)


def test_pad_before_a_conv_integer_with_a_computed_zero_point_stays():
    model = pad_conv_integer(None, 0)
    model.graph.node[1].input.append("zp")
    model.graph.input.append(value_info("zp", TensorProto.UINT8, []))
    expect_guard(model, ["fuse_pad_into_conv"], "pad_conv_integer.zero_point", {**X_U8, "zp": np.array(0, np.uint8)})


def test_pad_folds_into_a_conv_with_auto_pad_valid():
    nodes = [helper.make_node("Pad", ["x", "p"], ["xp"]),
             helper.make_node("Conv", ["xp", "w"], ["y"], auto_pad="VALID", name="conv")]
    model = make_model(nodes, [value_info("x", F, [1, 2, 5, 5])], [value_info("y", F, None)],
                       [tensor("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)), tensor("w", RNG.standard_normal((3, 2, 3, 3)).astype(np.float32))])
    optimized = check_pass(model, "fuse_pad_into_conv", [{"x": RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)}])
    assert op_types(optimized) == ["Conv"]
    assert {a.name: list(a.ints) for a in optimized.graph.node[0].attribute}["pads"] == [1, 2, 2, 1]


def test_reshape_chain_copying_a_known_dim_writes_it_out():
    """[2, 3, 4] -> Reshape [6, 4] -> Reshape [0, 2, 2]: the 0 copies 6, which x does not have there."""
    nodes = [helper.make_node("Reshape", ["x", "a"], ["r1"]), helper.make_node("Reshape", ["r1", "b"], ["r2"]),
             helper.make_node("Neg", ["r2"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2, 3, 4])], [value_info("y", F, None)],
                       [tensor("a", np.array([6, 4], np.int64)), tensor("b", np.array([0, 2, 2], np.int64))])
    optimized = check_pass(model, "eliminate_consecutive_idempotent_ops", [{"x": special_floats((2, 3, 4))}])
    assert op_types(optimized) == ["Reshape", "Neg"]


# --- MatMul + Add -> Gemm with a computed weight --------------------------------------------------


def matmul_computed_weight(w_shape):
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    return make_model(nodes, [value_info("x", F, [3, 4]), value_info("w", F, w_shape)], [value_info("y", F, None)],
                      [tensor("b", RNG.standard_normal(5).astype(np.float32))])


def test_matmul_with_a_computed_weight_and_constant_bias_becomes_gemm():
    model = matmul_computed_weight([5, 4])
    feeds_ = [{"x": RNG.standard_normal((3, 4)).astype(np.float32), "w": RNG.standard_normal((5, 4)).astype(np.float32)}]
    optimized = check_pass(model, "fuse_matmul_add_bias_into_gemm", feeds_, exact=False)
    assert op_types(optimized) == ["Transpose", "Gemm"] and optimized.graph.node[-1].name == "add"


def test_matmul_with_a_computed_weight_of_unknown_shape_stays():
    model = matmul_computed_weight(["k", 4])
    feeds_ = {"x": RNG.standard_normal((3, 4)).astype(np.float32), "w": RNG.standard_normal((5, 4)).astype(np.float32)}
    expect_guard(model, ["fuse_matmul_add_bias_into_gemm"], "gemm.weight_shape")
    check_pass(model, "fuse_matmul_add_bias_into_gemm", [feeds_], changed=False)
