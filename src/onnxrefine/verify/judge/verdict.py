"""The verdict: is a candidate's difference from the original explained by float rounding?

Per output, over every input set, the candidate C is compared with the original O (both from
onnxruntime) and, when available, with the float64 reference R (the ORIGINAL graph evaluated in
float64). All arithmetic below is in float64.

exact     C is bit-identical to O on every input set (two NaNs count as identical).
rounding  every element where C differs from O is explained by one of the RULES below.
unstable  the unexplained elements are all unstable positions of the original (below).
mismatch  anything else; also a shape or dtype change. Overall: the worst output's verdict.

The rounding bound (RoundingBound)
    u      unit roundoff of the lowest-precision float type the graph declares anywhere.
    N      accumulation length of the value: the largest, over the paths from the inputs, of the
           summed reduction lengths of the nodes on the path (Conv: C_in/group * prod(kernel);
           MatMul/Gemm: K; Reduce*, pools, Softmax, normalizations: their reduced elements; an
           elementwise node counts 1). graphinfo.accumulation_profile computes it. No cap.
    n      max(N_MIN, min(N, STAT_K * ceil(sqrt(N)))), gamma = exp(n*u + N*u^2/(1-u)) - 1
           (accumulation_gamma: finite and positive for every n, also where n*u >= 1).
           Why sqrt: Higham's gamma_N bounds the error of N roundings relative to the sum of the
           |terms|, which the verdict does not know (|R| of a mixed-sign sum or mean is far
           smaller). Rounding errors of independent operations add like a random walk: a length-N
           accumulation errs by ~u*sqrt(N) relative to the magnitude of its partial sums, which
           is the magnitude of the result both for same-sign terms and for random-sign ones
           (error ~ u*sqrt(N/3) resp. u*sqrt(N/2) times |result|). STAT_K = 4 is a wide margin
           over that; systematic (correlated) rounding is what the original's own measured error
           e_o covers at each element, since the original commits it too. The worst-case N*u is
           ~sqrt(N)/STAT_K times looser and swallowed real bugs: a BatchNorm fold that dropped
           epsilon (1e-5 on variances ~1 is ~8e-6 relative) before a GlobalAveragePool.
           Why exp: Higham and Mary's probabilistic bound on N roundings, |prod(1 + delta_k) - 1| <=
           exp(lambda*sqrt(N)*u + N*u^2/(1-u)) - 1, with lambda*sqrt(N) <= n; where n = N it is the
           worst case (1 + u)^N - 1 <= exp(N*u) - 1. Higham's n*u / (1 - n*u) holds only for n*u < 1:
           a float16 value with n = 2052 > 1/u = 2048 got a negative gamma, an allowance below zero.
    e_o    |O - R| where both are finite, else 0; e_c = |C - R|.
    M      per element, the magnitude of its terms: max(|R_i|, M_i) with M_i from the reference
           (SetEvidence.magnitude, reference/bound.py: the root-sum-square of the terms of the last dot
           product, reduction or normalization, carried through the elementwise ops after it, the scale
           of the partial sums the sqrt(N) random walk above rounds), so a cancelling element keeps the
           size of its terms; past an op without a rule M is probed (magnitude_probe.py); not derived: |R_i|.
    E, m   max e_o and the RMS of the finite |R| over the output: read only by the accumulation cap of
           within-derived-bound, which restricts and excuses nothing.
    s      the original's measured sensitivity: max over the perturbation runs (inputs moved by
           PERTURB_ULPS ulps) of |O' - O|, stable positions only.

Rules (RULES in rules.py, applied in order by judge_output; an element explained by any rule is explained,
unless the veto "sign-flip" applies). Each names its legitimate case (a regression test) and the
counterexamples it must not excuse (tests as well); see the Rule entries in rules.py.
    within-bound       where no derived bound is in force: e_c <= 2*e_o + gamma*M, C and R finite,
                       every term the element's own. Where O broke (non-finite, R finite) e_o is 0:
                       the candidate must then lie within the normal bound of R.
    ill-conditioned    only for outputs behind an ill-conditioned op (graphinfo.ILL_CONDITIONED_OPS:
                       Sqrt, Log, Div by a non-constant, Pow, Reciprocal, Softmax, normalizations,
                       ...): e_c <= within-bound's allowance + 2*k*s, k = max(1, gamma/(PERTURB_ULPS*u)).
                       Derived, not a constant: s / (PERTURB_ULPS*u*|O|) is the output's measured
                       condition number kappa, so 2*k*s ~ 2*gamma*kappa*|O|, the first-order rounding
                       bound of an ill-conditioned value (kappa ~ 1 adds about gamma*|O| again).
    reference-inexact  R not finite, O and C finite: |C - O| <= 2*gamma*max(|O_i|, its terms as s_i
                       measures them, capped by m_O) (+ 2*k*s_i behind an ill-conditioned op).
    follows-reference  C non-finite and of R's class, or +-inf where |R| exceeds the dtype's max.
    original-broke     O non-finite, R finite, C non-finite too (the original's own error is
                       unbounded there; a finite C is judged by within-bound against R).
    nonfinite-order    inf <-> NaN (both non-finite) on inf/NaN inputs, only on elements whose
                       dependency cone holds the non-finite inputs (SetEvidence.nonfinite_cone) and
                       where O is itself an artefact (O's class differs from R's, or no R), or
                       where O and R are both NaN (undefined: a reassociation may meet an inf
                       alone, NaN -> inf; never a defined inf -> NaN).
    saturation         inf <-> the largest finite value of the same sign, same conditions.
    overflow-territory on extreme-magnitude inputs (finite floats beyond sqrt(max)), elements
                       whose true value overflows (R non-finite or |R| > sqrt(max); without R,
                       the same of O): which intermediate overflows first depends on evaluation
                       order. A candidate +-inf where R is finite and moderate is NOT excused.
    float16-skipped-rounding  C finite within B_c (the candidate's own bound, SetEvidence.spec_same_bound)
                       of R where the original's is not finite and the reference gives both models the
                       same value: B_c also bounds a run computing a float16 op in float32.
    maxpool-lowest     -inf <-> -largest (to -largest/k behind AveragePools of k elements) where R is -inf
                       and a MaxPool makes that side's output (onnxruntime's MaxPool over only -inf).
    maxpool-lowest-run where R' (the reference evaluated with onnxruntime's -largest out of each float32
                       MaxPool window of only -inf) differs from R and O or C is not finite: the other
                       rules, judged against R' (its bounds, magnitudes) instead of R.
    undefined-pick     R NaN, both outputs a min/max's, in the cone: which element a NaN leaves is order.
    sign-flip (veto)   a +inf <-> -inf flip is never explained, whatever rule matched.
Without a float64 reference (UnsupportedOperatorError), O stands in for R: "fallback" requires
|C - O| <= 2*gamma*max(|O_i|, min(s_i / (PERTURB_ULPS*u), m_O)), plus 2*k*s_i behind an
ill-conditioned op (without R no magnitude of the summands is derived: the element's own sensitivity
measures it; m_O, the RMS of O, only caps that measure, which a jump would make huge); every
class change is unexplained unless nonfinite-order, saturation or overflow-territory applies.

Decisions: no element of a discrete (integer/bool) output is explained. A differing element of an
output made directly by a decision -- ArgMax/ArgMin, TopK's indices, a comparison or a Where on one,
a Cast to int/bool (also made floats again by a Cast), Floor/Ceil/Round -- counts as unstable only where the feed
(float64) lies within that element's own bound of the decision boundary (SetEvidence.decision,
decisions.near_boundary; a feed computed exactly has a bound of 0); otherwise it is a mismatch.
Other outputs, and any output when no decision evidence is available, use the controls below.

unstable positions (controls on the ORIGINAL: CONTROLS in rules.py, each named with its tests;
Judgement.unstable_by counts the unexplained elements each one marked)
    - the original run twice on the same inputs: any element that differs;
    - the original on float inputs moved by up to PERTURB_ULPS ulps (checkerboard runs, then random
      ones; at least 8 when a discrete op can see what they move, verify/discrete.py): an element
      whose class changes, an integer element that changes, or, behind a discontinuous op (Floor,
      Round, comparisons, Cast to int, ...: graphinfo.DISCRETE_OPS), a float element that moves
      by more than JUMP * (PERTURB_ULPS + n) * u * max(|O_i|, m_O) -- each only where the
      candidate lies within the range the moved originals span, and the jump/discrete ones only
      where rounding reaches a decision behind the output (SetEvidence.exact_decisions is False).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from onnxrefine.verify import graphinfo
from onnxrefine.verify.judge.compare import ValueClass, bit_identical, largest_first
from onnxrefine.verify.judge.decisions import DecisionEvidence
from onnxrefine.verify.judge.systematic import systematic_error
from onnxrefine.verify.judge.controls import CONTROLS, JUMP, Control, ControlFacts
from onnxrefine.verify.judge.perturbation import nonfinite_replaced, perturb
from onnxrefine.verify.judge.decisions import DiscreteFacts
from onnxrefine.verify.judge.rules import RULES, OutputFacts, Rule
from onnxrefine.verify.judge.verdicts import EXACT, MISMATCH, ROUNDING, UNSTABLE, VERDICTS, Verdict


N_MIN = 4
STAT_K = 4
SCATTER_POINTS = 400

FIN = int(ValueClass.FINITE)

__all__ = [
    "Verdict", "ValueClass", "CONTROLS", "Control", "JUMP", "EXACT", "ROUNDING", "UNSTABLE", "MISMATCH", "VERDICTS",
    "RULES", "Rule", "RoundingBound",
    "SetEvidence", "Judgement", "DecisionEvidence", "judge_output", "perturb", "worst",
    "perturbation_runs", "lowest_precision_u", "moved_u", "describe_bound", "nonfinite_replaced",
]


def worst(verdicts) -> str:
    return max(verdicts, key=VERDICTS.index, default=EXACT)


def effective_n(accumulation: int) -> int:
    """n of gamma_n for an accumulation length N (see the module docstring)."""
    accumulation = max(1, int(accumulation))
    return max(N_MIN, min(accumulation, STAT_K * math.isqrt(accumulation - 1) + STAT_K))


def accumulation_gamma(n: int, accumulation: int, u: float) -> float:
    """gamma of an accumulation of length `accumulation` whose effective n is `n` (module docstring)."""
    exponent = n * u + max(1, int(accumulation)) * u * u / (1.0 - u)
    return math.expm1(exponent) if exponent < 700.0 else math.inf  # no relative accuracy is left there


@dataclass
class RoundingBound:
    u: float
    depth: int
    width: int
    n: int
    gamma: float
    path_sum: int = 0
    # ill-conditioned op types behind the value; None: unknown (the sensitivity term applies)
    amplifiers: tuple | None = None
    # discontinuous op types behind the value; None: unknown (float jumps count as unstable)
    jumps: tuple | None = None

    @classmethod
    def for_output(cls, u: float, depth: int, width: int, *, path_sum: int | None = None,
                   amplifiers=None, jumps=None) -> "RoundingBound":
        """path_sum None: depth * width stands in for it (an upper bound of it)."""
        total = int(path_sum) if path_sum is not None else int(depth) * int(width)
        n = effective_n(total)
        return cls(u=u, depth=depth, width=width, n=n, gamma=accumulation_gamma(n, total, u), path_sum=total,
                   amplifiers=None if amplifiers is None else tuple(amplifiers),
                   jumps=None if jumps is None else tuple(jumps))

    @classmethod
    def for_value(cls, u: float, accumulation: graphinfo.Accumulation) -> "RoundingBound":
        return cls.for_output(u, accumulation.depth, accumulation.width, path_sum=accumulation.path_sum,
                              amplifiers=accumulation.amplifiers, jumps=accumulation.jumps)

    @property
    def ill_conditioned(self) -> bool:
        return self.amplifiers is None or bool(self.amplifiers)

    @property
    def discontinuous(self) -> bool:
        return self.jumps is None or bool(self.jumps)

    def to_dict(self) -> dict:
        result = dict(self.__dict__)
        for key in ("amplifiers", "jumps"):
            result[key] = None if result[key] is None else list(result[key])
        return result


@dataclass
class SetEvidence:
    """What the runs produced for one output on one input set."""

    original: np.ndarray
    rerun: np.ndarray
    candidate: np.ndarray
    perturbed: list = field(default_factory=list)
    # the largest unit roundoff of the float inputs the perturbation runs moved by PERTURB_ULPS ulps
    perturbation_u: float | None = None
    reference: np.ndarray | None = None
    extreme: bool = False  # the input set holds finite floats beyond sqrt(max) of their dtype
    nonfinite_inputs: bool = False  # the input set holds inf or NaN
    # bool per element: depends on the non-finite input elements (None: unknown, all assumed to)
    nonfinite_cone: np.ndarray | None = None
    decision: DecisionEvidence | None = None  # float64 values feeding a discrete output's op
    # per element, beside `reference` (bound.py): an upper bound on |original run - reference|
    # (NaN: not derived there), and the part of it a legitimate candidate may err by coherently
    error_bound: np.ndarray | None = None
    coherent_bound: np.ndarray | None = None
    # per element, the scale sigma of that error in the independent-rounding model (bound.py)
    probable_scale: np.ndarray | None = None
    # per element, where the original's bound is not finite in a float16 graph and the reference gives
    # both models the same value: the candidate's own derived bound (NaN elsewhere; rule float16-skipped-rounding)
    spec_same_bound: np.ndarray | None = None
    # per element, the magnitude of the terms (reference.magnitude_of), read where no bound is in force
    magnitude: np.ndarray | None = None
    # the reference evaluated as onnxruntime's float32 MaxPool computes, where that moves a value
    # (verify/run_reference.py, evaluate_float64's `as_onnxruntime`; rule maxpool-lowest-run)
    run_reference: np.ndarray | None = None
    # this set's verdict for the output in the latest judge_output over it (None: not judged yet)
    verdict: str | None = None

    def attach_reference(self, value) -> None:
        """`reference` (and its bounds, when the evaluator derived them) from a float64 evaluation."""
        from onnxrefine.verify.reference import bound_of, coherent_of, probable_scale_of

        self.reference = np.asarray(value, dtype=np.float64)
        self.error_bound, self.coherent_bound, self.probable_scale = (
            self._shaped(read(value)) for read in (bound_of, coherent_of, probable_scale_of))
        self.attach_magnitude(value)

    def attach_magnitude(self, value) -> None:
        """`magnitude` alone, from a float64 evaluation of the same values (reference.magnitude_of)."""
        from onnxrefine.verify.reference import magnitude_of

        self.magnitude = self._shaped(magnitude_of(value))

    def _shaped(self, array):
        return None if array is None or array.shape != self.reference.shape else np.asarray(array, np.float64)

    # every decision behind the output reads exactly computed values (decisions.exact_decisions)
    exact_decisions: bool = False
    # (original, candidate): evidence.made_by_maxpool (maxpool-lowest), made_by_picker (undefined-pick)
    maxpool_made: tuple = (0, 0)
    picker_made: tuple = (False, False)
    magnitude_read: bool = False  # the judge read `magnitude` at a differing element (no bound in force)


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
    excused: dict = field(default_factory=dict)  # rule name -> elements it explained
    # The differing elements that weigh most, unexplained ones first, then by |candidate -
    # original|: {"set", "index", "original", "candidate", "reference", "explained"} (_record_worst).
    worst_elements: list = field(default_factory=list)
    beyond_own_bound: int = 0  # elements where the ORIGINAL exceeds its derived bound (judged by the old rules)
    systematic: str = ""  # why the candidate's mean error is no rounding ("" when it is)
    # control name -> unexplained elements it marked unstable (one element may have several)
    unstable_by: dict = field(default_factory=dict)


def unstable_positions(evidence: SetEvidence, bound: RoundingBound, by_control: dict | None = None) -> np.ndarray:
    """Elements where the original itself is not a fixed function of its inputs: any of CONTROLS
    (`by_control`, when given, receives each control's own mask)."""
    facts = ControlFacts(evidence, bound)
    unstable = facts.none
    for control in CONTROLS:
        # not in place: a 0-d output's masks broadcast to the (1,) that bit_identical makes of it
        marked = control.apply(facts)
        if by_control is not None:
            by_control[control.name] = marked
        unstable = unstable | marked
    return unstable


def _explained_discrete(evidence: SetEvidence, bound: RoundingBound, differ: np.ndarray,
                        judgement: Judgement) -> np.ndarray:
    explained = np.zeros(differ.shape, dtype=bool)
    if evidence.decision is None or not evidence.decision.usable(differ.shape):
        return explained
    facts = DiscreteFacts(evidence, bound)
    for rule in RULES:
        if rule.discrete:
            matched = rule.apply(facts) & differ & ~explained
            if matched.any():
                judgement.excused[rule.name] = judgement.excused.get(rule.name, 0) + int(np.count_nonzero(matched))
            explained |= matched
    return explained


def _explained_float(evidence: SetEvidence, bound: RoundingBound, unstable: np.ndarray,
                     differ: np.ndarray, judgement: Judgement, judged: int | None = None) -> np.ndarray:
    facts = OutputFacts(evidence, bound, unstable, judged)
    explained = np.zeros(differ.shape, dtype=bool)
    vetoed = np.zeros(differ.shape, dtype=bool)
    has_reference = facts.r is not None
    unexplained = int(np.count_nonzero(differ))
    for rule in RULES:
        if rule.discrete or (rule.needs_reference is not None and rule.needs_reference != has_reference):
            continue
        if not rule.veto and not unexplained:
            continue  # every differing element is explained: this rule would explain none anew
        with np.errstate(invalid="ignore", over="ignore"):
            matched = rule.apply(facts) & differ
        if rule.veto:
            vetoed |= matched
            continue
        new = int(np.count_nonzero(matched & ~explained))
        if new:
            judgement.excused[rule.name] = judgement.excused.get(rule.name, 0) + new
            unexplained -= new
        explained |= matched
    explained &= ~vetoed
    unstable &= ~vetoed  # a veto also overrides the original's instability (a pole at 0, say)
    if has_reference:
        _record_errors(facts, judgement)
        judgement.beyond_own_bound += int(np.count_nonzero(facts.beyond_own_bound & differ))
        reads = np.where(facts.cr == FIN, ~facts.derived | (facts.cc != FIN), (facts.ca == FIN) & (facts.cc == FIN))
        evidence.magnitude_read |= bool(np.any(differ & reads))
    return explained


def _record_errors(f: OutputFacts, judgement: Judgement) -> None:
    judgement.used_reference = True
    finite_r = f.cr == FIN
    finite_ar = (f.ca == FIN) & finite_r
    cand_err = np.where((f.cc == FIN) & finite_r, f.err_c, 0.0)
    judgement.orig_err_max = max(judgement.orig_err_max or 0.0, float(f.err_o.max(initial=0.0)))
    judgement.cand_err_max = max(judgement.cand_err_max or 0.0, float(cand_err.max(initial=0.0)))
    _sample_scatter(judgement, np.abs(np.where(finite_r, f.r, 0.0)), f.err_o, cand_err,
                    finite_ar & (f.cc == FIN))


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
    """The verdict for one output (or any value) over all input sets (module docstring)."""
    judgement = Judgement(verdict=EXACT)
    per_set = []
    for set_index, evidence in enumerate(sets):
        original, candidate = evidence.original, evidence.candidate
        if original.shape != candidate.shape or original.dtype != candidate.dtype:
            judgement.notes.append(
                f"candidate output is {candidate.dtype}{list(candidate.shape)}, "
                f"the original's {original.dtype}{list(original.shape)}")
            judgement.verdict = evidence.verdict = MISMATCH
            judgement.differing += int(max(original.size, candidate.size))
            judgement.unexplained += int(max(original.size, candidate.size))
            return judgement
        differ = ~bit_identical(candidate, original)
        judgement.differing += int(np.count_nonzero(differ))
        if not differ.any():
            per_set.append(EXACT)
            evidence.verdict = EXACT
            continue
        by_control: dict = {}
        unstable = unstable_positions(evidence, bound, by_control)
        if graphinfo.is_float_dtype(original.dtype):
            explained = _explained_float(evidence, bound, unstable, differ, judgement,  # may veto unstable
                                         sum(int(e.original.size) for e in sets))
        else:
            explained = _explained_discrete(evidence, bound, differ, judgement)
        judgement.unstable_positions += int(np.count_nonzero(unstable))
        unexplained = differ & ~explained
        for name, marked in by_control.items():
            count = int(np.count_nonzero(unexplained & unstable & marked))
            if count:
                judgement.unstable_by[name] = judgement.unstable_by.get(name, 0) + count
        judgement.unexplained += int(np.count_nonzero(unexplained))
        _record_worst(judgement, set_index, evidence, differ, unexplained)
        if not unexplained.any() and graphinfo.is_float_dtype(original.dtype) and systematic_error(evidence, judgement):
            per_set.append(MISMATCH)
        elif not unexplained.any():
            per_set.append(ROUNDING)
        elif not (unexplained & ~unstable).any():
            per_set.append(UNSTABLE)
        else:
            per_set.append(MISMATCH)
        evidence.verdict = per_set[-1]
    judgement.overflow_excused = _excused(judgement, "overflow-territory")
    judgement.nonfinite_excused = _excused(judgement, "nonfinite-order", "saturation")
    judgement.verdict = worst(per_set)
    return judgement


WORST_ELEMENTS = 10


def _record_worst(judgement: Judgement, set_index: int, evidence: SetEvidence, differ: np.ndarray,
                  unexplained: np.ndarray) -> None:
    """Keep the WORST_ELEMENTS differing elements that weigh most over all sets: unexplained
    first, then the largest |candidate - original| (a NaN against a number counts as infinite)."""
    if evidence.original.dtype.kind not in "biuf" or not differ.any():
        return
    original, candidate, reference = evidence.original, evidence.candidate, evidence.reference
    flat = np.flatnonzero(differ.ravel())
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(candidate.ravel()[flat].astype(np.float64) - original.ravel()[flat].astype(np.float64))
    gap = np.where(np.isnan(gap), np.inf, gap)
    bad = unexplained.ravel()[flat]
    chosen = [np.flatnonzero(bad), np.flatnonzero(~bad)]  # unexplained first, each by the largest gap
    first = chosen[0][largest_first(gap[chosen[0]], WORST_ELEMENTS)]
    for k in np.concatenate([first, chosen[1][largest_first(gap[chosen[1]], WORST_ELEMENTS - first.size)]]):
        position = int(flat[k])
        judgement.worst_elements.append({
            "set": set_index, "index": [int(i) for i in np.unravel_index(position, original.shape)],
            "original": float(original.flat[position]), "candidate": float(candidate.flat[position]),
            "reference": None if reference is None or np.shape(reference) != original.shape
            else float(np.asarray(reference).flat[position]),
            "difference": float(gap[k]), "explained": not bool(bad[k])})
    judgement.worst_elements.sort(key=lambda e: (e["explained"], -e["difference"]))
    del judgement.worst_elements[WORST_ELEMENTS:]


_RULES_BY_NAME = {rule.name: rule for rule in RULES}


def _excused(judgement: Judgement, *names: str) -> int:
    """Elements the named rules of RULES explained (a KeyError, not a silent 0, if one is renamed)."""
    return sum(judgement.excused.get(_RULES_BY_NAME[name].name, 0) for name in names)


def perturbation_runs(trials: int, discrete: bool) -> int:
    return max(8, trials) if discrete else max(2, trials)


def moved_u(feeds) -> float | None:
    """The largest unit roundoff among the float arrays of `feeds` (what perturb moves), or None."""
    roundoffs = [graphinfo.unit_roundoff(np.asarray(v).dtype) for v in feeds.values()
                 if graphinfo.is_float_dtype(np.asarray(v).dtype)]
    return max(roundoffs) if roundoffs else None


def lowest_precision_u(float_dtypes) -> float:
    roundoffs = [graphinfo.unit_roundoff(dtype) for dtype in float_dtypes]
    return max(roundoffs) if roundoffs else graphinfo.unit_roundoff(np.float32)


def describe_bound(bound: RoundingBound) -> str:
    amplified = "" if not bound.amplifiers else f", behind {'/'.join(bound.amplifiers)}"
    return (f"n={bound.n} (accumulation {bound.path_sum}: depth {bound.depth}, widest {bound.width}), "
            f"u=2^{math.log2(bound.u):.0f}, gamma_n={bound.gamma:.3g}{amplified}")
