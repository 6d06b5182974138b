"""MatMul families: sibling MatMuls merged on concatenated weights (fuse_qkv) and MatMul + Add
made Gemm. Each proof, and beside it the check of its reading of the operators against
onnxruntime on a miniature built from the rewrite's own nodes.

For sibling MatMuls merged on concatenated weights (fuse_qkv) what the proof reads is the Split:
which product each output hands back. A miniature of the rewrite (the real Split node and sizes,
each weight's first row, x = 1 with one term) must hand each original MatMul's row back bit for
bit where the rewrite says (`split_reading_agrees`); that replaces a run over a 768 x 2304 weight
(~25 ms of CPU on bert-base).

For MatMul + Add -> Gemm what the proof reads is Gemm itself: alpha = beta = 1 and no transposes
make it a @ b + c, with c broadcast as Add broadcasts it. A miniature asks onnxruntime: the real
Gemm, MatMul and Add nodes (attributes and all) on a 2x3 a, a 3x4 b and a c of the real one's
rank and broadcast, all small integers, so that both sides are exact and must agree bit for bit
(`gemm_reading_agrees`); that replaces a run over the real weight (~0.27 s of the 3 GiB model's
0.4 s of certificates, a 4096 x 4096 product in float64).

Anything unusual (a dtype other than float16/32/64, a session or run that fails, a result that
differs or is not finite) returns None, and the certificate falls back to running the rewrite whole.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.signed_zero import for_context
from onnxrefine.verify.certificate.proofs.record import PROOF_TESTS as _P
from onnxrefine.verify.certificate.proofs.record import Proof, Runtime, miniature_model


# --- sibling MatMuls merged ----------------------------------------------------------------------


def _split_sizes(split: ir.Node, rank: int | None) -> list[int] | None:
    """The Split's sizes if it splits the last axis (of a rank-`rank` value), or None."""
    axis = attr(split, "axis", 0)
    if axis != -1 and (rank is None or axis != rank - 1):
        return None
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        sizes = constant_array(split.inputs[1])
        return None if sizes is None else [int(v) for v in sizes.reshape(-1)]
    sizes = attr(split, "split")
    return None if sizes is None else [int(v) for v in sizes]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical arrays of one dtype and shape, compared through an unsigned view of the same
    width (no copy of a column slice; tobytes copied both sides of a 7 MB merged weight)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.itemsize not in (1, 2, 4, 8) or a.dtype.kind not in "fiub":
        return a.tobytes() == np.ascontiguousarray(b).tobytes()
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(bits), b.view(bits)))


def _split_order(split: ir.Node, matmuls: list, replaced: dict) -> list | None:
    """The original MatMuls in the order of the Split's outputs (which one each output replaces)."""
    order = []
    for value in split.outputs:
        owner = [n for n in matmuls if replaced.get(id(n.outputs[0])) is value]
        if len(owner) != 1:
            return None
        order.append(owner[0])
    return order


def merged_matmul_parts(request):
    """(MatMuls in Split order, their weights, merged node, merged weight, Split node, rank) for
    a sibling-MatMul merge whose shapes and sizes agree, else None (weights not compared yet)."""
    matmuls = [n for n in request.matched]
    new = [n for n in request.replacement if n.op_type != "Constant"]
    if len(matmuls) < 2 or len(new) != 2 or len(request.outputs) != len(matmuls):
        return None
    merged, split = new
    if merged.op_type != "MatMul" or split.op_type != "Split" or split.inputs[0] is not merged.outputs[0]:
        return None
    if any(n.domain not in STANDARD_DOMAINS for n in matmuls + new) or not isinstance(request.owner, ir.Graph):
        return None
    x = merged.inputs[0]
    if any(n.op_type != "MatMul" or n.inputs[0] is not x for n in matmuls):
        return None
    order = _split_order(split, matmuls, {id(old): new_value for old, new_value in request.outputs})
    if order is None:
        return None
    weights = [constant_array(n.inputs[1]) for n in order]
    merged_weight = constant_array(merged.inputs[1])
    if merged_weight is None or any(w is None or w.ndim != 2 or w.dtype != merged_weight.dtype for w in weights):
        return None
    if merged_weight.ndim != 2 or merged_weight.shape != (weights[0].shape[0], sum(w.shape[1] for w in weights)):
        return None
    product = merged.outputs[0]
    rank = len(product.shape) if product.shape is not None else request.context.facts.rank(product)
    if _split_sizes(split, rank) != [w.shape[1] for w in weights]:
        return None
    return order, weights, merged, merged_weight, split, rank


