"""Quantized models keep their quantization.

Each model is made in the test by onnxruntime.quantization from a tiny float one (QDQ static,
QOperator static, dynamic), optimized with the default pipeline, and checked: the count of every
quantization operator is unchanged, quantized weights stay integer, and the outputs are
bit-identical to the original's under onnxruntime's default level and with optimizations off.
The hand-built cases each pin one guard of ir/quantization.py (each fails without its guard).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, tensor, value_info
from modelcheck import assert_dtypes_kept, assert_same_outputs, op_counts
from onnx import TensorProto, helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)

import onnxrefine
from onnxrefine.api import optimize_with_report
from onnxrefine.verified import VerifySettings

QUANT_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
             "QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm")
C = 8


def float_cnn() -> onnx.ModelProto:
    """Conv -> BN -> Relu -> Conv -> residual Add -> pool -> Gemm, random weights."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    f32 = np.float32
    inits = [
        tensor("w1", (rng.standard_normal((C, 3, 3, 3)) * 0.3).astype(f32)),
        tensor("b1", (rng.standard_normal(C) * 0.1).astype(f32)),
        tensor("s", (rng.random(C) + 0.5).astype(f32)), tensor("bb", (rng.standard_normal(C) * 0.1).astype(f32)),
        tensor("m", (rng.standard_normal(C) * 0.1).astype(f32)), tensor("v", (rng.random(C) + 0.5).astype(f32)),
        tensor("w2", (rng.standard_normal((C, C, 3, 3)) * 0.2).astype(f32)),
        tensor("wf", rng.standard_normal((4, C)).astype(f32)), tensor("bf", np.zeros(4, f32)),
    ]
    return make_model(nodes, [value_info("x", shape=[1, 3, 8, 8])], [value_info("y", shape=[1, 4])], inits)


def float_mlp() -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> MatMul, the shape dynamic quantization rewrites."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    inits = [tensor("w1", rng.standard_normal((16, 32)).astype(np.float32)),
             tensor("b1", rng.standard_normal(32).astype(np.float32)),
             tensor("w2", rng.standard_normal((32, 8)).astype(np.float32))]
    return make_model(nodes, [value_info("x", shape=[4, 16])], [value_info("y", shape=[4, 8])], inits)


class _Reader(CalibrationDataReader):
    def __init__(self, name: str, shape):
        rng = np.random.default_rng(2)
        self._feeds = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(3)])

    def get_next(self):
        return next(self._feeds, None)


def quantized(tmp_path, kind: str) -> onnx.ModelProto:
    source, target = tmp_path / "float.onnx", tmp_path / f"{kind}.onnx"
    if kind == "dynamic":
        onnx.save(float_mlp(), source)
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    else:
        onnx.save(float_cnn(), source)
        quantize_static(str(source), str(target), _Reader("x", (1, 3, 8, 8)),
                        quant_format=QuantFormat.QDQ if kind == "qdq" else QuantFormat.QOperator,
                        per_channel=kind == "qdq", weight_type=QuantType.QInt8)
    return onnx.load(target)


def feeds_for(model: onnx.ModelProto, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {model.graph.input[0].name: rng.standard_normal(shape).astype(np.float32)}


def quant_counts(model: onnx.ModelProto) -> dict:
    counts = op_counts(model)
    return {op: counts[op] for op in QUANT_OPS if counts[op]}


def float_weight_bytes(model: onnx.ModelProto) -> int:
    return sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer
               if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16))


def integer_weights(model: onnx.ModelProto) -> dict:
    return {i.name: i.data_type for i in model.graph.initializer
            if i.data_type in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32)}


