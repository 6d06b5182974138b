"""The verdict's exemptions as named lists, applied by verdict.judge_output: RULES (a difference
explained as rounding) and CONTROLS (a position where the original itself is unstable, so an
unexplained difference there is `unstable`, not `mismatch`; see the end of this module).

Each Rule says which differing elements it explains (`apply` returns a mask over one output on one
input set), why (its legitimate case, with the regression test that holds it), and the
counterexamples it must not excuse (tests of real bugs, each of which passed before the rule was
narrowed). verdict.py's module docstring gives the formulas; tests/test_verdict_rules.py checks that
every test named here exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from onnxrefine.verify.judge.compare import ValueClass, bit_identical, value_class
from onnxrefine.verify.judge.decisions import near_boundary, reference_decision
from onnxrefine.verify.graphinfo import is_float_dtype

ERROR_FACTOR = 2.0  # the original and the candidate each round: twice one side's error
PERTURB_ULPS = 4

FIN, PINF, NINF, NAN = (int(c) for c in ValueClass)


def rms(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0


def _sensitivity(evidence, unstable: np.ndarray) -> np.ndarray:
    base = evidence.original.astype(np.float64)
    sensitivity = np.zeros(base.shape)
    for moved in evidence.perturbed:
        if moved.shape != base.shape:
            continue
        moved64 = moved.astype(np.float64)
        usable = np.isfinite(moved64) & np.isfinite(base) & ~unstable
        sensitivity = np.maximum(sensitivity, np.where(usable, np.abs(moved64 - base), 0.0))
    return sensitivity


class OutputFacts:
    """Everything the rules read for one float output on one input set (float64 arrays)."""

    def __init__(self, evidence, bound, unstable: np.ndarray):
        self.evidence, self.bound = evidence, bound
        self.a = evidence.original.astype(np.float64)
        self.c = evidence.candidate.astype(np.float64)
        self.r = None if evidence.reference is None else evidence.reference.astype(np.float64)
        self.ca, self.cc = value_class(self.a), value_class(self.c)
        self.cr = None if self.r is None else value_class(self.r)
        # R's class once rounded to the output dtype: +-inf where the true value overflows it
        with np.errstate(over="ignore", invalid="ignore"):
            self.crd = None if self.r is None else value_class(
                self.r.astype(evidence.candidate.dtype).astype(np.float64))
        self.top = float(ml_dtypes.finfo(evidence.candidate.dtype).max)
        self.huge = math.sqrt(self.top)
        self.sens = _sensitivity(evidence, unstable)
        # s measures kappa * PERTURB_ULPS * u * |O| (kappa: the output's condition number); scaled
        # by k it becomes kappa * gamma * |O|, the first-order effect of the graph's rounding
        self.sens_factor = max(1.0, bound.gamma / (PERTURB_ULPS * bound.u))
        with np.errstate(invalid="ignore", over="ignore"):
            if self.r is not None:
                finite_ar = (self.ca == FIN) & (self.cr == FIN)
                self.err_o = np.where(finite_ar, np.abs(self.a - self.r), 0.0)
                self.err_c = np.abs(self.c - self.r)
                self.big_e = float(self.err_o.max(initial=0.0))
                self.scale = np.maximum(np.abs(np.where(self.cr == FIN, self.r, 0.0)), rms(self.r))
        self.scale_o = np.maximum(np.abs(np.where(self.ca == FIN, self.a, 0.0)), rms(self.a))
        self.cone = evidence.nonfinite_cone if evidence.nonfinite_cone is not None \
            and evidence.nonfinite_cone.shape == self.a.shape else np.ones(self.a.shape, dtype=bool)

    def base_allowance(self) -> np.ndarray:
        return ERROR_FACTOR * self.err_o + ERROR_FACTOR * self.big_e + self.bound.gamma * self.scale

    def artefact(self) -> np.ndarray:
        """Elements where the original's class is itself an artefact of float evaluation."""
        return np.ones(self.a.shape, dtype=bool) if self.r is None else self.ca != self.crd


