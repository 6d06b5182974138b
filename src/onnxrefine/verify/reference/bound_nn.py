"""Error-bound rules for data movement, dot products and reductions (bound.py; normalizations: bound_norm.py).

Data movement reuses the op's own float64 kernel on the bound arrays (a Transpose of the bounds is the
bound of the Transpose). Dot products (MatMul, Gemm, Conv, ConvTranspose) and sums use the running error bound
gamma(n) * sum |a_i * b_i| on a magnitude evaluation of the same op, with the inputs' bounds carried as
(|a| + b_a)(|b| + b_b) - |a||b|; docs/verification.md gives the formulas.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxrefine.verify.reference.bound_ops import NOT_DERIVED, all_exact, is_float, materialize
from onnxrefine.verify.reference.stacked_conv import stacked_conv

# op type -> the input positions that are data (moved); every other input must be exact
_MOVERS = {
    "Identity": (0,), "Reshape": (0,), "Transpose": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Flatten": (0,),
    "Slice": (0,), "Gather": (0,), "GatherElements": (0,), "GatherND": (0,), "Expand": (0,), "Tile": (0,),
    "DepthToSpace": (0,), "SpaceToDepth": (0,), "Pad": (0,), "Trilu": (0,), "Compress": (0,), "Split": (0,),
    "Dropout": (0,), "Concat": None,  # None: every input is data
}
# the same, but picking among data elements by value: a relative bound c*|x| is no c*|y| there
_PICKERS = {"MaxPool": (0,), "ReduceMax": (0,), "ReduceMin": (0,)}
# a picker's result errs by at most the largest bound it may pick: ReduceMin's bound is the ReduceMax of
# the bounds (its own kernel would pick the smallest)
_BOUND_KERNEL = {"ReduceMin": "ReduceMax"}
# outputs that are exact whatever the inputs' bounds (shapes and sizes are exact)
_SHAPES = frozenset({"Shape", "Size"})


def _movement(positions, relative_passes: bool):
    def rule(ctx):
        data = range(len(ctx.inputs)) if positions is None else positions
        data = [i for i in data if i < len(ctx.inputs) and ctx.inputs[i] is not None]
        others_exact = all(ctx.b[i] is None for i in range(len(ctx.inputs)) if i not in data)
        outputs = []
        for compacts, _ in ctx.channels():
            chosen = [compacts[i] for i in data]
            if not others_exact and compacts is ctx.b:
                outputs.append([NOT_DERIVED] * len(ctx.outputs))
            elif all(c is None for c in chosen):
                outputs.append([None] * len(ctx.outputs))
            elif relative_passes and all(isinstance(c, float) for c in chosen) and len(set(chosen)) == 1:
                outputs.append([chosen[0]] * len(ctx.outputs))
            else:
                substituted = list(ctx.inputs)
                for i in data:
                    substituted[i] = materialize(compacts[i], ctx.inputs[i])
                    if ctx.terms_pass and not relative_passes:  # a picker: the picked element's terms, and
                        # where the result is finite (where the magnitude is read) the element picked is finite
                        finite = np.isfinite(np.asarray(ctx.inputs[i], np.float64))
                        substituted[i] = np.where(finite, substituted[i], 0.0)
                if ctx.node.op_type == "Pad" and len(substituted) > 2 and substituted[2] is not None:
                    substituted[2] = np.zeros_like(np.asarray(substituted[2], dtype=np.float64))
                moved = ctx.kernel(substituted, _BOUND_KERNEL.get(ctx.node.op_type))
                if not relative_passes:
                    moved = [_picked(ctx, substituted, moved[0], data)] + list(moved[1:])
                outputs.append([np.asarray(moved[0], dtype=np.float64)] +
                               [NOT_DERIVED if ctx.node.op_type == "MaxPool" else
                                (None if m is None else np.asarray(m, dtype=np.float64)) for m in moved[1:]])
        if ctx.node.op_type == "Dropout" and len(ctx.outputs) > 1:
            for channel in outputs:
                channel[1] = None  # the mask of an inference Dropout is all true
        return list(zip(*outputs))
    return rule


def _picked(ctx, substituted, moved, data):
    """A picker's bound, NaN where its window holds a bound not derived (the kernel's max skips a NaN:
    a MaxPool then picks its padding's lowest, a negative bound) and never below 0."""
    moved = np.maximum(np.asarray(moved, dtype=np.float64), 0.0)
    if not any(np.isnan(substituted[i]).any() for i in data):
        return moved
    flagged = list(substituted)
    for i in data:
        flagged[i] = np.isnan(substituted[i]).astype(np.float64)
    reached = np.asarray(ctx.kernel(flagged, _BOUND_KERNEL.get(ctx.node.op_type))[0], dtype=np.float64)
    return np.where(reached > 0, np.nan, moved)


