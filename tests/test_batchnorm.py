"""The BatchNormalization folding family: numerics against onnxruntime, and every guard."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_valid_like, make_model, op_types, run, stress_inputs, tensor, value_info
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.passes.registry import get_pass
from onnxrefine.rewrite.rule import REASSOCIATING

BN_PASSES = ["fuse_bn_into_conv", "fuse_bn_into_gemm", "fuse_mul_into_conv", "fuse_add_bias_into_conv"]
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def bn_params(prefix, channels, dtype, rng, *, var_low=0.5):
    return [
        tensor(f"{prefix}_s", rng.uniform(0.5, 1.5, channels).astype(dtype)),
        tensor(f"{prefix}_b", rng.normal(0, 0.2, channels).astype(dtype)),
        tensor(f"{prefix}_m", rng.normal(0, 0.2, channels).astype(dtype)),
        tensor(f"{prefix}_v", rng.uniform(var_low, 1.5, channels).astype(dtype)),
    ]


def bn_node(prefix, x, y, **attrs):
    return helper.make_node(
        "BatchNormalization", [x, f"{prefix}_s", f"{prefix}_b", f"{prefix}_m", f"{prefix}_v"], [y], name=prefix, **attrs
    )


def ulp_tolerance(reference: np.ndarray, dtype) -> float:
    """A few units of rounding at the output's magnitude: the budget of a reassociating fold."""
    eps = float(np.finfo(dtype).eps)
    return 64 * eps * (float(np.max(np.abs(reference))) + 1.0)


def assert_folded_close(original, optimized, feeds_list, dtype):
    for feeds in feeds_list:
        expected = run(original, feeds)
        actual = run(optimized, feeds)
        for e, a in zip(expected, actual):
            assert e.shape == a.shape and e.dtype == a.dtype
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=0, atol=ulp_tolerance(e, dtype))


def conv_bn_model(dtype=TensorProto.FLOAT, *, dims=2, group=1, bias=True, seed=0, c_in=4, c_out=8, epsilon=1e-5):
    rng = np.random.default_rng(seed)
    npdt = NP[dtype]
    kernel = (3,) * dims
    inits = [tensor("W", rng.normal(0, 0.5, (c_out, c_in // group) + kernel).astype(npdt))]
    inputs = ["x", "W"]
    if bias:
        inits.append(tensor("B", rng.normal(0, 0.2, c_out).astype(npdt)))
        inputs.append("B")
    inits += bn_params("bn", c_out, npdt, rng)
    nodes = [
        helper.make_node("Conv", inputs, ["c"], name="conv", group=group, pads=[1] * (2 * dims)),
        bn_node("bn", "c", "y", epsilon=epsilon),
    ]
    shape = ["N", c_in] + ["S"] * dims
    return make_model(nodes, [value_info("x", dtype, shape)], [value_info("y", dtype, None)], inits)


def optimize(model, passes=BN_PASSES, **options):
    optimized, report = onnxrefine.optimize_with_report(model, passes, **options)
    assert_valid_like(model, optimized)
    return optimized, report


def test_bn_passes_are_declared_reassociating():
    for name in BN_PASSES:
        spec = get_pass(name)
        assert spec.kind == REASSOCIATING
        assert all(rule.kind == REASSOCIATING for rule in spec.rules)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("dims,group,bias", [(1, 1, True), (2, 1, False), (2, 2, True), (3, 1, True), (2, 4, False)])
def test_conv_bn_folds_and_matches(dtype, dims, group, bias):
    model = conv_bn_model(dtype, dims=dims, group=group, bias=bias)
    optimized, report = optimize(model)
    assert op_types(optimized) == ["Conv"]
    assert report.log.counts()["conv_bn"] == 1
    npdt = NP[dtype]
    feeds = [{"x": x} for x in stress_inputs((2, 4) + (5,) * dims, npdt)]
    assert_folded_close(model, optimized, feeds, npdt)


def test_depthwise_conv_bn():
    model = conv_bn_model(c_in=6, c_out=6, group=6)
    optimized, _ = optimize(model)
    assert op_types(optimized) == ["Conv"]
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((1, 6, 7, 7))], np.float32)


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_bn(group):
    rng = np.random.default_rng(1)
    c_in, c_out_per_group = 4, 3
    c_out = group * c_out_per_group
    inits = [tensor("W", rng.normal(0, 0.5, (c_in, c_out_per_group, 2, 2)).astype(np.float32))]
    inits.append(tensor("B", rng.normal(0, 0.2, c_out).astype(np.float32)))
    inits += bn_params("bn", c_out, np.float32, rng)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "W", "B"], ["c"], group=group, strides=[2, 2]),
        bn_node("bn", "c", "y"),
    ]
    model = make_model(nodes, [value_info("x", shape=[1, c_in, 3, 3])], [value_info("y")], inits)
    optimized, _ = optimize(model)
    assert op_types(optimized) == ["ConvTranspose"]
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((1, c_in, 3, 3))], np.float32)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("with_c", [True, False])
def test_gemm_bn(trans_b, with_c):
    rng = np.random.default_rng(2)
    k, n = 5, 7
    w = rng.normal(0, 0.5, (n, k) if trans_b else (k, n)).astype(np.float32)
    inits = [tensor("W", w)] + bn_params("bn", n, np.float32, rng)
    inputs = ["x", "W"]
    if with_c:
        inits.append(tensor("C", rng.normal(0, 0.2, (1, n)).astype(np.float32)))
        inputs.append("C")
    nodes = [helper.make_node("Gemm", inputs, ["g"], transB=trans_b, alpha=0.5, beta=2.0), bn_node("bn", "g", "y")]
    model = make_model(nodes, [value_info("x", shape=["M", k])], [value_info("y")], inits)
    optimized, _ = optimize(model)
    assert op_types(optimized) == ["Gemm"]
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((3, k))], np.float32)


