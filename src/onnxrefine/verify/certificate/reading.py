"""A proof's reading of the ops, checked against onnxruntime without running the rewrite.

A certificate by proof (`certificate/proofs.py`) reads each op's meaning itself, so it could
share a misreading with the rule it checks (both ignoring an epsilon attribute, say): until a
rule's proof has been checked against onnxruntime in an optimization, none of its rewrites rests
on the proof alone (`certificate.Certifier`). That check used to be the whole run-based
certificate of the first rewrite: a convolution over six adversarial sets, in onnxruntime and in
float64, ~3 ms of CPU, a tenth of a small CNN's optimization.

For sibling MatMuls merged on concatenated weights (fuse_qkv) what the proof reads is the Split:
which product each output hands back. A miniature of the rewrite (the real Split node and sizes,
each weight's first row, x = 1 with one term) must hand each original MatMul's row back bit for
bit where the rewrite says (`split_reading_agrees`); that replaces a run over a 768 x 2304 weight
(~25 ms of CPU on bert-base).

For the affine folds (Conv -> BatchNormalization / Mul / Add / Sub / Div) what the proof reads
is the tail's per-channel map t -> a t + d; the Conv part of the proof (linearity in the
weights, the same input and attributes) reads no op semantics that differ between models. So
the tail alone is asked: its nodes with the model's own constants, in one onnxruntime session
like the certificates' (CPU, optimizations off, one thread), on t = 0 and t = T = 2^20 in every
channel, give d = T(0) and a = (T(T) - T(0)) / T. They must agree with the proof's a and d
within the float32 rounding of a few operations on values of magnitude |a| T + |d|:

    |a_ort - a| <= c (|a| + m / T) eps    and    |d_ort - d| <= c m eps,    c = 16 (nodes + 1)

where m bounds the magnitudes summed into d (`proofs._tail_step`) and eps = 2^-23.
A dropped or misread epsilon changes a by ~epsilon / (2 var) relative (5e-4 for 1e-3 and a
variance of 1: ~130x the tolerance of one node); a swapped Sub changes the sign of a.

For MatMul + Add -> Gemm what the proof reads is Gemm itself: alpha = beta = 1 and no transposes
make it a @ b + c, with c broadcast as Add broadcasts it. A miniature asks onnxruntime: the real
Gemm, MatMul and Add nodes (attributes and all) on a 2x3 a, a 3x4 b and a c of the real one's
rank and broadcast, all small integers, so that both sides are exact and must agree bit for bit
(`gemm_reading_agrees`); that replaces a run over the real weight (~0.27 s of the 3 GiB model's
0.4 s of certificates, a 4096 x 4096 product in float64).

Anything unusual (a float16 or float64 weight, a session or run that fails, a non-finite result)
returns None, and the certificate falls back to running the rewrite whole, as before.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from onnxrefine.ir.foldmath import constant_array
from onnxrefine.verify.certificate.model import canonical_node

PROBE = 2.0 ** 20
_EPS32 = 2.0 ** -23


def tail_model(nodes: list[ir.Node], data: ir.Value, rank: int, channels: int, opsets: dict) -> onnx.ModelProto | None:
    """The tail nodes alone: input "t" in place of `data` (the Conv's output), [2, C, 1, ...],
    their constants as initializers, output "y" the last node's first output."""
    rename = {data.name: "t"}
    initializers, protos = [], []
    produced = {id(v) for n in nodes for v in n.outputs}
    for node in nodes:
        for value in node.inputs:
            if value is None or value is data or id(value) in produced or value.name in rename:
                continue
            array = constant_array(value)
            if array is None:
                return None  # the tail reads something that is neither t nor a constant
            rename[value.name] = f"k{len(rename)}"
            initializers.append(numpy_helper.from_array(np.require(array, requirements="C"), rename[value.name]))
    protos.extend(canonical_node(node, rename) for node in nodes)
    protos.append(helper.make_node("Identity", [rename[nodes[-1].outputs[0].name]], ["y"]))
    shape = [2, channels] + [1] * (rank - 2)
    graph = helper.make_graph(protos, "tail", [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, shape)],
                              [onnx.ValueInfoProto(name="y")], initializers)
    return _model(graph, opsets)


def _model(graph: onnx.GraphProto, opsets: dict) -> onnx.ModelProto:
    """A model of the standard domain at the rewritten model's opset, at the lowest IR version
    that opset needs (onnxruntime may not know the installed onnx's newest)."""
    opset = helper.make_opsetid("", int(opsets.get("", opsets.get("ai.onnx", 13))))
    model = helper.make_model(graph, opset_imports=[opset])
    try:
        model.ir_version = helper.find_min_ir_version_for([opset])
    except Exception:  # noqa: BLE001 - an opset newer than onnx's table: its own newest
        model.ir_version = onnx.IR_VERSION
    return model


def tail_reading_agrees(tail, make_session, run) -> str | None:
    """The certificate's note when onnxruntime computes the tail's map as the proof read it;
    None when it does not, or the check does not apply (the rewrite is then run whole).

    `tail`: (nodes, data value, rank, channels, dtype, a, d, m) from
    `proofs.affine_tail`; `make_session` and `run` are the certifier's own."""
    nodes, data, rank, channels, dtype, a, d, magnitude, opsets = tail
    if np.dtype(dtype) != np.float32 or not nodes:
        return None
    model = tail_model(nodes, data, rank, channels, opsets)
    if model is None:
        return None
    try:
        session = make_session(model.SerializeToString())
    except Exception:  # noqa: BLE001 - onnxruntime raises many types; the run decides then
        return None
    probe = np.zeros((2, channels) + (1,) * (rank - 2), np.float32)
    probe[1] = PROBE
    result = run(session, {"t": probe})
    if isinstance(result, str):
        return None
    y = np.asarray(result["y"], np.float64).reshape(2, -1)
    if y.shape[1] != channels or not np.all(np.isfinite(y)):
        return None
    a_ort, d_ort = (y[1] - y[0]) / PROBE, y[0]
    c = 16.0 * (len(nodes) + 1) * _EPS32
    if np.all(np.abs(a_ort - a) <= c * (np.abs(a) + magnitude / PROBE)) and np.all(np.abs(d_ort - d) <= c * magnitude):
        return "its reading of the tail agrees with onnxruntime on this model's constants"
    return None