def merged_matmul_proof(request) -> str | None:
    """MatMul(x, W_i) for several i -> Split(MatMul(x, concat(W_i, axis=1)), widths), proved.

    Each output element of the merged product is the dot product of the same row of x with the
    same column of the same W_i, so the outputs equal the originals' up to the order onnxruntime
    accumulates in (the reassociating class; signed zeros and inf/NaN meet the same terms). Proved:
    the same x, 2-D weights of one dtype, the merged weight bit-identical to their concatenation in
    the order the Split hands the outputs back, and the Split's sizes the weights' widths.
    """
    parts = merged_matmul_parts(request)
    if parts is None:
        return None
    _, weights, _, merged_weight, _, _ = parts
    start = 0
    for weight in weights:  # bit for bit (NaN payloads and signed zeros included)
        end = start + weight.shape[1]
        if not _same_bits(merged_weight[:, start:end], weight):
            return None
        start = end
    return (f"proved: {len(weights)} MatMuls of one input; the merged weight is their weights' "
            f"concatenation bit for bit and the Split hands each product back")


def split_reading_agrees(parts, outputs, opsets: dict, make_session, run) -> str | None:
    """The certificate's note when onnxruntime hands each merged product back where the rewrite
    says (the merged-MatMul proof's reading of Split: its sizes, axis and output order), None
    when it does not or the check does not apply (the first merge is then run whole).

    A miniature of the rewrite with the real nodes' attributes and the real Split sizes: x of
    the product's rank with K = 1, x = 1, and each weight's first row. A product by 1 with one
    term is exact, so each Split output must be, bit for bit, the first row of the weight of the
    MatMul whose output it replaces (`outputs`: the request's (original, replacement) pairs).
    `parts`: `merged_matmul_parts`."""
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
    model = miniature_model(graph, opsets)
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


def _split_reading(request, runtime: Runtime) -> str | None:
    parts = merged_matmul_parts(request)
    return None if parts is None else split_reading_agrees(
        parts, request.outputs, dict(request.model.opset_imports), runtime.make_session, runtime.run)


# --- MatMul + Add -> Gemm -----------------------------------------------------------------------


def gemm_from_matmul_add_proof(request) -> str | None:
    """Add(MatMul(a, b), c) -> Gemm(a, b, c), proved without reading a weight.

    Gemm with alpha = beta = 1 and no transposes is A @ B + C by definition; onnxruntime adds C
    inside the accumulation instead of after it (the reassociating class: each output element sums
    the same terms, so infinities and NaN meet the same terms too). Proved: the Gemm reads the very
    values a, b and c the MatMul and the Add read, a is 2-D (Gemm's requirement), c broadcasts onto
    [M, N] without enlarging it, and no reader can see a zero's sign (a -0 bias added last keeps a
    sum of +0 at +0; accumulated first, it can give -0).
    """
    matched = list(request.matched)
    new = [n for n in request.replacement if n.op_type != "Constant"]
    if len(matched) != 2 or len(new) != 1 or len(request.outputs) != 1:
        return None
    matmul, add = matched
    gemm = new[0]
    if (matmul.op_type, add.op_type, gemm.op_type) != ("MatMul", "Add", "Gemm"):
        return None
    if any(n.domain not in STANDARD_DOMAINS for n in (matmul, add, gemm)) or not isinstance(request.owner, ir.Graph):
        return None
    product = matmul.outputs[0]
    others = [v for v in add.inputs if v is not product]
    if len(add.inputs) != 2 or len(others) != 1 or product.is_graph_output() or len(product.uses()) != 1:
        return None
    a, b = matmul.inputs[0], matmul.inputs[1]
    c = others[0]
    if len(gemm.inputs) != 3 or gemm.inputs[0] is not a or gemm.inputs[1] is not b or gemm.inputs[2] is not c:
        return None
    if (float(attr(gemm, "alpha", 1.0)), float(attr(gemm, "beta", 1.0)),
            int(attr(gemm, "transA", 0)), int(attr(gemm, "transB", 0))) != (1.0, 1.0, 0, 0):
        return None
    old, replacement = request.outputs[0]
    if old is not add.outputs[0] or replacement is not gemm.outputs[0]:
        return None
    oracle = request.context.facts
    a_shape, b_shape, c_shape = oracle.symbolic_shape(a), oracle.static_shape(b), oracle.static_shape(c)
    if a_shape is None or len(a_shape) != 2 or b_shape is None or len(b_shape) != 2 or c_shape is None:
        return None
    m_dim, n_dim = a_shape[0], b_shape[1]
    aligned = (1,) * (2 - len(c_shape)) + tuple(c_shape) if len(c_shape) <= 2 else None
    if aligned is None or aligned[1] not in (1, n_dim) or (aligned[0] != 1 and aligned[0] != m_dim):
        return None
    if for_context(request.context).observable(old):
        return None
    return "proved: Gemm(a, b, c) with alpha = beta = 1 and no transposes reads the MatMul's and the Add's own values"


