"""The rules that explain onnxruntime's known departures from the spec (rules.py lists them in RULES, with
the real bugs each must not excuse): each takes the OutputFacts of one output on one input set and
returns the mask of the differing elements it explains."""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxrefine.verify.judge.compare import ValueClass, bit_identical

FIN, NAN = int(ValueClass.FINITE), int(ValueClass.NAN)
AS_RUN = "maxpool-lowest-run"


def maxpool_lowest(f) -> np.ndarray:
    # onnxruntime's float MaxPool starts each window at lowest(), so a window holding only -inf
    # gives -FLT_MAX where the spec (and float64) says -inf; only the side whose output a MaxPool
    # makes (k > 0: averaged by AveragePools of k elements in all after it, between -FLT_MAX and
    # -FLT_MAX/k; per element where a Concat joins the MaxPool's output to constants, 0 on theirs),
    # and only where the true value is -inf
    made_o, made_c = (np.asarray(made, dtype=np.int64) for made in f.evidence.maxpool_made)

    def lowest(values, made):
        if not made.any() or (made.ndim and made.shape != values.shape):
            return np.zeros(values.shape, dtype=bool)
        return (made > 0) & (values >= -f.top) & (values <= -f.top / np.maximum(made, 1))

    pair = ((f.a == -np.inf) & lowest(f.c, made_c)) | ((f.c == -np.inf) & lowest(f.a, made_o))
    return pair & (True if f.r is None else f.r == -np.inf)


def float16_skipped_rounding(f) -> np.ndarray:
    # onnxruntime's CPU computes float16 ops that lack a float16 kernel in float32 and drops the Casts
    # between neighbours; an If boundary keeps the rounding, so an inlined branch skips a float16
    # rounding the spec defines. Where the reference gives both models the same value, the candidate's
    # own derived bound (which holds for a run skipping roundings: each op's float16 rounding bounds a
    # float32 one) judges the element; the original's bound is not finite there (a subgraph on the path)
    same = f.evidence.spec_same_bound
    if f.r is None or same is None or same.shape != f.a.shape:
        return np.zeros(f.a.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return (f.cc == FIN) & (f.cr == FIN) & (f.err_c <= same)


def undefined_pick(f) -> np.ndarray:
    # a minimum or maximum over elements among which a NaN is has no value (float64: NaN), and
    # onnxruntime's kernels keep or skip the NaN by the order they read the elements in (a SIMD min
    # gives its second operand where either is NaN, dropping what came before): a layout change (fused
    # Transposes) or the thread pool's partition of the reduction picks another element. Only where
    # both sides' outputs are a picker's (through data movement), on a set holding inf or NaN, on
    # elements that depend on those inputs
    made_o, made_c = f.evidence.picker_made
    if f.r is None or not f.evidence.nonfinite_inputs or not (made_o and made_c):
        return np.zeros(f.a.shape, dtype=bool)
    return (f.cr == NAN) & f.cone


def judged_as_run(f, facts_of, rules) -> np.ndarray:
    # after onnxruntime's -FLT_MAX out of a float32 MaxPool (maxpool_lowest) the run computes on a
    # finite value the spec's -inf does not have: a Conv after it sums -FLT_MAX times its weights,
    # which overflows in one order and not in another (a BatchNormalization folded into it). Where the
    # reference evaluated as onnxruntime computes (SetEvidence.run_reference, R') differs from the
    # spec's and a run is not finite, the element is judged against R' by AGAINST_THE_RUN alone, each
    # element by its own magnitude |R'_i| (no bound, no magnitude of terms: a cancellation of terms of
    # ~FLT_MAX has a bound of ~u*FLT_MAX, which would excuse any change of what follows it; no class
    # swap: an original -inf is no artefact to be saturated to -FLT_MAX by a fold off by 2x). Nowhere
    # else, and never past a veto (`facts_of`: rules.OutputFacts; `rules`: RULES)
    none = np.zeros(f.a.shape, dtype=bool)
    run_reference = f.evidence.run_reference
    if f.r is None or run_reference is None or np.shape(run_reference) != f.a.shape:
        return none
    moved = ~bit_identical(run_reference, f.r) & ((f.ca != FIN) | (f.cc != FIN))
    if not moved.any():
        return none
    twin = dataclasses.replace(f.evidence, run_reference=None, reference=run_reference, error_bound=None,
                               coherent_bound=None, probable_scale=None, magnitude=None, spec_same_bound=None)
    run = facts_of(twin, f.bound, f.unstable, f.judged)
    explained, vetoed = none.copy(), none.copy()
    for rule in rules:
        if rule.veto or rule.name in AGAINST_THE_RUN:
            with np.errstate(invalid="ignore", over="ignore"):
                matched = rule.apply(run)
            if rule.veto:
                vetoed |= matched
            else:
                explained |= matched
    return explained & moved & ~vetoed


# the rules that judge an element against R' (judged_as_run): a finite candidate within its own
# magnitude's rounding, or non-finite as R' is, or where the original broke and the candidate does too
AGAINST_THE_RUN = ("within-bound", "follows-reference", "original-broke")
