"""Error-bound rules of the normalizations (bound.py): Softmax, LogSoftmax, BatchNormalization at
inference, LayerNormalization, InstanceNormalization, each a derived per-element bound of its own
(not a chain through the mean, variance, root and division) that knows the op's output range: a
probability lies in [0, 1], a normalised value in a ball of radius sqrt(n). docs/verification.md gives
the formulas.
"""

from __future__ import annotations

import math

import numpy as np

from onnxrefine.verify.reference.bound_ops import (LIBRARY_ULPS, NOT_DERIVED, REACH_LAMBDA, gamma,
                                                   materialize)


def _softmax_axes(ctx, x):
    axis = int(ctx.attr("axis", -1 if ctx.opset >= 13 else 1)) % max(x.ndim, 1)
    if ctx.opset >= 13:
        return x, (axis,), None
    return x.reshape((int(np.prod(x.shape[:axis])), -1)), (1,), x.shape


def _softmax(log: bool):
    """y_i = exp(x_i - m) / sum_j exp(x_j - m): |dy_i| <= y_i (exp(b_i + max_j b_j) - 1) carried; rounding
    of the subtraction, exp, sum (gamma(n)) and division relative to y_i (Softmax) or absolute (LogSoftmax)."""
    def rule(ctx):
        x, axes, _ = _softmax_axes(ctx, ctx.r(0))
        y = ctx.y().reshape(x.shape)
        finite = np.isfinite(x)
        top = np.max(np.where(finite, x, -np.inf), axis=axes, keepdims=True)
        n = x.shape[axes[0]]
        u = ctx.u()
        results = []
        for compacts, rounding in ctx.channels():
            b = None if compacts[0] is None else materialize(compacts[0], ctx.inputs[0]).reshape(x.shape)
            if ctx.terms_pass and b is not None:
                # the magnitude of terms is read only where y is finite, whose row holds no NaN or +inf:
                # a -inf logit there is the exact term exp(-inf) = 0, no magnitude (an inf/NaN input set)
                b = np.where(finite, b, 0.0)
            spread = 0.0 if b is None else b + np.max(b, axis=axes, keepdims=True)
            if rounding:
                library = LIBRARY_ULPS[ctx.node.op_type] * 2.0 * u
                shifted = np.abs(x - top) * u + library  # relative error of each exp term
                if ctx.terms_pass:
                    shifted = np.where(finite, shifted, 0.0)
                total = ctx.gamma(n) + np.max(shifted, axis=axes, keepdims=True) * (1.0 + ctx.gamma(n))
                spread = spread + shifted + total + (u if not log else 0.0)
            if log and not rounding:
                # the row's log-sum is computed once and subtracted from every element: its rounding
                # errs alike along the row in any legitimate run (the systematic test's allowance)
                carried = spread + _log_sum_rounding(x, top, axes, n, u)
            elif log:
                carried = spread + u * (np.abs(y) + spread)
            elif ctx.probable:
                # y (exp(s) - 1) is convex in the spread s: its slope at the inputs' reach times the scale
                r = materialize(ctx.reach(0, compacts[0]), ctx.inputs[0]).reshape(x.shape)
                carried_spread = 0.0 if b is None else b + np.max(b, axis=axes, keepdims=True)
                reach = r + np.max(r, axis=axes, keepdims=True) + (spread - carried_spread)
                grown = y * spread * np.exp(np.minimum(reach, 700.0))
                carried = np.minimum(grown, np.maximum(y, 1.0 - y)) + u * y
            else:
                # y * (exp(spread) - 1), in log space where the spread is large (a masked logit at
                # -FLT_MAX has y = 0 and a huge spread: its bound is exp(t + spread), t = log y);
                # both the run's and the reference's probabilities lie in [0, 1]
                log_y = (x - top) - np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True))
                spread = spread + np.zeros(x.shape)
                grown = np.where(spread < 1.0, y * np.expm1(np.minimum(spread, 1.0)),
                                 np.exp(np.minimum(log_y + spread, 1.0)) - y)
                carried = np.minimum(grown, np.maximum(y, 1.0 - y)) + (u * y if rounding else 0.0)
            carried = np.asarray(carried + np.zeros(x.shape)).reshape(ctx.outputs[0].shape)
            results.append(ctx.finish(0, carried, None, underflows=n + 2) if rounding else carried)
        return [tuple(results)]
    return rule