# ---------------------------------------------------------------------------------- the rules

def _within_bound(f: OutputFacts) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (f.cc == FIN) & (f.cr == FIN) & (f.err_c <= f.base_allowance())


def _ill_conditioned(f: OutputFacts) -> np.ndarray:
    if not f.bound.ill_conditioned:
        return np.zeros(f.a.shape, dtype=bool)
    allowed = f.base_allowance() + ERROR_FACTOR * f.sens_factor * f.sens
    with np.errstate(invalid="ignore"):
        return (f.cc == FIN) & (f.cr == FIN) & (f.err_c <= allowed)


def _reference_inexact(f: OutputFacts) -> np.ndarray:
    finite_ac = (f.ca == FIN) & (f.cc == FIN)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite_ac, np.abs(f.c - f.a), np.inf)
    return finite_ac & (f.cr != FIN) & (diff <= ERROR_FACTOR * f.big_e + f.bound.gamma * f.scale_o)


def _follows_reference(f: OutputFacts) -> np.ndarray:
    return (f.cc != FIN) & ((f.cc == f.cr) | (f.cc == f.crd))


def _original_broke(f: OutputFacts) -> np.ndarray:
    # O is broken where it is not finite though R is finite and, rounded to the dtype, not O's
    # class: an O of +inf where R = 1e39 in float32 is right (the true value overflows), not broken
    return (f.ca != FIN) & (f.cr == FIN) & (f.ca != f.crd) & (f.cc != FIN)


def _nonfinite_order(f: OutputFacts) -> np.ndarray:
    if not f.evidence.nonfinite_inputs:
        return np.zeros(f.a.shape, dtype=bool)
    infinite = (PINF, NINF)
    swap = (np.isin(f.ca, infinite) & (f.cc == NAN)) | ((f.ca == NAN) & np.isin(f.cc, infinite))
    # NaN in the original AND in float64: the value is undefined there (inf - inf, 0 * inf), and
    # which infinities a reassociation meets first decides between NaN and +-inf (x@B@C -> x@(BC)
    # with an inf in x). The other way, a candidate NaN where the original is a defined inf, only
    # passes where the original's inf is itself an artefact.
    undefined = (f.ca == NAN) & (np.ones(f.a.shape, dtype=bool) if f.cr is None else f.cr == NAN)
    return swap & f.cone & (f.artefact() | undefined)


def _saturation(f: OutputFacts) -> np.ndarray:
    if not f.evidence.nonfinite_inputs:
        return np.zeros(f.a.shape, dtype=bool)
    a, c, top = f.a, f.c, f.top
    pairs = ((a == np.inf) & (c == top)) | ((a == -np.inf) & (c == -top)) | \
        ((c == np.inf) & (a == top)) | ((c == -np.inf) & (a == -top))
    return pairs & f.cone & f.artefact()


def _overflow_territory(f: OutputFacts) -> np.ndarray:
    if not f.evidence.extreme:
        return np.zeros(f.a.shape, dtype=bool)
    if f.r is None:
        return (f.ca != FIN) | (np.abs(np.where(f.ca == FIN, f.a, 0.0)) > f.huge)
    return (f.cr != FIN) | (np.abs(np.where(f.cr == FIN, f.r, 0.0)) > f.huge)


def _fallback(f: OutputFacts) -> np.ndarray:
    finite = (f.ca == FIN) & (f.cc == FIN)
    allowed = ERROR_FACTOR * f.bound.gamma * f.scale_o
    if f.bound.ill_conditioned:
        allowed = allowed + ERROR_FACTOR * f.sens_factor * (f.sens + float(f.sens.max(initial=0.0)))
    with np.errstate(invalid="ignore", over="ignore"):
        return finite & (np.abs(f.c - f.a) <= allowed)


