"""One test per guard of the fusion passes (passes/fusion_chains.py, fusion_matmul.py, fusion_pad.py).

Each model reaches exactly that guard; the test asserts the guard's id and, where onnxruntime runs
the model, bit-identical outputs afterwards. Models only a malformed input reaches are not run."""

from __future__ import annotations

import numpy as np
from guardutil import expect_guard
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def chain(nodes, x_shape, inits=(), *, dtype=F, opset=17, inputs=None, out="y"):
    graph_inputs = inputs if inputs is not None else [value_info("x", dtype, x_shape)]
    return make_model(nodes, graph_inputs, [value_info(out, dtype, None)], inits, opset=opset)


def i64(name, values):
    return tensor(name, np.array(values, np.int64))


# --- fuse_consecutive_transposes ---------------------------------------------------------------


def test_transposes_default_perm_of_unknown_rank():
    model = chain([node("Transpose", ["x"], ["t"]), node("Transpose", ["t"], ["y"], perm=[1, 0])], None)
    expect_guard(model, "fuse_consecutive_transposes", "transposes.perm_rank", {"x": rand(2, 3)})


def test_transposes_perms_of_different_ranks():
    model = chain([node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), node("Transpose", ["t"], ["y"], perm=[1, 0])],
                  [2, 3, 4])
    expect_guard(model, "fuse_consecutive_transposes", "transposes.not_perms")


# --- fuse_consecutive_squeezes / unsqueezes ----------------------------------------------------


def test_squeeze_chain_without_axes():
    model = chain([node("Squeeze", ["x", "a"], ["t"]), node("Squeeze", ["t"], ["y"])], [1, 2, 1, 3],
                  [i64("a", [0])])
    expect_guard(model, "fuse_consecutive_squeezes", "squeeze_chain.no_axes", {"x": rand(1, 2, 1, 3)})


def test_squeeze_chain_negative_axes_unknown_rank():
    model = chain([node("Squeeze", ["x", "a"], ["t"]), node("Squeeze", ["t", "a"], ["y"])], None,
                  [i64("a", [-1])])
    expect_guard(model, "fuse_consecutive_squeezes", "squeeze_chain.negative_axes", {"x": rand(2, 1, 1)})


# --- fuse_consecutive_slices -------------------------------------------------------------------


def _slices(axes1, axes2, x_shape):
    inits = [i64("s", [0]), i64("e", [2]), i64("a1", axes1), i64("a2", axes2)]
    return chain([node("Slice", ["x", "s", "e", "a1"], ["t"]), node("Slice", ["t", "s", "e", "a2"], ["y"])],
                 x_shape, inits)


def test_slices_negative_axes_unknown_rank():
    expect_guard(_slices([-1], [0], None), "fuse_consecutive_slices", "slices.axes", {"x": rand(3, 3)})


def test_slices_cut_the_same_axis():
    expect_guard(_slices([0], [0], [4, 3]), "fuse_consecutive_slices", "slices.same_axis", {"x": rand(4, 3)})


# --- fuse_consecutive_concats -----------------------------------------------------------------


def test_concats_doubling_past_the_input_cap():
    inner = node("Concat", ["x"] * 600, ["c"], axis=0)
    model = chain([inner, node("Concat", ["c", "c"], ["y"], axis=0)], [1])
    expect_guard(model, "fuse_consecutive_concats", "concats.too_many_inputs", {"x": rand(1)})


# --- fuse_consecutive_log_softmax -------------------------------------------------------------


def test_log_softmax_element_type_unknown():
    # The Softmax reads a custom-domain op's output, whose element type no trusted fact gives.
    nodes = [node("Mystery", ["x"], ["m"], domain="com.example"), node("Softmax", ["m"], ["s"]),
             node("Log", ["s"], ["y"])]
    model = chain(nodes, [2, 3])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    expect_guard(model, "fuse_consecutive_log_softmax", "log_softmax.dtype_unknown")


def test_log_softmax_float64():
    model = chain([node("Softmax", ["x"], ["s"]), node("Log", ["s"], ["y"])], [2, 3], dtype=TensorProto.DOUBLE)
    x = rand(2, 3, dtype=np.float64)
    x[0, 1] = np.nan
    expect_guard(model, "fuse_consecutive_log_softmax", "log_softmax.float64", {"x": x})


