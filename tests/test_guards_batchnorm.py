"""One test per guard of the BatchNormalization / constant Mul-Add folding family (passes/batchnorm.py)
and of the fold arithmetic it rounds through (ir/foldmath.py). Each builds a model that reaches
exactly that guard, asserts the guard's id, and where onnxruntime can run the model, that the
outputs are bit-identical afterwards. Models that only a malformed input reaches (types the
checker rejects) are not run."""

from __future__ import annotations

import numpy as np
from guardutil import expect_guard, expect_refused
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.ir.foldmath import round_folded

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
NP = {F32: np.float32, F64: np.float64, TensorProto.FLOAT16: np.float16}
RNG = np.random.default_rng(0)


def bn_inits(channels, dtype=np.float32, *, scale=None, var=None, bias=None, shape=None):
    shape = (channels,) if shape is None else shape
    return [
        tensor("s", (np.full(shape, 1.5) if scale is None else scale).astype(dtype)),
        tensor("b", (np.full(shape, 0.25) if bias is None else bias).astype(dtype)),
        tensor("m", np.full(shape, 0.1).astype(dtype)),
        tensor("v", (np.full(shape, 0.5) if var is None else var).astype(dtype)),
    ]


def bn(x="c", outputs=("y",), **attrs):
    return helper.make_node("BatchNormalization", [x, "s", "b", "m", "v"], list(outputs), name="bn", **attrs)


def conv_bn_model(*, opset=17, bn_attrs=None, params=None, outputs=None, weight=None, conv_bias=None,
                  extra_outputs=(), channels=4):
    weight = RNG.standard_normal((channels, 2, 3, 3)).astype(np.float32) if weight is None else weight
    inits = [tensor("W", weight)] + (bn_inits(channels) if params is None else params)
    conv_inputs = ["x", "W"]
    if conv_bias is not None:
        inits.append(tensor("B", conv_bias))
        conv_inputs.append("B")
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1]),
             bn(outputs=outputs or ("y",), **(bn_attrs or {}))]
    graph_outputs = [value_info("y", shape=[1, channels, 5, 5])] + [value_info(n) for n in extra_outputs]
    return make_model(nodes, [value_info("x", shape=[1, 2, 5, 5])], graph_outputs, inits, opset=opset)


def x_feeds():
    return {"x": RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)}


def gemm_bn_model(*, weight, c=None, opset=17, params=None, dtype=F32, channels=3, trans_b=0):
    inits = [tensor("W", weight)] + (bn_inits(channels, NP.get(dtype, np.float32)) if params is None else params)
    inputs = ["x", "W"]
    if c is not None:
        inits.append(tensor("C", c))
        inputs.append("C")
    nodes = [helper.make_node("Gemm", inputs, ["c"], name="gemm", transB=trans_b), bn()]
    return make_model(nodes, [value_info("x", dtype, [2, 4])], [value_info("y", dtype, [2, channels])], inits,
                      opset=opset)


def conv_op_model(op, constant, *, channels=4, out_shape=None):
    """Conv followed by Mul/Add with a constant (the fuse_mul_into_conv / fuse_add_bias_into_conv shape)."""
    inits = [tensor("W", RNG.standard_normal((channels, 2, 3, 3)).astype(np.float32)), tensor("k", constant)]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", "k"], ["y"], name="op")]
    return make_model(nodes, [value_info("x", shape=[1, 2, 5, 5])], [value_info("y", shape=out_shape)], inits)


# --- bn_affine: inference-mode and parameter guards -----------------------------------------------


def test_bn_training_mode():
    expect_guard(conv_bn_model(bn_attrs={"training_mode": 1}), "fuse_bn_into_conv", "bn.training_mode")


def test_bn_is_test_before_opset_7():
    expect_guard(conv_bn_model(opset=6), "fuse_bn_into_conv", "bn.is_test")