def test_matmul_bn_with_known_rank_becomes_gemm():
    rng = np.random.default_rng(3)
    inits = [tensor("W", rng.normal(0, 0.5, (5, 4)).astype(np.float32))] + bn_params("bn", 4, np.float32, rng)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), bn_node("bn", "mm", "y")]
    model = make_model(nodes, [value_info("x", shape=["M", 5])], [value_info("y")], inits)
    optimized, _ = optimize(model)
    assert op_types(optimized) == ["Gemm"]
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((3, 5))], np.float32)


def test_matmul_bn_with_unknown_rank_is_refused():
    rng = np.random.default_rng(3)
    inits = [tensor("W", rng.normal(0, 0.5, (5, 4)).astype(np.float32))] + bn_params("bn", 4, np.float32, rng)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), bn_node("bn", "mm", "y")]
    # The declared rank of the intermediate says 2, but the input's rank is unknown: not trusted.
    model = make_model(nodes, [value_info("x", shape=None)], [value_info("y")], inits)
    model.graph.value_info.append(value_info("mm", shape=[3, 4]))
    optimized, report = optimize(model)
    assert op_types(optimized) == ["MatMul", "BatchNormalization"]
    assert "bn_matmul.output_rank" in report.log.refusal_guards()


@pytest.mark.parametrize("order", ["conv_first", "const_first"])
@pytest.mark.parametrize("const_shape", [(6, 1, 1), (1,), ()])
def test_conv_add_bn_per_channel_folds_to_one_conv(order, const_shape):
    rng = np.random.default_rng(4)
    inits = [tensor("W", rng.normal(0, 0.5, (6, 4, 3, 3)).astype(np.float32))]
    inits.append(tensor("K", rng.normal(0, 1, const_shape).astype(np.float32)))
    inits += bn_params("bn", 6, np.float32, rng)
    add_inputs = ["c", "K"] if order == "conv_first" else ["K", "c"]
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", add_inputs, ["a"]),
        bn_node("bn", "a", "y"),
    ]
    model = make_model(nodes, [value_info("x", shape=[1, 4, 5, 5])], [value_info("y")], inits)
    optimized, _ = optimize(model, ["fuse_bn_into_conv"])
    assert op_types(optimized) == ["Conv"]
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((1, 4, 5, 5))], np.float32)


def spatial_add_bn_model():
    rng = np.random.default_rng(5)
    inits = [tensor("W", rng.normal(0, 0.5, (6, 4, 3, 3)).astype(np.float32))]
    inits.append(tensor("K", rng.normal(0, 1, (1, 1, 5, 5)).astype(np.float32)))
    inits += bn_params("bn", 6, np.float32, rng)
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["K", "c"], ["a"]),
        bn_node("bn", "a", "y"),
    ]
    return make_model(nodes, [value_info("x", shape=[1, 4, 5, 5])], [value_info("y")], inits)


