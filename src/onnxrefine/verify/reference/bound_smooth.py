"""Error-bound rules of the differentiable elementwise ops (bound.py): Exp, Log, Sqrt, Tanh, Sigmoid,
Softplus, Erf, Pow.

Worst case: |f(x^) - f(x)| over the interval |x^ - x| <= b, from the interval's image (a monotone f's
ends) or from the largest slope over it (the mean value theorem), capped by f's range. Probable pass:
the scale sigma times the largest slope over the input's reach (bound_ops.OpContext.reach), so that
lambda * sigma_out covers f wherever lambda * sigma_in takes the input. docs/verification.md gives the
formulas.
"""

from __future__ import annotations

import math

import numpy as np

from onnxrefine.verify.reference.bound_ops import elementwise_rule, width_of


def _smooth(worst, slope):
    """A differentiable f: `worst(ctx, x, b)` bounds |f(x^) - f(x)| over |x^ - x| <= b; in the probable
    pass the scale is sigma * max |f'| over the input's reach r, `slope(ctx, x, r)` (the largest slope
    over [x - r, x + r]), which covers lambda * sigma for every lambda up to REACH_LAMBDA (the mean
    value theorem); in the coherent pass K * max |f'| over the candidate's whole width B + K."""
    def prop(ctx, b):
        x = ctx.r(0)
        if ctx.probable or ctx.coherent_pass:
            return width_of(b[0]) * slope(ctx, x, width_of(ctx.reach(0, b[0])))
        return worst(ctx, x, width_of(b[0]))
    return prop


def _distance_from_zero(x, width):
    """How far [x - width, x + width] lies from 0 (0 where it holds 0)."""
    distance = np.asarray(np.abs(x))  # an array also where x is 0-d: the steps below are in place
    distance -= width
    return np.maximum(distance, 0.0, out=distance)


def _capped(bound, width, largest_slope, cap):
    """bound, but at most cap() (the op's range allows no more); cap is computed only where it can
    bind: bound <= width * largest_slope, and every cap here is at least 1/2."""
    if np.max(width, initial=0.0) * largest_slope <= 0.5:
        return bound
    return np.minimum(bound, cap())


def _exp_worst(ctx, x, b):
    return ctx.y() * np.expm1(b)  # exp(x + b) - exp(x) >= exp(x) - exp(x - b)


def _exp_slope(ctx, x, width):
    return np.exp(x + width)


def _log_worst(ctx, x, b):
    ratio = b / np.where(x > 0, x, 1.0)  # log(x) - log(x - b) >= log(x + b) - log(x)
    return np.where((x > 0) & (ratio < 1.0), -np.log1p(-np.where(ratio < 1.0, ratio, 0.0)), np.inf)


def _log_slope(ctx, x, width):
    low = x - width
    return np.where(low > 0, 1.0 / np.where(low > 0, low, 1.0), np.inf)


def _sqrt_worst(ctx, x, b):
    y = ctx.y()
    return np.maximum(y - _sqrt(x - b), _sqrt(x + b) - y)


def _sqrt_slope(ctx, x, width):
    low = x - width
    return np.where(low > 0, 0.5 / _sqrt(np.where(low > 0, low, 1.0)), np.inf)


def _tanh_slope(ctx, x, width):
    widest = float(np.max(width, initial=0.0))
    if widest < _NARROW:  # |d/dt log tanh'(t)| = 2 |tanh(t)| <= 2: tanh' <= (1 - y^2) e^(2r) over the interval
        y = ctx.y()
        return (1.0 - y * y + 2.0 * ctx.u() + 2.0 ** -51) * math.exp(2.0 * widest)
    t = np.asarray(np.tanh(_distance_from_zero(x, width)))
    np.square(t, out=t)
    return np.subtract(1.0, t, out=t)


def _tanh_worst(ctx, x, b):
    bound = b * _tanh_slope(ctx, x, b)
    return _capped(bound, b, 1.0, lambda: 1.0 + np.abs(ctx.y()))  # tanh lies in [-1, 1]


# below this widest reach, a slope is taken from y and one scalar exp instead of an exp per element
_NARROW = 0.05