def test_bn_spatial_0_before_opset_9():
    # spatial=0 normalizes per element: its parameters have the C x H x W shape.
    model = conv_bn_model(opset=8, bn_attrs={"is_test": 1, "spatial": 0}, params=bn_inits(4, shape=(4, 5, 5)))
    expect_guard(model, "fuse_bn_into_conv", "bn.spatial")


def test_bn_statistics_outputs_read():
    model = conv_bn_model(opset=9, outputs=("y", "mean_out"), extra_outputs=("mean_out",))
    expect_guard(model, "fuse_bn_into_conv", "bn.stats_outputs")


def test_bn_parameter_dtype_differs_from_the_weight():
    params = bn_inits(4)
    params[0] = tensor("s", np.full(4, 1.5, np.float16))
    expect_guard(conv_bn_model(params=params), "fuse_bn_into_conv", "bn.param_dtype")


def test_bn_parameter_shape_is_not_per_channel():
    expect_guard(conv_bn_model(params=bn_inits(4, shape=(4, 1))), "fuse_bn_into_conv", "bn.param_shape")


def test_bn_variance_plus_epsilon_not_positive():
    model = conv_bn_model(params=bn_inits(4, var=np.array([0.5, -1.0, 0.5, 0.5])))
    expect_guard(model, "fuse_bn_into_conv", "bn.variance", x_feeds())


def test_bn_affine_form_overflows_float64():
    # scale 1e308 / sqrt(0 + eps) is past float64's range: s is inf before anything is rounded.
    params = bn_inits(3, np.float64, scale=np.full(3, 1e308), var=np.zeros(3))
    model = gemm_bn_model(weight=RNG.standard_normal((4, 3)), params=params, dtype=F64)
    expect_guard(model, "fuse_bn_into_gemm", "bn.affine_nonfinite", {"x": RNG.standard_normal((2, 4))})


# --- weights and biases ------------------------------------------------------------------------


def test_bn_fold_integer_weight():
    # Gemm on int32 feeding a float BatchNormalization: malformed, and never folded.
    model = gemm_bn_model(weight=np.ones((4, 3), np.int32), dtype=TensorProto.INT32)
    expect_guard(model, "fuse_bn_into_gemm", "bn_fold.weight_dtype")


def test_bn_fold_conv_bias_of_another_shape():
    model = conv_bn_model(conv_bias=np.zeros((4, 1), np.float32))
    expect_guard(model, "fuse_bn_into_conv", "bn_fold.bias")


def test_bn_conv_transpose_group_does_not_divide_channels():
    inits = [tensor("W", RNG.standard_normal((4, 2, 3, 3)).astype(np.float32))] + bn_inits(6)
    nodes = [helper.make_node("ConvTranspose", ["x", "W"], ["c"], name="conv", group=3), bn()]
    model = make_model(nodes, [value_info("x", shape=[1, 4, 5, 5])], [value_info("y")], inits)
    expect_guard(model, "fuse_bn_into_conv", "bn_conv.group")


# --- Gemm / MatMul ---------------------------------------------------------------------------------


def test_bn_gemm_before_opset_7():
    expect_guard(gemm_bn_model(weight=RNG.standard_normal((4, 3)).astype(np.float32), opset=6),
                 "fuse_bn_into_gemm", "bn_gemm.opset")


def test_bn_gemm_weight_not_2d():
    expect_guard(gemm_bn_model(weight=np.ones((4, 3, 1), np.float32)), "fuse_bn_into_gemm", "bn_gemm.weight_rank")


def test_bn_gemm_c_dtype_differs():
    model = gemm_bn_model(weight=np.ones((4, 3), np.float32), c=np.zeros(3, np.float16))
    expect_guard(model, "fuse_bn_into_gemm", "bn_gemm.c_dtype")


def test_bn_gemm_c_does_not_broadcast_over_the_columns():
    model = gemm_bn_model(weight=np.ones((4, 3), np.float32), c=np.zeros(2, np.float32))
    expect_guard(model, "fuse_bn_into_gemm", "bn_gemm.c_shape")


