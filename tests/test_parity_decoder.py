"""An LLM-shaped decoder step built in code, the way the dynamo exporter writes it: fused qkv
projection split by SplitToSequence/SequenceAt, heads split by Reshape -> Transpose, a KV cache
(past in, present out, symbolic sequence and past lengths), an MLP whose GELU sits between a Reshape
pair, and the MLP as a model-local function. Optimized and verified; the cache outputs keep their
names, types and values exactly, and every output matches in onnxruntime with optimizations off and
at the default level."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.api import optimize_with_report
from onnxrefine.verified import VerifySettings

D, H = 8, 2  # model width, heads


def mlp_function() -> onnx.FunctionProto:
    """MLP as a model-local function: Reshape to 2-D, MatMul, tanh-GELU, Reshape back."""
    nodes = [
        helper.make_node("Constant", [], ["flat"], value=helper.make_tensor("f", TensorProto.INT64, [2], [-1, D])),
        helper.make_node("Reshape", ["h", "flat"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w"], ["m"]),
        helper.make_node("Shape", ["h"], ["hs"]),
        helper.make_node("Reshape", ["m", "hs"], ["m3"]),
        helper.make_node("Tanh", ["m3"], ["g"]),
        helper.make_node("Mul", ["m3", "g"], ["out"]),
    ]
    return helper.make_function("local", "Mlp", ["h", "w"], ["out"], nodes, [helper.make_opsetid("", 18)])


def decoder_step() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    hd = D // H
    nodes = [
        helper.make_node("MatMul", ["x", "w_qkv"], ["qkv"]),
        helper.make_node("SplitToSequence", ["qkv", "split_sizes"], ["parts"], axis=2),
        helper.make_node("SequenceAt", ["parts", "i0"], ["q"]),
        helper.make_node("SequenceAt", ["parts", "i1"], ["k"]),
        helper.make_node("SequenceAt", ["parts", "i2"], ["v"]),
        # heads: [1, S, D] -> [1, S, H, hd] -> [1, H, S, hd]; S stays symbolic (0 copies it)
        helper.make_node("Reshape", ["q", "heads"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["k", "heads"], ["k4"]),
        helper.make_node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["v", "heads"], ["v4"]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["past_key", "kh"], ["present_key"], axis=2),
        helper.make_node("Concat", ["past_value", "vh"], ["present_value"], axis=2),
        helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qh", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "present_value"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Reshape", ["ctx_t", "xs"], ["attn"]),
        helper.make_node("Add", ["attn", "x"], ["h"]),
        helper.make_node("Mlp", ["h", "w_mlp"], ["mlp"], domain="local"),
        helper.make_node("Add", ["h", "mlp"], ["logits"]),
    ]
    inits = [
        tensor("w_qkv", rng.standard_normal((D, 3 * D)).astype(np.float32) * 0.3),
        tensor("w_mlp", rng.standard_normal((D, D)).astype(np.float32) * 0.3),
        tensor("split_sizes", np.array([D, D, D], np.int64)),
        tensor("i0", np.array(0, np.int64)), tensor("i1", np.array(1, np.int64)), tensor("i2", np.array(-1, np.int64)),
        tensor("heads", np.array([0, 0, H, hd], np.int64)),
        tensor("scale", np.array(1 / np.sqrt(hd), np.float32)),
    ]
    inputs = [value_info("x", shape=[1, "seq", D]),
              value_info("past_key", shape=[1, H, "past", hd]), value_info("past_value", shape=[1, H, "past", hd])]
    outputs = [value_info("logits", shape=[1, "seq", D]), value_info("present_key", shape=[1, H, "total", hd]),
               value_info("present_value", shape=[1, H, "total", hd])]
    model = make_model(nodes, inputs, outputs, inits, opset=18, functions=[mlp_function()])
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def feeds(seq=3, past=5, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, seq, D)).astype(np.float32),
            "past_key": rng.standard_normal((1, H, past, D // H)).astype(np.float32),
            "past_value": rng.standard_normal((1, H, past, D // H)).astype(np.float32)}


def run(model, inputs, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, inputs)


def count(model):
    return len(model.graph.node) + sum(len(f.node) for f in model.functions)


def test_decoder_step_optimized_verified_and_cache_exact():
    original = decoder_step()
    onnx.checker.check_model(original, full_check=True)
    optimized, report = optimize_with_report(original, verify=VerifySettings(enabled=True, dims={"seq": 3, "past": 5}))
    assert report.verification["status"] == "verified"
    assert report.verification["verdict"] in ("exact", "rounding"), report.verification
    assert not report.rolled_back
    rules = report.log.counts()
    assert rules.get("split_to_sequence_as_split") == 1
    assert {"SplitToSequence", "SequenceAt"}.isdisjoint(n.op_type for n in optimized.graph.node)
    assert count(optimized) < count(original)
    # The cache keeps its interface: names, element types, ranks, symbolic dims.
    for before, after in zip(original.graph.output, optimized.graph.output):
        assert before.name == after.name
        assert before.type.tensor_type.elem_type == after.type.tensor_type.elem_type
        assert len(before.type.tensor_type.shape.dim) == len(after.type.tensor_type.shape.dim)
    assert [i.name for i in optimized.graph.input] == ["x", "past_key", "past_value"]
    for seq, past in ((3, 5), (1, 9), (4, 0)):  # a first step has an empty cache
        inputs = feeds(seq, past)
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            expected = run(original, inputs, level)
            actual = run(optimized, inputs, level)
            np.testing.assert_allclose(actual[0], expected[0], rtol=1e-5, atol=1e-6)
            for e, a in zip(expected[1:], actual[1:]):  # the cache is data movement: bit-identical
                assert e.shape == a.shape and np.array_equal(e, a)
