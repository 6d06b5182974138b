"""The verdict's exemptions as named lists, applied by verdict.judge_output: RULES (a difference
explained as rounding), here, and CONTROLS (a position where the original itself is unstable, so an
unexplained difference there is `unstable`, not `mismatch`) in controls.py.

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

from onnxrefine.verify.judge import departures
from onnxrefine.verify.judge.compare import ValueClass, bit_identical, value_class
from onnxrefine.verify.judge.decisions import ERROR_FACTOR
from onnxrefine.verify.graphinfo import is_float_dtype, underflow_floor
from onnxrefine.verify.reference import probable_lambda

PERTURB_ULPS = 4

FIN, PINF, NINF, NAN = (int(c) for c in ValueClass)


def rms(values: np.ndarray) -> float:
    """RMS of the finite elements; all finite: the flat array itself, not a gathered copy (the same
    elements in the same order, so the same value; deeplabv3's 5.7M: 31 -> 18 ms a call)."""
    flat = values.ravel()
    finite_mask = np.isfinite(flat)
    finite = flat if finite_mask.all() else flat[finite_mask]
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
    """Everything the rules read for one float output on one input set (float64 arrays). `judged`: the
    elements judged in the output over all input sets (the probable bound's union bound runs over them)."""

    def __init__(self, evidence, bound, unstable: np.ndarray, judged: int | None = None):
        self.evidence, self.bound, self.unstable, self.judged = evidence, bound, unstable, judged
        self._sensed = None
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
        self.floor = underflow_floor(evidence.candidate.dtype)  # a rounding's absolute error below normal
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
                # each element's own magnitude: gamma * |R_i| is a relative rounding of that element
                self.scale = np.abs(np.where(self.cr == FIN, self.r, 0.0))
                # whole-output terms, read only by the accumulation cap (which restricts, never excuses)
                self.big_e = float(self.err_o.max(initial=0.0))
                self.scale_rms = np.maximum(self.scale, rms(self.r))
        self.magnitude = self._magnitude(evidence)
        # K_i, the coherent bound (0 where not derived): what a legitimate candidate's folded constants err by
        coherent = evidence.coherent_bound
        self.coherent = 0.0 if coherent is None or coherent.shape != self.a.shape \
            else np.where(np.isnan(coherent), 0.0, coherent)
        self.bound_e = self.bound_c = None
        self.derived = self.beyond_own_bound = np.zeros(self.a.shape, dtype=bool)
        if self.r is not None and evidence.error_bound is not None \
                and evidence.error_bound.shape == self.a.shape:
            self._derive(evidence, judged if judged is not None else self.a.size)
        self.cone = evidence.nonfinite_cone if evidence.nonfinite_cone is not None \
            and evidence.nonfinite_cone.shape == self.a.shape else np.ones(self.a.shape, dtype=bool)

    def _derive(self, evidence, judged: int) -> None:
        """The bound in force per element (bound.py): the probable bound lambda * sigma where the
        original lies within it, else the worst-case bound B where the original lies within that;
        not derived where neither holds the original, or the bound is not finite."""
        worst = evidence.error_bound
        scale = getattr(evidence, "probable_scale", None)
        with np.errstate(invalid="ignore", over="ignore"):
            probable = np.full(worst.shape, np.nan) if scale is None or scale.shape != worst.shape \
                else probable_lambda(judged) * scale
            known = (self.ca == FIN) & (self.cr == FIN)
            in_force = np.where(self.err_o <= probable, np.fmin(probable, worst),
                                np.where(self.err_o <= worst, worst, np.nan))
            self.beyond_own_bound = known & ~np.isnan(worst) & np.isnan(in_force)
            self.derived = known & np.isfinite(in_force)
            # a legitimate candidate also holds folded constants, each rounded once: the coherent bound
            self.bound_e = in_force
            self.bound_c = in_force + self.coherent

    def _magnitude(self, evidence) -> np.ndarray:
        """Per element, the magnitude of the terms behind it, max(|R_i|, M_i) (|O_i| without R): M from the
        reference (reference.magnitude_of), the root-sum-square of a dot product's terms carried through
        the elementwise ops after it, so it stays large where the result cancels; past an op without a
        rule, probed (reference/magnitude_probe.py); a model-local function's body is tracked as the
        main graph is (a legitimate BatchNormalization fold inside a function keeps its cancelling
        elements' terms, tests/test_engine.py::test_fold_inside_a_model_local_function_uses_constant_nodes). Where it is
        not derived (a jump within the probe's step) the element's own |R_i| alone: no whole-output term."""
        own = np.abs(np.where(self.ca == FIN, self.a, 0.0)) if self.r is None else self.scale  # |R_i|
        terms = evidence.magnitude
        if self.r is None:
            return own
        if terms is None or terms.shape != own.shape:
            return own
        with np.errstate(invalid="ignore"):
            return np.maximum(own, np.where(np.isfinite(terms), terms, 0.0))

    def base_allowance(self) -> np.ndarray:
        """Where no bound is in force (not derived, +inf, or the original beyond it): the accumulation
        estimate per element, 2*e_o_i + gamma*M_i (M: _magnitude). No term is shared across elements:
        a large or ill-computed element lends the others nothing; a cancelling element (|R_i| far below
        its terms, bert-base's) is judged by its terms' magnitude. Each of the gamma/u roundings gamma
        counts may also err by the underflow floor absolutely, the candidate's and the reference's alike,
        which no relative term covers (a float16 subnormal result one step from float64)."""
        underflow = ERROR_FACTOR * self.bound.gamma / self.bound.u * self.floor if self.bound.u > 0 else 0.0
        return ERROR_FACTOR * self.err_o + self.bound.gamma * self.magnitude + underflow

    def sensed_terms(self) -> np.ndarray:
        """Per element, the magnitude of its terms as its own sensitivity measures it, where no float64
        value gives one: inputs moved by PERTURB_ULPS ulps of their own type move a cancelling element by
        about PERTURB_ULPS*u times its terms' size. A jump within the move reads as a huge magnitude: the
        RMS of O caps it, so the whole-output term only restricts."""
        if self._sensed is None:  # two rules read it: computed once
            with np.errstate(invalid="ignore", over="ignore"):
                # float32 inputs of an fp16 conversion move by float32 ulps; unknown: the graph's lowest
                # precision, the largest step it can be
                step = PERTURB_ULPS * (self.evidence.perturbation_u or self.bound.u)
                self._sensed = np.minimum(self.sens / step, rms(self.a))
        return self._sensed

    def artefact(self) -> np.ndarray:
        """Elements where the original's class is itself an artefact of float evaluation."""
        return np.ones(self.a.shape, dtype=bool) if self.r is None else self.ca != self.crd


# ---------------------------------------------------------------------------------- the rules

def _accumulation_cap(f: OutputFacts) -> np.ndarray:
    """e_c <= 2*e_o + 2*E + gamma*max(|R|, m) + u*M_i (+ 2*k*s behind an ill-conditioned op): a random-walk
    estimate of rounding at the scale of the whole output, plus the random walk of a legitimate fold's
    constants, each a term rounded once, u times the root-sum-square of the element's terms M_i (they
    err so however the result cancels: a float16 BatchNormalization fold whose result is far below its
    terms). It only restricts within-derived-bound,
    so its whole-output terms excuse nothing: a difference within the derived bound but beyond it is
    one no independent rounding reaches at that scale (a BatchNorm fold that dropped epsilon before
    a GlobalAveragePool, whose pooled error lies within every bound of the pool's own rounding)."""
    allowance = ERROR_FACTOR * f.err_o + ERROR_FACTOR * f.big_e + f.bound.gamma * f.scale_rms \
        + f.bound.u * f.magnitude
    if f.bound.ill_conditioned:
        allowance = allowance + ERROR_FACTOR * f.sens_factor * f.sens
    with np.errstate(invalid="ignore"):
        return f.err_c <= allowance


def _within_derived_bound(f: OutputFacts) -> np.ndarray:
    if f.bound_c is None:
        return f.derived
    with np.errstate(invalid="ignore"):
        return f.derived & (f.cc == FIN) & (f.err_c <= f.bound_c) & _accumulation_cap(f)


def _within_bound(f: OutputFacts) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return ~f.derived & (f.cc == FIN) & (f.cr == FIN) & (f.err_c <= f.base_allowance())


def _ill_conditioned(f: OutputFacts) -> np.ndarray:
    if not f.bound.ill_conditioned:
        return np.zeros(f.a.shape, dtype=bool)
    allowed = f.base_allowance() + ERROR_FACTOR * f.sens_factor * f.sens
    with np.errstate(invalid="ignore"):
        return ~f.derived & (f.cc == FIN) & (f.cr == FIN) & (f.err_c <= allowed)


def _reference_inexact(f: OutputFacts) -> np.ndarray:
    # no float64 value at this element: the two float runs against each other, each element by its own
    # magnitude or its terms' as its sensitivity measures them (a MaxPool skipping a NaN float64 does not
    # have picks an element whose terms the reference does not know), + the growth behind an amplifier
    finite_ac = (f.ca == FIN) & (f.cc == FIN)
    own = np.abs(np.where(f.ca == FIN, f.a, 0.0))
    allowed = ERROR_FACTOR * f.bound.gamma * np.maximum(np.maximum(own, f.magnitude), f.sensed_terms())
    if f.bound.ill_conditioned:
        allowed = allowed + ERROR_FACTOR * f.sens_factor * f.sens
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite_ac, np.abs(f.c - f.a), np.inf)
    return finite_ac & (f.cr != FIN) & (diff <= allowed)