def split_reading_agrees(parts, outputs, opsets: dict, make_session, run) -> str | None:
    """The certificate's note when onnxruntime hands each merged product back where the rewrite
    says (the merged-MatMul proof's reading of Split: its sizes, axis and output order), None
    when it does not or the check does not apply (the first merge is then run whole).

    A miniature of the rewrite with the real nodes' attributes and the real Split sizes: x of
    the product's rank with K = 1, x = 1, and each weight's first row. A product by 1 with one
    term is exact, so each Split output must be, bit for bit, the first row of the weight of the
    MatMul whose output it replaces (`outputs`: the request's (original, replacement) pairs).
    `parts`: `proofs.merged_matmul_parts`."""
    order, weights, merged, merged_weight, split, rank = parts
    if rank is None or rank < 2 or merged_weight.dtype not in (np.float32, np.float64, np.float16):
        return None
    replaced = {id(new): old for old, new in outputs}
    expected = {}
    for index, value in enumerate(split.outputs):
        old = replaced.get(id(value))
        owner = [k for k, node in enumerate(order) if node.outputs[0] is old]
        if len(owner) != 1:
            return None
        expected[f"s{index}"] = np.ascontiguousarray(weights[owner[0]][:1])
    rename = {merged.outputs[0].name: "p"}
    initializers = [numpy_helper.from_array(np.ascontiguousarray(merged_weight[:1]), "m")]
    for index, value in enumerate(split.inputs[1:], start=1):
        if value is not None:
            array = constant_array(value)
            if array is None:
                return None
            rename[value.name] = f"k{index}"
            initializers.append(numpy_helper.from_array(np.require(array, requirements="C"), f"k{index}"))
    proto = ir.serde.serialize_node(split)
    proto.name = ""
    for index, name in enumerate(proto.input):
        if name:
            proto.input[index] = rename[name]
    for index in range(len(proto.output)):
        proto.output[index] = f"s{index}"
    elem = helper.np_dtype_to_tensor_dtype(merged_weight.dtype)
    nodes = [helper.make_node("MatMul", ["x", "m"], ["p"]), proto]
    graph = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", elem, [1] * rank)],
                              [onnx.ValueInfoProto(name=f"s{i}") for i in range(len(split.outputs))], initializers)
    model = _model(graph, opsets)
    try:
        session = make_session(model.SerializeToString())
    except Exception:  # noqa: BLE001
        return None
    result = run(session, {"x": np.ones([1] * rank, merged_weight.dtype)})
    if isinstance(result, str):
        return None
    for name, row in expected.items():
        got = np.asarray(result[name]).reshape(-1)
        if got.dtype != row.dtype or got.tobytes() != row.reshape(-1).tobytes():
            return None
    return "onnxruntime hands each product back where the proof reads it"


def gemm_reading_agrees(parts, dtype, opsets: dict, make_session, run) -> str | None:
    """The certificate's note when onnxruntime's Gemm (the rewrite's node, attributes as they are)
    gives MatMul + Add's values on a miniature, None when it does not or the check does not apply
    (the first rewrite is then run whole). `parts`: `proofs.gemm_parts`."""
    if parts is None or np.dtype(dtype) not in (np.float32, np.float64, np.float16):
        return None
    matmul, add, gemm, c_rank, c_one_row, c_one_column = parts
    rng = np.random.default_rng(0)
    dtype = np.dtype(dtype)
    a = rng.integers(-3, 4, (2, 3)).astype(dtype)
    b = rng.integers(-3, 4, (3, 4)).astype(dtype)
    c_full = (1 if c_one_row else 2, 1 if c_one_column else 4)
    c = rng.integers(-3, 4, c_full).astype(dtype).reshape(c_full[2 - c_rank:] if c_rank else ())
    nodes = []
    for node, inputs, output in ((matmul, ["a", "b"], "p"), (add, None, "y"), (gemm, ["a", "b", "c"], "g")):
        proto = ir.serde.serialize_node(node)
        proto.name = ""
        if inputs is None:  # the Add: the product where the MatMul's output was, c for the other
            inputs = ["p" if name == matmul.outputs[0].name else "c" for name in proto.input]
        del proto.input[:]
        proto.input.extend(inputs)
        del proto.output[:]
        proto.output.append(output)
        nodes.append(proto)
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    graph = helper.make_graph(nodes, "gemm_reading", [helper.make_tensor_value_info("a", elem, [2, 3])],
                              [helper.make_tensor_value_info(n, elem, None) for n in ("y", "g")],
                              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    try:
        session = make_session(_model(graph, opsets).SerializeToString())
    except Exception:  # noqa: BLE001 - onnxruntime raises many types; the run decides then
        return None
    result = run(session, {"a": a})
    if isinstance(result, str):
        return None
    y, g = np.asarray(result["y"]), np.asarray(result["g"])
    if y.shape == g.shape == (2, 4) and np.array_equal(y, g) and np.all(np.isfinite(y)):
        return "its reading of Gemm agrees with onnxruntime on a miniature with the rewrite's own nodes"
    return None