def test_conv_add_bn_spatial_constant_stays_an_add():
    model = spatial_add_bn_model()
    optimized, _ = optimize(model, ["fuse_bn_into_conv"])
    assert op_types(optimized) == ["Conv", "Add"]
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((1, 4, 5, 5))], np.float32)


def test_spatial_constant_over_budget_is_refused():
    model = spatial_add_bn_model()
    # The rescaled constant is 6*5*5*4 = 600 bytes; the source is 100 bytes.
    optimized, report = optimize(model, ["fuse_bn_into_conv"], per_tensor_bytes=256)
    assert op_types(optimized) == op_types(model)
    assert "budget.rule_tensor" in report.log.refusal_guards()


def test_conv_mul_and_add_chain():
    rng = np.random.default_rng(6)
    inits = [
        tensor("W", rng.normal(0, 0.5, (6, 4, 3, 3)).astype(np.float32)),
        tensor("B", rng.normal(0, 0.2, 6).astype(np.float32)),
        tensor("M", rng.uniform(0.5, 2, (6, 1, 1)).astype(np.float32)),
        tensor("A", np.float32(0.25)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"]),
        helper.make_node("Mul", ["M", "c"], ["m"]),
        helper.make_node("Add", ["m", "A"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", shape=[2, 4, 6, 6])], [value_info("y")], inits)
    optimized, report = optimize(model)
    assert op_types(optimized) == ["Conv"]
    assert report.log.counts() == {"conv_mul": 1, "conv_add": 1}
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((2, 4, 6, 6))], np.float32)


def test_mul_varying_spatially_is_refused():
    rng = np.random.default_rng(7)
    inits = [
        tensor("W", rng.normal(0, 0.5, (6, 4, 3, 3)).astype(np.float32)),
        tensor("M", rng.uniform(0.5, 2, (1, 1, 4, 4)).astype(np.float32)),
    ]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Mul", ["c", "M"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[2, 4, 6, 6])], [value_info("y")], inits)
    optimized, _ = optimize(model)
    assert op_types(optimized) == ["Conv", "Mul"]


# --- guards ---------------------------------------------------------------------------------


def float16_overflow_model():
    inits = [
        tensor("W", np.full((1, 1, 1, 1), 40000, np.float16)),
        tensor("bn_s", np.array([2], np.float16)),
        tensor("bn_b", np.array([0], np.float16)),
        tensor("bn_m", np.array([0], np.float16)),
        tensor("bn_v", np.array([1], np.float16)),
    ]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), bn_node("bn", "c", "y", epsilon=0.0)]
    return make_model(
        nodes, [value_info("x", TensorProto.FLOAT16, [1, 1, 2, 2])], [value_info("y", TensorProto.FLOAT16)], inits
    )


def test_float16_fold_that_would_overflow_is_refused():
    model = float16_overflow_model()
    feeds = {"x": np.full((1, 1, 2, 2), 0.25, np.float16)}
    (expected,) = run(model, feeds)
    assert np.all(expected == 20000)
    optimized, report = optimize(model)
    assert op_types(optimized) == ["Conv", "BatchNormalization"]
    assert "foldmath.overflow" in report.log.refusal_guards()
    (actual,) = run(optimized, feeds)
    assert np.array_equal(actual, expected)


def test_generated_name_never_collides_with_existing_tensor():
    model = conv_bn_model()
    # A graph input carrying exactly the name the fold would generate for the new weight.
    model.graph.input.append(value_info("conv_weight_folded", shape=[1]))
    model.graph.output.append(value_info("conv_weight_folded_echo", shape=[1]))
    model.graph.node.append(helper.make_node("Identity", ["conv_weight_folded"], ["conv_weight_folded_echo"]))
    optimized, _ = optimize(model)
    names = [i.name for i in optimized.graph.initializer] + [i.name for i in optimized.graph.input]
    assert len(names) == len(set(names))
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 4, 5, 5)).astype(np.float32), "conv_weight_folded": np.ones(1, np.float32)}
    assert_folded_close(model, optimized, [feeds], np.float32)


def test_conv_output_read_inside_if_branch_is_refused():
    model = conv_bn_model()
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["c"], ["t"])], "then", [], [value_info("t")]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["c"], ["e"])], "else", [], [value_info("e")]
    )
    model.graph.node.append(helper.make_node("If", ["flag"], ["z"], then_branch=then_branch, else_branch=else_branch))
    model.graph.input.append(value_info("flag", TensorProto.BOOL, []))
    model.graph.output.append(value_info("z"))
    optimized, report = optimize(model)
    assert "BatchNormalization" in op_types(optimized)
    assert "driver.intermediate_shared" in report.log.refusal_guards()
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 5)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        for e, a in zip(run(model, feeds), run(optimized, feeds)):
            assert np.array_equal(e, a)