@pytest.mark.parametrize("kind", ["qdq", "qoperator", "dynamic"])
def test_quantized_model_keeps_its_quantization(tmp_path, kind):
    original = quantized(tmp_path, kind)
    optimized = onnxrefine.optimize(original)
    assert quant_counts(optimized) == quant_counts(original)
    assert quant_counts(original)  # the quantizer did quantize
    # every integer weight of the original is still read as an integer weight (never dequantized
    # into a float32 constant); duplicate scales may have been merged, never a weight's bytes changed
    after = {i.name: i for i in optimized.graph.initializer}
    readers = {name for node in optimized.graph.node for name in node.input}
    kept = [name for name, dtype in integer_weights(original).items()
            if name in readers and after[name].data_type == dtype]
    assert float_weight_bytes(optimized) <= float_weight_bytes(original)  # nothing dequantized into float
    assert kept
    assert_dtypes_kept(original, optimized)
    assert_same_outputs(original, optimized, feeds_for(original))


def test_qdq_weights_are_not_folded_with_the_reason_logged(tmp_path):
    original = quantized(tmp_path, "qdq")
    _, report = optimize_with_report(original, ["fold_constants"])
    assert report.nodes_after == report.nodes_before
    assert report.log.refusal_guards("fold_constants") == {"fold.quantized"}


@pytest.mark.slow
def test_qdq_model_verified_end_to_end(tmp_path):
    original = quantized(tmp_path, "qdq")
    optimized, report = optimize_with_report(original, verify=VerifySettings(budget_s=20))
    assert report.verification["verdict"] in ("exact", "rounding"), report.verification
    assert quant_counts(optimized) == quant_counts(original)


def _twin_dequantize() -> onnx.ModelProto:
    """One int8 input dequantized twice with the same scale (two quantized units), e.g. after
    duplicate scales were merged."""
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["d1"]),
        helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["d2"]),
        helper.make_node("Relu", ["d1"], ["y1"]),
        helper.make_node("Sigmoid", ["d2"], ["y2"]),
    ]
    inits = [tensor("sc", np.float32(0.05)), tensor("zp", np.int8(0))]
    return make_model(nodes, [value_info("q", TensorProto.INT8, [2, 3])],
                      [value_info("y1", shape=[2, 3]), value_info("y2", shape=[2, 3])], inits)


def test_cse_merges_twin_dequantize_nodes():
    """onnxruntime gives each consumer of a shared DequantizeLinear its own copy before its QDQ
    fusions (ir/quantization.merge_refusal); tests/test_quant_twins.py checks the node units."""
    model = _twin_dequantize()
    optimized = onnxrefine.optimize(model, ["eliminate_common_subexpression"])
    assert op_counts(optimized)["DequantizeLinear"] == 1
    feeds = {"q": np.arange(-3, 3, dtype=np.int8).reshape(2, 3)}
    assert_same_outputs(model, optimized, feeds)


