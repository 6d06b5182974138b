"""Fusion passes: numerics against onnxruntime (bit-exact for exact ones) and every known trap."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from passutil import assert_bit_identical, assert_close, check_pass, optimize, special_floats

import onnxrefine
from onnxrefine.passes.fusion import compose_perms, compose_squeezes, compose_unsqueezes
from onnxrefine.passes.registry import get_pass
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def feeds_for(shape, seed=0, name="x"):
    return [{name: special_floats(tuple(shape), seed=seed)}, {name: np.full(tuple(shape), -0.0, np.float32)}]


def kinds():
    return {
        "fuse_consecutive_transposes": EXACT, "fuse_consecutive_squeezes": EXACT, "fuse_consecutive_unsqueezes": EXACT,
        "fuse_consecutive_slices": EXACT, "fuse_consecutive_concats": EXACT, "fuse_consecutive_log_softmax": REASSOCIATING,
        "fuse_consecutive_reduce_unsqueeze": EXACT, "fuse_matmul_add_bias_into_gemm": REASSOCIATING,
        "fuse_transpose_into_gemm": EXACT, "fuse_pad_into_conv": EXACT, "fuse_pad_into_pool": REASSOCIATING,
        "fuse_concat_into_reshape": EXACT, "fuse_qkv": REASSOCIATING,
    }


def test_fusion_passes_registered_with_kinds():
    for name, kind in kinds().items():
        assert get_pass(name).kind == kind


# --- transposes -------------------------------------------------------------------------------


def test_compose_perms_order_on_non_symmetric_perms():
    x = np.arange(24).reshape(2, 3, 4)
    inner, outer = [1, 0, 2], [0, 2, 1]
    expected = np.transpose(np.transpose(x, inner), outer)
    assert np.array_equal(np.transpose(x, compose_perms(inner, outer)), expected)
    assert compose_perms(inner, outer) != compose_perms(outer, inner)


def transpose_chain(shape, perms):
    nodes, prev = [], "x"
    for i, perm in enumerate(perms):
        out = "y" if i == len(perms) - 1 else f"t{i}"
        kwargs = {} if perm is None else {"perm": perm}
        nodes.append(helper.make_node("Transpose", [prev], [out], **kwargs))
        prev = out
    return make_model(nodes, [value_info("x", F, list(shape))], [value_info("y", F, None)])


def test_transposes_fused_non_symmetric():
    model = transpose_chain((2, 3, 4), [[1, 2, 0], [2, 0, 1], None])
    optimized = check_pass(model, "fuse_consecutive_transposes", feeds_for((2, 3, 4)))
    assert op_types(optimized) == ["Transpose"]


def test_transposes_that_cancel_leave_nothing_with_nop_pass():
    model = transpose_chain((2, 3, 4), [[1, 2, 0], [2, 0, 1]])
    model.graph.node.append(helper.make_node("Neg", ["y"], ["z"]))
    model.graph.output[0].name = "z"
    optimized = check_pass(model, ["fuse_consecutive_transposes", "eliminate_nop_transpose"], feeds_for((2, 3, 4)))
    assert op_types(optimized) == ["Neg"]


@settings(deadline=None, max_examples=30)
@given(rank=st.integers(1, 5), data=st.data())
def test_transpose_chain_property(rank, data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    perms = [data.draw(st.one_of(st.none(), st.permutations(range(rank)))) for _ in range(data.draw(st.integers(2, 4)))]
    model = transpose_chain(shape, perms)
    optimized = optimize(model, "fuse_consecutive_transposes")
    assert op_types(optimized) == ["Transpose"]
    f = {"x": special_floats(tuple(shape), seed=rank)}
    assert_bit_identical(run(model, f), run(optimized, f))


# --- squeezes / unsqueezes --------------------------------------------------------------------


def axes_chain(op, shape, axes_list, opset=13, symbolic=False):
    nodes, inits, prev = [], [], "x"
    for i, axes in enumerate(axes_list):
        out = "y" if i == len(axes_list) - 1 else f"s{i}"
        if opset >= 13:
            inits.append(tensor(f"a{i}", np.array(axes, np.int64)))
            nodes.append(helper.make_node(op, [prev, f"a{i}"], [out]))
        else:
            nodes.append(helper.make_node(op, [prev], [out], axes=axes))
        prev = out
    dims = [f"d{i}" if symbolic and d != 1 else d for i, d in enumerate(shape)]
    return make_model(nodes, [value_info("x", F, dims)], [value_info("y", F, None)], inits, opset=opset)


def test_compose_squeezes_negative_axes():
    # x: [1, 3, 1, 4, 1]; squeeze -1 -> [1, 3, 1, 4]; squeeze -2 -> [1, 3, 4]: axes {4, 2} of x.
    assert compose_squeezes([-1], [-2], 5) == [2, 4]
    assert compose_squeezes([0], [1], None) == [0, 2]
    assert compose_squeezes([-1], [0], None) is None


def test_compose_unsqueezes_negative_axes():
    x = np.zeros((3, 4))
    y = np.expand_dims(np.expand_dims(x, -1), -3)  # [3, 4, 1] -> [3, 1, 4, 1]... axes of output
    axes = compose_unsqueezes([-1], [-3], 2)
    assert np.expand_dims(x, axes).shape == y.shape
    assert compose_unsqueezes([0], [0], None) == [0, 1]


@pytest.mark.parametrize("opset", [11, 13])
def test_squeezes_with_negative_axes_fused(opset):
    model = axes_chain("Squeeze", (1, 3, 1, 4, 1), [[-1], [-2]], opset)
    optimized = check_pass(model, "fuse_consecutive_squeezes", feeds_for((1, 3, 1, 4, 1)))
    assert op_types(optimized) == ["Squeeze"]


def test_squeezes_negative_axes_with_unknown_rank_kept():
    # Inside a function the input's rank is unknown: -1 cannot be resolved.
    nodes = [helper.make_node("Constant", [], ["a"], value=tensor("a", np.array([-1], np.int64))),
             helper.make_node("Constant", [], ["b"], value=tensor("b", np.array([0], np.int64))),
             helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Squeeze", ["r", "a"], ["s"]),
             helper.make_node("Squeeze", ["s", "b"], ["y"])]
    fn = helper.make_function("local", "F", ["x"], ["y"], nodes, [helper.make_opsetid("", 13)])
    model = make_model([helper.make_node("F", ["x"], ["y"], domain="local")], [value_info("x", F, [1, 2, 1])],
                       [value_info("y", F, [2])], functions=[fn], opset=13)
    model.opset_import.append(helper.make_opsetid("local", 1))
    optimized = onnxrefine.optimize(model, ["fuse_consecutive_squeezes"])
    assert [n.op_type for n in optimized.functions[0].node].count("Squeeze") == 2


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueezes_with_negative_axes_fused(opset):
    model = axes_chain("Unsqueeze", (3, 4), [[-1, 0], [-2]], opset)
    optimized = check_pass(model, "fuse_consecutive_unsqueezes", feeds_for((3, 4)))
    assert op_types(optimized) == ["Unsqueeze"]


@settings(deadline=None, max_examples=30)
@given(data=st.data())
def test_squeeze_chain_property(data):
    shape = data.draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=2, max_size=6))
    ones = [i for i, d in enumerate(shape) if d == 1]
    if len(ones) < 2:
        shape = shape + [1, 1]
        ones = [i for i, d in enumerate(shape) if d == 1]
    first = data.draw(st.lists(st.sampled_from(ones), min_size=1, max_size=len(ones) - 1, unique=True))
    rank = len(shape)
    remaining = [d for i, d in enumerate(shape) if i not in first]
    second_ones = [i for i, d in enumerate(remaining) if d == 1]
    second = data.draw(st.lists(st.sampled_from(second_ones), min_size=1, max_size=len(second_ones), unique=True))
    negate = data.draw(st.booleans())
    first = [a - rank if negate and data.draw(st.booleans()) else a for a in first]
    second = [a - len(remaining) if negate and data.draw(st.booleans()) else a for a in second]
    model = axes_chain("Squeeze", shape, [first, second], symbolic=data.draw(st.booleans()))
    optimized = optimize(model, "fuse_consecutive_squeezes")
    assert op_types(optimized) == ["Squeeze"]
    f = {"x": special_floats(tuple(shape), seed=rank)}
    assert_bit_identical(run(model, f), run(optimized, f))


@settings(deadline=None, max_examples=30)
@given(data=st.data())
def test_unsqueeze_chain_property(data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    r1 = len(shape) + data.draw(st.integers(1, 2))
    first = data.draw(st.lists(st.integers(-r1, r1 - 1), min_size=r1 - len(shape), max_size=r1 - len(shape),
                               unique_by=lambda a: a % r1))
    r2 = r1 + data.draw(st.integers(1, 2))
    second = data.draw(st.lists(st.integers(-r2, r2 - 1), min_size=r2 - r1, max_size=r2 - r1, unique_by=lambda a: a % r2))
    model = axes_chain("Unsqueeze", shape, [first, second], symbolic=data.draw(st.booleans()))
    optimized = optimize(model, "fuse_consecutive_unsqueezes")
    assert op_types(optimized) == ["Unsqueeze"]
    f = {"x": special_floats(tuple(shape), seed=len(shape))}
    assert_bit_identical(run(model, f), run(optimized, f))


def test_squeeze_without_axes_kept():
    nodes = [helper.make_node("Squeeze", ["x", "a"], ["s"]), helper.make_node("Squeeze", ["s"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [1, 2, 1])], [value_info("y", F, None)],
                       [tensor("a", np.array([0], np.int64))], opset=13)
    check_pass(model, "fuse_consecutive_squeezes", feeds_for((1, 2, 1)), changed=False)


# --- slices, concats --------------------------------------------------------------------------


def slice_model(shape, s1, s2, symbolic=False):
    inits = []
    nodes, prev = [], "x"
    for i, (starts, ends, axes, steps) in enumerate((s1, s2)):
        names = [f"st{i}", f"en{i}", f"ax{i}", f"sp{i}"]
        for name, values in zip(names, (starts, ends, axes, steps)):
            inits.append(tensor(name, np.array(values, np.int64)))
        out = "y" if i == 1 else "s0"
        nodes.append(helper.make_node("Slice", [prev, *names], [out]))
        prev = out
    dims = [f"d{i}" for i in range(len(shape))] if symbolic else list(shape)
    return make_model(nodes, [value_info("x", F, dims)], [value_info("y", F, None)], inits)


def test_slices_on_disjoint_axes_fused():
    model = slice_model((4, 5, 6), ([1], [4], [0], [1]), ([-1], [0], [-1], [-2]))
    assert op_types(check_pass(model, "fuse_consecutive_slices", feeds_for((4, 5, 6)))) == ["Slice"]


def test_slices_on_the_same_axis_kept():
    model = slice_model((4, 5, 6), ([1], [4], [0], [1]), ([1], [3], [-3], [1]))
    check_pass(model, "fuse_consecutive_slices", feeds_for((4, 5, 6)), changed=False)


def test_slices_with_negative_axes_and_unknown_rank_kept():
    model = slice_model((4, 5, 6), ([1], [4], [0], [1]), ([-1], [0], [-1], [-2]))
    model.graph.input[0].type.tensor_type.ClearField("shape")
    optimized = onnxrefine.optimize(model, ["fuse_consecutive_slices"])
    assert op_types(optimized) == ["Slice", "Slice"]


def test_concats_fused_same_axis_and_kept_when_shared():
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=1), helper.make_node("Concat", ["c", "x", "c"], ["y"], axis=-1)]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, None)])
    assert op_types(check_pass(model, "fuse_consecutive_concats", feeds_for((2, 3)))) == ["Concat"]
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=0), helper.make_node("Concat", ["c", "c"], ["y"], axis=1)]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, None)])
    check_pass(model, "fuse_consecutive_concats", [], changed=False)
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=1), helper.make_node("Concat", ["c", "x"], ["y"], axis=1)]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, None), value_info("c", F, None)])
    check_pass(model, "fuse_consecutive_concats", feeds_for((2, 3)), changed=False)


# --- log softmax, reduce + unsqueeze ----------------------------------------------------------


@pytest.mark.parametrize("opset, axis", [(11, 1), (11, None), (13, 0), (13, None)])
def test_log_softmax_fused_with_opset_axis_semantics(opset, axis):
    kwargs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("Softmax", ["x"], ["s"], **kwargs), helper.make_node("Log", ["s"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2, 3, 4])], [value_info("y", F, None)], opset=opset)
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}
    optimized = check_pass(model, "fuse_consecutive_log_softmax", [x], exact=False, rtol=1e-5, atol=1e-5)
    assert op_types(optimized) == ["LogSoftmax"]


@pytest.mark.parametrize("op, opset", [("ReduceSum", 13), ("ReduceMean", 13), ("ReduceMax", 18), ("ReduceL2", 11)])
def test_reduce_unsqueeze_fused(op, opset):
    axes = [-1, 0]
    inits = []
    if (op == "ReduceSum" and opset >= 13) or opset >= 18:
        inits.append(tensor("ra", np.array(axes, np.int64)))
        reduce = helper.make_node(op, ["x", "ra"], ["r"], keepdims=0)
    else:
        reduce = helper.make_node(op, ["x"], ["r"], keepdims=0, axes=axes)
    if opset >= 13:
        inits.append(tensor("ua", np.array([0, 2], np.int64)))
        unsq = helper.make_node("Unsqueeze", ["r", "ua"], ["y"])
    else:
        unsq = helper.make_node("Unsqueeze", ["r"], ["y"], axes=[0, 2])
    model = make_model([reduce, unsq], [value_info("x", F, [2, 3, 4])], [value_info("y", F, None)], inits, opset=opset)
    optimized = check_pass(model, "fuse_consecutive_reduce_unsqueeze", feeds_for((2, 3, 4)))
    assert op_types(optimized) == [op]


def test_reduce_unsqueeze_different_axes_kept():
    nodes = [helper.make_node("ReduceMax", ["x"], ["r"], keepdims=0, axes=[1]), helper.make_node("Unsqueeze", ["r"], ["y"], axes=[0])]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, None)], opset=11)
    check_pass(model, "fuse_consecutive_reduce_unsqueeze", feeds_for((2, 3)), changed=False)


# --- gemm -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias_shape", [(5,), (1, 5), ()])
def test_matmul_add_into_gemm(bias_shape):
    rng = np.random.default_rng(0)
    inits = [tensor("B", rng.standard_normal((4, 5)).astype(np.float32)), tensor("C", rng.standard_normal(bias_shape).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["C", "m"], ["y"])]
    model = make_model(nodes, [value_info("x", F, ["M", 4])], [value_info("y", F, None)], inits)
    x = [{"x": rng.standard_normal((3, 4)).astype(np.float32)}]
    assert op_types(check_pass(model, "fuse_matmul_add_bias_into_gemm", x, exact=False)) == ["Gemm"]


def test_matmul_add_with_3d_or_unknown_rank_input_kept():
    rng = np.random.default_rng(0)
    inits = [tensor("B", rng.standard_normal((4, 5)).astype(np.float32)), tensor("C", np.ones(5, np.float32))]
    for shape in ([2, 3, 4], None):
        nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["m", "C"], ["y"])]
        model = make_model(nodes, [value_info("x", F, shape)], [value_info("y", F, None)], inits)
        assert op_types(onnxrefine.optimize(model, ["fuse_matmul_add_bias_into_gemm"])) == ["MatMul", "Add"]


def test_matmul_add_bias_that_broadcasts_rows_kept():
    rng = np.random.default_rng(0)
    inits = [tensor("B", rng.standard_normal((4, 5)).astype(np.float32)), tensor("C", np.ones((3, 5), np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["m", "C"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [3, 4])], [value_info("y", F, None)], inits)
    assert op_types(optimize(model, "fuse_matmul_add_bias_into_gemm")) == ["MatMul", "Add"]


@pytest.mark.parametrize("which", ["A", "B", "both"])
def test_transpose_into_gemm(which):
    rng = np.random.default_rng(0)
    nodes, a, b = [], "a", "b"
    if which in ("A", "both"):
        nodes.append(helper.make_node("Transpose", ["a"], ["ta"], perm=[1, 0]))
        a = "ta"
    if which in ("B", "both"):
        nodes.append(helper.make_node("Transpose", ["b"], ["tb"]))
        b = "tb"
    nodes.append(helper.make_node("Gemm", [a, b, "c"], ["y"], transB=1 if which == "A" else 0, alpha=0.5))
    a_shape = [4, 3] if a == "ta" else [3, 4]
    b_shape = [5, 4] if b == "tb" or which == "A" else [4, 5]
    model = make_model(nodes, [value_info("a", F, a_shape), value_info("b", F, b_shape)], [value_info("y", F, None)],
                       [tensor("c", rng.standard_normal(5).astype(np.float32))])
    f = [{"a": special_floats(tuple(a_shape), seed=1), "b": rng.standard_normal(b_shape).astype(np.float32)},
         {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}]
    assert op_types(check_pass(model, "fuse_transpose_into_gemm", f)) == ["Gemm"]


# --- pad into conv / pool ---------------------------------------------------------------------


def pad_model(consumer, pad_amounts, value=None, mode="constant", opset=13, **attrs):
    rng = np.random.default_rng(0)
    inits = [tensor("p", np.array(pad_amounts, np.int64))]
    pad_inputs = ["x", "p"]
    if value is not None:
        inits.append(tensor("v", np.array(value, np.float32)))
        pad_inputs.append("v")
    nodes = [helper.make_node("Pad", pad_inputs, ["q"], mode=mode)]
    if consumer == "Conv":
        inits.append(tensor("W", rng.standard_normal((2, 3, 3, 3)).astype(np.float32)))
        nodes.append(helper.make_node("Conv", ["q", "W"], ["y"], **attrs))
    else:
        nodes.append(helper.make_node(consumer, ["q"], ["y"], kernel_shape=[3, 3], **attrs))
    return make_model(nodes, [value_info("x", F, [1, 3, 5, 6])], [value_info("y", F, None)], inits, opset=opset)


def pool_feeds():
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, 3, 5, 6)).astype(np.float32)},
            {"x": -np.abs(rng.standard_normal((1, 3, 5, 6))).astype(np.float32) - 1},
            {"x": special_floats((1, 3, 5, 6), seed=3)},
            {"x": np.full((1, 3, 5, 6), -0.0, np.float32)}]


@pytest.mark.parametrize("conv_pads", [None, [1, 0, 0, 1]])
def test_pad_into_conv(conv_pads):
    attrs = {} if conv_pads is None else {"pads": conv_pads}
    model = pad_model("Conv", [0, 0, 1, 2, 0, 0, 2, 1], **attrs)
    assert op_types(check_pass(model, "fuse_pad_into_conv", pool_feeds())) == ["Conv"]


@pytest.mark.parametrize("pads, value, mode", [
    ([1, 0, 1, 1, 0, 0, 1, 1], None, "constant"),  # pads the batch dim
    ([0, 0, 1, 1, 0, 0, 1, 1], 1.0, "constant"),  # nonzero value
    ([0, 0, 1, 1, 0, 0, 1, 1], -0.0, "constant"),  # -0.0 is not Conv's +0.0 padding
    ([0, 0, 1, 1, 0, 0, 1, 1], None, "reflect"),
    ([0, 0, -1, 1, 0, 0, 1, 1], None, "constant"),  # cropping
])
def test_pad_into_conv_refused(pads, value, mode):
    model = pad_model("Conv", pads, value, mode)
    check_pass(model, "fuse_pad_into_conv", pool_feeds()[:1], changed=False)


def test_pad_into_average_pool_counting_pads():
    model = pad_model("AveragePool", [0, 0, 1, 1, 0, 0, 2, 1], count_include_pad=1)
    # An all -0.0 window may turn +0.0 into -0.0 (test below); nothing here reads the sign of a
    # zero (ir/signed_zero.py), so the guard lets it through and the certificate treats the zero
    # signs alike, with or without certificates.
    assert op_types(onnxrefine.optimize(model, ["fuse_pad_into_pool"], certify=False)) == ["AveragePool"]
    optimized = optimize(model, "fuse_pad_into_pool")
    assert op_types(optimized) == ["AveragePool"]
    for feeds in pool_feeds():
        assert_close(run(model, feeds), run(optimized, feeds), rtol=0, atol=0)


def test_pad_into_average_pool_changes_only_the_sign_of_zero():
    # Summing the explicit +0.0 pads turns an all -0.0 window into +0.0; the fused pool skips them.
    model = pad_model("AveragePool", [0, 0, 1, 1, 0, 0, 2, 1], count_include_pad=1)
    optimized = optimize(model, "fuse_pad_into_pool")
    zeros = {"x": np.full((1, 3, 5, 6), -0.0, np.float32)}
    expected, actual = run(model, zeros)[0], run(optimized, zeros)[0]
    assert np.array_equal(expected, actual)


def test_pad_into_average_pool_excluding_pads_refused():
    model = pad_model("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], count_include_pad=0)
    check_pass(model, "fuse_pad_into_pool", pool_feeds(), changed=False)


def test_zero_pad_into_max_pool_refused():
    model = pad_model("MaxPool", [0, 0, 1, 1, 0, 0, 1, 1])
    optimized = check_pass(model, "fuse_pad_into_pool", pool_feeds(), changed=False)
    assert op_types(optimized) == ["Pad", "MaxPool"]


def test_minus_inf_pad_into_max_pool_refused():
    # Semantically exact, but onnxruntime's padded MaxPool kernel answers differently from the
    # unpadded one on NaN and on windows of -inf (-FLT_MAX instead of -inf): refused.
    model = pad_model("MaxPool", [0, 0, 1, 2, 0, 0, 2, 1], value=-np.inf)
    check_pass(model, "fuse_pad_into_pool", pool_feeds(), changed=False)


def test_pad_into_pool_with_auto_pad_refused():
    model = pad_model("AveragePool", [0, 0, 1, 1, 0, 0, 1, 1], count_include_pad=1, auto_pad="SAME_UPPER")
    check_pass(model, "fuse_pad_into_pool", pool_feeds()[:1], changed=False)


# --- concat into reshape ----------------------------------------------------------------------


def test_concat_of_constants_into_reshape():
    nodes = [helper.make_node("Concat", ["a", "b"], ["s"], axis=0), helper.make_node("Reshape", ["x", "s"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2, 3, 4])], [value_info("y", F, None)],
                       [tensor("a", np.array([0], np.int64)), tensor("b", np.array([-1], np.int64))])
    assert op_types(check_pass(model, "fuse_concat_into_reshape", feeds_for((2, 3, 4)))) == ["Reshape"]


def test_concat_with_own_batch_dim_into_reshape():
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "b"], ["s"], axis=0),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", F, ["N", 3, 4])], [value_info("y", F, None)],
                       [tensor("i0", np.array(0, np.int64)), tensor("ax", np.array([0], np.int64)),
                        tensor("b", np.array([-1], np.int64))])
    optimized = check_pass(model, "fuse_concat_into_reshape", feeds_for((2, 3, 4)) + feeds_for((5, 3, 4)))
    assert "Concat" not in op_types(optimized)


def test_concat_with_zero_size_dim_next_to_minus_one_refused():
    nodes = [
        helper.make_node("Shape", ["z"], ["sh"]),
        helper.make_node("Concat", ["sh", "b"], ["s"], axis=0),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", F, [0, 3]), value_info("z", F, [0])], [value_info("y", F, None)],
                       [tensor("b", np.array([-1], np.int64))])
    optimized = onnxrefine.optimize(model, ["fuse_concat_into_reshape"])
    assert "Concat" in op_types(optimized)


def test_concat_with_other_tensors_dim_refused_when_allowzero_copy_would_differ():
    nodes = [
        helper.make_node("Shape", ["z"], ["sh"]),
        helper.make_node("Concat", ["sh", "b"], ["s"], axis=0),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", F, ["N", 6]), value_info("z", F, ["M"])], [value_info("y", F, None)],
                       [tensor("b", np.array([-1], np.int64))])
    assert "Concat" in op_types(onnxrefine.optimize(model, ["fuse_concat_into_reshape"]))


# --- qkv --------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 13])
def test_qkv_fused(opset):
    rng = np.random.default_rng(0)
    inits = [tensor(n, rng.standard_normal((8, k)).astype(np.float32)) for n, k in (("Wq", 8), ("Wk", 8), ("Wv", 4))]
    nodes = [helper.make_node("Relu", ["x"], ["h"])]
    nodes += [helper.make_node("MatMul", ["h", w], [o]) for w, o in (("Wq", "q"), ("Wk", "k"), ("Wv", "v"))]
    nodes += [helper.make_node("Neg", ["q"], ["nq"])]
    model = make_model(nodes, [value_info("x", F, [2, 5, 8])],
                       [value_info("nq", F, None), value_info("k", F, None), value_info("v", F, None)], inits, opset=opset)
    x = [{"x": rng.standard_normal((2, 5, 8)).astype(np.float32)}]
    optimized = check_pass(model, "fuse_qkv", x, exact=False)
    assert sorted(op_types(optimized)) == ["MatMul", "Neg", "Relu", "Split"]
    assert [o.name for o in optimized.graph.output] == ["nq", "k", "v"]


def test_match_reaching_into_the_enclosing_graph_is_left_alone():
    # The Reshape sits in an If branch; its target's Concat lives in the main graph.
    then_graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["t"])], "then", [], [value_info("t", F, [3, 2])])
    else_graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["e"])], "else", [], [value_info("e", F, [3, 2])])
    nodes = [helper.make_node("Concat", ["a", "b"], ["s"], axis=0),
             helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)]
    model = make_model(nodes, [value_info("x", F, [2, 3]), value_info("c", TensorProto.BOOL, [])], [value_info("y", F, [3, 2])],
                       [tensor("a", np.array([3], np.int64)), tensor("b", np.array([2], np.int64))])
    optimized = optimize(model, "fuse_concat_into_reshape", "fuse_consecutive_concats")
    f = {"x": special_floats((2, 3)), "c": np.array(True)}
    assert_bit_identical(run(model, f), run(optimized, f))