def matmul_bn_model(weight, x_shape, channels, opset=17):
    inits = [tensor("W", weight)] + bn_inits(channels)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["c"], name="matmul"), bn()]
    return make_model(nodes, [value_info("x", shape=x_shape)], [value_info("y")], inits, opset=opset)


def test_bn_matmul_before_opset_7():
    model = matmul_bn_model(RNG.standard_normal((4, 3)).astype(np.float32), [2, 4], 3, opset=6)
    expect_guard(model, "fuse_bn_into_gemm", "bn_matmul.opset")


def test_bn_matmul_weight_not_2d():
    # [2, 4, 8] @ [2, 8, 5]: BatchNormalization's channel axis is the 4 rows, not the weight's columns.
    model = matmul_bn_model(RNG.standard_normal((2, 8, 5)).astype(np.float32), [2, 4, 8], 4)
    expect_guard(model, "fuse_bn_into_gemm", "bn_matmul.weight_rank",
                 {"x": RNG.standard_normal((2, 4, 8)).astype(np.float32)})


def test_bn_matmul_output_not_known_2d():
    model = matmul_bn_model(RNG.standard_normal((4, 3)).astype(np.float32), None, 3)
    expect_guard(model, "fuse_bn_into_gemm", "bn_matmul.output_rank",
                 {"x": RNG.standard_normal((2, 4)).astype(np.float32)})


# --- constant Mul / Add after a Conv ---------------------------------------------------------------


def test_affine_constant_raises_the_rank():
    model = conv_op_model("Mul", np.full((1, 1, 4, 1, 1), 2.0, np.float32))
    expect_guard(model, "fuse_mul_into_conv", "affine_fold.rank", x_feeds())


def test_affine_constant_channel_dim_mismatch():
    model = conv_op_model("Mul", np.full((1, 3, 1, 1), 2.0, np.float32))
    expect_guard(model, "fuse_mul_into_conv", "affine_fold.channels")


def test_affine_constant_dtype_differs():
    model = conv_op_model("Mul", np.full((1, 4, 1, 1), 2.0, np.float16))
    expect_guard(model, "fuse_mul_into_conv", "affine_fold.dtype")


def test_affine_constant_varies_along_a_spatial_axis():
    model = conv_op_model("Add", RNG.standard_normal((1, 1, 5, 5)).astype(np.float32))
    expect_guard(model, "fuse_add_bias_into_conv", "affine_fold.non_channel", x_feeds())


# --- rounding the folded values (ir/foldmath.py) -------------------------------------------------


def test_foldmath_non_float_dtype():
    # Every rule checks the weight's dtype first (bn_fold.weight_dtype), so only a direct call reaches it.
    expect_refused("foldmath.non_float_dtype", round_folded, np.ones(3), np.int32, "folded weight")


def test_foldmath_nonfinite():
    weight = RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)
    weight[1, 0, 0, 0] = np.nan
    model = conv_bn_model(weight=weight)
    expect_guard(model, "fuse_bn_into_conv", "foldmath.nonfinite", x_feeds())


def test_foldmath_overflow():
    weight = np.full((4, 2, 3, 3), 1e30, np.float32)
    model = _with_weight(conv_op_model("Mul", np.full((1, 4, 1, 1), 1e20, np.float32)), weight)
    expect_guard(model, "fuse_mul_into_conv", "foldmath.overflow", x_feeds())


def test_foldmath_underflow():
    weight = np.full((4, 2, 3, 3), 1e-30, np.float32)
    model = _with_weight(conv_op_model("Mul", np.full((1, 4, 1, 1), 1e-20, np.float32)), weight)
    expect_guard(model, "fuse_mul_into_conv", "foldmath.underflow", x_feeds())


def _with_weight(model, weight):
    for i, init in enumerate(model.graph.initializer):
        if init.name == "W":
            model.graph.initializer[i].CopyFrom(tensor("W", weight))
    return model