def _maxpool_lowest(f: OutputFacts) -> np.ndarray:
    # onnxruntime's float MaxPool starts each window at lowest(), so a window holding only -inf
    # gives -FLT_MAX where the spec (and float64) says -inf; only the side whose output a MaxPool
    # makes, and only where the true value is -inf
    made_o, made_c = f.evidence.maxpool_made
    low = -f.top
    pair = ((f.a == -np.inf) & (f.c == low) & made_c) | ((f.c == -np.inf) & (f.a == low) & made_o)
    return pair & (True if f.r is None else f.r == -np.inf)


def _sign_flip(f: OutputFacts) -> np.ndarray:
    flip = ((f.ca == PINF) & (f.cc == NINF)) | ((f.ca == NINF) & (f.cc == PINF))
    if f.crd is not None:  # the candidate's infinity against the true value's overflow
        flip |= ((f.crd == PINF) & (f.cc == NINF)) | ((f.crd == NINF) & (f.cc == PINF))
    return flip


@dataclass(frozen=True)
class Rule:
    """One exemption: which differing elements it explains, why, and what it must not excuse."""

    name: str
    excuses: str
    why: str
    legitimate: tuple  # regression tests of the case it exists for
    counterexamples: tuple  # tests of real bugs it must not excuse
    apply: Callable[[OutputFacts], np.ndarray]
    needs_reference: bool | None  # True: only with R; False: only without R; None: either
    veto: bool = False  # the elements it matches are unexplained whatever else matched
    discrete: bool = False  # judges integer/bool outputs (reads DiscreteFacts)


_V = "tests/test_verify_verdict.py::"
_F = "tests/test_fuzz_regressions.py::"
_R = "tests/test_verdict_rules.py::"

