"""Affine folds into a convolution (Conv -> BatchNormalization / Mul / Add / Sub / Div): the
proof, and beside it the check of its reading of the tail against onnxruntime.

Why: running a fold's matched subgraph on adversarial sets costs a convolution over every weight
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
map on the first rewrite's own constants (`tail_reading_agrees`, below, from `affine_tail`);
wherever that check cannot say, the first rewrite is run whole.

The reading check. What the proof reads is the tail's per-channel map t -> a t + d; the Conv part of the proof (linearity in the
weights, the same input and attributes) reads no op semantics that differ between models. So
the tail alone is asked: its nodes with the model's own constants, in one onnxruntime session
like the certificates' (CPU, optimizations off, one thread), on t = 0 and t = T = 2^20 in every
channel, give d = T(0) and a = (T(T) - T(0)) / T. They must agree with the proof's a and d
within the float32 rounding of a few operations on values of magnitude |a| T + |d|:

    |a_ort - a| <= c (|a| + m / T) eps    and    |d_ort - d| <= c m eps,    c = 16 (nodes + 1)

where m bounds the magnitudes summed into d (`_tail_step`) and eps = 2^-23.
A dropped or misread epsilon changes a by ~epsilon / (2 var) relative (5e-4 for 1e-3 and a
variance of 1: ~130x the tolerance of one node); a swapped Sub changes the sign of a.

Anything unusual (a float16 or float64 weight, a session or run that fails, a non-finite result)
returns None, and the certificate falls back to running the rewrite whole.
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
from onnxrefine.verify.certificate.model import canonical_node
from onnxrefine.verify.certificate.proofs.record import PROOF_TESTS as _P
from onnxrefine.verify.certificate.proofs.record import Proof, Runtime, miniature_model

_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_EPS64 = float(np.finfo(np.float64).eps)
_EPS32 = 2.0 ** -23
_SLACK = 64.0  # float64 ulps allowed between two derivations of a and d (a few ops each)
PROBE = 2.0 ** 20


def _attrs(node: ir.Node) -> dict:
    """Comparable attributes (a reference refuses: two of them may hold different callers' values)."""
    return {name: (found.type, _hashable(attr(node, name))) for name, found in node.attributes.items()}


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
        if attr(node, "training_mode", 0) != 0:
            return None
        if any(out.uses() or out.is_graph_output() for out in node.outputs[1:]):
            return None
        params = [constant_array(v) for v in node.inputs[1:]]
        if any(p is None or p.dtype != dtype or p.shape != (channels,) for p in params):
            return None
        gamma, beta, mean, var = (p.astype(np.float64) for p in params)
        eps = float(np.float32(attr(node, "epsilon", 1e-5)))
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
    nodes (a = 1, d = 0 before the first), with what `tail_reading_agrees` needs to ask
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


# --- the reading check ---------------------------------------------------------------------------


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
    return miniature_model(graph, opsets)


def tail_reading_agrees(tail, make_session, run) -> str | None:
    """The certificate's note when onnxruntime computes the tail's map as the proof read it;
    None when it does not, or the check does not apply (the rewrite is then run whole).

    `tail`: (nodes, data value, rank, channels, dtype, a, d, m) from
    `affine_tail`; `make_session` and `run` are the certifier's own."""
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


def _tail_reading(request, runtime: Runtime) -> str | None:
    tail = affine_tail(request)
    return None if tail is None else tail_reading_agrees(tail, runtime.make_session, runtime.run)


PROOFS = (
    Proof("affine_fold", "Conv followed by per-channel affine maps: every folded weight and bias is its "
          "float64 value rounded once",
          affine_fold_proof, _tail_reading,
          (_P + "test_every_fold_is_proved_the_first_once_onnxruntime_agrees_with_its_tail_reading",),
          (_P + "test_a_wrong_constant_in_a_later_fold_is_not_proved_and_its_run_refuses_it",
           _P + "test_a_misreading_the_proof_shares_with_the_rule_is_caught_by_onnxruntime",
           _P + "test_no_proof_where_a_reader_sees_the_sign_of_a_zero",
           _P + "test_the_tail_reading_check_is_tight_enough_for_a_dropped_default_epsilon")),
)
