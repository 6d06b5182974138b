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
    pass the scale is sigma * max |f'| over the input's reach, `slope(ctx, x, low, high)`, which
    covers lambda * sigma for every lambda up to REACH_LAMBDA (the mean value theorem); in the coherent
    pass K * max |f'| over the candidate's whole width B + K."""
    def prop(ctx, b):
        x = ctx.r(0)
        if ctx.probable or ctx.coherent_pass:
            width = width_of(ctx.reach(0, b[0]))
            return width_of(b[0]) * slope(ctx, x, x - width, x + width)
        return worst(ctx, x, width_of(b[0]))
    return prop


def _distance_from_zero(low, high):
    return np.maximum(np.maximum(low, -high), 0.0)


def _exp_worst(ctx, x, b):
    return ctx.y() * np.expm1(b)  # exp(x + b) - exp(x) >= exp(x) - exp(x - b)


def _exp_slope(ctx, x, low, high):
    return np.exp(high)


def _log_worst(ctx, x, b):
    ratio = b / np.where(x > 0, x, 1.0)  # log(x) - log(x - b) >= log(x + b) - log(x)
    return np.where((x > 0) & (ratio < 1.0), -np.log1p(-np.where(ratio < 1.0, ratio, 0.0)), np.inf)


def _log_slope(ctx, x, low, high):
    return np.where(low > 0, 1.0 / np.where(low > 0, low, 1.0), np.inf)


def _sqrt_worst(ctx, x, b):
    y = ctx.y()
    return np.maximum(y - _sqrt(x - b), _sqrt(x + b) - y)


def _sqrt_slope(ctx, x, low, high):
    return np.where(low > 0, 0.5 / _sqrt(np.where(low > 0, low, 1.0)), np.inf)


def _tanh_slope(ctx, x, low, high):
    t = np.tanh(_distance_from_zero(low, high))
    return 1.0 - t * t


def _tanh_worst(ctx, x, b):
    return np.minimum(b * _tanh_slope(ctx, x, x - b, x + b), 1.0 + np.abs(ctx.y()))  # tanh lies in [-1, 1]


def _sigmoid_slope(ctx, x, low, high):
    e = np.exp(-_distance_from_zero(low, high))  # sigmoid'(d) = e^-d / (1 + e^-d)^2
    return e / np.square(1.0 + e)


def _sigmoid_worst(ctx, x, b):
    y = ctx.y()
    return np.minimum(b * _sigmoid_slope(ctx, x, x - b, x + b), np.maximum(y, 1.0 - y))  # in [0, 1]


def _softplus_worst(ctx, x, b):
    return _softplus(x + b) - ctx.y()  # convex, increasing: the upper end moves further


def _softplus_slope(ctx, x, low, high):
    return _sigmoid(high)


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
    distance = np.maximum(np.abs(ctx.r(0)) - width_of(ctx.reach(0, b[0])), 0.0)
    return np.minimum(width * (2.0 / math.sqrt(math.pi)) * np.exp(-distance * distance), 1.0 + np.abs(ctx.y()))


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