def test_conv_output_that_is_a_graph_output_is_refused():
    model = conv_bn_model()
    model.graph.output.append(value_info("c"))
    optimized, report = optimize(model)
    assert op_types(optimized) == ["Conv", "BatchNormalization"]
    assert "driver.intermediate_output" in report.log.refusal_guards()


def test_shared_weight_is_copied_not_modified():
    rng = np.random.default_rng(8)
    weight = rng.normal(0, 0.5, (6, 4, 3, 3)).astype(np.float32)
    inits = [tensor("W", weight)] + bn_params("bn", 6, np.float32, rng)
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], name="conv_a"),
        bn_node("bn", "c", "y"),
        helper.make_node("Conv", ["x", "W"], ["z"], name="conv_b"),
    ]
    model = make_model(nodes, [value_info("x", shape=[1, 4, 5, 5])], [value_info("y"), value_info("z")], inits)
    optimized, _ = optimize(model)
    assert op_types(optimized) == ["Conv", "Conv"]
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in optimized.graph.initializer}
    assert np.array_equal(initializers["W"], weight)
    conv_b = next(n for n in optimized.graph.node if n.name == "conv_b")
    assert conv_b.input[1] == "W"
    assert_folded_close(model, optimized, [{"x": x} for x in stress_inputs((1, 4, 5, 5))], np.float32)


def test_training_mode_bn_is_refused():
    model = conv_bn_model()
    model.graph.node[1].attribute.append(helper.make_attribute("training_mode", 1))
    optimized, report = optimize(model)
    assert "BatchNormalization" in op_types(optimized)
    assert "bn.training_mode" in report.log.refusal_guards()


def test_non_constant_bn_parameters_are_not_folded():
    model = conv_bn_model()
    scale = next(t for t in model.graph.initializer if t.name == "bn_s")
    # An initializer that is also a graph input can be overridden at run time: not a constant.
    model.graph.input.append(value_info("bn_s", shape=[8]))
    optimized, _ = optimize(model)
    assert "BatchNormalization" in op_types(optimized)
    del scale


@pytest.mark.parametrize("variance", [-2.0, np.inf, np.nan])
def test_bad_variance_is_refused(variance):
    model = conv_bn_model(epsilon=1e-5)
    var = next(t for t in model.graph.initializer if t.name == "bn_v")
    values = onnx.numpy_helper.to_array(var).copy()
    values[0] = variance
    var.CopyFrom(tensor("bn_v", values))
    optimized, report = optimize(model)
    assert "BatchNormalization" in op_types(optimized)
    assert "bn.variance" in report.log.refusal_guards()


def test_mismatched_parameter_dtype_is_refused():
    model = conv_bn_model()
    mean = next(t for t in model.graph.initializer if t.name == "bn_m")
    mean.CopyFrom(tensor("bn_m", onnx.numpy_helper.to_array(mean).astype(np.float64)))
    model.opset_import[0].version = 15  # BN-15 allows distinct types for mean/var
    optimized, report = optimize(model)
    assert "BatchNormalization" in op_types(optimized)
    assert "bn.param_dtype" in report.log.refusal_guards()


def test_bn_output_as_graph_output_keeps_its_name():
    model = conv_bn_model()
    optimized, _ = optimize(model)
    assert [o.name for o in optimized.graph.output] == ["y"]
    assert optimized.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_fold_inside_if_branch_and_function():
    inner = conv_bn_model()
    branch = helper.make_graph(list(inner.graph.node), "then", [], [value_info("y")], list(inner.graph.initializer))
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"])], "else", [], [value_info("y2")])
    nodes = [helper.make_node("If", ["flag"], ["out"], then_branch=branch, else_branch=other)]
    model = make_model(
        nodes, [value_info("x", shape=[1, 4, 5, 5]), value_info("flag", TensorProto.BOOL, [])], [value_info("out")]
    )
    optimized, report = optimize(model)
    assert report.log.counts()["conv_bn"] == 1
    then = next(a.g for a in optimized.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in then.node] == ["Conv"]
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 5)).astype(np.float32)
    assert_folded_close(model, optimized, [{"x": x, "flag": np.array(True)}], np.float32)