def _shape(ctx):
    return [(None, None)] * len(ctx.outputs)


def _exact_of_exact(ctx):
    """Ops computing a fixed function of exact inputs exactly (a filled shape, a range, positions)."""
    if all(bound is None for bound in ctx.b):
        return [(None, None)] * len(ctx.outputs)
    return None


# ------------------------------------------------------------------------------------ dot products

def _abs(value):
    return np.abs(np.asarray(value, dtype=np.float64))


def _bilinear(product, a, b_a, w, b_w, g: float, magnitude=None):
    """Bound of product(a^, w^) - product(a, w) plus gamma(n) of the magnitudes, for the compact
    bounds b_a, b_w (None, c*|.| or an array); one product when either side is exact or relative."""
    abs_a, abs_w = _abs(a), _abs(w)
    if b_a is None and b_w is None:
        return g * (magnitude if magnitude is not None else product(abs_a, abs_w))
    if b_a is None and magnitude is not None and (isinstance(b_w, float) or b_w is None):
        return ((1.0 + g) * (1.0 + (b_w or 0.0)) - 1.0) * magnitude
    if isinstance(b_w, float) or b_w is None:
        scale = (1.0 + g) * (1.0 + (b_w or 0.0))
        left = (scale - 1.0) * abs_a + (0.0 if b_a is None else scale * materialize(b_a, a))
        return product(left, abs_w)
    if isinstance(b_a, float) or b_a is None:
        scale = (1.0 + g) * (1.0 + (b_a or 0.0))
        right = (scale - 1.0) * abs_w + scale * materialize(b_w, w)
        return product(abs_a, right)
    if magnitude is None:
        magnitude = product(abs_a, abs_w)
    if product is np.matmul and abs_a.ndim >= 2 and abs_w.ndim >= 2:
        # both sides carry bounds (attention's products): each cross term by its largest bound times
        # the other side's sum, sum_k |a_ik| b_kj <= (sum_k |a_ik|) max_k b_kj; terms of the
        # element's own row and column, one product (the magnitude) instead of three
        b_a, b_w = materialize(b_a, a), materialize(b_w, w)
        cross = np.max(b_a, axis=-1, keepdims=True) * np.sum(abs_w + b_w, axis=-2, keepdims=True) \
            + np.sum(abs_a, axis=-1, keepdims=True) * np.max(b_w, axis=-2, keepdims=True)
        return (1.0 + g) * cross + g * magnitude
    return (1.0 + g) * product(abs_a + materialize(b_a, a), abs_w + materialize(b_w, w)) - magnitude


def _in_quadrature(product, a, s_a, w, s_w, g: float, magnitude=None, stacked=None, n: int = 0, narrowed=None):
    """The probable pass's scale of product(a^, w^) - product(a, w): independent input errors of
    scales s_a, s_w add in quadrature, sqrt(product(s_a^2, w^2) + product(a^2, s_w^2) + product(s_a^2,
    s_w^2)), plus the sum's own rounding g * product(|a|, |w|) (added, not in quadrature: larger).
    `stacked`: the product of a stack of left operands, for the common case (exact right side) in
    one float32 call made an upper bound again (_stacked_nonnegative), whose w^2 in float32
    `narrowed(squared)` gives (_narrow_right)."""
    abs_w = None
    if magnitude is None:
        abs_w = _abs(w)
        magnitude = product(_abs(a), abs_w)
    sq_a = None if s_a is None else np.square(materialize(s_a, a))
    sq_w = None if s_w is None else np.square(materialize(s_w, w))
    if sq_a is not None and sq_w is None and stacked is not None:
        right = narrowed(True) if narrowed is not None else np.square(_abs(w))
        quick = _stacked_nonnegative(stacked, [sq_a], right, n)
        if quick is not None and quick[0] is not None:
            return np.sqrt(quick[0]) + g * magnitude
    if abs_w is None:
        abs_w = _abs(w)
    variance = 0.0
    if sq_a is not None:
        variance = variance + product(sq_a, abs_w * abs_w)
    if sq_w is not None:
        variance = variance + product(np.square(_abs(a)), sq_w)
    if sq_a is not None and sq_w is not None:
        variance = variance + product(sq_a, sq_w)
    return np.sqrt(variance) + g * magnitude