RULES = (
    Rule("within-bound", "finite C within 2*e_o + 2*E + gamma*max(|R|, m) of R",
         "reassociation, folding and fusion change rounding only; the candidate may err as much "
         "as twice the original's own error plus the accumulation's rounding",
         (_V + "test_conv_bn_fold_in_float32_is_rounding",
          _V + "test_judge_rounding_within_bound_and_mismatch_beyond",
          _R + "test_correct_bn_fold_before_global_average_pool_is_rounding"),
         (_V + "test_scale_error_of_1e_minus_3_is_caught", _V + "test_fold_without_epsilon_is_mismatch",
          _R + "test_bn_fold_dropping_epsilon_before_global_average_pool_is_mismatch",
          _R + "test_clipped_softmax_where_the_original_overflows_is_mismatch"),
         _within_bound, True),
    Rule("ill-conditioned", "within-bound plus 2*k*s, behind Sqrt/Log/Div/Pow/Softmax/normalizations",
         "rounding differences before an ill-conditioned op grow beyond gamma*|R| (a root near 0); "
         "the original's measured few-ulp sensitivity, scaled to gamma, measures the growth",
         (_F + "test_rounding_amplified_by_sqrt_near_zero_is_rounding_not_mismatch",),
         (_F + "test_sensitivity_does_not_excuse_a_real_change",
          _R + "test_constant_off_by_half_in_a_well_conditioned_sub_is_mismatch"),
         _ill_conditioned, True),
    Rule("reference-inexact", "R not finite, |C - O| <= 2*E + gamma*max(|O|, m_O)",
         "where the float64 value is itself inf/NaN, the two float runs are compared with each other",
         (_F + "test_log_softmax_on_widely_spread_logits_is_not_a_mismatch",),
         (_R + "test_reference_inexact_does_not_excuse_a_far_candidate",),
         _reference_inexact, True),
    Rule("follows-reference", "a class change to R's class (or to +-inf where |R| > max)",
         "the candidate computes the true value where the original missed an overflow or NaN",
         (_V + "test_judge_nan_pattern_change_follows_the_reference",),
         (_V + "test_judge_nan_pattern_change_follows_the_reference",),
         _follows_reference, True),
    Rule("original-broke", "O non-finite, R finite, C non-finite",
         "the original's error is unbounded there (float32 Log(Softmax) underflowing to -inf); a "
         "candidate that breaks down too is no worse. A finite C must be within bound of R",
         (_F + "test_candidate_non_finite_where_the_original_already_broke_down_is_not_a_mismatch",),
         (_R + "test_clipped_softmax_where_the_original_overflows_is_mismatch",),
         _original_broke, True),
    Rule("nonfinite-order", "inf <-> NaN on inf/NaN inputs, in the cone, O an artefact or undefined",
         "whether an inf meets an inf of the other sign depends on evaluation order",
         (_R + "test_nonfinite_order_excuses_an_artefact_in_the_cone",
          _R + "test_matmul_chain_fold_on_inf_inputs_is_rounding"),
         (_R + "test_max_rewritten_as_relu_of_difference_is_mismatch",
          _R + "test_inf_in_an_unrelated_input_excuses_nothing",
          _R + "test_sign_flip_of_infinity_is_mismatch"),
         _nonfinite_order, None),
    Rule("saturation", "inf <-> +-largest finite of the same sign, in the cone, O an artefact",
         "onnxruntime saturates in places (Clip's default bounds, MaxPool's padding swallowing NaN)",
         (_F + "test_saturation_to_the_largest_float_on_inf_nan_inputs_is_not_a_mismatch",),
         (_R + "test_relu_rewritten_as_clip_saturating_inf_is_mismatch",),
         _saturation, None),
    Rule("overflow-territory", "on extreme inputs, elements whose true value overflows",
         "which intermediate overflows first depends on evaluation order",
         (_R + "test_overflow_territory_excuses_order_of_overflow",),
         (_R + "test_reassociation_that_overflows_a_moderate_value_is_mismatch",),
         _overflow_territory, None),
    Rule("fallback", "no R: |C - O| <= 2*gamma*max(|O|, m_O) (+ 2*k*(s + max s) if ill-conditioned)",
         "without float64, the original stands in for R; its error is within gamma of R",
         (_V + "test_conv_bn_fold_in_float32_is_rounding",),
         (_V + "test_scale_error_of_1e_minus_3_is_caught",),
         _fallback, False),
    Rule("follows-reference-decision",
         "a discrete element where C makes float64's decision and O does not, away from the boundary",
         "the original's float32 value was off by more than rounding (an underflow tie, a "
         "cancellation) and the candidate decides as exact arithmetic does",
         (_R + "test_cast_to_int_following_the_reference_is_rounding",),
         (_R + "test_cast_to_int_flipped_beyond_the_boundary_is_mismatch",),
         lambda f: f.follows(), True, discrete=True),
    Rule("maxpool-lowest", "-inf <-> -largest finite where a MaxPool makes the -largest side's output and R "
         "is -inf", "onnxruntime's float MaxPool gives lowest() (-FLT_MAX) for a window of only -inf, the spec "
         "-inf: a rewrite that moves a MaxPool before or after an op that maps -inf to -inf shows it",
         ("tests/test_false_alarm_rules.py::test_maxpool_window_of_only_minus_inf_is_onnxruntimes_lowest",),
         ("tests/test_false_alarm_rules.py::test_clip_turning_minus_inf_into_lowest_is_still_mismatch",
          "tests/test_false_alarm_rules.py::test_maxpool_lowest_where_the_true_value_is_finite_is_mismatch"),
         _maxpool_lowest, None),
    Rule("sign-flip", "nothing: a +inf <-> -inf flip is always unexplained",
         "no rounding turns +inf into -inf; a sign-of-zero change before a division does",
         (), (_R + "test_sign_flip_of_infinity_is_mismatch",), _sign_flip, None, veto=True),
)


class DiscreteFacts:
    """A discrete output on one input set, with the float64 values feeding its decision."""

    def __init__(self, evidence, bound):
        self.evidence, self.bound = evidence, bound

    def follows(self) -> np.ndarray:
        ev = self.evidence
        restated = reference_decision(ev.decision, ev.original)
        if restated is None:
            return np.zeros(ev.original.shape, dtype=bool)
        expected, defined = restated
        near = near_boundary(ev.decision, ev.original, ev.candidate, self.bound.gamma, ERROR_FACTOR)
        return defined & ~near & (ev.candidate == expected) & (ev.original != expected)


