"""The verdict: is a candidate's difference from the original explained by float rounding?

Per output, over every input set, the candidate C is compared with the original O (both from
onnxruntime) and, when the float64 reference R (the ORIGINAL graph evaluated in float64) is
available, with R. All arithmetic below is in float64.

exact
    C is bit-identical to O on every input set (two NaNs count as identical).

rounding bound (float outputs, reference available)
    u      unit roundoff of the lowest-precision float type the graph declares anywhere
           (2^-24 float32, 2^-11 float16, 2^-8 bfloat16, 2^-53 float64).
    n      accumulation length of the output: L * W, where L is the longest path (in nodes) from
           the inputs to the output and W the largest reduction length among its ancestors (Conv:
           C_in/group * prod(kernel); MatMul/Gemm: K; Reduce*: reduced elements; Softmax: axis
           length; ...). Clamped to [4, N_CAP(u)], N_CAP(u) = max(64, 2^-13 / u) (2048 for
           float32), so that gamma_n never exceeds ~1.2e-4 for float32.
    gamma  gamma_n = n*u / (1 - n*u)   (Higham's bound for n sequential roundings)
    e_o    |O - R| per element, e_c = |C - R|
    E      max of e_o over the elements where O and R are finite (the original's own worst error
           on this output: a measure of how ill-conditioned the output is)
    m      RMS of |R| over finite elements (the output's typical magnitude, so elements that
           cancel to ~0 are judged against the magnitude of what was summed, not against 0)
    s      the original's sensitivity (below): how far O_i moves when the inputs move by a few
           ulps; it covers a rounding difference amplified by an ill-conditioned op downstream
           (Sqrt or Log near 0, division by a small value) that gamma * |R| does not.
    allowed_i = 2 * e_o_i + 2 * E + 2 * s_i + gamma * max(|R_i|, m)
    An element that differs (C_i != O_i) is explained when e_c_i <= allowed_i.
    With float32, n <= 2048 gives gamma*|R| <= 1.2e-4 |R|, so a change of 1e-3 relative is caught
    unless the original itself is wrong by ~5e-4 on that output; 1e-6 relative rounding
    (a few ulps) is within 2*E or gamma*|R| (n >= 4 allows 4 ulps on every element).
    Where R is not finite but O and C are, the element is judged by |C_i - O_i| <= 2E + gamma*
    max(|O_i|, m_O).

NaN/inf pattern changes (class finite/+inf/-inf/NaN of C_i differs from O_i)
    explained when C_i has R_i's class, or C_i overflowed to the sign of an R_i that is itself
    beyond the dtype's largest finite value, or O_i itself is not finite where R_i is (the
    original's own error is unbounded there, so allowed_i is infinite: a float32 Log(Softmax)
    that underflows to -inf, say); otherwise unexplained.

fallback without a float64 reference (the reference raised UnsupportedOperatorError)
    e_o is replaced by the original's sensitivity s_i = max over perturbation runs of
    |O'_i - O_i| (O' = the original on inputs moved by a few ulps; positions that jump are
    excluded), E by max s_i, R by O:
        allowed_i = 2 * s_i + 2 * max(s) + gamma * max(|O_i|, m_O),  |C_i - O_i| <= allowed_i
    and every NaN/inf pattern change is unexplained (outside overflow territory, below). The report marks such outputs
    "no float64 reference".

extreme-magnitude input sets (finite float inputs beyond sqrt(max) of their dtype)
    Intermediates overflow there, and which one overflows first depends on evaluation order, so
    elements in overflow territory are not judged (they are counted in the notes): where R_i (if
    available) or O_i is not finite, |R_i| or |O_i| > sqrt(max), or C_i is +-inf or beyond
    sqrt(max) (a NaN candidate is still judged). Elements whose true value is moderate are still judged, which
    catches rewrites that overflow on large inputs (softmax without the max shift, say).

input sets holding inf or NaN
    Whether an inf meets an inf of the other sign (NaN) depends on evaluation order, so a change
    between inf and NaN (both sides non-finite) is explained there (counted in the notes), and
    so is an infinity on one side where the other holds the largest finite value of the same sign
    (onnxruntime saturates there in places: Clip's default bounds, MaxPool's padding, which also
    swallows a NaN); other finite <-> non-finite changes are still judged by the pattern rule.

Integer/bool outputs: every differing element is unexplained.

unstable positions (controls on the ORIGINAL)
    - the original run twice on the same inputs: any element that differs;
    - the original on float inputs moved by up to PERTURB_ULPS ulps (two checkerboard runs,
      +-PERTURB_ULPS alternating by position, then random offsets; `trials` runs in all, at least 2,
      at least 8 when the graph holds discrete ops such as ArgMax, Floor, Round, Cast to
      int, comparisons): an element whose class changes, an integer element that changes, or a
      float element that moves by more than JUMP * (PERTURB_ULPS + n) * u * max(|O_i|, m_O),
      i.e. far more than a few-ulp input change explains.

Decision per output: no unexplained element on any set -> `rounding` (or `exact`); all
unexplained elements are unstable positions -> `unstable`; otherwise `mismatch`.
Shape or dtype differences are an immediate `mismatch`. The overall verdict is the worst output's
in the order exact < rounding < unstable < mismatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from onnxrefine.verify import graphinfo
from onnxrefine.verify.compare import bit_identical, ordered_int, value_class

EXACT = "exact"
ROUNDING = "rounding"
UNSTABLE = "unstable"
MISMATCH = "mismatch"
VERDICTS = (EXACT, ROUNDING, UNSTABLE, MISMATCH)  # in order of severity

ERROR_FACTOR = 2.0
N_MIN = 4
PERTURB_ULPS = 4
JUMP = 64.0
SCATTER_POINTS = 400


def worst(verdicts) -> str:
    return max(verdicts, key=VERDICTS.index, default=EXACT)


def n_cap(u: float) -> int:
    return max(64, int(2.0 ** -13 / u))


@dataclass
class RoundingBound:
    u: float
    depth: int
    width: int
    n: int
    gamma: float

    @classmethod
    def for_output(cls, u: float, depth: int, width: int) -> "RoundingBound":
        n = int(min(max(depth * width, N_MIN), n_cap(u)))
        return cls(u=u, depth=depth, width=width, n=n, gamma=n * u / (1.0 - n * u))

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SetEvidence:
    """What the runs produced for one output on one input set."""

    original: np.ndarray
    rerun: np.ndarray
    candidate: np.ndarray
    perturbed: list = field(default_factory=list)
    reference: np.ndarray | None = None
    extreme: bool = False  # the input set holds finite floats beyond sqrt(max) of their dtype
    nonfinite_inputs: bool = False  # the input set holds inf or NaN


@dataclass
class Judgement:
    verdict: str
    differing: int = 0
    unexplained: int = 0
    unstable_positions: int = 0
    orig_err_max: float | None = None
    cand_err_max: float | None = None
    used_reference: bool = False
    overflow_excused: int = 0
    nonfinite_excused: int = 0
    scatter: dict = field(default_factory=lambda: {"ref": [], "orig": [], "cand": []})
    notes: list = field(default_factory=list)


def perturb(array: np.ndarray, rng: np.random.Generator, max_ulps: int = PERTURB_ULPS,
            checkerboard: int | None = None) -> np.ndarray:
    """Move each finite element by up to max_ulps ulps.

    checkerboard=0/1: +max_ulps on even/odd flat positions and -max_ulps on the others (moves any
    two neighbours apart or together by 2*max_ulps deterministically); None: random offsets.
    """
    if not graphinfo.is_float_dtype(array.dtype) or array.size == 0:
        return array
    bits = 8 * array.dtype.itemsize
    keys = ordered_int(array)
    if checkerboard is None:
        offsets = rng.integers(-max_ulps, max_ulps + 1, size=array.shape)
    else:
        parity = (np.arange(array.size).reshape(array.shape) + checkerboard) % 2
        offsets = np.where(parity == 0, max_ulps, -max_ulps)
    moved = keys + offsets
    sign_bit = np.int64(1) << np.int64(bits - 1) if bits < 64 else np.int64(np.iinfo(np.int64).min)
    raw = np.where(moved < 0, (-moved) | sign_bit, moved)
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64, 1: np.uint8}[array.dtype.itemsize]
    result = raw.astype(unsigned).view(array.dtype).reshape(array.shape)
    keep = ~np.isfinite(array.astype(np.float64)) | ~np.isfinite(result.astype(np.float64))
    return np.where(keep, array, result).astype(array.dtype)


def _rms(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0


def unstable_positions(evidence: SetEvidence, bound: RoundingBound) -> np.ndarray:
    """Elements where the original itself is not a fixed function of its inputs."""
    original = evidence.original
    unstable = ~bit_identical(evidence.rerun, original)
    is_float = graphinfo.is_float_dtype(original.dtype)
    if is_float:
        base = original.astype(np.float64)
        scale = np.maximum(np.abs(np.nan_to_num(base, nan=0.0, posinf=0.0, neginf=0.0)), _rms(base))
        threshold = JUMP * (PERTURB_ULPS + bound.n) * bound.u * scale
    for moved in evidence.perturbed:
        if moved.shape != original.shape:
            unstable |= True
            continue
        if is_float:
            moved64 = moved.astype(np.float64)
            class_change = value_class(moved64) != value_class(base)
            both_finite = np.isfinite(moved64) & np.isfinite(base)
            with np.errstate(invalid="ignore"):
                jump = both_finite & (np.abs(moved64 - base) > threshold)
            unstable |= class_change | jump
        else:
            unstable |= ~bit_identical(moved, original)
    return unstable


def _sensitivity(evidence: SetEvidence, unstable: np.ndarray) -> np.ndarray:
    base = evidence.original.astype(np.float64)
    sensitivity = np.zeros(base.shape)
    for moved in evidence.perturbed:
        if moved.shape != base.shape:
            continue
        moved64 = moved.astype(np.float64)
        usable = np.isfinite(moved64) & np.isfinite(base) & ~unstable
        sensitivity = np.maximum(sensitivity, np.where(usable, np.abs(moved64 - base), 0.0))
    return sensitivity


def _explained_float(evidence: SetEvidence, bound: RoundingBound, unstable: np.ndarray,
                     judgement: Judgement) -> np.ndarray:
    """Boolean mask: elements whose candidate value is explained by rounding."""
    a = evidence.original.astype(np.float64)
    c = evidence.candidate.astype(np.float64)
    class_a, class_c = value_class(a), value_class(c)
    finite_ac = (class_a == 0) & (class_c == 0)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite_ac, np.abs(c - a), 0.0)
    m_a = _rms(a)
    ref = evidence.reference
    if ref is None:
        sens = _sensitivity(evidence, unstable)
        allowed = ERROR_FACTOR * sens + ERROR_FACTOR * float(sens.max(initial=0.0)) \
            + bound.gamma * np.maximum(np.abs(np.where(finite_ac, a, 0.0)), m_a)
        explained = finite_ac & (diff <= allowed)
        huge = np.sqrt(graphinfo.finite_max(evidence.original.dtype))
        territory = (class_a != 0) | (np.abs(np.where(class_a == 0, a, 0.0)) > huge) | \
            ((class_c != 3) & (np.abs(np.nan_to_num(c, posinf=np.inf, neginf=-np.inf)) > huge))
        return _overflow_excuse(evidence, explained, territory, judgement)
    r = ref.astype(np.float64)
    class_r = value_class(r)
    with np.errstate(invalid="ignore", over="ignore"):
        err_o = np.abs(a - r)
        err_c = np.abs(c - r)
    finite_ar = (class_a == 0) & (class_r == 0)
    big_e = float(np.where(finite_ar, err_o, 0.0).max(initial=0.0))
    m_r = _rms(r)
    scale = np.maximum(np.abs(np.where(class_r == 0, r, 0.0)), m_r)
    # gamma * scale bounds the rounding of the arithmetic that feeds the output, not its
    # amplification by an ill-conditioned op further on (Sqrt or Log near 0, a Div by a small
    # value); how far the original itself moves when its inputs move by a few ulps measures that.
    sens = _sensitivity(evidence, unstable)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = ERROR_FACTOR * np.where(class_a == 0, err_o, np.inf) + ERROR_FACTOR * big_e \
            + ERROR_FACTOR * sens + bound.gamma * scale
        value_ok = (class_c == 0) & (class_r == 0) & (err_c <= allowed)
    # The reference is not finite but both float32 runs are: compare them with each other.
    no_ref_ok = finite_ac & (class_r != 0) & (
        diff <= ERROR_FACTOR * big_e + bound.gamma * np.maximum(np.abs(np.where(finite_ac, a, 0.0)), m_a))
    # A class change is explained when the candidate follows the reference, or when the true value
    # overflows the dtype anyway and the candidate rounds it to the matching infinity.
    top = float(ml_dtypes.finfo(evidence.candidate.dtype).max)
    overflow_ok = (((class_c == 1) & (r > top)) | ((class_c == 2) & (r < -top)))
    pattern_ok = (class_c != 0) & ((class_c == class_r) | overflow_ok)
    finite_r = class_r == 0
    judgement.used_reference = True
    orig_err = np.where(finite_ar, err_o, 0.0)
    cand_err = np.where((class_c == 0) & finite_r, err_c, 0.0)
    judgement.orig_err_max = max(judgement.orig_err_max or 0.0, float(orig_err.max(initial=0.0)))
    judgement.cand_err_max = max(judgement.cand_err_max or 0.0, float(cand_err.max(initial=0.0)))
    _sample_scatter(judgement, np.abs(np.where(finite_r, r, 0.0)), orig_err, cand_err,
                    finite_ar & (class_c == 0))
    huge = np.sqrt(top)
    territory = (class_r != 0) | (class_a != 0) | (np.abs(np.where(class_r == 0, r, 0.0)) > huge) | \
        (np.abs(np.where(class_a == 0, a, 0.0)) > huge) | \
        ((class_c != 3) & (np.abs(np.nan_to_num(c, posinf=np.inf, neginf=-np.inf)) > huge))
    original_broke = (class_a != 0) & (class_r == 0)
    return _overflow_excuse(evidence, value_ok | no_ref_ok | pattern_ok | original_broke, territory,
                            judgement)


def _overflow_excuse(evidence: SetEvidence, explained: np.ndarray, territory: np.ndarray,
                     judgement: Judgement) -> np.ndarray:
    """On extreme-magnitude inputs, elements in overflow territory are not judged (counted).

    There intermediates overflow, and which one overflows first depends on evaluation order.
    Likewise, with inf/NaN inputs, whether inf meets -inf (NaN) or not (inf) depends on the order,
    so an inf <-> NaN change (both sides non-finite) is not blamed either.
    """
    if evidence.nonfinite_inputs:
        class_a, class_c = value_class(evidence.original), value_class(evidence.candidate)
        order = ~explained & (class_a != 0) & (class_c != 0) & (class_a != class_c)
        a = evidence.original.astype(np.float64)
        c = evidence.candidate.astype(np.float64)
        top = float(ml_dtypes.finfo(evidence.candidate.dtype).max)
        saturated = ~explained & (((a == np.inf) & (c == top)) | ((a == -np.inf) & (c == -top))
                                  | ((c == np.inf) & (a == top)) | ((c == -np.inf) & (a == -top)))
        order |= saturated
        judgement.nonfinite_excused += int(np.count_nonzero(order))
        explained = explained | order
    if not evidence.extreme:
        return explained
    excused = ~explained & territory & ~bit_identical(evidence.candidate, evidence.original)
    judgement.overflow_excused += int(np.count_nonzero(excused))
    return explained | excused


def _sample_scatter(judgement: Judgement, ref_abs, orig_err, cand_err, usable) -> None:
    room = SCATTER_POINTS - len(judgement.scatter["ref"])
    index = np.flatnonzero(usable.ravel())
    if room <= 0 or index.size == 0:
        return
    if index.size > room:
        index = index[np.linspace(0, index.size - 1, room).astype(np.int64)]
    judgement.scatter["ref"].extend(ref_abs.ravel()[index].tolist())
    judgement.scatter["orig"].extend(orig_err.ravel()[index].tolist())
    judgement.scatter["cand"].extend(cand_err.ravel()[index].tolist())


def judge_output(sets: list[SetEvidence], bound: RoundingBound) -> Judgement:
    """The verdict for one output over all input sets (see the module docstring)."""
    judgement = Judgement(verdict=EXACT)
    per_set = []
    for evidence in sets:
        original, candidate = evidence.original, evidence.candidate
        if original.shape != candidate.shape or original.dtype != candidate.dtype:
            judgement.notes.append(
                f"candidate output is {candidate.dtype}{list(candidate.shape)}, "
                f"the original's {original.dtype}{list(original.shape)}")
            judgement.verdict = MISMATCH
            judgement.differing += int(max(original.size, candidate.size))
            judgement.unexplained += int(max(original.size, candidate.size))
            return judgement
        differ = ~bit_identical(candidate, original)
        judgement.differing += int(np.count_nonzero(differ))
        if not differ.any():
            per_set.append(EXACT)
            continue
        unstable = unstable_positions(evidence, bound)
        judgement.unstable_positions += int(np.count_nonzero(unstable))
        if graphinfo.is_float_dtype(original.dtype):
            explained = _explained_float(evidence, bound, unstable, judgement)
        else:
            explained = np.zeros(original.shape, dtype=bool)
        unexplained = differ & ~explained
        judgement.unexplained += int(np.count_nonzero(unexplained))
        if not unexplained.any():
            per_set.append(ROUNDING)
        elif not (unexplained & ~unstable).any():
            per_set.append(UNSTABLE)
        else:
            per_set.append(MISMATCH)
    judgement.verdict = worst(per_set)
    return judgement


def perturbation_runs(trials: int, discrete: bool) -> int:
    return max(8, trials) if discrete else max(2, trials)


def lowest_precision_u(float_dtypes) -> float:
    roundoffs = [graphinfo.unit_roundoff(dtype) for dtype in float_dtypes]
    return max(roundoffs) if roundoffs else graphinfo.unit_roundoff(np.float32)


def describe_bound(bound: RoundingBound) -> str:
    return (f"n={bound.n} (depth {bound.depth} x width {bound.width}), u=2^{math.log2(bound.u):.0f}, "
            f"gamma_n={bound.gamma:.3g}")