def _sigmoid_slope(ctx, x, width):
    widest = float(np.max(width, initial=0.0))
    if widest < _NARROW:
        # |d/dt log sigmoid'(t)| = |1 - 2 sigmoid(t)| <= 1: over the interval sigmoid' <= y (1 - y) e^r,
        # plus what y (1 - y) may lose where y is rounded (float64's 1 - y; a float16 reference's y)
        y = ctx.y()
        return (y * (1.0 - y) + ctx.u() + 2.0 ** -52) * math.exp(widest)
    e = _distance_from_zero(x, width)  # sigmoid'(d) = e^-d / (1 + e^-d)^2
    np.negative(e, out=e)
    np.exp(e, out=e)
    grown = np.asarray(e + 1.0)
    np.square(grown, out=grown)
    return np.divide(e, grown, out=e)


def _sigmoid_worst(ctx, x, b):
    bound = b * _sigmoid_slope(ctx, x, b)
    return _capped(bound, b, 0.25, lambda: np.maximum(ctx.y(), 1.0 - ctx.y()))  # sigmoid lies in [0, 1]


def _softplus_worst(ctx, x, b):
    return _softplus(x + b) - ctx.y()  # convex, increasing: the upper end moves further


def _softplus_slope(ctx, x, width):
    return _sigmoid(x + width)


def _sqrt(t):
    return np.sqrt(np.maximum(t, 0.0))


def _pow(ctx, b):
    if b[1] is not None and np.any(b[1]):
        return np.full(ctx.y().shape, np.nan)
    x, width, p = ctx.r(0), width_of(b[0]), ctx.r(1)
    y = ctx.y()
    if ctx.probable:  # sigma * max |p t^(p-1)| over the reach: t^(p-1) is monotone on each side of 0
        reach = width_of(ctx.reach(0, b[0]))
        low, high = x - reach, x + reach
        slope = np.maximum(np.abs(p * np.power(np.abs(low), p - 1.0)), np.abs(p * np.power(np.abs(high), p - 1.0)))
        slope = np.where((low < 0) & (high > 0) & (p < 1.0) & (p != 0.0), np.inf, slope)
        return width * np.where(np.isnan(slope), np.inf, slope)
    worst = np.zeros(y.shape)
    low, high = x - width, x + width
    for t in (low, high, np.where((low < 0) & (high > 0), 0.0, x)):
        with np.errstate(all="ignore"):
            worst = np.maximum(worst, np.abs(np.power(t, p) - y))
    return np.where(np.isnan(worst), np.inf, worst)


def _erf_slope(ctx, b):
    """|erf(x^) - erf(x)| <= b * max |erf'| over [x - r, x + r] = b * 2/sqrt(pi) * exp(-d^2), d the
    interval's distance from 0 (the mean value theorem; cheaper than erf at both ends; r the input's
    reach, b itself in the worst case), and never more than erf's range [-1, 1] allows, 1 + |y|."""
    width = width_of(b[0])
    distance = _distance_from_zero(ctx.r(0), width_of(ctx.reach(0, b[0])))
    np.square(distance, out=distance)
    np.negative(distance, out=distance)
    bound = width * (2.0 / math.sqrt(math.pi)) * np.exp(distance, out=distance)
    return _capped(bound, width, 2.0 / math.sqrt(math.pi), lambda: 1.0 + np.abs(ctx.y()))


def _sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def _softplus(t):
    return np.logaddexp(0.0, t)


SMOOTH = {
    "Pow": elementwise_rule(_pow), "Sqrt": elementwise_rule(_smooth(_sqrt_worst, _sqrt_slope)),
    "Exp": elementwise_rule(_smooth(_exp_worst, _exp_slope)), "Log": elementwise_rule(_smooth(_log_worst, _log_slope)),
    "Tanh": elementwise_rule(_smooth(_tanh_worst, _tanh_slope)),
    "Sigmoid": elementwise_rule(_smooth(_sigmoid_worst, _sigmoid_slope)),
    "Erf": elementwise_rule(_erf_slope),
    "Softplus": elementwise_rule(_smooth(_softplus_worst, _softplus_slope)),
}