def _narrow_right(ctx, w):
    """narrowed(squared): |w|, or w^2, rounded to float32 for the stacked products, made once per
    node (its worst-case and probable passes share them, kept on the node's context with `w`, so
    that another right operand a later pass substitutes gets its own); None where float32 cannot
    hold them. Where float32 holds w exactly (a float32 model's weight, held in float64), w^2 is
    squared in float32: w^2 is then exact in float64 and a float32 product is rounded once, as
    converting it is, so both give the same bits, without a float64 temporary the size of the
    weight."""
    kept = ctx.__dict__.setdefault("narrowed_rights", {})
    if id(w) in kept:
        return kept[id(w)][1]
    # a partial, not a closure over itself: a cycle would keep the weight's forms alive until a
    # garbage collection, which the command freezes (cli/main.py)
    narrowed = functools.partial(_float32_form, w, {})
    kept[id(w)] = (w, narrowed)
    return narrowed


def _float32_form(w, cache: dict, squared: bool):
    """_narrow_right's narrowed(squared); `cache`: squared -> the form, "exact" -> whether float32
    holds w."""
    if squared not in cache:
        with np.errstate(all="ignore"):
            if squared and _float32_form(w, cache, False) is not None and cache["exact"]:
                right = np.square(cache[False])
            elif squared:  # w^2 rounded once (a float32 square of a rounded w would round twice)
                right = np.square(np.asarray(w, dtype=np.float64)).astype(np.float32)
            else:  # |w| rounds as w does
                right = np.asarray(w).astype(np.float32)
                cache["exact"] = bool(np.array_equal(right, w))
                np.abs(right, out=right)
        cache[squared] = right if np.all(np.isfinite(right)) else None
    return cache[squared]


def _integral(*values) -> bool:
    return all(value is None or np.array_equal(np.asarray(value), np.round(np.asarray(value))) for value in values)


def _exact_sum(ctx, magnitude, *values) -> np.ndarray | None:
    """Where a dot product or sum of exact integers stays below 2^precision, it is exact in any order."""
    dtype = ctx.out_dtypes[0]
    if not all_exact(ctx.b) or not _integral(*values) or not is_float(dtype):
        return None
    limit = 2.0 ** (np.finfo(dtype).nmant + 1) if dtype.kind == "f" else 2.0 ** 8
    return magnitude <= limit


_U32 = 2.0 ** -24
# The largest entry a left operand is handed to float32 with: one above it is scaled down by a power
# of two first (exact), so that a sum of n products of it with `right` stays finite in float32.
_F32_LEFT_MAX = 2.0 ** 100


def _narrowed_left(left) -> tuple[np.ndarray, float] | None:
    """(left * 2^-k rounded to float32, 2^k), k the least with max(left) * 2^-k <= _F32_LEFT_MAX (0
    where it already is); None where `left` holds a NaN or an infinity. Deep networks carry
    worst-case bounds far beyond float32's range (resnet50's last blocks: 1e38 to 1e62, where each
    such product ran in float64 instead); a power of two moves every entry's exponent alike."""
    with np.errstate(all="ignore"):
        top = float(np.max(left, initial=0.0))
        if not math.isfinite(top):
            return None
        factor = 1.0 if top <= _F32_LEFT_MAX else 2.0 ** math.ceil(math.log2(top / _F32_LEFT_MAX))
        narrowed = (left / factor if factor != 1.0 else left).astype(np.float32)
    return (narrowed, factor) if np.all(np.isfinite(narrowed)) else None


