"""The systematic-error test of the verdict (verdict.judge_output): a bias no per-element bound sees.

A candidate can err below every element's own bound and still be wrong everywhere: a bias added
twice, a scale off by less than rounding's worst case. Rounding errors of independent operations
have independent, symmetric signs, so their sum over many elements grows like the square root of
their number; a bias grows like the number itself. systematic_error compares the candidate's
errors against float64, summed, with that limit (derived from Hoeffding's inequality) plus the
coherent bound (bound.py): the part a legitimate candidate may err alike everywhere.
"""

from __future__ import annotations

import math

import numpy as np

# The systematic test's tail probability per judged value (over all its statistics): each limit is
# sqrt(2 ln(statistics / alpha)) standard deviations of a sum of independent, symmetric rounding errors.
SYSTEMATIC_ALPHA = 1e-9


def _slice_sums(values: np.ndarray, axis: int | None) -> np.ndarray:
    """Sums over the whole array (axis None) or over every slice at a fixed index of `axis`."""
    if axis is None:
        return np.asarray([values.sum()])
    return values.sum(axis=tuple(i for i in range(values.ndim) if i != axis))


def _systematic_excess(errors: np.ndarray, reference: np.ndarray, coherent: np.ndarray, usable: np.ndarray):
    """(statistic, sum, limit, elements) of the statistic furthest beyond its limit, or None if none is.

    Statistics: the sum of the errors, plain and along the sign of the value, over the whole value
    and over each slice at one index of one axis (a channel, a row). Limit of each: the sum of the
    coherent bounds plus k * (sqrt(sum e^2) + sqrt(sum K^2)), k = sqrt(2 ln(count / alpha)): with
    the errors' sizes fixed and their signs independent and symmetric, Hoeffding's inequality puts a
    sum beyond k standard deviations at probability exp(-k^2 / 2) = alpha / count."""
    errors, coherent = np.where(usable, errors, 0.0), np.where(usable, coherent, 0.0)
    sign = np.where(usable, np.sign(reference), 0.0)
    axes = [None] + [axis for axis in range(errors.ndim) if errors.shape[axis] > 1]
    count = 2 * sum(1 if axis is None else errors.shape[axis] for axis in axes)
    k = math.sqrt(2.0 * math.log(count / SYSTEMATIC_ALPHA))
    worst = None
    for axis in axes:
        spread = np.sqrt(_slice_sums(errors * errors, axis))
        allowance = _slice_sums(coherent, axis)
        limit = allowance + k * (spread + np.sqrt(_slice_sums(coherent * coherent, axis)))
        elements = _slice_sums(usable.astype(np.float64), axis)
        for name, weights in (("mean error", 1.0), ("mean error along the sign of the value", sign)):
            total = _slice_sums(weights * errors, axis)
            excess = np.abs(total) - limit
            index = int(np.argmax(excess))
            if excess[index] > 0 and (worst is None or excess[index] / limit[index] > worst[4]):
                where = "" if axis is None else f" (axis {axis}, index {index})"
                worst = (name + where, float(total[index]), float(limit[index]), int(elements[index]),
                         float(excess[index] / limit[index]))
    return worst


def systematic_error(evidence, judgement) -> bool:
    """A bias the per-element bounds leave through (a bias added twice: below every element's bound,
    on every element): the candidate's errors against float64 summed over the elements (and over each
    slice of one axis), plain and along the sign of the value, must lie within the coherent allowance
    (the rounding of every constant a legitimate candidate may have folded, reference/bound.py) plus k
    standard deviations of independent symmetric rounding errors (_systematic_excess). Not judged
    where the original fails it too (its own errors are then no symmetric rounding)."""
    if evidence.reference is None or evidence.coherent_bound is None or evidence.error_bound is None:
        return False
    r = evidence.reference
    a, c = evidence.original.astype(np.float64), evidence.candidate.astype(np.float64)
    if r.ndim == 0:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        usable = np.isfinite(r) & np.isfinite(a) & np.isfinite(c) & np.isfinite(evidence.coherent_bound) \
            & ~np.isnan(evidence.error_bound)
        if np.count_nonzero(usable) < 2:
            return False
        found = _systematic_excess(c - r, r, evidence.coherent_bound, usable)
        if found is None or _systematic_excess(a - r, r, evidence.coherent_bound, usable) is not None:
            return False
    name, total, limit, count = found[:4]
    first = not judgement.systematic
    judgement.systematic = (f"systematic: {name} {total / max(count, 1):.3g} over {count} elements, beyond the "
                            f"rounding limit {limit / max(count, 1):.3g}")
    if first:
        judgement.notes.append(judgement.systematic)
    return True
