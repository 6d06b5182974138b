"""The peers' fusions of values computed at run time: a per-channel Add into a Conv's bias and a
per-column Add into a Gemm's C (reassociating: judged against the float64 reference within the
derived bound), and Squeeze/Unsqueeze chains whose intermediate has other readers (exact:
bit-identical in onnxruntime). Each guard refuses its edge case."""

from __future__ import annotations

import numpy as np
import pytest
from guardutil import expect_guard
from helpers import make_model, op_types, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical, check_pass, optimize, special_floats

import onnxrefine

from onnxrefine.passes.batchnorm import CONV_ADD_COMPUTED
from onnxrefine.passes.fusion import MATMUL_ADD_COMPUTED
from onnxrefine.rewrite.rule import REASSOCIATING
from onnxrefine.verify import verify_models

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def assert_within_rounding(original, optimized, feeds_list):
    """Reassociating: every output within the bound derived against the float64 reference."""
    report = verify_models(original, optimized, inputs=feeds_list, stress=False, deployment=None)
    assert report.verdict in ("exact", "rounding"), report.to_dict()["outputs"]


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def i64(name, values):
    return tensor(name, np.array(values, np.int64))


# --- a run-time bias into a Conv --------------------------------------------------------------


def conv_add(bias_shape, *, made_by=None, conv_bias=False, opset=17):
    """y = Conv(x, W) + b, b a graph input of `bias_shape` (or, with `made_by`, those nodes make
    it from graph input `b0`); the Conv has 8 output channels."""
    inits = [tensor("W", RNG.standard_normal((8, 3, 3, 3)).astype(np.float32))]
    conv_inputs = ["x", "W"]
    if conv_bias:
        inits.append(tensor("B", RNG.standard_normal(8).astype(np.float32)))
        conv_inputs.append("B")
    nodes = [node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1])]
    inputs = [value_info("x", F, [1, 3, 5, 5])]
    if made_by is None:
        inputs.append(value_info("b", F, list(bias_shape)))
    else:
        made, source_shape, more_inits = made_by
        nodes += made
        inits += more_inits
        inputs.append(value_info("b0", F, list(source_shape)))
    nodes += [node("Add", ["c", "b"], ["y"], name="add")]
    return make_model(nodes, inputs, [value_info("y", F, [1, 8, 5, 5])], inits, opset=opset)


def conv_feeds(bias_shape, source="b"):
    bias = RNG.standard_normal(bias_shape).astype(np.float32)
    bias.flat[0] = -0.0
    return [{"x": special_floats((1, 3, 5, 5), seed=4), source: bias}]


def test_conv_bias_rule_declared_reassociating():
    assert CONV_ADD_COMPUTED.kind == REASSOCIATING and MATMUL_ADD_COMPUTED.kind == REASSOCIATING


@pytest.mark.parametrize("bias_shape, opset", [((1, 8, 1, 1), 17), ((8, 1, 1), 17), ((1, 8, 1, 1), 11)])
def test_graph_input_bias_becomes_the_conv_bias_through_a_squeeze(bias_shape, opset):
    model = conv_add(bias_shape, opset=opset)
    optimized = optimize(model, "fuse_add_bias_into_conv")
    assert op_types(optimized) == ["Squeeze", "Conv"]
    conv = optimized.graph.node[1]
    assert conv.input[2] == optimized.graph.node[0].output[0] and conv.output[0] == "y"
    assert_within_rounding(model, optimized, conv_feeds(bias_shape))


def test_bias_unsqueezed_from_a_vector_is_read_as_the_vector():
    made = ([node("Unsqueeze", ["b0", "axes"], ["b"])], (8,), [i64("axes", [1, 2])])
    model = conv_add(None, made_by=made)
    optimized = optimize(model, "fuse_add_bias_into_conv")
    assert op_types(optimized) == ["Conv"] and list(optimized.graph.node[0].input) == ["x", "W", "b0"]
    assert_within_rounding(model, optimized, conv_feeds((8,), "b0"))


def test_bias_computed_after_the_conv_keeps_the_graph_in_order():
    """onnxoptimizer moves only the bias's own producer before the Conv: here that Unsqueeze reads
    a Relu that comes after the Conv, and its graph is out of order. The checker in `optimize`
    rejects an unordered graph."""
    made = ([node("Relu", ["b0"], ["r"]), node("Unsqueeze", ["r", "axes"], ["b"])], (8,), [i64("axes", [1, 2])])
    model = conv_add(None, made_by=made)
    optimized = optimize(model, "fuse_add_bias_into_conv")
    assert op_types(optimized) == ["Relu", "Conv"]
    assert_within_rounding(model, optimized, conv_feeds((8,), "b0"))