def _follows_reference(f: OutputFacts) -> np.ndarray:
    return (f.cc != FIN) & ((f.cc == f.cr) | (f.cc == f.crd))


def _original_broke(f: OutputFacts) -> np.ndarray:
    # O is broken where it is not finite though R is finite and, rounded to the dtype, not O's
    # class: an O of +inf where R = 1e39 in float32 is right (the true value overflows), not broken.
    # A finite C there is judged by the element's worst-case bound B (plus its coherent bound): what
    # any run of the function may err by, the original's run having left it
    broke = (f.ca != FIN) & (f.cr == FIN) & (f.ca != f.crd)
    worst = f.evidence.error_bound
    if worst is None or worst.shape != f.a.shape:
        return broke & (f.cc != FIN)
    with np.errstate(invalid="ignore"):
        allowed = worst + f.coherent
        within = (f.cc == FIN) & np.isfinite(allowed) & (f.err_c <= allowed)
    return broke & ((f.cc != FIN) | within)


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


def _terms_overflow(f: OutputFacts) -> np.ndarray:
    # the element's terms (the original's magnitude of terms, M_i) reach the type's largest finite
    # value: some order of its sums overflows though the result does not, whatever the inputs' size
    if f.r is None or f.evidence.magnitude is None or f.evidence.magnitude.shape != f.a.shape:
        return np.zeros(f.a.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return (f.cc != FIN) & (f.cr == FIN) & (f.crd == FIN) & (f.magnitude >= f.top)


def _fallback(f: OutputFacts) -> np.ndarray:
    # O stands in for R. Without a reference no magnitude of the summands is derived, and |O_i| alone
    # flags a cancelling element of a legitimate fold: the element's own sensitivity measures its terms
    # (OutputFacts.sensed_terms; one large column lends the others nothing: their sensitivity is their own).
    finite = (f.ca == FIN) & (f.cc == FIN)
    allowed = ERROR_FACTOR * f.bound.gamma * np.maximum(f.magnitude, f.sensed_terms())
    if f.bound.ill_conditioned:
        allowed = allowed + ERROR_FACTOR * f.sens_factor * f.sens
    with np.errstate(invalid="ignore", over="ignore"):
        return finite & (np.abs(f.c - f.a) <= allowed)


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

_B = "tests/test_error_bound_verdict.py::"
_P = "tests/test_probable_bound.py::"
_H = "tests/test_float16_false_alarms.py::"
_M = "tests/test_magnitude_probe.py::"
_A = "tests/test_false_alarm_rules.py::"

RULES = (
    Rule("within-derived-bound", "finite C within T_i + K_i of R, where the original is within T_i (T: the "
         "element's bound in force, lambda*sigma_i where the original lies within it, else the worst-case B_i; K: "
         "its coherent bound; reference/bound.py), capped by the accumulation estimate (which only restricts)",
         "a run in the graph's precision lies within B_i of float64 element by element (running error "
         "analysis on the summands' magnitudes, so any order of a sum is covered), and within lambda*sigma_i "
         "but with probability 1e-6 per output when its roundings are independent and mean zero; a candidate "
         "computing the same function may also hold folded constants, each rounded once (K_i)",
         (_V + "test_conv_bn_fold_in_float32_is_rounding", _B + "test_matmul_chain_fold_is_rounding_by_the_bound",
          _P + "test_deep_matmul_chain_fold_is_rounding_by_the_probable_bound",
          _H + "test_a_float16_bn_fold_cancelling_below_its_terms_is_rounding"),
         (_B + "test_negated_columns_beside_a_large_column_are_mismatch",
          _B + "test_scaled_columns_beside_a_cancelling_column_are_mismatch",
          _V + "test_scale_error_of_1e_minus_3_is_caught",
          _R + "test_bn_fold_dropping_epsilon_before_global_average_pool_is_mismatch",
          _P + "test_one_percent_error_in_a_deep_matmul_chain_is_mismatch",
          _H + "test_a_float16_bn_fold_with_a_one_percent_wrong_mean_is_mismatch"),
         _within_derived_bound, True),
    Rule("within-bound", "where no bound is in force (not derived, +inf, or the original beyond it): finite "
         "C within 2*e_o_i + gamma*M_i + 2*(gamma/u)*floor of R, M_i = max(|R_i|, the magnitude of the element's "
         "terms) (OutputFacts.base_allowance); where that magnitude is not derived |R_i| alone; floor: the "
         "type's absolute rounding below the normal range",
         "reassociation, folding and fusion change rounding only; the candidate may err as much "
         "as twice the original's own error at that element plus the accumulation's rounding of its summands",
         (_V + "test_conv_bn_fold_in_float32_is_rounding",
          _V + "test_judge_rounding_within_bound_and_mismatch_beyond",
          _R + "test_correct_bn_fold_before_global_average_pool_is_rounding",
          _P + "test_cancelling_elements_without_a_bound_in_force_are_judged_by_their_summands",
          _H + "test_a_float16_subnormal_one_step_off_is_rounding_where_no_bound_is_in_force",
          _H + "test_a_bias_fused_into_a_float16_conv_behind_a_constant_if_is_rounding",
          _H + "test_a_float16_branch_passes_on_its_terms_magnitude",
          _M + "test_a_float16_bn_fold_before_a_maxpool_beside_infinities_is_rounding"),
         (_V + "test_scale_error_of_1e_minus_3_is_caught", _V + "test_fold_without_epsilon_is_mismatch",
          _R + "test_bn_fold_dropping_epsilon_before_global_average_pool_is_mismatch",
          _R + "test_clipped_softmax_where_the_original_overflows_is_mismatch",
          _P + "test_one_ill_computed_column_lends_no_allowance_where_no_bound_is_derived",
          _P + "test_a_cancelling_element_beyond_its_summands_magnitude_is_mismatch",
          _P + "test_without_the_summands_magnitude_a_cancelling_element_is_judged_by_its_own_value",
          _P + "test_one_large_column_lends_no_allowance_where_no_bound_is_derived",
          _A + "test_a_max_after_the_lowest_carries_the_terms_of_what_it_picks",
          _A + "test_a_max_beside_a_huge_finite_operand_carries_the_terms_of_what_it_picks",
          _A + "test_a_log_softmax_after_the_lowest_shifted_is_still_mismatch",
          _M + "test_a_log_softmax_beside_an_infinite_logit_is_rounding_and_a_shift_of_it_is_not",
          _M + "test_a_jump_within_the_step_derives_no_magnitude_and_excuses_nothing",
          _H + "test_the_underflow_floor_excuses_nothing_in_the_normal_range_or_many_steps_off",
          _H + "test_a_wrong_bias_fused_into_a_float16_conv_behind_a_constant_if_is_mismatch",
          _H + "test_a_float16_branch_with_another_constant_is_mismatch"),
         _within_bound, True),
    Rule("ill-conditioned", "where no bound is in force: within-bound's allowance plus 2*k*s_i, behind Sqrt/Log/Div/"
         "Pow/Softmax/normalizations",
         "rounding differences before an ill-conditioned op grow beyond gamma*|R| (a root near 0); "
         "the original's measured few-ulp sensitivity at that element, scaled to gamma, measures the growth",
         (_F + "test_rounding_amplified_by_sqrt_near_zero_is_rounding_not_mismatch",),
         (_F + "test_sensitivity_does_not_excuse_a_real_change",
          _R + "test_constant_off_by_half_in_a_well_conditioned_sub_is_mismatch",
          _P + "test_one_large_column_lends_no_allowance_behind_an_amplifier",
          _P + "test_one_sensitive_column_lends_no_allowance"),
         _ill_conditioned, True),
    Rule("reference-inexact", "R not finite at the element: |C - O| <= 2*gamma*max(|O_i|, M_i, min(s_i / "
         "(PERTURB_ULPS*u), m_O)) (+ 2*k*s_i if ill-conditioned)",
         "where the float64 value is itself inf/NaN, the two float runs are compared with each other, "
         "each element by its own magnitude or its terms': the reference's magnitude of the run's terms "
         "(behind onnxruntime's MaxPool lowest) or its own sensitivity (a MaxPool skipping the NaN of an "
         "overflow float64 does not have picks a cancelling element)",
         (_F + "test_log_softmax_on_widely_spread_logits_is_not_a_mismatch",
          _R + "test_reference_inexact_judges_a_cancelling_element_by_its_sensitivity",
          _A + "test_maxpool_lowest_carried_through_a_cancelling_conv_is_judged_by_its_terms"),
         (_R + "test_reference_inexact_does_not_excuse_a_far_candidate",
          _R + "test_reference_inexact_lends_a_jump_no_allowance",
          _A + "test_maxpool_lowest_through_a_conv_whose_weight_is_off_is_still_mismatch",
          _A + "test_a_relu_of_a_nan_after_the_lowest_lends_nothing",
          _A + "test_a_float16_maxpool_keeps_minus_inf_and_lends_nothing"),
         _reference_inexact, True),
    Rule("follows-reference", "a class change to R's class (or to +-inf where |R| > max)",
         "the candidate computes the true value where the original missed an overflow or NaN",
         (_V + "test_judge_nan_pattern_change_follows_the_reference",),
         (_V + "test_judge_nan_pattern_change_follows_the_reference",),
         _follows_reference, True),
    Rule("original-broke", "O non-finite, R finite: C non-finite, or finite within B_i + K_i of R",
         "the original's error is unbounded there (float32 Log(Softmax) underflowing to -inf); a "
         "candidate that breaks down too is no worse. A finite C must be within the element's worst-case bound",
         (_F + "test_candidate_non_finite_where_the_original_already_broke_down_is_not_a_mismatch",
          _R + "test_a_finite_candidate_where_the_original_broke_is_judged_by_the_worst_case_bound"),
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
    Rule("terms-overflow", "C non-finite where R is finite (also rounded to the output type) and the magnitude of "
         "the element's terms M_i reaches the type's largest finite value",
         "a sum whose terms reach the largest finite value overflows in some order of its additions though its "
         "result does not: a reassociation may overflow it, on any inputs",
         (_R + "test_a_sum_whose_terms_reach_the_largest_value_may_overflow_in_another_order",),
         (_R + "test_reassociation_that_overflows_a_moderate_value_is_mismatch",
          _R + "test_terms_near_the_largest_value_excuse_no_finite_difference",
          _R + "test_inf_in_an_unrelated_input_excuses_nothing"),
         _terms_overflow, True),
    Rule("fallback", "no R anywhere in the model (an operator the float64 evaluator lacks): |C - O| <= "
         "2*gamma*max(|O_i|, min(s_i / (PERTURB_ULPS*u), m_O)) (+ 2*k*s_i if ill-conditioned): the element's "
         "own sensitivity stands in for its terms' magnitude, the RMS of O (m_O) only caps it",
         "without float64, the original stands in for R; its error is within gamma of R; with "
         "no reference there is no per-element bound, and the terms' magnitude is measured by moving the inputs",
         (_V + "test_conv_bn_fold_in_float32_is_rounding",),
         (_V + "test_scale_error_of_1e_minus_3_is_caught", _P + "test_one_sensitive_column_lends_no_allowance",
          _P + "test_one_large_column_lends_no_allowance_where_no_bound_is_derived"),
         _fallback, False),
    Rule("follows-reference-decision",
         "a discrete element where C makes float64's decision and O does not, away from the boundary",
         "the original's float32 value was off by more than rounding (an underflow tie, a "
         "cancellation) and the candidate decides as exact arithmetic does",
         (_R + "test_cast_to_int_following_the_reference_is_rounding",),
         (_R + "test_cast_to_int_flipped_beyond_the_boundary_is_mismatch",),
         lambda f: f.follows(), True, discrete=True),
    Rule("maxpool-lowest", "-inf <-> -largest finite where a MaxPool makes the -largest side's element (moved "
         "by data movement or a LogSoftmax after it, or in its part of a Concat with constants; averaged by "
         "AveragePools of k elements in all: between -largest and -largest/k) and R is -inf", "onnxruntime's float MaxPool gives lowest() "
         "(-FLT_MAX) for a window of only -inf, the spec -inf: a rewrite that moves a MaxPool before or after an "
         "op that maps -inf to -inf, or fuses the Log(Softmax) after it, shows it",
         (_A + "test_maxpool_window_of_only_minus_inf_is_onnxruntimes_lowest",
          _A + "test_maxpool_lowest_through_a_log_softmax_fusion_is_onnxruntimes_lowest",
          _A + "test_maxpool_lowest_averaged_by_an_average_pool_is_onnxruntimes_lowest",
          _A + "test_maxpool_lowest_joined_to_constants_by_a_concat_is_onnxruntimes_lowest",
          _A + "test_the_campaign_case_of_a_concat_after_a_maxpool_is_judged_so_inside_the_graph"),
         (_A + "test_clip_turning_minus_inf_into_lowest_is_still_mismatch",
          _A + "test_clip_to_lowest_before_a_log_softmax_is_still_mismatch",
          _A + "test_clip_to_lowest_before_an_average_pool_is_still_mismatch",
          _A + "test_maxpool_lowest_beyond_the_average_pools_reach_is_mismatch",
          _A + "test_maxpool_lowest_where_the_true_value_is_finite_is_mismatch",
          _A + "test_a_constant_beside_the_maxpool_changed_to_lowest_is_still_mismatch"),
         departures.maxpool_lowest, None),
    Rule(departures.AS_RUN, "where the reference evaluated as onnxruntime's float32 MaxPool computes (-FLT_MAX for "
         "a window of only -inf) differs from the spec's and a run is not finite: within-bound by the element's "
         "own magnitude, follows-reference or original-broke, against that one (departures.AGAINST_THE_RUN)",
         "after onnxruntime's -FLT_MAX the run computes finite sums the spec's -inf does not have, and a rewrite "
         "after the MaxPool (a BatchNormalization folded into the Conv that reads it) changes how they overflow",
         (_A + "test_a_bn_fold_after_the_lowest_overflowing_in_the_original_is_rounding",
          _A + "test_a_wrong_constant_after_a_conv_that_overflows_to_nan_in_the_original_is_mismatch"),
         (_A + "test_a_wrong_bn_fold_after_the_lowest_is_still_mismatch",
          _A + "test_a_wrong_constant_after_a_conv_that_overflows_to_nan_in_the_original_is_mismatch",
          _A + "test_the_run_reference_judges_only_where_the_departure_moves_the_value",
          _A + "test_a_relu_after_a_conv_that_cancels_the_lowest_lends_nothing",
          _A + "test_maxpool_lowest_through_a_conv_whose_weight_is_off_is_still_mismatch",
          _A + "test_a_float16_maxpool_gets_no_run_reference"),
         lambda f: departures.judged_as_run(f, OutputFacts, RULES), True),
    Rule("float16-skipped-rounding", "finite C within the candidate's own derived bound B_c of R, where the "
         "original's bound is not finite (a subgraph on the path) and the reference gives both models the same "
         "value", "onnxruntime's CPU runs neighbouring float16 ops without a float16 kernel in float32 once an If "
         "boundary between them is gone, skipping a float16 rounding the spec defines; B_c bounds such a run",
         (_H + "test_skipped_rounding_excuses_a_candidate_within_its_own_bound",
          _H + "test_an_underflowing_float16_product_computed_in_float32_is_rounding"),
         (_H + "test_inlined_if_branch_with_a_changed_constant_is_mismatch",
          _H + "test_an_underflowing_float16_product_with_another_constant_is_mismatch",
          _H + "test_skipped_rounding_does_not_excuse_a_candidate_beyond_its_own_bound"),
         departures.float16_skipped_rounding, True),
    Rule("undefined-pick", "where R is NaN (a minimum or maximum over elements among which a NaN is), both sides "
         "a picker's output (ReduceMin/Max, MaxPool, Min/Max, through data movement), in the non-finite cone",
         "onnxruntime's min and max kernels keep or skip a NaN by the order they read the elements in, which "
         "a layout change or the thread pool's partition moves: the spec gives the element no value",
         (_A + "test_a_reduce_min_over_a_nan_after_fused_transposes_is_undefined",),
         (_A + "test_a_reduction_replaced_by_another_at_a_nan_is_still_mismatch",
          _A + "test_a_pick_where_the_minimum_is_defined_is_still_mismatch",
          _A + "test_a_nan_pick_without_non_finite_inputs_is_still_mismatch"),
         departures.undefined_pick, True),
    Rule("sign-flip", "nothing: a +inf <-> -inf flip is always unexplained",
         "no rounding turns +inf into -inf; a sign-of-zero change before a division does",
         (), (_R + "test_sign_flip_of_infinity_is_mismatch",), _sign_flip, None, veto=True),
)