def _stacked_nonnegative(product, lefts, right, n: int):
    """product(left, right) for each of `lefts` (all >= 0, as is `right`), in one float32 call, made an
    upper bound again. Each float32 operand x32 of an operand x >= 0 has x <= (x32 + e) / (1 - u), e
    the half smallest subnormal (below the normal range the rounding is absolute), so each exact
    product is at most (l32 w32 + e (l32 + w32) + e^2) / (1 - u)^2; a sum of n nonnegative float32
    products rounds each term at most n times, and below the normal range by at most tiny a step.
    Hence the exact product is at most (computed + n tiny + n e (max l32 + max w32 + e)) over
    (1 - u)^2 (1 - n u). Where every float32 entry of `right` is normal (no zero, no subnormal),
    its rounding is relative and its term e * l32 drops out. A left operand beyond _F32_LEFT_MAX is
    handed over as left * 2^-k and its bound multiplied by 2^k, both exact: the bound of
    product(left * 2^-k, right) so scaled, its absolute terms with it, is one of product(left,
    right). An entry is None where float32 cannot hold that left operand (a NaN or an infinity in
    it) or its product (its caller computes it in float64); the whole result None where it cannot
    hold `right` or n is that large (a float32 `right`, or None, is _narrow_right's, checked
    there)."""
    if n * _U32 >= 0.5 or right is None:
        return None
    with np.errstate(all="ignore"):
        right32 = right if right.dtype == np.float32 else right.astype(np.float32)
        if right32 is not right and not np.all(np.isfinite(right32)):
            return None
        tiny = float(np.finfo(np.float32).tiny)
        right_normal = not np.any(right32 < tiny)
        narrowed = [_narrowed_left(left) for left in lefts]
        held = [index for index, entry in enumerate(narrowed) if entry is not None]
        if not held:
            return None
        results = product(np.stack([narrowed[index][0] for index in held]), right32)
    inflate = 1.0 / ((1.0 - _U32) ** 2 * (1.0 - n * _U32))
    half_subnormal = float(np.finfo(np.float32).smallest_subnormal) / 2.0
    right_error = 0.0 if right_normal else half_subnormal  # the absolute rounding of right's entries
    widest_right = float(np.max(right32, initial=0.0))
    out = [None] * len(lefts)
    for index, result in zip(held, results):
        if np.all(np.isfinite(result)):
            left32, factor = narrowed[index]
            widest_left = float(np.max(left32, initial=0.0))
            lost = n * (tiny + right_error * widest_left + half_subnormal * (widest_right + right_error))
            widened = np.asarray(result, dtype=np.float64)
            widened += lost
            widened *= inflate
            if factor != 1.0:
                widened *= factor
                if not np.all(np.isfinite(widened)):
                    continue  # beyond float64 too: the caller's float64 product says so
            out[index] = widened
    return out


def _left_operand(a, abs_a, b_a, b_w, g: float):
    """P with product(P, |w|) the bound of _bilinear when the right side's bound is 0 or relative."""
    scale = (1.0 + g) * (1.0 + (b_w or 0.0))
    left = (scale - 1.0) * abs_a
    if b_a is not None:
        left += scale * materialize(b_a, a)
    return left


