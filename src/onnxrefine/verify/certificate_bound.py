"""The certificate of a reassociating rewrite: the float64 bound it must stay within.

Per output element, with O the original and C the replacement (onnxruntime, the model's dtype),
R the float64 reference of the matched subgraph on the same inputs (`reference.py`), and all
arithmetic in float64:

    u      unit roundoff of the output's dtype (2^-24 for float32)
    n      depth x width of the arithmetic behind the output on either side (the longest path in
           nodes times the largest accumulation length: Conv C_in/group * kernel, MatMul K, ...),
           from `graphinfo.accumulation_depths` on the certificate model; no cap
    gamma  n*u / (1 - n*u)  (Higham: n sequential roundings)
    m      RMS of the finite |R| of this output (its typical magnitude)
    eta    the dtype's smallest subnormal (the absolute error of an operation that underflows)
    allowed_i = 2 |O_i - R_i| + gamma * max(|R_i|, m) + n * eta

The original's own error 2|O_i - R_i| admits a reassociation wherever the original itself loses
accuracy (cancellation); gamma * max(|R_i|, m) is the a priori bound of n roundings.

An element passes when C_i is bit-identical to O_i, or:
    - R_i finite and within the dtype's range: C_i finite and |C_i - R_i| <= allowed_i, or the
      original broke there (O_i not finite) and C_i broke the same way;
    - R_i finite beyond the dtype's range: C_i the infinity of R_i's sign, or O_i's class;
    - R_i not finite: C_i of R_i's class or of O_i's (the original's own artefact);
and never when it flips the sign of an exact zero: R_i and O_i the same signed zero, C_i the
other one (the sign-of-zero class: 1/x turns +inf into -inf downstream).

The meaning of the folded constants is checked without float32 noise: on the finite set, the
replacement evaluated in float64 (Rc, with its constants as stored) must satisfy
    |Rc_i - R_i| <= 2u * max(|R_i|, m) + E,   E = max over the output of |O - R|
(folding rounds each new constant once, which moves the result by about u relative to the
magnitude of the summands; E, the original's own largest rounding error on this output, measures
that magnitude where the output cancels). A dropped epsilon or a wrong scale is far outside.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx

from onnxrefine.verify import graphinfo
from onnxrefine.verify.compare import bit_identical, value_class
from onnxrefine.verify.reference import UnsupportedOperatorError, evaluate_float64


class CertificateSkip(Exception):
    """The certificate cannot be made concrete; the rewrite is applied and the reason recorded."""


class CertificateFailure(Exception):
    """The replacement does not compute what the matched subgraph computes."""


def side_model(proto: onnx.ModelProto, side: str) -> onnx.ModelProto:
    """The certificate model with only one side's outputs and the nodes they need."""
    keep_outputs = [o for o in proto.graph.output if o.name.startswith(f"__certificate_{side}_")]
    producers = {out: node for node in proto.graph.node for out in node.output}
    needed, stack = set(), [o.name for o in keep_outputs]
    while stack:
        node = producers.get(stack.pop())
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        stack.extend(i for i in node.input if i)
    reduced = onnx.ModelProto()
    reduced.CopyFrom(proto)
    del reduced.graph.node[:]
    reduced.graph.node.extend(n for n in proto.graph.node if id(n) in needed)
    del reduced.graph.output[:]
    reduced.graph.output.extend(keep_outputs)
    return reduced