def test_conv_with_a_bias_of_its_own_is_left():
    model = conv_add((1, 8, 1, 1), conv_bias=True)
    assert op_types(optimize(model, "fuse_add_bias_into_conv")) == ["Conv", "Add"]


def _open_output(model):
    model.graph.output[0].type.tensor_type.ClearField("shape")
    return model


@pytest.mark.parametrize("bias_shape", [(1, 1, 1, 5), (1, 1, 5, 1)])   # varies along the width, the height
def test_bias_that_is_not_one_value_per_channel_stays_an_add(bias_shape):
    optimized, _ = expect_guard(_open_output(conv_add(bias_shape)), "fuse_add_bias_into_conv",
                                "conv_bias.not_per_channel", conv_feeds(bias_shape)[0])
    assert "Add" in op_types(optimized)


@pytest.mark.parametrize("bias_shape", [(1,), (1, 1, 8, 1, 1)])   # no channel axis; a rank above the output's
def test_bias_that_does_not_line_up_with_the_channels_stays_an_add(bias_shape):
    optimized, _ = expect_guard(_open_output(conv_add(bias_shape)), "fuse_add_bias_into_conv", "conv_bias.rank",
                                conv_feeds(bias_shape)[0])
    assert "Add" in op_types(optimized)


def test_bias_of_unknown_shape_stays_an_add():
    model = conv_add(("c", 1, 1))
    expect_guard(model, "fuse_add_bias_into_conv", "conv_bias.shape_unknown", conv_feeds((8, 1, 1))[0])


# --- a run-time bias into a Gemm --------------------------------------------------------------


def matmul_add(bias_shape, *, weight_input=False, bias_after=False):
    inits, inputs = [], [value_info("a", F, [3, 4])]
    if weight_input:
        inputs.append(value_info("w", F, [4, 5]))
    else:
        inits.append(tensor("w", RNG.standard_normal((4, 5)).astype(np.float32)))
    inputs.append(value_info("b0", F, list(bias_shape)))
    nodes = [node("MatMul", ["a", "w"], ["m"], name="matmul"), node("Relu", ["b0"], ["b"]),
             node("Add", ["m", "b"], ["y"], name="add")]
    if not bias_after:
        nodes = [nodes[1], nodes[0], nodes[2]]
    return make_model(nodes, inputs, [value_info("y", F, [3, 5])], inits)


def gemm_feeds(bias_shape, weight_input=False):
    feeds = {"a": special_floats((3, 4), seed=5), "b0": RNG.standard_normal(bias_shape).astype(np.float32)}
    if weight_input:
        feeds["w"] = RNG.standard_normal((4, 5)).astype(np.float32)
    return [feeds]


@pytest.mark.parametrize("bias_shape", [(5,), (1, 5)])
@pytest.mark.parametrize("weight_input", [False, True])
def test_run_time_bias_per_column_into_gemm(bias_shape, weight_input):
    model = matmul_add(bias_shape, weight_input=weight_input)
    optimized = optimize(model, "fuse_matmul_add_bias_into_gemm")
    assert op_types(optimized) == ["Relu", "Gemm"] and optimized.graph.node[1].name == "add"
    assert_within_rounding(model, optimized, gemm_feeds(bias_shape, weight_input))


def test_bias_computed_after_the_matmul_keeps_the_graph_in_order():
    """onnxoptimizer inserts the Gemm where the MatMul was, before the Relu that makes its C."""
    model = matmul_add((5,), bias_after=True)
    optimized = optimize(model, "fuse_matmul_add_bias_into_gemm")
    assert op_types(optimized) == ["Relu", "Gemm"]
    assert_within_rounding(model, optimized, gemm_feeds((5,)))


def test_run_time_value_of_every_element_stays_an_add():
    """An [M, N] run-time value is a residual connection, not a bias: not even a candidate."""
    model = matmul_add((3, 5))
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_matmul_add_bias_into_gemm"])
    assert op_types(optimized) == ["Relu", "MatMul", "Add"] and not report.log.refusal_guards()


def test_run_time_bias_broadcast_from_one_value_stays_an_add():
    model = matmul_add((1,))
    optimized, _ = expect_guard(model, "fuse_matmul_add_bias_into_gemm", "gemm.bias_not_per_column",
                                gemm_feeds((1,))[0])
    assert op_types(optimized) == ["Relu", "MatMul", "Add"]


