"""The certificate of a reassociating rewrite: the float64 bound it must stay within.

Per output element, with O the original and C the replacement (onnxruntime, the model's dtype),
R the float64 reference of the matched subgraph on the same inputs (`reference/evaluator.py`), and all
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

Overflow territory: in an accumulation (width > 1) whose terms reach the dtype's range (the huge
set, or |R| or |O| beyond sqrt(max)), which partial sum overflows first, and with which sign,
depends on the very order a reassociation changes; there only zero signs are judged (the count
is in the note). An elementwise reassociation gets no such excuse.

Heavy certificates (large accumulations, where float64 evaluation dominates the cost): the
reference runs on the finite set only; the other sets are judged against the original instead:
same value classes (a sum holding infinities has the same class in any order), no zero changing
sign, and |C - O| <= 2 gamma * max(|O|, m_O) + 2 n eta.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx

from onnxrefine.verify import graphinfo
from onnxrefine.verify.judge import bit_identical


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
    # Only the inputs the kept nodes read: the float64 reference converts every input it binds,
    # and the other side's folded constants are the largest ones.
    read = {name for node in reduced.graph.node for name in node.input}
    del reduced.graph.input[:]
    reduced.graph.input.extend(i for i in proto.graph.input if i.name in read)
    return reduced


def _reference(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict:
    # Imported here: an optimization whose rewrites are all exact never loads the reference.
    from onnxrefine.verify.reference import UnsupportedOperatorError, evaluate_float64

    wanted = {i.name for i in model.graph.input}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # inf - inf in adversarial sets is expected, not news
            # no per-element bounds: a certificate judges by its own (this module's docstring)
            return evaluate_float64(model, {k: v for k, v in feeds.items() if k in wanted}, outputs=names,
                                    error_bounds=False)
    except UnsupportedOperatorError as exc:
        raise CertificateSkip(f"no float64 reference: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the reference's own failure is not the rewrite's
        raise CertificateSkip(f"the float64 reference failed: {str(exc).splitlines()[0][:160]}") from None


def judge_exact(runs, names, unsigned=frozenset()) -> str:
    """Bit-identical outputs (any two NaNs equal; +0 and -0 equal only on `unsigned` outputs)."""
    for label, _, result in runs:
        for original, candidate in names:
            o, c = result[original], result[candidate]
            if o.shape != c.shape or o.dtype != c.dtype:
                raise CertificateFailure(f"on the '{label}' inputs the replacement gives {c.dtype}{list(c.shape)}, "
                              f"the original {o.dtype}{list(o.shape)}")
            differ = ~bit_identical(o, c)
            if original in unsigned and o.dtype.kind == "f":
                differ &= ~((o == 0) & (c == 0))
            if differ.any():
                index = np.unravel_index(int(np.flatnonzero(differ)[0]), o.shape) if o.ndim else ()
                raise CertificateFailure(f"exact rewrite differs on the '{label}' inputs at {list(map(int, index))}: "
                              f"original {o[index]!r}, replacement {c[index]!r} "
                              f"({int(differ.sum())} of {o.size} elements)")
    return "bit-identical"


def judge_reassociating(proto: onnx.ModelProto, runs, names, stacked: list[str] | None, heavy: bool,
                        unsigned=frozenset()) -> str:
    """Raise CertificateFailure unless every output of every run is within the bound.

    `stacked`: the activations whose sets were stacked along the batch axis (each run's results
    are one row of it), so the float64 reference runs and the judgement is made once for all sets
    (None: once per set). `heavy` (a large accumulation, where float64 evaluation dominates the
    cost): the reference runs on the finite set only, and the other sets compare the replacement
    with the original (see `_judge_against_original`)."""
    original = side_model(proto, "original")
    lengths = _lengths(proto, runs[0][1])
    labels = [label for label, _, _ in runs]
    wanted = [o for o, _ in names]
    finite = labels.index("finite") if "finite" in labels else None
    if stacked:
        groups = [list(range(len(runs)))]
    else:
        groups = [[i] for i in range(len(runs))]
    worst, overflow = 0.0, 0
    meaning_done = False
    for group in groups:
        with_reference = [i for i in group if not heavy or i == finite]
        without = [i for i in group if i not in with_reference]
        reference, candidate_reference = None, {}
        if with_reference == [finite] and not meaning_done:
            # The finite set alone: both sides in one float64 evaluation, which binds (converts)
            # the activations and the shared constants once.
            both = _reference(proto, runs[finite][1], wanted + [c for _, c in names])
            reference = both
            candidate_reference = {c: both[c] for _, c in names}
        elif with_reference:
            feeds = dict(runs[with_reference[0]][1])
            if len(with_reference) > 1:
                feeds.update({k: np.concatenate([runs[i][1][k] for i in with_reference]) for k in stacked})
            if finite in with_reference and not meaning_done:
                # Sets stacked along the batch axis: both sides in one evaluation, the candidate's
                # finite row kept (rows are independent: the reason the sets may be stacked).
                try:
                    reference = _reference(proto, feeds, wanted + [c for _, c in names])
                except CertificateSkip:
                    reference = None  # the candidate's float64 on a non-finite set: apart below
                else:
                    row = with_reference.index(finite)
                    candidate_reference = {c: np.asarray(reference[c])[row:row + 1] for _, c in names}
            if reference is None:
                reference = _reference(original, feeds, wanted)
        for o_name, c_name in names:
            o_all = [runs[i][2][o_name] for i in group]
            c_all = [runs[i][2][c_name] for i in group]
            for i, o, c in zip(group, o_all, c_all):
                if o.shape != c.shape or o.dtype != c.dtype:
                    raise CertificateFailure(f"on the '{labels[i]}' inputs the replacement gives "
                                             f"{c.dtype}{list(c.shape)}, the original {o.dtype}{list(o.shape)}")
                if not graphinfo.is_float_dtype(o.dtype) and not np.array_equal(o, c):
                    raise CertificateFailure(f"non-float output differs on the '{labels[i]}' inputs")
            if not graphinfo.is_float_dtype(o_all[0].dtype):
                continue
            depth = max(lengths[o_name][0] - 1, lengths[c_name][0] - 1, 1)  # the Identity is free
            width = max(lengths[o_name][1], lengths[c_name][1])
            n = depth * width

            def rows(indices, arrays_by_index):
                if stacked:
                    return np.concatenate([arrays_by_index[i] for i in indices])
                return np.stack([arrays_by_index[i] for i in indices])

            by_index_o = dict(zip(group, o_all))
            by_index_c = dict(zip(group, c_all))
            if with_reference:
                o, c = rows(with_reference, by_index_o), rows(with_reference, by_index_c)
                r = np.asarray(reference[o_name], dtype=np.float64).reshape(o.shape)
                row_labels = [labels[i] for i in with_reference]
                ratio, excused = _judge(row_labels, o, c, r, n, width > 1, o_name in unsigned)
                worst, overflow = max(worst, ratio), overflow + excused
                if finite in with_reference and not meaning_done:
                    row = with_reference.index(finite)
                    rc = candidate_reference.get(c_name)
                    rc = (_candidate_reference(proto, runs[finite][1], c_name, o[row].shape) if rc is None
                          else np.asarray(rc, dtype=np.float64).reshape(o[row].shape))
                    _judge_meaning(o[row], r[row], rc)
            if without:
                o, c = rows(without, by_index_o), rows(without, by_index_c)
                overflow += _judge_against_original([labels[i] for i in without], o, c, n, width > 1,
                                                    o_name in unsigned)
        meaning_done = meaning_done or finite in group
    note = f"; {overflow} elements in overflow territory judged by sign only" if overflow else ""
    return f"within the float64 bound (worst {worst:.2g} of allowed{note})"


def _candidate_reference(proto, feeds, name: str, shape) -> np.ndarray:
    candidate = side_model(proto, "candidate")
    return np.asarray(_reference(candidate, feeds, [name])[name], dtype=np.float64).reshape(shape)


def _lengths(proto: onnx.ModelProto, feeds: dict) -> dict[str, tuple[int, int]]:
    """Output name -> (depth, width) as `graphinfo.accumulation_depths` gives them, computed from
    the fed and constant shapes where every reduction's operands are among them (no onnx shape
    inference, which costs more than the rest of a small certificate)."""
    shapes = {name: tuple(np.shape(value)) for name, value in feeds.items()}
    shapes.update({init.name: tuple(init.dims) for init in proto.graph.initializer})
    constants = {init.name: onnx.numpy_helper.to_array(init) for init in proto.graph.initializer
                 if np.prod(init.dims, dtype=np.int64) <= 64}
    depth: dict[str, int] = {}
    widest: dict[str, int] = {}
    for node in proto.graph.node:
        width = graphinfo.reduction_length(node, shapes, constants)
        if width == graphinfo.UNKNOWN_DIM and any(i and i not in shapes for i in node.input):
            # (64 is also a real width: 64 input channels of a 1x1 convolution)
            return graphinfo.accumulation_depths(proto, feeds)
        in_depth = max((depth.get(i, 0) for i in node.input if i), default=0)
        in_width = max((widest.get(i, 1) for i in node.input if i), default=1)
        for out in node.output:
            depth[out], widest[out] = in_depth + 1, max(in_width, width)
    return {o.name: (max(1, depth.get(o.name, 1)), widest.get(o.name, 1)) for o in proto.graph.output}


def _judge_against_original(labels: list[str], o: np.ndarray, c: np.ndarray, n: int, accumulates: bool,
                            unsigned: bool = False) -> int:
    """A set without float64 reference: same value classes as the original, no zero changing
    sign, and |C - O| <= 2 gamma_n max(|O|, m_O) + 2 n eta (each within n roundings of the true
    value). In the overflow territory of an accumulation only zero signs are judged; the count of
    elements not judged is returned."""
    info = np.finfo(o.dtype)
    u = float(info.eps) / 2
    gamma = n * u / (1 - n * u) if n * u < 1 else np.inf
    o64, c64 = o.astype(np.float64), c.astype(np.float64)
    same = bit_identical(o, c)
    flip = (o64 == 0) & (c64 == 0) & (np.signbit(o64) != np.signbit(c64)) & (not unsigned)
    if unsigned:
        same = same | ((o64 == 0) & (c64 == 0))
    if flip.any():
        raise _where(flip, labels, o, c, o64, "flips the sign of an exact zero")
    territory = np.array([lab == "huge" and accumulates for lab in labels]).reshape((-1,) + (1,) * (o.ndim - 1))
    co, cc = _classes(o64), _classes(c64)
    m = _rms_rows(o64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(c64 - o64) <= 2 * gamma * np.maximum(np.abs(np.nan_to_num(o64)), m) + 2 * n * float(
            info.smallest_subnormal)
    bad = ~same & ~((co == cc) & ((co != 0) | close)) & ~territory
    if bad.any():
        raise _where(bad, labels, o, c, o64, "differs from the original beyond rounding (no float64 "
                     "reference on this set; 'float64' shows the original)")
    return int((~same & territory).sum())


def _rms(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0


def _where(mask: np.ndarray, labels, o, c, r, what: str):
    """The refusal naming the first offending element (rows are the sets, in `labels` order)."""
    index = np.unravel_index(int(np.flatnonzero(mask)[0]), mask.shape) if mask.ndim else ()
    label = labels[index[0]] if isinstance(labels, list) else labels
    where = list(map(int, index[1:])) if isinstance(labels, list) else list(map(int, index))
    row = mask[index[0]] if isinstance(labels, list) else mask
    return CertificateFailure(
        f"{what} on the '{label}' inputs at {where}: original {o[index]!r}, "
        f"replacement {c[index]!r}, float64 {r[index]!r} ({int(row.sum())} of {row.size} elements)")


def _rms_rows(values: np.ndarray) -> np.ndarray:
    """RMS of the finite elements of each row (axis 0), shaped to broadcast against `values`."""
    flat = values.reshape(values.shape[0], -1)
    finite = np.isfinite(flat)
    with np.errstate(invalid="ignore", over="ignore"):
        squares = np.where(finite, flat, 0.0) ** 2
    rms = np.sqrt(squares.sum(axis=1) / np.maximum(finite.sum(axis=1), 1))
    return rms.reshape((-1,) + (1,) * (values.ndim - 1))


def _judge(labels: list[str], o: np.ndarray, c: np.ndarray, r: np.ndarray, n: int, accumulates: bool,
           unsigned: bool = False) -> tuple[float, int]:
    """The bound of the module docstring; rows (axis 0) are the input sets named by `labels`.

    Rows where O, C and R are all finite (most sets, most of the time) are judged by
    `_judge_finite`, the same rules with every value class known to be "finite" (about a third of
    the array passes); the others by `_judge_general`. Each row is judged on its own either way
    (m is per row), so the split changes no outcome."""
    if o.ndim == 0 or o.size == 0:
        return _judge_general(labels, o, c, r, n, accumulates, unsigned)
    rows = o.shape[0]
    o64, c64 = o.astype(np.float64), c.astype(np.float64)
    finite = (np.isfinite(o64).reshape(rows, -1).all(axis=1) & np.isfinite(c64).reshape(rows, -1).all(axis=1)
              & np.isfinite(r).reshape(rows, -1).all(axis=1))
    if not finite.any():
        return _judge_general(labels, o, c, r, n, accumulates, unsigned)
    if finite.all():
        return _judge_finite(labels, o, c, r, o64, c64, n, accumulates, unsigned)
    yes, no = np.flatnonzero(finite), np.flatnonzero(~finite)
    first = _judge_finite([labels[i] for i in yes], o[yes], c[yes], r[yes], o64[yes], c64[yes], n, accumulates,
                          unsigned)
    second = _judge_general([labels[i] for i in no], o[no], c[no], r[no], n, accumulates, unsigned)
    return max(first[0], second[0]), first[1] + second[1]


_INT_VIEWS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _classes(values: np.ndarray) -> np.ndarray:
    """compare.value_class (0 finite, 1 +inf, 2 -inf, 3 NaN) in fewer passes."""
    out = np.zeros(values.shape, dtype=np.int8)
    special = ~np.isfinite(values)
    if special.any():
        picked = values[special]
        out[special] = np.where(np.isnan(picked), 3, np.where(picked > 0, 1, 2))
    return out


def _judge_finite(labels, o, c, r, o64, c64, n: int, accumulates: bool, unsigned: bool) -> tuple[float, int]:
    """`_judge_general` where O, C and R are finite everywhere: its masks with every class 0
    (broke_alike and nonfinite_ok empty, beyond = not in range)."""
    info = np.finfo(o.dtype)
    u = float(info.eps) / 2
    gamma = n * u / (1 - n * u) if n * u < 1 else np.inf
    eta, top = float(info.smallest_subnormal), float(info.max)
    view = _INT_VIEWS.get(o.dtype.itemsize)  # no NaN here: same bits is the whole of bit_identical
    same = (np.ascontiguousarray(o).view(view) == np.ascontiguousarray(c).view(view)) if view is not None \
        and o.dtype == c.dtype else bit_identical(o, c)
    zeros = c64 == 0
    if zeros.any():
        both = zeros & (o64 == 0)
        if unsigned:
            same = same | both
        else:
            zero_flip = both & (r == 0) & (np.signbit(r) == np.signbit(o64)) & (np.signbit(c64) != np.signbit(o64))
            if zero_flip.any():
                raise _where(zero_flip, labels, o, c, r, "flips the sign of an exact zero")
    rows = o.shape[0]
    m = np.sqrt(np.mean(np.square(r.reshape(rows, -1)), axis=1)).reshape((-1,) + (1,) * (o.ndim - 1))
    abs_r = np.abs(r)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = 2 * np.abs(o64 - r) + gamma * np.maximum(abs_r, m) + n * eta
        error = np.abs(c64 - r)
    in_range = abs_r <= top
    ok = same | ~in_range | (error <= allowed)  # value_ok | beyond | same
    if accumulates:
        huge = np.sqrt(top)
        huge_inputs = np.array([lab == "huge" for lab in labels]).reshape((-1,) + (1,) * (o.ndim - 1))
        territory = (abs_r > huge) | (np.abs(o64) > huge) | huge_inputs
        excused = territory & ~ok
    else:
        excused = np.zeros(o.shape, dtype=bool)
    bad = ~ok & ~excused
    if bad.any():
        finite_c = in_range
        what = "outside the float64 bound" if (bad & finite_c).any() else "changes which values are inf/NaN"
        raise _where(bad & finite_c if (bad & finite_c).any() else bad, labels, o, c, r, what)
    usable = in_range & ~same & (allowed > 0) & ~excused
    return float(np.max(error[usable] / allowed[usable], initial=0.0)), int(excused.sum())


def _judge_general(labels: list[str], o: np.ndarray, c: np.ndarray, r: np.ndarray, n: int, accumulates: bool,
                   unsigned: bool = False) -> tuple[float, int]:
    """The bound of the module docstring on any rows."""
    huge_inputs = np.array([lab == "huge" for lab in labels]).reshape((-1,) + (1,) * (o.ndim - 1))
    info = np.finfo(o.dtype)
    u = float(info.eps) / 2
    gamma = n * u / (1 - n * u) if n * u < 1 else np.inf
    eta = float(info.smallest_subnormal)
    top = float(info.max)
    same = bit_identical(o, c)
    o64, c64 = o.astype(np.float64), c.astype(np.float64)
    co, cc, cr = _classes(o64), _classes(c64), _classes(r)
    zero_flip = (r == 0) & (o64 == 0) & (c64 == 0) & (np.signbit(r) == np.signbit(o64)) & \
        (np.signbit(c64) != np.signbit(o64)) & (not unsigned)
    if unsigned:
        same = same | ((o64 == 0) & (c64 == 0))
    if zero_flip.any():
        raise _where(zero_flip, labels, o, c, r, "flips the sign of an exact zero")
    m = _rms_rows(r)
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
        raise _where(bad & finite_c if (bad & finite_c).any() else bad, labels, o, c, r, what)
    usable = in_range & (cc == 0) & ~same & (allowed > 0) & ~excused
    return float(np.max(error[usable] / allowed[usable], initial=0.0)), int(excused.sum())


def error_o_c(o64: np.ndarray, c64: np.ndarray, gamma: float, n: int, eta: float) -> np.ndarray:
    """Where float64 has no finite value but both runs do: C within n roundings of O."""
    m = _rms_rows(o64)
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