# ------------------------------------------------------------- the controls: unstable positions
#
# A difference the RULES leave unexplained is `unstable` (not `mismatch`) only at an unstable
# position of the ORIGINAL: an element where the original itself is not a fixed function of its
# inputs. CONTROLS names each way a position is found unstable (unstable_positions in verdict.py
# ORs them). `unstable` is never accepted (verified.py rolls back on it), but it is a lesser finding
# than `mismatch`, so each control also names the real bugs it must not turn into `unstable`.

JUMP = 64.0  # a float behind a discontinuous op moving beyond JUMP * (PERTURB_ULPS + n) * u * scale jumped


class ControlFacts:
    """One output on one input set, for the controls: the original, its re-run and perturbed runs."""

    def __init__(self, evidence, bound):
        self.evidence, self.bound = evidence, bound
        original = evidence.original
        self.none = np.zeros(original.shape, dtype=bool)
        # a discrete output with its float64 feed: the decision boundary decides, not the perturbed runs
        self.decided = evidence.decision is not None and evidence.decision.usable(original.shape)
        # every decision behind the output reads values computed exactly: no rounding precedes it,
        # so a few-ulp input move is no move within the original's own bound (Floor of an input)
        self.exact_decisions = bool(evidence.exact_decisions)
        self.is_float = is_float_dtype(original.dtype)
        self.moved = [moved for moved in evidence.perturbed if moved.shape == original.shape]
        self.reshaped = len(self.moved) < len(evidence.perturbed)
        if self.is_float:
            self.base = original.astype(np.float64)
            scale = np.maximum(np.abs(np.nan_to_num(self.base, nan=0.0, posinf=0.0, neginf=0.0)), rms(self.base))
            self.threshold = JUMP * (PERTURB_ULPS + bound.n) * bound.u * scale

    def perturbed_float(self):
        """The perturbed runs as float64, with the class of each element (float outputs only)."""
        for moved in self.moved:
            moved64 = moved.astype(np.float64)
            yield moved64, value_class(moved64)

    def within_span(self) -> np.ndarray:
        """Elements where the candidate lies within the range the original and its perturbed runs
        span (each end widened by (PERTURB_ULPS + n) * u of itself: the candidate's own rounding).
        A NaN among them spans every value (the original has no value there); an infinity extends
        the range to it. A position the original does not move is no span: the controls mark it
        only where it moves."""
        runs = [self.evidence.original.astype(np.float64)] + [m.astype(np.float64) for m in self.moved]
        stacked = np.stack(runs)
        undefined = np.isnan(stacked).any(axis=0)
        with np.errstate(invalid="ignore", over="ignore"):
            low = np.nanmin(np.where(np.isnan(stacked), np.inf, stacked), axis=0)
            high = np.nanmax(np.where(np.isnan(stacked), -np.inf, stacked), axis=0)
            widen = (PERTURB_ULPS + self.bound.n) * self.bound.u if self.is_float else 0.0
            low = low - widen * np.abs(np.where(np.isfinite(low), low, 0.0))
            high = high + widen * np.abs(np.where(np.isfinite(high), high, 0.0))
            candidate = self.evidence.candidate.astype(np.float64)
            return undefined | ((candidate >= low) & (candidate <= high))


def _rerun(f: ControlFacts) -> np.ndarray:
    return ~bit_identical(f.evidence.rerun, f.evidence.original)


def _decision_boundary(f: ControlFacts) -> np.ndarray:
    if not f.decided:
        return f.none
    ev = f.evidence
    return near_boundary(ev.decision, ev.original, ev.candidate, f.bound.gamma, ERROR_FACTOR)


def _perturbed_shape(f: ControlFacts) -> np.ndarray:
    return f.none | (not f.decided and not f.exact_decisions and f.reshaped)


def _perturbed_class(f: ControlFacts) -> np.ndarray:
    if f.decided or not f.is_float:
        return f.none
    base_class = value_class(f.base)
    unstable = f.none.copy()
    for _, moved_class in f.perturbed_float():
        unstable |= moved_class != base_class
    return unstable & f.within_span() if unstable.any() else unstable