def test_log_softmax_feeding_argmin():
    nodes = [node("Softmax", ["x"], ["s"]), node("Log", ["s"], ["l"]), node("ArgMin", ["l"], ["y"], axis=1)]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", I64, None)])
    # -200 and -210 underflow in Softmax: Log(Softmax) ties them at -inf (ArgMin 1), LogSoftmax does not (2).
    x = np.array([[0.0, -200.0, -210.0], [1.0, 2.0, 3.0]], np.float32)
    expect_guard(model, "fuse_consecutive_log_softmax", "log_softmax.discrete_use", {"x": x})


# --- fuse_consecutive_reduce_unsqueeze ----------------------------------------------------------


def _reduce_unsqueeze(x_shape, unsqueeze_axes, **reduce_attrs):
    nodes = [node("ReduceSum", ["x"], ["r"], keepdims=0, **reduce_attrs), node("Unsqueeze", ["r", "u"], ["y"])]
    return chain(nodes, x_shape, [i64("u", unsqueeze_axes)])


def test_reduce_unsqueeze_no_axes_with_noop_flag():
    model = _reduce_unsqueeze([2, 3], [0], noop_with_empty_axes=1)
    expect_guard(model, "fuse_consecutive_reduce_unsqueeze", "reduce_unsqueeze.noop_empty_axes", {"x": rand(2, 3)})


def test_reduce_unsqueeze_all_axes_of_unknown_rank():
    model = _reduce_unsqueeze(None, [0])
    expect_guard(model, "fuse_consecutive_reduce_unsqueeze", "reduce_unsqueeze.rank_unknown", {"x": rand(2, 3)})


def test_reduce_unsqueeze_negative_axes_of_unknown_rank():
    nodes = [node("ReduceSum", ["x", "a"], ["r"], keepdims=0), node("Unsqueeze", ["r", "a"], ["y"])]
    model = chain(nodes, None, [i64("a", [-1])])
    expect_guard(model, "fuse_consecutive_reduce_unsqueeze", "reduce_unsqueeze.negative_axes", {"x": rand(2, 3)})


# --- fuse_concat_into_reshape --------------------------------------------------------------------


def _concat_reshape(x_shape, z_shape, parts, inits, extra_inputs=()):
    nodes = [node("Shape", ["z"], ["sh"]), node("Concat", parts, ["s"], axis=0), node("Reshape", ["x", "s"], ["y"])]
    inputs = [value_info("x", F, x_shape), value_info("z", F, z_shape), *extra_inputs]
    return chain(nodes, None, inits, inputs=inputs)


def test_concat_reshape_part_neither_constant_nor_a_shape():
    model = _concat_reshape([2, 3], [2], ["sh", "n"], [], [value_info("n", I64, [1])])
    feeds = {"x": rand(2, 3), "z": rand(2), "n": np.array([3], np.int64)}
    expect_guard(model, "fuse_concat_into_reshape", "concat_reshape.part_unknown", feeds)


def test_concat_reshape_runtime_size_of_another_tensor():
    model = _concat_reshape(["N", 6], ["M"], ["sh", "b"], [i64("b", [-1])])
    expect_guard(model, "fuse_concat_into_reshape", "concat_reshape.runtime_size", {"x": rand(2, 6), "z": rand(4)})


def test_concat_reshape_zero_dim_next_to_minus_one():
    model = _concat_reshape([0, 3], [0], ["sh", "b"], [i64("b", [-1])])
    expect_guard(model, "fuse_concat_into_reshape", "concat_reshape.zero_with_minus_one")


def test_concat_reshape_zero_dim_would_mean_copy():
    model = _concat_reshape([0, 3], [0], ["sh", "b"], [i64("b", [3])])
    expect_guard(model, "fuse_concat_into_reshape", "concat_reshape.zero_copies",
                 {"x": np.zeros((0, 3), np.float32), "z": np.zeros(0, np.float32)})


# --- fuse_matmul_add_bias_into_gemm ---------------------------------------------------------------


def _matmul_add(x_shape, weight, bias, *, dtype=F, opset=17):
    nodes = [node("MatMul", ["x", "W"], ["p"]), node("Add", ["p", "c"], ["y"])]
    return chain(nodes, x_shape, [tensor("W", weight), tensor("c", bias)], dtype=dtype, opset=opset)


def test_gemm_before_opset_11():
    model = _matmul_add([2, 4], rand(4, 3), rand(3), opset=10)
    expect_guard(model, "fuse_matmul_add_bias_into_gemm", "gemm.opset", {"x": rand(2, 4)})