def _dot_rule(product_of, terms_of, extra_of=None, stack=None):
    """A dot-product rule: product_of(ctx) -> bilinear function; terms_of(ctx) -> n (terms per element).
    `stack(product)`: the product of a stack of left operands (one call for the bound and the
    coherent bound, in float32, see _stacked_nonnegative)."""
    def rule(ctx):
        product, (a, w) = product_of(ctx)
        n = terms_of(ctx)
        u = ctx.u()
        magnitude = None
        exact = None
        if all_exact(ctx.b):
            magnitude = product(_abs(a), _abs(w))
            exact = _exact_sum(ctx, magnitude, a, w)
        carried_by_channel = None
        right_relative = all(c[1] is None or isinstance(c[1], float) for c in (ctx.b, ctx.k))
        narrowed = None if stack is None else _narrow_right(ctx, w)
        if ctx.probable:
            carried_by_channel = [_in_quadrature(product, a, ctx.b[0], w, ctx.b[1], ctx.gamma(n),
                                                 magnitude if magnitude is not None else ctx.magnitude,
                                                 None if stack is None else stack(product, ctx), n, narrowed)]
        elif stack is not None and magnitude is None and right_relative:
            abs_a = _abs(a)
            lefts = [_left_operand(a, abs_a, compacts[0], compacts[1], ctx.gamma(n) if rounding else 0.0)
                     for compacts, rounding in ctx.channels()]
            # |a| rides along: the probable pass's magnitude |a| |w| (bound.py) costs no call of its own
            # an entry float32 cannot hold is None: that channel's product runs in float64 below
            carried_by_channel = _stacked_nonnegative(stack(product, ctx), lefts + [abs_a], narrowed(False), n)
            if carried_by_channel is not None:
                ctx.magnitude = carried_by_channel.pop()
        results = []
        for index, (compacts, rounding) in enumerate(ctx.channels()):
            g = ctx.gamma(n) if rounding else 0.0
            carried = None if carried_by_channel is None else carried_by_channel[index]
            if carried is None:
                carried = _bilinear(product, a, compacts[0], w, compacts[1], g, magnitude)
            if extra_of is not None:
                carried = carried + extra_of(ctx, compacts, g)
            if rounding:
                if exact is not None:
                    carried = np.where(exact, 0.0, carried)
                carried = ctx.finish(0, carried, None, underflows=0 if exact is not None and exact.all() else n,
                                     owned=True)  # every carried array above is made here
            results.append(carried)
        return [tuple(results)]
    return rule


def _matmul_stack(product, ctx=None):
    """The stack as more rows of one 2-D product when the right side is a matrix (numpy's batched
    matmul is slower than one BLAS call on the same numbers)."""
    def run(stacked, right):
        if right.ndim == 2 and stacked.ndim >= 2:
            flat = product(stacked.reshape(-1, stacked.shape[-1]), right)
            return flat.reshape(stacked.shape[:-1] + (right.shape[-1],))
        return product(stacked, right)  # matmul broadcasts the stack axis
    return run


def _conv_stack(product, ctx):
    """The stack in one call of onnxruntime's float32 Conv (stacked_conv.py); else one numpy
    convolution per left operand: the kernel's im2col of a batch of one is read in place where
    the conv is pointwise, and a larger batch costs more than its share (a stack of 3 as one
    batch: about 5x one convolution, as three: 3x)."""
    def run(stacked, right):
        if ctx.node.op_type == "Conv" and (ctx.node.domain or "") in ("", "ai.onnx"):
            out = stacked_conv(stacked, right, ctx.attrs)
            if out is not None:
                return out
        return np.stack([product(left, right) for left in stacked])
    return run


def _matmul_product(ctx):
    return np.matmul, (ctx.inputs[0], ctx.inputs[1])


def _gemm_product(ctx):
    a, w = ctx.inputs[0], ctx.inputs[1]
    if ctx.attr("transA", 0):
        a = np.swapaxes(a, -1, -2)
    if ctx.attr("transB", 0):
        w = np.swapaxes(w, -1, -2)
    alpha = abs(float(ctx.attr("alpha", 1.0)))
    return (lambda p, q: alpha * np.matmul(p, q)), (a, w)


def _gemm_extra(ctx, compacts, g):
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if c is None:
        return 0.0
    beta = abs(float(ctx.attr("beta", 1.0)))
    b_c = 0.0 if compacts[2] is None else materialize(compacts[2], c)
    return beta * (g * _abs(c) + (1.0 + g) * b_c)


def _gemm_terms(ctx):
    a = ctx.inputs[0]
    k = a.shape[0] if ctx.attr("transA", 0) else a.shape[-1]
    return k + 3  # the products, the scaling by alpha and beta, the add of C


def _conv_product(ctx):
    return (lambda p, q: np.asarray(ctx.kernel([p, q, None])[0], dtype=np.float64)), (ctx.inputs[0], ctx.inputs[1])


def _conv_terms(ctx):
    w = ctx.inputs[1]
    return int(np.prod(w.shape[1:])) + (1 if len(ctx.inputs) > 2 and ctx.inputs[2] is not None else 0)