def _perturbed_jump(f: ControlFacts) -> np.ndarray:
    # a continuous value moving far (a cancellation, x - 1e6 near 1e6) is sensitive, not unstable:
    # only a discontinuous op behind it can make it jump, and only where rounding reaches its input
    if f.decided or not f.is_float or not f.bound.discontinuous or f.exact_decisions:
        return f.none
    unstable = f.none.copy()
    for moved64, _ in f.perturbed_float():
        both_finite = np.isfinite(moved64) & np.isfinite(f.base)
        with np.errstate(invalid="ignore"):
            unstable |= both_finite & (np.abs(moved64 - f.base) > f.threshold)
    return unstable & f.within_span() if unstable.any() else unstable


def _perturbed_discrete(f: ControlFacts) -> np.ndarray:
    if f.decided or f.is_float or f.exact_decisions:
        return f.none
    unstable = f.none.copy()
    for moved in f.moved:
        unstable |= ~bit_identical(moved, f.evidence.original)
    return unstable & f.within_span() if unstable.any() else unstable


@dataclass(frozen=True)
class Control:
    """One way a position of the original is found unstable, why, and what it must not excuse."""

    name: str
    marks: str
    why: str
    legitimate: tuple  # tests of the case it exists for
    counterexamples: tuple  # tests of real bugs it must not turn into `unstable`
    apply: Callable[[ControlFacts], np.ndarray]


# The perturbation controls stand aside for a discrete output with decision evidence: the old
# perturbation control called a Cast flipped to -2 at a wavering boundary `unstable`.
_DECIDED_INSTEAD = (_R + "test_cast_to_int_flipped_beyond_the_boundary_is_mismatch",)
_D = "tests/test_decision_margins.py::"
# the perturbation controls mark only where rounding reaches a decision and the candidate lies
# within the perturbed originals' span (an exact Floor of an input, a candidate 1000 away)
_WITH_A_DISTANCE = (_D + "test_control_marks_only_a_candidate_within_the_span_of_the_perturbed_originals",
                    _D + "test_control_marks_nothing_where_no_rounding_reaches_the_decision",
                    _D + "test_floor_of_an_input_off_by_a_thousand_is_mismatch")