def _float_layer_in_qdq_region(tail: str) -> onnx.ModelProto:
    """DQ(x) -> float layer (constant float weight) -> `tail` -> QuantizeLinear -> DQ: a float
    layer inside a quantized region (weights left in float, activations quantized)."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"])]
    if tail in ("bn", "mul", "add"):
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"]))
        nodes.append({
            "bn": helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["t"]),
            "mul": helper.make_node("Mul", ["c", "k"], ["t"]),
            "add": helper.make_node("Add", ["c", "k"], ["t"]),
        }[tail])
        x_shape, out_shape = [1, 4, 5, 5], [1, 4, 5, 5]
    elif tail == "gemm":
        nodes += [helper.make_node("MatMul", ["x", "wm"], ["c"]), helper.make_node("Add", ["c", "k4"], ["t"])]
        x_shape, out_shape = [3, 4], [3, 4]
    else:  # sibling MatMuls of one dequantized input, each quantized next
        nodes += [helper.make_node("MatMul", ["x", "wm"], ["t"]), helper.make_node("MatMul", ["x", "wm2"], ["u"]),
                  helper.make_node("QuantizeLinear", ["u", "ys", "yz"], ["uq"]),
                  helper.make_node("DequantizeLinear", ["uq", "ys", "yz"], ["z"])]
        x_shape, out_shape = [3, 4], [3, 4]
    nodes += [helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
              helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    f32 = np.float32
    inits = [tensor("xs", f32(0.02)), tensor("xz", np.uint8(128)), tensor("ys", f32(0.01)), tensor("yz", np.uint8(128)),
             tensor("w", (rng.standard_normal((4, 4, 1, 1)) * 0.3).astype(f32)),
             tensor("s", (rng.random(4) + 0.5).astype(f32)), tensor("bb", (rng.standard_normal(4) * 0.1).astype(f32)),
             tensor("m", (rng.standard_normal(4) * 0.1).astype(f32)), tensor("v", (rng.random(4) + 0.5).astype(f32)),
             tensor("k", (rng.random((1, 4, 1, 1)) + 0.5).astype(f32)),
             tensor("wm", (rng.standard_normal((4, 4)) * 0.3).astype(f32)),
             tensor("wm2", (rng.standard_normal((4, 4)) * 0.3).astype(f32)),
             tensor("k4", (rng.standard_normal(4) * 0.1).astype(f32))]
    used = {name for node in nodes for name in node.input}
    outputs = [value_info("y", shape=out_shape)] + ([value_info("z", shape=out_shape)] if tail == "qkv" else [])
    return make_model(nodes, [value_info("xq", TensorProto.UINT8, x_shape)], outputs,
                      [i for i in inits if i.name in used])


@pytest.mark.parametrize("tail,passes", [
    ("bn", ["fuse_bn_into_conv"]), ("mul", ["fuse_mul_into_conv"]), ("add", ["fuse_add_bias_into_conv"]),
    ("gemm", ["fuse_matmul_add_bias_into_gemm"]), ("qkv", ["fuse_qkv"]),
])
def test_float_arithmetic_is_not_folded_into_a_quantized_unit(tail, passes):
    model = _float_layer_in_qdq_region(tail)
    optimized, report = optimize_with_report(model, passes)
    assert report.nodes_after == report.nodes_before, report.log.counts()
    assert "quant.layer" in report.log.refusal_guards(), report.log.to_dict()["refused"]
    rng = np.random.default_rng(5)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert_same_outputs(model, optimized, {"xq": rng.integers(0, 256, shape, dtype=np.uint8)})


@pytest.mark.parametrize("tail", ["bn", "mul", "add"])
def test_fold_into_a_dequantized_weight_is_refused_with_the_reason(tail):
    """Conv(x, DequantizeLinear(int8 W)) -> BN/Mul/Add: kept, and --explain says why."""
    rng = np.random.default_rng(6)
    f32 = np.float32
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["x", "w"], ["c"]),
             {"bn": helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"]),
              "mul": helper.make_node("Mul", ["c", "k"], ["y"]),
              "add": helper.make_node("Add", ["c", "k"], ["y"])}[tail]]
    inits = [tensor("wq", rng.integers(-127, 128, (4, 3, 1, 1), dtype=np.int8)),
             tensor("ws", (rng.random(4) * 0.01 + 0.001).astype(f32)), tensor("wz", np.zeros(4, np.int8)),
             tensor("s", (rng.random(4) + 0.5).astype(f32)), tensor("bb", (rng.standard_normal(4) * 0.1).astype(f32)),
             tensor("m", (rng.standard_normal(4) * 0.1).astype(f32)), tensor("v", (rng.random(4) + 0.5).astype(f32)),
             tensor("k", np.full((1, 4, 1, 1), 2.0, f32))]
    used = {name for node in nodes for name in node.input}
    model = make_model(nodes, [value_info("x", shape=[1, 3, 4, 4])], [value_info("y", shape=[1, 4, 4, 4])],
                       [i for i in inits if i.name in used])
    optimized, report = optimize_with_report(model)
    assert report.nodes_after == report.nodes_before
    assert op_counts(optimized)["DequantizeLinear"] == 1
    reasons = {r.rule: r.reason for r in report.log.refused.values()}
    assert "weight is quantized" in reasons.get(f"quantized_layer_{tail}", ""), reasons
    assert_same_outputs(model, optimized, {"x": rng.standard_normal((1, 3, 4, 4)).astype(f32)})


@pytest.mark.parametrize("clutter", ["Identity", "Reshape", "Transpose pair"])
def test_noops_inside_a_qdq_unit_go_and_the_unit_still_fuses_the_same(tmp_path, clutter):
    """DequantizeLinear -> (no-op) -> Conv -> QuantizeLinear: removing the no-op leaves the unit in
    the form onnxruntime fuses; outputs stay bit-identical at its default level (where it fuses the
    unit into QLinearConv) as with optimizations off."""
    model = quantized(tmp_path, "qdq")
    graph = model.graph
    conv = next(n for n in graph.node if n.op_type == "Conv")
    at, source = list(graph.node).index(conv), conv.input[0]
    if clutter == "Identity":
        added = [helper.make_node("Identity", [source], ["x_clutter"])]
    elif clutter == "Reshape":
        graph.initializer.append(tensor("clutter_shape", np.array([1, 3, 8, 8], np.int64)))
        added = [helper.make_node("Reshape", [source, "clutter_shape"], ["x_clutter"])]
    else:
        added = [helper.make_node("Transpose", [source], ["x_nhwc"], perm=[0, 2, 3, 1]),
                 helper.make_node("Transpose", ["x_nhwc"], ["x_clutter"], perm=[0, 3, 1, 2])]
    for offset, node in enumerate(added):
        graph.node.insert(at + offset, node)
    conv.input[0] = "x_clutter"
    optimized = onnxrefine.optimize(model)
    assert len(optimized.graph.node) == len(model.graph.node) - len(added)
    assert quant_counts(optimized) == quant_counts(model)
    assert_same_outputs(model, optimized, feeds_for(model))


def test_zero_bias_after_a_dynamic_quantized_matmul_is_removed(tmp_path):
    """quantize_dynamic keeps the float bias Add after MatMulInteger -> Cast -> Mul(scale). A zero
    bias (freshly initialised Linear layers) is removable once the oracle knows MatMulInteger's shape
    and that DynamicQuantizeLinear / MatMulInteger cannot observe a zero's sign."""
    model = float_mlp()
    for init in model.graph.initializer:
        if init.name == "b1":
            init.CopyFrom(tensor("b1", np.zeros(32, np.float32)))
    source, target = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(model, source)
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    original = onnx.load(target)
    assert op_counts(original)["MatMulInteger"] == 2 and op_counts(original)["Add"] == 1
    optimized, report = optimize_with_report(original)
    assert report.log.counts()["eliminate_float_add_zero"] == 1, report.log.refused
    assert op_counts(optimized)["Add"] == 0
    assert quant_counts(optimized) == quant_counts(original)
    assert_same_outputs(original, optimized, feeds_for(original))


@pytest.mark.parametrize("zero_point", [np.uint8(128), np.int8(0), None], ids=["uint8", "int8", "default"])
def test_x_plus_zero_before_quantize_linear_is_removed(zero_point):
    """QuantizeLinear to an integer type maps -0.0 and +0.0 to the same zero point."""
    inputs = ["t", "s"] + ([] if zero_point is None else ["z"])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "zero"], ["t"]),
             helper.make_node("QuantizeLinear", inputs, ["q"]),
             helper.make_node("DequantizeLinear", ["q"] + inputs[1:], ["y"])]
    inits = [tensor("zero", np.zeros(4, np.float32)), tensor("s", np.float32(0.05))]
    if zero_point is not None:
        inits.append(tensor("z", zero_point))
    model = make_model(nodes, [value_info("x", shape=[3, 4])], [value_info("y", shape=[3, 4])], inits)
    optimized, report = optimize_with_report(model)
    assert report.log.counts()["eliminate_float_add_zero"] == 1, report.log.refused
    x = np.array([[-0.0, 0.0, 1.0, -1.0], [0.02, -0.02, 0.03, 7.0], [-5.0, 5.0, 0.0, -0.0]], np.float32)
    assert_same_outputs(model, optimized, {"x": x})