def test_gemm_weight_not_a_matrix():
    model = _matmul_add([2, 2, 4], rand(2, 4, 3), rand(3))
    expect_guard(model, "fuse_matmul_add_bias_into_gemm", "gemm.weight_rank", {"x": rand(2, 2, 4)})


def test_gemm_integer_dtypes():
    model = _matmul_add([2, 4], np.ones((4, 3), np.int32), np.ones(3, np.int32), dtype=I32)
    expect_guard(model, "fuse_matmul_add_bias_into_gemm", "gemm.dtypes", {"x": np.arange(8, dtype=np.int32).reshape(2, 4)})


def test_gemm_input_not_2d():
    model = _matmul_add([2, 2, 4], rand(4, 3), rand(3))
    expect_guard(model, "fuse_matmul_add_bias_into_gemm", "gemm.input_rank", {"x": rand(2, 2, 4)})


def test_gemm_bias_broadcasting_rows():
    model = _matmul_add([2, 4], rand(4, 3), rand(2, 1))
    expect_guard(model, "fuse_matmul_add_bias_into_gemm", "gemm.bias_shape", {"x": rand(2, 4)})


# --- fuse_transpose_into_gemm / fuse_qkv -------------------------------------------------------------


def test_transpose_into_gemm_not_a_matrix_transpose():
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 1]), node("Gemm", ["t", "W"], ["y"])]
    model = chain(nodes, [2, 4], [tensor("W", rand(4, 3))])
    expect_guard(model, "fuse_transpose_into_gemm", "transpose_gemm.perm", {"x": rand(2, 4)})


def _qkv(weights, dtype=F):
    nodes = [node("MatMul", ["x", f"W{i}"], [f"y{i}"]) for i in range(len(weights))]
    outputs = [value_info(f"y{i}", dtype, None) for i in range(len(weights))]
    return make_model(nodes, [value_info("x", dtype, [2, 4])], outputs,
                      [tensor(f"W{i}", w) for i, w in enumerate(weights)])


def test_qkv_weights_of_different_inner_dims():
    expect_guard(_qkv([rand(4, 3), rand(5, 3)]), "fuse_qkv", "qkv.weights_differ")


def test_qkv_integer_weights():
    model = _qkv([np.ones((4, 3), np.int32), np.full((4, 2), 2, np.int32)], dtype=I32)
    expect_guard(model, "fuse_qkv", "qkv.dtype", {"x": np.arange(8, dtype=np.int32).reshape(2, 4)})


# --- fuse_pad_into_conv / fuse_pad_into_pool ------------------------------------------------------


X4 = [1, 2, 5, 5]
SPATIAL = [0, 0, 1, 1, 0, 0, 1, 1]


def _pad_into(consumer, *, pads=SPATIAL, pad_inputs=None, pad_attrs=None, inits=(), x_shape=X4, inputs=None,
              opset=17):
    pad_inputs = pad_inputs or ["x", "p"]
    consumer_inputs = ["t", "W"] if consumer.op_type == "Conv" else ["t"]
    consumer.input[:] = consumer_inputs
    consumer.output[:] = ["y"]
    base = [i64("p", pads), tensor("W", rand(3, 2, 3, 3))]
    return chain([node("Pad", pad_inputs, ["t"], **(pad_attrs or {})), consumer], x_shape, [*base, *inits],
                 inputs=inputs, opset=opset)


def x4():
    return {"x": rand(*X4)}


def conv(**attrs):
    return node("Conv", [], [], **attrs)


def avg(**attrs):
    return node("AveragePool", [], [], **{"kernel_shape": [3, 3], "count_include_pad": 1, **attrs})


def test_pad_fuse_not_constant_mode():
    expect_guard(_pad_into(conv(), pad_attrs={"mode": "reflect"}), "fuse_pad_into_conv", "pad_fuse.mode", x4())


def test_pad_fuse_without_pads():
    # Pad before opset 11 keeps its pads in an attribute; one without them is malformed.
    model = chain([node("Pad", ["x"], ["t"]), node("Conv", ["t", "W"], ["y"])], X4, [tensor("W", rand(3, 2, 3, 3))],
                  opset=10)
    expect_guard(model, "fuse_pad_into_conv", "pad_fuse.no_pads")


