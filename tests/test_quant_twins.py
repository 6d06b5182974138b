"""Twin QuantizeLinear / DequantizeLinear nodes (the same tensor, scale and zero point) merged only
where every consumer keeps the node unit onnxruntime's QDQ fusions form (ir/quantization.py's
merge_refusal). Checked at the deployment level: the outputs are bit-identical under onnxruntime's
default level and with optimizations off, and the integer kernels onnxruntime makes (QLinearConv)
are the ones it makes for the original."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
from helpers import make_model, tensor, value_info
from modelcheck import assert_same_outputs, op_counts
from onnx import TensorProto, helper

import onnxrefine

F, I8 = TensorProto.FLOAT, TensorProto.INT8
CSE = ["eliminate_common_subexpression"]


def deployed_ops(model: onnx.ModelProto, tmp_path, name: str) -> collections.Counter:
    """The operators of the model onnxruntime runs at its default level (its QDQ fusions done)."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / f"{name}.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return op_counts(onnx.load(options.optimized_model_filepath))


def qdq_model(head: str) -> onnx.ModelProto:
    """Two QDQ Conv units. head 'twin_dq': x -> Q -> DQ, DQ' (twins) -> one Conv unit each.
    'twin_q': x -> Q, Q' (twins) -> DQ, DQ' -> the two units. 'unit_twin_q': a Conv unit whose
    output is quantized by twins Q, Q' (its only readers), each dequantized to an output.
    'shared_twin_q': the same, its output also read by a Relu."""
    rng = np.random.default_rng(3)
    nodes, outputs = [], []
    if head == "twin_dq":
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xa"]),
                  helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xb"])]
    elif head == "twin_q":
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xqa"]),
                  helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xqb"]),
                  helper.make_node("DequantizeLinear", ["xqa", "s", "z"], ["xa"]),
                  helper.make_node("DequantizeLinear", ["xqb", "s", "z"], ["xb"])]
    else:
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
                  helper.make_node("DequantizeLinear", ["wqa", "ws", "wz"], ["wa"]),
                  helper.make_node("Conv", ["xd", "wa"], ["c"]),
                  helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cqa"]),
                  helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cqb"]),
                  helper.make_node("DequantizeLinear", ["cqa", "s", "z"], ["ya"]),
                  helper.make_node("DequantizeLinear", ["cqb", "s", "z"], ["yb"])]
        outputs = ["ya", "yb"]
        if head == "shared_twin_q":
            nodes.append(helper.make_node("Relu", ["c"], ["r"]))
            outputs.append("r")
    if head in ("twin_dq", "twin_q"):
        for branch in "ab":
            nodes += [helper.make_node("DequantizeLinear", [f"wq{branch}", "ws", "wz"], [f"w{branch}"]),
                      helper.make_node("Conv", [f"x{branch}", f"w{branch}"], [f"c{branch}"]),
                      helper.make_node("QuantizeLinear", [f"c{branch}", "s", "z"], [f"q{branch}"]),
                      helper.make_node("DequantizeLinear", [f"q{branch}", "s", "z"], [f"y{branch}"])]
        outputs = ["ya", "yb"]
    inits = [tensor("s", np.float32(0.05)), tensor("z", np.uint8(128)), tensor("ws", np.float32(0.02)),
             tensor("wz", np.int8(0))]
    inits += [tensor(f"wq{b}", rng.integers(-60, 60, (4, 3, 1, 1)).astype(np.int8)) for b in "ab"]
    used = {name for node in nodes for name in node.input}
    return make_model(nodes, [value_info("x", F, [1, 3, 4, 4])],
                      [value_info(name, F, [1, 4, 4, 4]) for name in outputs], [i for i in inits if i.name in used])


def feeds():
    return {"x": np.random.default_rng(5).standard_normal((1, 3, 4, 4)).astype(np.float32)}


def test_twin_dequantize_merged_and_both_units_still_fused(tmp_path):
    model = qdq_model("twin_dq")
    optimized = onnxrefine.optimize(model, CSE)
    assert op_counts(optimized)["DequantizeLinear"] == op_counts(model)["DequantizeLinear"] - 1
    assert deployed_ops(model, tmp_path, "a")["QLinearConv"] == 2
    assert deployed_ops(optimized, tmp_path, "b")["QLinearConv"] == 2
    assert_same_outputs(model, optimized, feeds())


def test_twin_quantize_of_a_graph_input_merged_with_their_dequantize_nodes(tmp_path):
    model = qdq_model("twin_q")
    optimized = onnxrefine.optimize(model, CSE)
    before, after = op_counts(model), op_counts(optimized)
    assert after["QuantizeLinear"] == before["QuantizeLinear"] - 1
    assert after["DequantizeLinear"] == before["DequantizeLinear"] - 1
    assert deployed_ops(optimized, tmp_path, "b")["QLinearConv"] == deployed_ops(model, tmp_path, "a")["QLinearConv"] == 2
    assert_same_outputs(model, optimized, feeds())


def test_twin_quantize_of_a_unit_output_stay(tmp_path):
    """Two Qs on a DQ-fed Conv's only readers: as given, the Conv is no node unit (the selectors
    need one Q per output); one Q would make it one. onnxruntime's own common-subexpression
    elimination merges them before its selectors (the deployed graph holds the QLinearConv either
    way), but a runtime that forms node units from the graph as given would compute something
    else, so they stay."""
    model = qdq_model("unit_twin_q")
    optimized = onnxrefine.optimize(model, CSE)
    assert op_counts(optimized)["QuantizeLinear"] == op_counts(model)["QuantizeLinear"] == 3
    assert deployed_ops(optimized, tmp_path, "b") == deployed_ops(model, tmp_path, "a")
    assert_same_outputs(model, optimized, feeds())


def test_twin_quantize_of_a_tensor_other_nodes_read_merged(tmp_path):
    model = qdq_model("shared_twin_q")
    optimized = onnxrefine.optimize(model, CSE)
    assert op_counts(optimized)["QuantizeLinear"] == op_counts(model)["QuantizeLinear"] - 1
    assert deployed_ops(optimized, tmp_path, "b")["QLinearConv"] == deployed_ops(model, tmp_path, "a")["QLinearConv"] == 0
    assert_same_outputs(model, optimized, feeds())