CONTROLS = (
    Control("rerun", "elements where a second run of the original on the same inputs differs",
            "a nondeterministic original (threaded reductions, unseeded kernels) has no single answer",
            (_V + "test_judge_nondeterministic_original_makes_unstable",),
            (_V + "test_judge_nondeterministic_original_makes_unstable",), _rerun),
    Control("decision-boundary", "a decision's elements (ArgMax/ArgMin, TopK indices, comparisons and Where "
            "conditions, Cast to int/bool, Floor/Ceil/Round) whose float64 feed is within its own bound of the "
            "boundary (decisions.near_boundary)",
            "rounding can flip a decision only where the exact value lies within its rounding error of the boundary",
            (_V + "test_argmax_over_one_ulp_gap_is_unstable_not_mismatch",
             _R + "test_comparison_flip_near_the_boundary_is_unstable_and_far_is_mismatch",
             _D + "test_argmax_over_a_rounded_near_tie_is_unstable",
             _D + "test_where_condition_flip_near_its_threshold_is_unstable_and_far_is_mismatch"),
            (_R + "test_argmax_flip_far_from_a_tie_is_mismatch",
             _R + "test_cast_to_int_flipped_beyond_the_boundary_is_mismatch",
             _R + "test_argmax_of_an_overflowing_exp_rewritten_to_argmax_is_mismatch",
             _D + "test_cast_of_floor_dropped_far_from_integers_is_mismatch",
             _D + "test_argmax_beside_one_large_constant_element_is_judged_per_row",
             _D + "test_select_last_index_dropped_on_exact_ties_is_mismatch",
             _D + "test_topk_tie_order_reversed_is_mismatch",
             _D + "test_round_of_an_exact_half_is_decided"), _decision_boundary),
    Control("perturbed-shape", "every element, when a perturbed run of the original has another shape",
            "a data-dependent shape (NonZero, Compress) that few-ulp input moves change has no stable elements",
            (_R + "test_control_perturbed_shape_marks_every_element",),
            _DECIDED_INSTEAD + (_R + "test_control_perturbed_shape_marks_every_element",), _perturbed_shape),
    Control("perturbed-class", "float elements whose class (finite, +-inf, NaN) changes under few-ulp input moves, "
            "the candidate within the moved originals' span (a NaN among them spans every value)",
            "an overflow or a 0/0 at the edge of the input domain flips under rounding",
            (_R + "test_control_perturbed_class_change_is_unstable_only_there",),
            _DECIDED_INSTEAD + (_R + "test_control_perturbed_class_change_is_unstable_only_there",),
            _perturbed_class),
    Control("perturbed-jump", "float elements behind a discontinuous op (Floor, Round, Cast to int, ...) that "
            "rounding reaches, that move beyond JUMP * (PERTURB_ULPS + n) * u * max(|O_i|, m_O) under few-ulp "
            "input moves, where the candidate lies within the span of the moved originals",
            "Floor(x) near an integer jumps by 1 under an ulp; rounding can do the same to the candidate",
            (_R + "test_control_perturbed_jump_only_behind_a_discontinuous_op",),
            _DECIDED_INSTEAD + _WITH_A_DISTANCE + (_R + "test_control_perturbed_jump_only_behind_a_discontinuous_op",),
            _perturbed_jump),
    Control("perturbed-discrete", "integer/bool elements that change under few-ulp input moves (no decision "
            "evidence; rounding reaches a decision behind them), the candidate within the moved originals' span", "a discrete value computed from floats flips where its float feed is at a boundary",
            (_R + "test_control_perturbed_discrete_change_is_unstable_only_there",),
            _DECIDED_INSTEAD + _WITH_A_DISTANCE + (_R + "test_control_perturbed_discrete_change_is_unstable_only_there",),
            _perturbed_discrete),
)


# -- runtime explanations ---------------------------------------------------------------------------
# A mismatch judged on one value becomes `unstable` when onnxruntime, not the rewrite, is shown to
# have moved it. They are whole-value checks made after the element rules (localisation's
# runtime_artefacts.py, spec_identity.py), so they carry no element mask, only what they excuse,
# why, and the real bugs they must not excuse.

@dataclass(frozen=True)
class RuntimeExplanation:
    name: str
    excuses: str
    why: str
    legitimate: tuple
    counterexamples: tuple
    where: str  # the module that applies it


_H = "tests/test_float16_runtime_precision.py::"
_L = "tests/test_localization_false_alarms.py::"
RUNTIME_EXPLANATIONS = (
    RuntimeExplanation(
        "same-node", "an intermediate computed by the same node from bit-identical inputs in both models",
        "onnxruntime's float16 Softmax gives NaN or 0 for a row holding both infinities depending on its "
        "buffer (fuzz case 282 of seed 500000)",
        (_L + "test_float16_softmax_artefact_of_onnxruntime_is_not_named_as_first_bad_value",),
        (_L + "test_a_real_change_next_to_the_float16_softmax_artefact_is_still_named",),
        "verify/judge/runtime_artefacts.py"),
    RuntimeExplanation(
        "float16-spec-identity", "a value of a float16 graph that the float64 reference, rounding every "
        "float16 value, computes bit for bit alike in both models on every set where it differs",
        "onnxruntime computes float16 Exp/Log in float32 and drops the rounding between them depending "
        "on the nodes in between, so fusing two Unsqueezes moved its answer (fuzz case 3969 of seed 20000)",
        (_H + "test_fused_unsqueezes_are_not_a_mismatch",
         _H + "test_a_value_inside_the_graph_is_excused_the_same_way"),
        (_H + "test_a_real_change_in_a_float16_graph_stays_a_mismatch",
         _H + "test_float32_arithmetic_anywhere_disables_the_excuse"),
        "verify/judge/spec_identity.py"),
)