def _conv_transpose_terms(ctx):
    """At most every input channel of the group times every kernel position reaches one output."""
    w = ctx.inputs[1]
    group = max(1, int(ctx.attr("group", 1)))
    return max(1, w.shape[0] // group) * int(np.prod(w.shape[2:])) \
        + (1 if len(ctx.inputs) > 2 and ctx.inputs[2] is not None else 0)


def _conv_extra(ctx, compacts, g):
    bias = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if bias is None:
        return 0.0
    shape = (1, -1) + (1,) * (ctx.inputs[0].ndim - 2)
    b_bias = 0.0 if compacts[2] is None else materialize(compacts[2], bias)
    return (g * _abs(bias) + (1.0 + g) * b_bias).reshape(shape)


# -------------------------------------------------------------------------------------- reductions

def _summing(mean: bool):
    """ReduceSum/ReduceMean/AveragePool/GlobalAveragePool: the op's kernel on (1+g)*b + g*|x|."""
    def rule(ctx):
        x, y = ctx.inputs[0], ctx.y()
        n = max(1, _window(ctx) if ctx.node.op_type == "AveragePool" else (x.size // y.size if y.size else 1))
        u = ctx.u()
        exact = None
        if all_exact(ctx.b) and _integral(x):
            magnitude = _kernel_on(ctx, _abs(x)) * (n if mean else 1)
            exact = _exact_sum(ctx, magnitude, x)
            if mean and n & (n - 1):
                exact = None  # the division by n rounds
        results = []
        for compacts, rounding in ctx.channels():
            g = ctx.gamma(n - 1) if rounding else 0.0
            if compacts[0] is None and not rounding:
                results.append(None)
                continue
            b = 0.0 if compacts[0] is None else materialize(compacts[0], x)
            if ctx.probable:
                # independent input errors add in quadrature: sqrt(sum b^2), a mean's sqrt(sum b^2) / n
                # (an AveragePool's window may hold fewer than n elements: not divided, larger)
                divisor = n if ctx.node.op_type in ("ReduceMean", "GlobalAveragePool") else 1.0
                spread = np.sqrt(_kernel_on(ctx, b * b + np.zeros(np.shape(x))) / divisor)
                carried = (1.0 + g) * spread + _kernel_on(ctx, g * _abs(x))
            else:
                carried = _kernel_on(ctx, (1.0 + g) * b + g * _abs(x))
            if rounding:
                if exact is not None:
                    carried = np.where(exact, 0.0, carried)
                divided = mean and bool(n & (n - 1))
                carried = ctx.finish(0, carried, 1.0 if divided else None,
                                     underflows=0 if exact is not None and exact.all() else n)
            results.append(carried)
        return [tuple(results)]
    return rule


def _window(ctx) -> int:
    return int(np.prod(ctx.attr("kernel_shape") or [1]))


def _kernel_on(ctx, data):
    substituted = list(ctx.inputs)
    substituted[0] = data
    return np.asarray(ctx.kernel(substituted)[0], dtype=np.float64)


STRUCTURAL = {
    **{op: _movement(positions, True) for op, positions in _MOVERS.items()},
    **{op: _movement(positions, False) for op, positions in _PICKERS.items()},
    **{op: _shape for op in _SHAPES},
    # Mod is exact in IEEE arithmetic too (fmod's result is representable), as are the bitwise ops
    **{op: _exact_of_exact for op in ("ConstantOfShape", "Range", "NonZero", "OneHot", "EyeLike", "Mod", "BitShift",
                                      "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")},
    "MatMul": _dot_rule(_matmul_product, lambda ctx: ctx.inputs[0].shape[-1], stack=_matmul_stack),
    "Gemm": _dot_rule(_gemm_product, _gemm_terms, _gemm_extra, stack=_matmul_stack),
    "Conv": _dot_rule(_conv_product, _conv_terms, _conv_extra, stack=_conv_stack),
    "ConvTranspose": _dot_rule(_conv_product, _conv_transpose_terms, _conv_extra, stack=_conv_stack),
    "ReduceSum": _summing(False), "ReduceMean": _summing(True), "AveragePool": _summing(True),
    "GlobalAveragePool": _summing(True),
}

MOVERS = frozenset(_MOVERS) | frozenset(_PICKERS)

__all__ = ["MOVERS", "STRUCTURAL", "math"]