def gemm_parts(request):
    """(matmul, add, gemm, rank of c, c broadcast over rows, c broadcast over columns) for the
    Gemm reading check (`gemm_reading_agrees`), or None; called only once
    `gemm_from_matmul_add_proof` has proved the request."""
    matmul, add = list(request.matched)
    gemm = next(n for n in request.replacement if n.op_type == "Gemm")
    c = next(v for v in add.inputs if v is not matmul.outputs[0])
    c_shape = request.context.facts.static_shape(c)
    b_shape = request.context.facts.static_shape(matmul.inputs[1])
    if c_shape is None or b_shape is None or len(c_shape) > 2:
        return None
    aligned = (1,) * (2 - len(c_shape)) + tuple(c_shape)
    return matmul, add, gemm, len(c_shape), aligned[0] == 1, aligned[1] == 1 and b_shape[1] != 1


def gemm_reading_agrees(parts, dtype, opsets: dict, make_session, run) -> str | None:
    """The certificate's note when onnxruntime's Gemm (the rewrite's node, attributes as they are)
    gives MatMul + Add's values on a miniature, None when it does not or the check does not apply
    (the first rewrite is then run whole). `parts`: `gemm_parts`."""
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
        session = make_session(miniature_model(graph, opsets).SerializeToString())
    except Exception:  # noqa: BLE001 - onnxruntime raises many types; the run decides then
        return None
    result = run(session, {"a": a})
    if isinstance(result, str):
        return None
    y, g = np.asarray(result["y"]), np.asarray(result["g"])
    if y.shape == g.shape == (2, 4) and np.array_equal(y, g) and np.all(np.isfinite(y)):
        return "its reading of Gemm agrees with onnxruntime on a miniature with the rewrite's own nodes"
    return None


def _gemm_reading(request, runtime: Runtime) -> str | None:
    output = request.outputs[0][0]
    dtype = request.context.facts.dtype(output) or output.dtype
    return None if dtype is None else gemm_reading_agrees(
        gemm_parts(request), dtype.numpy(), dict(request.model.opset_imports), runtime.make_session, runtime.run)


PROOFS = (
    Proof("merged_matmul", "sibling MatMuls of one input on concatenated weights, split back in order",
          merged_matmul_proof, _split_reading,
          (_P + "test_merged_matmuls_are_proved_the_first_once_onnxruntime_agrees_with_its_split_reading",),
          (_P + "test_a_merged_weight_that_is_not_the_concatenation_is_not_proved",
           _P + "test_a_split_order_the_proof_misreads_with_the_rule_is_caught_by_onnxruntime")),
    Proof("gemm_from_matmul_add", "MatMul by a constant plus a constant bias is Gemm(alpha=1, beta=1) on the "
          "same constants",
          gemm_from_matmul_add_proof, _gemm_reading,
          (_P + "test_matmul_add_to_gemm_after_the_first_is_proved_and_the_outputs_agree",),
          (_P + "test_a_gemm_with_a_transposed_weight_is_not_proved_and_its_run_refuses_it",
           _P + "test_a_proof_that_misreads_beta_is_caught_by_the_miniature_and_the_run_refuses",
           _P + "test_no_gemm_proof_where_a_zero_sign_is_read")),
)