def test_pad_fuse_pads_not_constant():
    inputs = [value_info("x", F, X4), value_info("p", I64, [8])]
    model = chain([node("Pad", ["x", "p"], ["t"]), node("Conv", ["t", "W"], ["y"])], None,
                  [tensor("W", rand(3, 2, 3, 3))], inputs=inputs)
    feeds = {"x": rand(*X4), "p": np.array(SPATIAL, np.int64)}
    expect_guard(model, "fuse_pad_into_conv", "args.not_constant", feeds)


def test_pad_fuse_value_not_constant():
    inputs = [value_info("x", F, X4), value_info("v", F, [])]
    model = _pad_into(conv(), pad_inputs=["x", "p", "v"], inputs=inputs)
    expect_guard(model, "fuse_pad_into_conv", "pad_fuse.value_not_constant",
                 {"x": rand(*X4), "v": np.array(0.0, np.float32)})


def test_pad_fuse_axes_of_unknown_rank():
    model = _pad_into(conv(), pads=[1, 1, 1, 1], pad_inputs=["x", "p", "", "a"], inits=[i64("a", [2, 3])],
                      x_shape=None, opset=18)
    expect_guard(model, "fuse_pad_into_conv", "pad_fuse.axes_rank", x4())


def test_pad_fuse_negative_pads():
    expect_guard(_pad_into(conv(), pads=[0, 0, 1, -1, 0, 0, 1, 1]), "fuse_pad_into_conv", "pad_fuse.negative", x4())


def test_pad_fuse_channel_dim():
    model = _pad_into(conv(), pads=[0, 1, 1, 1, 0, 0, 1, 1])
    model.graph.initializer[1].CopyFrom(tensor("W", rand(3, 3, 3, 3)))
    expect_guard(model, "fuse_pad_into_conv", "pad_fuse.batch_channel", x4())


def test_pad_fuse_consumer_auto_pad():
    expect_guard(_pad_into(conv(auto_pad="SAME_UPPER")), "fuse_pad_into_conv", "pad_fuse.auto_pad", x4())


def test_pad_fuse_consumer_pads_of_another_rank():
    expect_guard(_pad_into(conv(pads=[1, 1])), "fuse_pad_into_conv", "pad_fuse.consumer_pads_rank")


def test_pad_conv_fill_not_zero():
    model = _pad_into(conv(), pad_inputs=["x", "p", "v"], inits=[tensor("v", np.array(1.0, np.float32))])
    expect_guard(model, "fuse_pad_into_conv", "pad_conv.fill", x4())


def test_pad_pool_average_excluding_padding():
    expect_guard(_pad_into(avg(count_include_pad=0)), "fuse_pad_into_pool", "pad_pool.count_include_pad", x4())


def test_pad_pool_fill_not_zero():
    model = _pad_into(avg(), pad_inputs=["x", "p", "v"], inits=[tensor("v", np.array(2.0, np.float32))])
    expect_guard(model, "fuse_pad_into_pool", "pad_pool.fill", x4())


def test_pad_pool_maxpool():
    model = _pad_into(node("MaxPool", [], [], kernel_shape=[3, 3]))
    x = rand(*X4)
    x[0, 0, :2, :2] = -np.inf
    x[0, 1, 2, 2] = np.nan
    expect_guard(model, "fuse_pad_into_pool", "pad_pool.maxpool", {"x": x})


def test_pad_pool_ceil_mode():
    # 6x6 padded at the end to 7x7, kernel 3 stride 3: onnxruntime gives 3x3 windows; the same
    # padding inside the pool gives 2x2 (its ceil_mode drops a window that starts in the padding).
    model = _pad_into(avg(ceil_mode=1, strides=[3, 3]), pads=[0, 0, 0, 0, 0, 0, 1, 1], x_shape=[1, 2, 6, 6])
    expect_guard(model, "fuse_pad_into_pool", "pad_pool.ceil_mode", {"x": rand(1, 2, 6, 6)})


def test_pad_pool_kernel_of_another_rank():
    model = _pad_into(node("AveragePool", [], [], kernel_shape=[3], count_include_pad=1))
    expect_guard(model, "fuse_pad_into_pool", "pad_pool.kernel_rank")


def test_pad_pool_merged_pads_reach_the_kernel():
    model = _pad_into(avg(kernel_shape=[2, 2]), pads=[0, 0, 2, 2, 0, 0, 2, 2])
    expect_guard(model, "fuse_pad_into_pool", "pad_pool.pads_reach_kernel", x4())