def test_residual_after_a_conv_is_not_a_bias_candidate():
    model = conv_add((1, 8, 5, 5))
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_add_bias_into_conv"])
    assert op_types(optimized) == ["Conv", "Add"] and not report.log.refusal_guards()


# --- Squeeze / Unsqueeze chains whose intermediate has other readers ----------------------------


def chain_with_reader(first, second, x_shape, first_axes, second_axes, reader_shape, y_shape):
    nodes = [node(first, ["x", "a1"], ["t"], name="inner"), node(second, ["t", "a2"], ["u"], name="outer"),
             node("Neg", ["u"], ["y"]), node("Abs", ["t"], ["z"])]
    return make_model(nodes, [value_info("x", F, list(x_shape))],
                      [value_info("y", F, list(y_shape)), value_info("z", F, list(reader_shape))],
                      [i64("a1", first_axes), i64("a2", second_axes)])


@pytest.mark.parametrize("first, second, x_shape, a1, a2, t_shape, y_shape, pass_name, fused", [
    ("Squeeze", "Squeeze", (1, 2, 1, 3), [0], [1], (2, 1, 3), (2, 3), "fuse_consecutive_squeezes",
     ["Squeeze", "Squeeze", "Neg", "Abs"]),
    ("Unsqueeze", "Unsqueeze", (2, 3), [0], [3], (1, 2, 3), (1, 2, 3, 1), "fuse_consecutive_unsqueezes",
     ["Unsqueeze", "Unsqueeze", "Neg", "Abs"]),
    ("Squeeze", "Unsqueeze", (2, 1, 3), [1], [1], (2, 3), (2, 1, 3), "fuse_consecutive_squeeze_unsqueeze",
     ["Squeeze", "Neg", "Abs"]),
    ("Unsqueeze", "Squeeze", (2, 3), [-1], [2], (2, 3, 1), (2, 3), "fuse_consecutive_squeeze_unsqueeze",
     ["Unsqueeze", "Neg", "Abs"]),
])
def test_shared_intermediate_kept_and_only_the_fusing_reader_repointed(first, second, x_shape, a1, a2, t_shape,
                                                                       y_shape, pass_name, fused):
    model = chain_with_reader(first, second, x_shape, a1, a2, t_shape, y_shape)
    feeds = [{"x": special_floats(x_shape, seed=6)}, {"x": np.full(x_shape, -0.0, np.float32)}]
    optimized = check_pass(model, pass_name, feeds, changed=None)
    assert op_types(optimized) == fused
    inner = next(n for n in optimized.graph.node if n.name == "inner")
    neg = next(n for n in optimized.graph.node if n.op_type == "Neg")
    abs_node = next(n for n in optimized.graph.node if n.op_type == "Abs")
    assert abs_node.input[0] == inner.output[0] == "t"     # the other reader still reads the intermediate
    producers = {out: n for n in optimized.graph.node for out in n.output}
    fused_input = neg.input[0] if neg.input[0] not in producers else producers[neg.input[0]].input[0]
    assert fused_input == "x"                               # the fusing reader alone is repointed
    for feed in feeds:
        assert_bit_identical(run(model, feed), run(optimized, feed))


def test_patch_merging_slices_fused_around_their_shared_row_slice():
    """Swin's patch merging: rows 0::2 of x sliced once, then columns 0::2 and 1::2 of them; each
    pair becomes one Slice of x on both axes, and the shared row Slice goes with its last reader."""
    def slice_node(src, out, start, axis):
        return node("Slice", [src, f"s{start}", "end", f"ax{axis}", "two"], [out])
    nodes = [slice_node("x", "rows", 0, 1), slice_node("rows", "a", 0, 2), slice_node("rows", "b", 1, 2),
             node("Concat", ["a", "b"], ["y"], axis=-1)]
    inits = [i64("s0", [0]), i64("s1", [1]), i64("end", [2 ** 62]), i64("ax1", [1]), i64("ax2", [2]), i64("two", [2])]
    model = make_model(nodes, [value_info("x", F, [1, 4, 4, 3])], [value_info("y", F, [1, 2, 2, 6])], inits)
    feeds = [{"x": special_floats((1, 4, 4, 3), seed=7)}]
    optimized = check_pass(model, "fuse_consecutive_slices", feeds)
    assert op_types(optimized) == ["Slice", "Slice", "Concat"]
    assert all(n.input[0] == "x" for n in optimized.graph.node if n.op_type == "Slice")