def _reference(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict:
    wanted = {i.name for i in model.graph.input}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # inf - inf in adversarial sets is expected, not news
            return evaluate_float64(model, {k: v for k, v in feeds.items() if k in wanted}, outputs=names)
    except UnsupportedOperatorError as exc:
        raise CertificateSkip(f"no float64 reference: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the reference's own failure is not the rewrite's
        raise CertificateSkip(f"the float64 reference failed: {str(exc).splitlines()[0][:160]}") from None


def judge_reassociating(proto: onnx.ModelProto, runs, names, fed) -> str:
    """Raise CertificateFailure unless every output of every run is within the bound."""
    original = side_model(proto, "original")
    candidate = side_model(proto, "candidate")
    lengths = graphinfo.accumulation_depths(proto, {**runs[0][1]})
    worst, overflow = 0.0, 0
    for label, feeds, result in runs:
        reference = _reference(original, feeds, [o for o, _ in names])
        replaced = _reference(candidate, feeds, [c for _, c in names]) if label == "finite" else None
        for o_name, c_name in names:
            o, c = result[o_name], result[c_name]
            if o.shape != c.shape or o.dtype != c.dtype:
                raise CertificateFailure(f"on the '{label}' inputs the replacement gives {c.dtype}{list(c.shape)}, "
                                         f"the original {o.dtype}{list(o.shape)}")
            if not graphinfo.is_float_dtype(o.dtype):
                if not np.array_equal(o, c):
                    raise CertificateFailure(f"non-float output differs on the '{label}' inputs")
                continue
            depth = max(lengths[o_name][0] - 1, lengths[c_name][0] - 1, 1)  # the Identity is free
            width = max(lengths[o_name][1], lengths[c_name][1])
            n = depth * width
            r = np.asarray(reference[o_name], dtype=np.float64)
            ratio, excused = _judge(label, o, c, r, n, width > 1, label == "huge")
            worst, overflow = max(worst, ratio), overflow + excused
            if replaced is not None:
                _judge_meaning(o, r, np.asarray(replaced[c_name], dtype=np.float64))
    note = f"; {overflow} elements in overflow territory judged by sign only" if overflow else ""
    return f"within the float64 bound (worst {worst:.2g} of allowed{note})"


def _rms(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0


def _where(mask: np.ndarray, label: str, o, c, r, what: str):
    index = np.unravel_index(int(np.flatnonzero(mask)[0]), mask.shape) if mask.ndim else ()
    return CertificateFailure(
        f"{what} on the '{label}' inputs at {list(map(int, index))}: original {o[index]!r}, "
        f"replacement {c[index]!r}, float64 {r[index]!r} ({int(mask.sum())} of {mask.size} elements)")


def _judge(label: str, o: np.ndarray, c: np.ndarray, r: np.ndarray, n: int, accumulates: bool,
           huge_inputs: bool) -> tuple[float, int]:
    info = np.finfo(o.dtype)
    u = float(info.eps) / 2
    gamma = n * u / (1 - n * u) if n * u < 1 else np.inf
    eta = float(info.smallest_subnormal)
    top = float(info.max)
    same = bit_identical(o, c)
    o64, c64 = o.astype(np.float64), c.astype(np.float64)
    co, cc, cr = value_class(o64), value_class(c64), value_class(r)
    zero_flip = (r == 0) & (o64 == 0) & (c64 == 0) & (np.signbit(r) == np.signbit(o64)) & \
        (np.signbit(c64) != np.signbit(o64))
    if zero_flip.any():
        raise _where(zero_flip, label, o, c, r, "flips the sign of an exact zero")
    m = _rms(r)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.maximum(np.abs(np.where(cr == 0, r, 0.0)), m)
        own = np.where(co == 0, np.abs(o64 - r), 0.0)
        allowed = 2 * own + gamma * scale + n * eta
        error = np.abs(c64 - r)
    in_range = (cr == 0) & (np.abs(np.where(cr == 0, r, 0.0)) <= top)
    value_ok = in_range & (cc == 0) & (error <= allowed)
    broke_alike = in_range & (co != 0) & (cc == co)
    beyond = (cr == 0) & ~in_range & (((cc == 1) & (r > 0)) | ((cc == 2) & (r < 0)) | (cc == co))
    nonfinite_ok = (cr != 0) & ((cc == cr) | (cc == co)) & ((cc != 0) | (error_o_c(o64, c64, gamma, n, eta)))
    # Overflow territory of an accumulation (a sum of many terms): once its terms approach the
    # dtype's range, which partial sum overflows first, with which sign (or inf - inf = NaN),
    # depends on the order the rewrite changes. Only there is a non-finite candidate not judged
    # (zero signs still are); an elementwise reassociation that overflows is refused.
    huge = np.sqrt(top)
    with np.errstate(invalid="ignore"):
        territory = (np.abs(np.nan_to_num(r, nan=0.0)) > huge) | (np.abs(np.nan_to_num(o64, nan=0.0)) > huge)
    territory = (territory | huge_inputs) & accumulates
    excused = territory & ~(same | value_ok | broke_alike | beyond | nonfinite_ok)
    bad = ~(same | value_ok | broke_alike | beyond | nonfinite_ok | excused)
    if bad.any():
        finite_c = in_range & (cc == 0)
        what = "outside the float64 bound" if (bad & finite_c).any() else "changes which values are inf/NaN"
        raise _where(bad & finite_c if (bad & finite_c).any() else bad, label, o, c, r, what)
    usable = in_range & (cc == 0) & ~same & (allowed > 0) & ~excused
    return float(np.max(error[usable] / allowed[usable], initial=0.0)), int(excused.sum())


def error_o_c(o64: np.ndarray, c64: np.ndarray, gamma: float, n: int, eta: float) -> np.ndarray:
    """Where float64 has no finite value but both runs do: C within n roundings of O."""
    m = _rms(o64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(c64 - o64) <= 2 * gamma * np.maximum(np.abs(np.nan_to_num(o64)), m) + n * eta


def _judge_meaning(o: np.ndarray, r: np.ndarray, rc: np.ndarray) -> None:
    u = float(np.finfo(o.dtype).eps) / 2
    o64 = o.astype(np.float64)
    both = np.isfinite(r) & np.isfinite(o64)
    big_e = float(np.max(np.abs(np.where(both, o64 - r, 0.0)), initial=0.0))
    m = _rms(r)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = 2 * u * np.maximum(np.abs(np.where(np.isfinite(r), r, 0.0)), m) + big_e
        bad = np.isfinite(r) & ~(np.abs(rc - r) <= allowed)
    if bad.any():
        raise _where(bad, "finite", o, rc.astype(o.dtype), r,
                     "the replacement's float64 value differs from the original's beyond the rounding "
                     "of its folded constants")