def _log_sum_rounding(x, top, axes, n, u):
    """How far a row's log(sum_j exp(x_j - top)), computed once per row and subtracted from each x_j - top,
    errs alike on the row in a legitimate run (one standard deviation of independent roundings, the
    systematic test's unit): the terms' own errors (|x_j - top| u from the subtraction, the library's
    exp) as a random walk relative to the sum, the n partial sums' roundings (sqrt(n) u), the log's."""
    with np.errstate(all="ignore"):
        terms = np.exp(x - top)
        total = np.sum(terms, axis=axes, keepdims=True)
        each = terms * (np.abs(x - top) * u + LIBRARY_ULPS["LogSoftmax"] * 2.0 * u)
        walk = np.sqrt(np.sum(each * each, axis=axes, keepdims=True)) / total + math.sqrt(n) * u
        log_sum = np.log(total)
        return np.where(np.isfinite(log_sum), walk + u * np.abs(log_sum), np.inf)


def _channel(param, x):
    return np.asarray(param, dtype=np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))


def _batch_norm(ctx):
    """Inference BatchNormalization, y = (x - mean) * s + bias with s = scale / sqrt(var + eps): every
    product and sum rounds, s and the shift carry a few roundings of their own (computed per channel)."""
    if len(ctx.outputs) > 1 and any(name for name in ctx.node.output[1:]):
        return None
    x = ctx.r(0)
    scale, bias, mean, var = (_channel(ctx.inputs[i], x) for i in (1, 2, 3, 4))
    s = scale / np.sqrt(var + float(ctx.attr("epsilon", 1e-5)))
    u = ctx.u()
    if any(c is not None for c in ctx.b[1:5]) or any(c is not None and not isinstance(c, float) for c in ctx.k[1:5]):
        return None  # parameters computed at run time: not derived
    # the same in the worst-case and the probable pass (kept with the x they were made of)
    kept = ctx.__dict__.get("batch_norm_terms")
    if kept is None or kept[0] is not ctx.inputs[0]:
        kept = ctx.batch_norm_terms = (ctx.inputs[0], np.abs(x * s) + np.abs(mean * s) + np.abs(bias))
    terms = kept[1]
    b_x = 0.0 if ctx.b[0] is None else materialize(ctx.b[0], ctx.inputs[0])
    bound = b_x * np.abs(s) * (1.0 + gamma(6, u)) + gamma(6, u) * terms
    if ctx.probable:  # its pass reads the bound alone
        return [(ctx.finish(0, bound, None, underflows=6, owned=True), None)]
    # s and the shift are computed once per channel: their rounding (and a fold's) errs alike on the channel
    k_x = 0.0 if ctx.k[0] is None else materialize(ctx.k[0], ctx.inputs[0])
    coherent = k_x * np.abs(s) + (gamma(6, u) + sum(c or 0.0 for c in ctx.k[1:5])) * terms
    return [(ctx.finish(0, bound, None, underflows=6, owned=True), coherent)]


def _layer_norm(ctx):
    """LayerNormalization: y = (x - mu) * r * g + beta, r = 1/sqrt(v + eps), over the trailing axes."""
    x = ctx.r(0)
    axis = int(ctx.attr("axis", -1)) % x.ndim
    shift = ctx.r(2) if len(ctx.inputs) > 2 and ctx.inputs[2] is not None else 0.0
    return _normalized(ctx, tuple(range(axis, x.ndim)), ctx.r(1), shift, 1e-5)


def _instance_norm(ctx):
    """InstanceNormalization: a LayerNormalization over the spatial axes of each (batch, channel),
    scaled and shifted per channel."""
    x = ctx.r(0)
    return _normalized(ctx, tuple(range(2, x.ndim)), _channel(ctx.inputs[1], x), _channel(ctx.inputs[2], x), 1e-5,
                       lambda compact, i: None if compact is None else
                       (compact if isinstance(compact, float) else _channel(compact, x)))


