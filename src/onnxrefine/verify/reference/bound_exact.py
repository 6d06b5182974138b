"""Where an elementwise op computes exactly in any evaluation order (bound_ops.py's `exactness`
masks): its rounding is then 0 at those elements."""

from __future__ import annotations

import ml_dtypes
import numpy as np


def exact_sum_of(ctx):
    """x + 0 and x - 0 (an exact zero operand), and exact integers whose sum stays below 2^p."""
    mask = np.zeros(ctx.y().shape, dtype=bool)
    for index in (0, 1):
        if ctx.exact_value(index):
            mask |= np.broadcast_to(ctx.r(index) == 0, mask.shape)
    if ctx.exact_value(0) and ctx.exact_value(1):
        a, b = ctx.r(0), ctx.r(1)
        mask |= np.broadcast_to((a == np.round(a)) & (b == np.round(b)) & (np.abs(a) + np.abs(b) <= ctx.precision_limit()),
                                mask.shape)
    return mask


def _power_of_two(value: np.ndarray) -> np.ndarray:
    mantissa, _ = np.frexp(value)
    return (np.abs(mantissa) == 0.5) | (value == 0)


def exact_product_of(ctx):
    """a product by an exact power of two (1, 0.5, 2^27, ...) unless it lands below the normal range, and
    of exact integers below 2^p; judged on the unrounded product (0 in float16 where it underflowed)."""
    y = ctx.y()
    mask = np.zeros(y.shape, dtype=bool)
    exact = [ctx.exact_value(index) for index in (0, 1)]
    if not any(exact):
        return mask
    a, b = ctx.r(0), ctx.r(1)
    with np.errstate(all="ignore"):
        product = np.broadcast_to(a * b, y.shape)
    normal = (np.abs(product) >= float(ml_dtypes.finfo(ctx.out_dtypes[0]).tiny)) | (product == 0)
    for index, factor in enumerate((a, b)):
        if exact[index]:
            mask |= np.broadcast_to(_power_of_two(factor), y.shape) & normal
    if all(exact):
        mask |= np.broadcast_to((a == np.round(a)) & (b == np.round(b)), y.shape) \
            & (np.abs(product) <= ctx.precision_limit())
    return mask


def exact_quotient_of(ctx):
    y = ctx.y()
    if not ctx.exact_value(1):
        return np.zeros(y.shape, dtype=bool)
    with np.errstate(all="ignore"):
        quotient = np.broadcast_to(ctx.r(0) / ctx.r(1), y.shape)
    normal = (np.abs(quotient) >= float(ml_dtypes.finfo(ctx.out_dtypes[0]).tiny)) | (quotient == 0)
    return np.broadcast_to(_power_of_two(ctx.r(1)) & (ctx.r(1) != 0), y.shape) & normal


def representable(ctx):
    """A Cast of an exact value its target type holds (one op on one value: exact in any order)."""
    if not ctx.exact_value(0):
        return np.zeros(ctx.y().shape, dtype=bool)
    y = ctx.y()
    with np.errstate(all="ignore"):
        return y.astype(ctx.out_dtypes[0]).astype(np.float64) == y
