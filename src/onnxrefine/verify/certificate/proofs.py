"""Certificates by proof, for rewrite families where a proof is cheaper and stronger than a run.

Two families: per-channel affine folds into a convolution (Conv -> BN/Mul/Add/Sub/Div,
`affine_fold_proof`) and sibling MatMuls merged into one on concatenated weights
(`merged_matmul_proof`). Each returns the certificate's note when it proves the rewrite and None
when the proof does not apply or does not hold: the run-based certificate then decides.

Affine folds. Why: running a fold's matched subgraph on adversarial sets costs a convolution over every weight
six times, in onnxruntime and again in float64, for each of the dozens of BatchNormalization folds
a CNN holds: more than the optimization itself. For this family a proof is cheaper and stronger.

The original computes y = T(Conv(x, W, b)), where the tail T is a chain of per-channel affine maps
(inference BatchNormalization, and Mul/Add/Sub/Div by a constant that varies along the channel
axis only), so T_c(t) = a_c * t + d_c. The replacement computes y' = Conv(x, W', b') with the same
activation x and the same attributes. Convolution is linear in its weights, so y' equals the
float64 value of y for every x up to the rounding of the reassociating class exactly when

    W'[c, ...] = round(a_c * W[c, ...])   and   b'[c] = round(a_c * b[c] + d_c),

each rounded once from float64 to the weight's dtype. This module derives a and d itself, in
float64, from the matched nodes and the spec's definition of each op (not from the rule), and
checks every element of W' and b' against them (a few float32 ulps, one float16 ulp; see
`_weights_agree`, `_bias_agrees`). That holds for all inputs at once, where a run holds for the
sets it tried.

Non-finite and zero inputs: an element of W' is accepted only with the sign and zero-ness of
a_c * W, so x = +-inf meets the same signed infinities and zeros on both sides (inf * 0 = NaN
where the original gives NaN too). The sign of an exact zero in y can differ (the tail adds d_c,
the folded Conv starts its sums at +0), so the proof is used only where the signed-zero analysis
shows no reader can observe it. Everything else is declined (None) and the run-based certificate
decides: unusual tails, broadcasting along other axes, dtypes other than float16/32/64, a weight
that would underflow or overflow, opset < 9 BatchNormalization, function bodies.

The proof reads each op's meaning itself, so it could share a misreading with the rule. Until a
rule's proof has been checked against onnxruntime in an optimization, no rewrite rests on the
proof alone (`certificate.Certifier`). For these folds the check asks onnxruntime for the tail's
map on the first rewrite's own constants (`certificate/reading.py`, from `affine_tail`); for the
other proofs, and wherever that check cannot say, the first rewrite is run whole.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.signed_zero import for_context

_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_EPS64 = float(np.finfo(np.float64).eps)
_SLACK = 64.0  # float64 ulps allowed between two derivations of a and d (a few ops each)


def _attrs(node: ir.Node) -> dict:
    return {name: (attr.type, _hashable(attr.value)) for name, attr in node.attributes.items()}


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def _per_channel(array: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """The constant as a float64 (channels,) vector if it broadcasts along the channel axis only."""
    if array.ndim > rank:
        return None
    aligned = array.reshape((1,) * (rank - array.ndim) + array.shape)
    if any(d != 1 for i, d in enumerate(aligned.shape) if i != 1) or aligned.shape[1] not in (1, channels):
        return None
    return np.broadcast_to(aligned.astype(np.float64).reshape(-1), (channels,))


def _tail_step(node: ir.Node, previous: ir.Value, a, d, mag, rank: int, channels: int, dtype, opset: int):
    """(a, d, |d| magnitude) after one tail node, or None if the node is not a per-channel affine
    map of `previous` that this proof reads."""
    if node.domain not in STANDARD_DOMAINS or len(node.outputs) < 1:
        return None
    if node.op_type == "BatchNormalization":
        if opset < 9 or node.inputs[0] is not previous or len(node.inputs) != 5:
            return None
        if node.attributes.get("training_mode") is not None and node.attributes["training_mode"].value != 0:
            return None
        if any(out.uses() or out.is_graph_output() for out in node.outputs[1:]):
            return None
        params = [constant_array(v) for v in node.inputs[1:]]
        if any(p is None or p.dtype != dtype or p.shape != (channels,) for p in params):
            return None
        gamma, beta, mean, var = (p.astype(np.float64) for p in params)
        epsilon = node.attributes.get("epsilon")
        eps = float(np.float32(epsilon.value if epsilon is not None else 1e-5))
        with np.errstate(all="ignore"):
            s = gamma / np.sqrt(var + eps)
        return a * s, (d - mean) * s + beta, (mag + np.abs(mean)) * np.abs(s) + np.abs(beta)
    if node.op_type not in ("Mul", "Add", "Sub", "Div") or len(node.inputs) != 2:
        return None
    if node.inputs[0] is previous and node.inputs[1] is not previous:
        other, data_first = node.inputs[1], True
    elif node.inputs[1] is previous and node.inputs[0] is not previous:
        other, data_first = node.inputs[0], False
    else:
        return None
    constant = constant_array(other)
    if constant is None or constant.dtype != dtype:
        return None
    k = _per_channel(constant, rank, channels)
    if k is None:
        return None
    if node.op_type == "Mul":
        return a * k, d * k, mag * np.abs(k)
    if node.op_type == "Add":
        return a, d + k, mag + np.abs(k)
    if node.op_type == "Sub":
        return (a, d - k, mag + np.abs(k)) if data_first else (-a, k - d, mag + np.abs(k))
    if not data_first:  # k / t is not affine in t
        return None
    with np.errstate(all="ignore"):
        return a / k, d / k, mag / np.abs(k)


_BLOCK = 1 << 15  # elements per block: the check's temporaries stay in cache
# The fast check's window around 1 for W' / (W a) computed in float32 (see `_weights_agree`).
_RATIO_WINDOW = 2.0 ** -21
_SCALE_RANGE = (2.0 ** -60, 2.0 ** 60)  # |a| where 1/a and the ratio stay normal float32 numbers


def _weights_agree(folded: np.ndarray, weight: np.ndarray, a: np.ndarray) -> bool:
    """Every folded weight is W * a rounded once, finite, with its sign and zero-ness.

    Two checks, block by block; a block passes if either holds (the first is cheaper).

    Ratio (float32 weights, |a| in _SCALE_RANGE): q = fl(fl(W' / W) * fl(1 / a)) lies in
    [1 - 2^-21, 1 + 2^-21]. A correct fold (W' = W a rounded once, relative error <= 2^-24) gives
    |q - 1| <= 4 * 2^-24 + O(2^-48): it passes with room. Passing implies W'/W was a normal number
    (a subnormal or infinite ratio times 1/a cannot land near 1), so each of the three roundings
    is relative (<= 2^-24) and |W' - W a| <= (2^-21 + 3 * 2^-24 + 2^-46) |W a|: within 5.5 float32
    ulps, the same sign, and W' = 0 only where W a = 0 (here never: W = 0 gives 0/0 = NaN, W'
    = 0 with W != 0 gives q = 0). NaN anywhere makes min/max NaN and the comparison false.
    It reads each weight once (a division, a scaling, a min and a max), where the product check
    below takes seven passes; a block with zero weights or a zero scale falls back to it.

    Product (any float dtype): checked in float32 for float32 and float16 weights (float64 for
    float64): p = W * float32(a) is within 2^-23 |W a| of the ideal product (two roundings) and a
    correct fold within 2^-24 (float32) or 2^-11 (float16) of it, so |folded - p| <= 4 float32
    ulps (one float16 ulp) * |p| holds for a correct fold. Relative only: that also forces the
    sign, and a zero exactly where p is zero (a zero weight's own sign cannot matter: the
    convolution's sums start at +0 and the output's zero signs are unobserved).

    A fold whose values fall in the subnormal range fails both and goes to the run-based
    certificate. A wrong constant (a dropped epsilon, a wrong channel, a flipped sign) is off by
    far more than a few ulps.
    """
    if folded.shape != weight.shape or folded.dtype != weight.dtype:
        return False
    channels = weight.shape[0]
    rows_w = weight.reshape(channels, -1)
    rows_f = folded.reshape(channels, -1)
    with np.errstate(all="ignore"):
        work = np.float64 if weight.dtype == np.float64 else np.float32
        if not np.all(np.isfinite(a.astype(work))):
            return False
        inverse = None
        magnitude = np.abs(a)
        if weight.dtype == np.float32 and np.all((magnitude >= _SCALE_RANGE[0]) & (magnitude <= _SCALE_RANGE[1])):
            inverse = (1.0 / a).astype(np.float32)
        step = max(1, _BLOCK // max(1, rows_w.shape[1]))
        ratio = np.empty((min(step, channels), rows_w.shape[1]), np.float32) if inverse is not None else None
        for begin in range(0, channels, step):
            end = min(channels, begin + step)
            if inverse is not None:
                q = ratio[: end - begin]
                np.divide(rows_f[begin:end], rows_w[begin:end], out=q)
                q *= inverse[begin:end, None]
                if q.min() >= 1.0 - _RATIO_WINDOW and q.max() <= 1.0 + _RATIO_WINDOW:
                    continue
            if not _products_agree(rows_f[begin:end], rows_w[begin:end], a[begin:end]):
                return False
    return True


def _products_agree(rows_f: np.ndarray, rows_w: np.ndarray, a: np.ndarray) -> bool:
    """The product check of `_weights_agree` on one block of rows."""
    work = np.float64 if rows_w.dtype == np.float64 else np.float32
    if rows_w.dtype == np.float16:  # half an ulp (2^-11) plus p's 2^-23: one float16 ulp
        limit = work(2.0 ** -10)
    else:
        limit = work((4.0 + (_SLACK if work == np.float64 else 0.0)) * float(np.finfo(work).eps) / 2)
    p = np.multiply(rows_w, a.astype(work)[:, None], dtype=work)
    q = np.subtract(rows_f, p, dtype=work)
    np.abs(q, out=q)
    np.abs(p, out=p)
    if not np.all(np.isfinite(p)):
        return False  # W a overflows: a finite W' would pass |W' - inf| <= inf below
    p *= limit
    # NaN anywhere makes a comparison false (inf - inf = NaN)
    return bool(np.less_equal(q, p).all())


def _bias_agrees(folded: np.ndarray, expected: np.ndarray, magnitude: np.ndarray, dtype) -> bool:
    """The folded bias is expected (float64) rounded once, within one ulp plus the float64 error
    of two derivations that may associate differently (`magnitude` bounds the terms summed)."""
    if folded.shape != expected.shape or not np.all(np.isfinite(folded)):
        return False
    with np.errstate(all="ignore"):
        target = expected.astype(dtype)
        if not np.all(np.isfinite(target)):
            return False
        ulp = np.spacing(np.abs(target)).astype(np.float64)
    folded64 = folded.astype(np.float64)
    return bool(np.all(np.abs(folded64 - expected) <= ulp + _SLACK * _EPS64 * magnitude))


def affine_fold_proof(request) -> str | None:
    """The certificate's note when the rewrite is proved, None when the proof does not apply or
    does not hold (the run-based certificate then decides, with its own reasons)."""
    matched, replacement = list(request.matched), [n for n in request.replacement if n.op_type != "Constant"]
    if len(matched) < 2 or len(replacement) != 1 or len(request.outputs) != 1:
        return None
    conv, folded = matched[0], replacement[0]
    if conv.op_type != "Conv" or folded.op_type != "Conv" or conv.domain not in STANDARD_DOMAINS:
        return None
    if folded.domain not in STANDARD_DOMAINS or not isinstance(request.owner, ir.Graph):
        return None
    if folded.inputs[0] is not conv.inputs[0] or _attrs(folded) != _attrs(conv):
        return None
    weight = constant_array(conv.inputs[1]) if len(conv.inputs) > 1 else None
    if weight is None or weight.dtype not in _DTYPES or weight.ndim < 3:
        return None
    dtype, channels, rank = weight.dtype, weight.shape[0], weight.ndim
    bias = constant_array(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else None
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and (
            bias is None or bias.dtype != dtype or bias.shape != (channels,)):
        return None
    a = np.ones(channels)
    d = np.zeros(channels) if bias is None else bias.astype(np.float64)
    mag = np.abs(d)
    previous = conv.outputs[0]
    opset = request.context.opset()
    for node in matched[1:]:
        if previous.is_graph_output() or len(previous.uses()) != 1:
            return None
        step = _tail_step(node, previous, a, d, mag, rank, channels, dtype, opset)
        if step is None:
            return None
        a, d, mag = step
        previous = node.outputs[0]
    old, new = request.outputs[0]
    if old is not previous or new is not folded.outputs[0]:
        return None
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(d))):
        return None
    if for_context(request.context).observable(old):
        return None  # the zeros' signs may differ and someone reads them: run it
    new_weight = constant_array(folded.inputs[1]) if len(folded.inputs) > 1 else None
    if new_weight is None or new_weight.dtype != dtype:
        return None
    if not _weights_agree(new_weight, weight, a):
        return None
    new_bias = constant_array(folded.inputs[2]) if len(folded.inputs) > 2 and folded.inputs[2] is not None else None
    if new_bias is None:
        if len(folded.inputs) > 2 and folded.inputs[2] is not None or np.any(d != 0):
            return None
    elif new_bias.dtype != dtype or not _bias_agrees(new_bias, d, mag, dtype):
        return None
    tail = "->".join(n.op_type for n in matched[1:])
    return (f"proved: Conv->{tail} is per-channel affine and every folded weight and bias is its "
            f"float64 value rounded once ({weight.size + channels} elements)")


def affine_tail(request):
    """For a request `affine_fold_proof` proved: the tail's own map t -> a t + d read from its
    nodes (a = 1, d = 0 before the first), with what `reading` needs to ask
    onnxruntime for the same map: (nodes, the Conv's output, rank, channels, dtype, a, d, m,
    opsets), m bounding the magnitudes summed into d. None if the tail cannot be read."""
    matched = list(request.matched)
    conv, tail = matched[0], matched[1:]
    weight = constant_array(conv.inputs[1])
    if weight is None or not tail:
        return None
    channels, rank, dtype = weight.shape[0], weight.ndim, weight.dtype
    a, d, mag = np.ones(channels), np.zeros(channels), np.zeros(channels)
    previous, opset = conv.outputs[0], request.context.opset()
    for node in tail:
        step = _tail_step(node, previous, a, d, mag, rank, channels, dtype, opset)
        if step is None:
            return None
        a, d, mag = step
        previous = node.outputs[0]
    opsets = dict(request.model.opset_imports)
    return tail, conv.outputs[0], rank, channels, dtype, a, d, mag, opsets


def _split_sizes(split: ir.Node, rank: int | None) -> list[int] | None:
    """The Split's sizes if it splits the last axis (of a rank-`rank` value), or None."""
    axis = split.attributes.get("axis")
    axis = 0 if axis is None else axis.value
    if axis != -1 and (rank is None or axis != rank - 1):
        return None
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        sizes = constant_array(split.inputs[1])
        return None if sizes is None else [int(v) for v in sizes.reshape(-1)]
    attr = split.attributes.get("split")
    return None if attr is None else [int(v) for v in attr.value]


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


def _attribute(node: ir.Node, name: str, default):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


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
    if (float(_attribute(gemm, "alpha", 1.0)), float(_attribute(gemm, "beta", 1.0)),
            int(_attribute(gemm, "transA", 0)), int(_attribute(gemm, "transB", 0))) != (1.0, 1.0, 0, 0):
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
    Gemm reading check (reading.gemm_reading_agrees), or None; called only once
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


def zero_addition_proof(request) -> str | None:
    """x + c -> x and x - c -> x where every element of c is a zero, by IEEE 754's definition.

    For every float x other than a zero, x + (+-0) and x - (+-0) are x itself (x is
    representable: nothing rounds), +-inf and NaN included (NaN payloads aside, as everywhere in
    the certificates); subnormals too (ONNX has no flush-to-zero; onnxruntime's is off unless a
    session asks). For x = +-0: x + (-0) and x - (+0) are x; x + (+0) and x - (-0) are +0, so
    x = -0 gives +0 where the candidate keeps -0. The rewrite is therefore bit-exact except for
    the sign of a zero where c holds a +0 (Add) or a -0 (Sub), which is accepted only on an
    output the rule declared sign-insensitive: the same condition the run-based judges apply.

    Declined (the run decides): c first in a Sub (0 - x is -x), any nonzero or NaN element of c,
    a c that broadcasts x up (a higher rank, a dim x does not provably have), a dtype that is not
    x's own, an unknown rank, a replacement that forwards anything but x, function bodies.
    This is a definition, like Identity's: there is no reading of an op to cross-check by a run.
    """
    matched = list(request.matched)
    if len(matched) != 1 or request.replacement or len(request.outputs) != 1 or not isinstance(request.owner, ir.Graph):
        return None
    node = matched[0]
    if (node.op_type not in ("Add", "Sub") or node.domain not in STANDARD_DOMAINS or len(node.inputs) != 2
            or len(node.outputs) != 1):
        return None
    old, new = request.outputs[0]
    if old is not node.outputs[0] or node.inputs[0] is node.inputs[1]:
        return None
    if new is node.inputs[0]:
        other = node.inputs[1]
    elif new is node.inputs[1] and node.op_type == "Add":  # 0 + x; never 0 - x
        other = node.inputs[0]
    else:
        return None
    zero = constant_array(other)
    if zero is None or zero.dtype.kind != "f" or np.any(zero != 0):  # NaN != 0 too
        return None
    oracle = request.context.facts
    dtype = oracle.dtype(new) or new.dtype
    if dtype is None or np.dtype(dtype.numpy()) != zero.dtype:
        return None
    shape = oracle.symbolic_shape(new)
    if shape is None or zero.ndim > len(shape):
        return None
    for d_zero, d_x in zip(zero.shape, shape[len(shape) - zero.ndim:]):
        if d_zero != 1 and not (isinstance(d_x, int) and d_x == d_zero):
            return None
    flips = ~np.signbit(zero) if node.op_type == "Add" else np.signbit(zero)
    if np.any(flips) and not any(old is v for v in request.sign_insensitive):
        return None
    what = "+ 0" if node.op_type == "Add" else "- 0"
    return (f"proved: x {what} is x by IEEE 754 (zeros of c: {zero.size}, no broadcast of x)"
            + ("; the zero sign it may flip is declared unread" if np.any(flips) else ""))
