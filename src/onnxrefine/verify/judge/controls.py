"""The positions where the original itself is unstable (CONTROLS: an unexplained difference there is
`unstable`, not `mismatch`) and onnxruntime's known departures from the spec that explain a
difference (RUNTIME_EXPLANATIONS); the rounding exemptions are rules.py's. Each names the real
bugs it must not excuse; tests/test_verdict_rules.py checks that every test named here exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from onnxrefine.verify.judge.compare import ValueClass, bit_identical, value_class
from onnxrefine.verify.judge.decisions import near_boundary
from onnxrefine.verify.graphinfo import is_float_dtype
from onnxrefine.verify.judge.rules import ERROR_FACTOR, PERTURB_ULPS, rms

_V = "tests/test_verify_verdict.py::"
_R = "tests/test_verdict_rules.py::"


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
            "conditions, Cast to int/bool, also made floats again by a Cast, Floor/Ceil/Round) whose float64 "
            "feed is within its own bound of the boundary (decisions.near_boundary)",
            "rounding can flip a decision only where the exact value lies within its rounding error of the boundary",
            (_V + "test_argmax_over_one_ulp_gap_is_unstable_not_mismatch",
             _R + "test_comparison_flip_near_the_boundary_is_unstable_and_far_is_mismatch",
             _D + "test_argmax_over_a_rounded_near_tie_is_unstable",
             _D + "test_where_condition_flip_near_its_threshold_is_unstable_and_far_is_mismatch",
             _D + "test_a_cast_to_int_made_float_again_is_judged_by_its_feed"),
            (_R + "test_argmax_flip_far_from_a_tie_is_mismatch",
             _R + "test_cast_to_int_flipped_beyond_the_boundary_is_mismatch",
             _R + "test_argmax_of_an_overflowing_exp_rewritten_to_argmax_is_mismatch",
             _D + "test_cast_of_floor_dropped_far_from_integers_is_mismatch",
             _D + "test_argmax_beside_one_large_constant_element_is_judged_per_row",
             _D + "test_select_last_index_dropped_on_exact_ties_is_mismatch",
             _D + "test_topk_tie_order_reversed_is_mismatch",
             _D + "test_round_of_an_exact_half_is_decided",
             _D + "test_a_cast_to_int_made_float_again_flipped_far_is_mismatch",
             _D + "test_a_decision_made_float_again_holding_values_no_decision_gives_is_mismatch"), _decision_boundary),
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
        "float16-spec-identity", "a value of a float16 graph, of one shape and type in both runs, that the "
        "float64 reference, rounding every "
        "float16 value, computes bit for bit alike in both models on every set where it differs, where it "
        "models every rounding behind the value (no float32 arithmetic on its cone but a prefix both share)",
        "onnxruntime computes float16 Exp/Log in float32 and drops the rounding between them depending "
        "on the nodes in between, so fusing two Unsqueezes moved its answer (fuzz case 3969 of seed 20000); "
        "an inlined If branch, a fused LogSoftmax and a removed Split did the same (seed 1400000)",
        (_H + "test_fused_unsqueezes_are_not_a_mismatch",
         _H + "test_a_value_inside_the_graph_is_excused_the_same_way",
         _H + "test_float32_arithmetic_off_the_path_leaves_the_excuse",
         _H + "test_a_float32_prefix_both_models_share_leaves_the_excuse",
         _H + "test_campaign_cases_where_onnxruntime_skips_a_float16_rounding_are_not_mismatches"),
        (_H + "test_a_real_change_in_a_float16_graph_stays_a_mismatch",
         _H + "test_a_float32_reassociation_that_overflows_stays_a_mismatch",
         _H + "test_a_value_of_another_shape_is_no_precision_departure",
         _H + "test_a_value_with_no_float16_behind_it_is_no_float16_precision"),
        "verify/judge/spec_identity.py"),
)