def _normalized(ctx, axes, scale, shift, default_eps, shaped=None):
    """y = (x - mu) * r * g + beta, r = 1/sqrt(v + eps), mu and v the mean and variance over `axes`.
    The variance is mean((x - mu)^2), as the spec's function computes it (onnxruntime's kernel errs far
    less than a float32 mean(x^2) - mu^2 would on rows of a large mean). The normalised value of any
    run lies in a ball, |x^_i| <= sqrt(n) (times its own roundings), so its error is at most |x^_i| +
    that radius however large the carried bounds."""
    x = ctx.r(0)
    n = int(np.prod([x.shape[a] for a in axes]))
    eps = float(ctx.attr("epsilon", default_eps))
    mu = np.mean(x, axis=axes, keepdims=True)
    d = x - mu
    v = np.mean(d * d, axis=axes, keepdims=True)
    r = 1.0 / np.sqrt(v + eps)
    u = ctx.u()
    library = 2.0 * (LIBRARY_ULPS["LayerNormalization"] + 1.0) * u
    # sum_j d^_j^2 <= n v^ / (1 - gamma(n + 1)) in any run, and v^ + eps rounds down by at most u
    shrink = (1.0 - gamma(n + 1, u)) * (1.0 - u)
    radius = math.sqrt(n / shrink) * (1.0 + library) * (1.0 + u) if shrink > 0 else math.inf
    scaled = np.abs(d) * r
    shaped = shaped or (lambda compact, i: compact)
    results = []
    for compacts, rounding in ctx.channels():
        b = 0.0 if compacts[0] is None else materialize(compacts[0], ctx.inputs[0])
        b_g = 0.0 if compacts[1] is None else materialize(shaped(compacts[1], 1), scale)
        b_s = 0.0 if len(compacts) < 3 or compacts[2] is None else materialize(shaped(compacts[2], 2), shift)
        g = ctx.gamma(n) if rounding else 0.0
        uu = u if rounding else 0.0
        b = b + np.zeros(x.shape)
        if ctx.probable:  # independent errors: the means of b and of |d| b_d in quadrature
            b_mu = np.sqrt(np.mean(b * b, axis=axes, keepdims=True) / n)
        else:
            b_mu = np.mean(b, axis=axes, keepdims=True)
        b_mu = b_mu + g * np.mean(np.abs(x), axis=axes, keepdims=True)
        b_d = (b + b_mu) * (1.0 + uu) + uu * np.abs(d)
        if ctx.probable:
            linear = np.sqrt(np.mean(np.square(d * b_d), axis=axes, keepdims=True) / n)
        else:
            linear = np.mean(np.abs(d) * b_d, axis=axes, keepdims=True)
        b_v = (2.0 * linear + np.mean(b_d * b_d, axis=axes, keepdims=True)) * (1.0 + g) \
            + ctx.gamma(n + 1) * v * (1.0 if rounding else 0.0)
        room = 1.0 - b_v / (v + eps)
        rel_r = np.where(room > 0, 1.0 / np.sqrt(np.where(room > 0, room, 1.0)) - 1.0, np.inf)
        grown_r = rel_r
        if ctx.probable:
            # 1/sqrt(1 - t) - 1 is convex in t: its slope at the variance's reach (REACH_LAMBDA times
            # its scale t, bound_ops.OpContext.reach) times t
            reach_room = 1.0 - REACH_LAMBDA * (1.0 - room)
            grown_r = np.where(reach_room > 0, 1.0 / np.sqrt(np.where(reach_room > 0, reach_room, 1.0)) - 1.0, np.inf)
            rel_r = np.where(reach_room > 0, 0.5 * (1.0 - room) / np.where(reach_room > 0, reach_room, 1.0) ** 1.5,
                             np.inf)
        if rounding:
            rel_r = (1.0 + rel_r) * (1.0 + library) - 1.0
            grown_r = (1.0 + grown_r) * (1.0 + library) - 1.0
        with np.errstate(invalid="ignore"):
            normalized = b_d * r * (1.0 + grown_r) + scaled * rel_r
        normalized = np.fmin(normalized, scaled + radius)
        carried = np.abs(scale) * normalized + b_g * (scaled + normalized) + b_s
        if rounding:
            carried = carried + gamma(3, u) * (np.abs(d * r * scale) + np.abs(shift) + carried)
        carried = np.where(np.isnan(carried), np.inf, carried)
        results.append(ctx.finish(0, carried, None, underflows=n + 6) if rounding else carried)
    return [tuple(results)] + [(NOT_DERIVED, NOT_DERIVED)] * (len(ctx.outputs) - 1)


NORMALIZATIONS = {
    "Softmax": _softmax(False), "LogSoftmax": _softmax(True),
    "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm,
    "InstanceNormalization": _instance_norm,
}
