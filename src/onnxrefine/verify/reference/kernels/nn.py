"""Float64-reference kernels for convolution, pooling and normalization.

Convolutions are one batched matmul over an im2col matrix built from a strided view (no Python loop over
output pixels), so a ResNet-50-sized model runs in a few seconds in float64.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from onnxrefine.verify.reference.base import kernel, register_kernels
from onnxrefine.verify.reference.kernels.resize import HANDLERS as _RESIZE_HANDLERS


def _same_pads(in_sizes, effective, strides, auto_pad):
    begins, ends = [], []
    for size, eff, stride in zip(in_sizes, effective, strides):
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins, ends


def _geometry(call, x, kernel):
    return geometry(call.attr, x.shape[2:], kernel)


def geometry(attr, spatial, kernel):
    """(strides, dilations, effective kernel, pads before, pads after) of a convolution or pool whose
    attributes `attr(name, default)` reads, over an input of `spatial` sizes (auto_pad resolved)."""
    d = len(kernel)
    strides = list(attr("strides") or [1] * d)
    dilations = list(attr("dilations") or [1] * d)
    effective = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations)]
    auto_pad = attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = _same_pads(spatial, effective, strides, auto_pad)
    elif auto_pad == "VALID":
        begins, ends = [0] * d, [0] * d
    else:
        pads = list(attr("pads") or [0] * (2 * d))
        begins, ends = pads[:d], pads[d:]
    return strides, dilations, effective, begins, ends


def _windows(xp, effective, strides, dilations, out_sizes):
    """View (N, C, O1..Od, K1..Kd) of a padded input; no copy."""
    d = len(effective)
    win = sliding_window_view(xp, effective, axis=tuple(range(2, 2 + d)))
    index = (slice(None), slice(None))
    index += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out_sizes, strides))
    index += tuple(slice(None, None, dl) for dl in dilations)
    return win[index]


def _tap_reach(size, out, stride, begin, offset):
    """(first output, end output, first input) of the outputs whose tap at `offset` (k * dilation)
    reads inside the input along one axis (input position o * stride - begin + offset); the
    other outputs read padding."""
    first = max(0, -(-(begin - offset) // stride))
    end = max(first, min(out, (size - 1 + begin - offset) // stride + 1))
    return first, end, first * stride - begin + offset


def conv(x, w, bias, strides, dilations, begins, ends, group):
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    d = len(kernel)
    effective = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations)]
    out_sizes = [(x.shape[2 + i] + begins[i] + ends[i] - effective[i]) // strides[i] + 1 for i in range(d)]
    n_out = int(np.prod(out_sizes, dtype=np.int64))
    k_size = int(np.prod(kernel, dtype=np.int64))
    mg = m // group
    if n == 1 and k_size == 1 and list(out_sizes) == list(x.shape[2:]) and not any(begins) \
            and all(stride == 1 for stride in strides):
        # a pointwise conv reads the input as is (a stride beside end padding can keep the size and
        # still read other positions: H 2, stride 2, pads end 1 reads rows 0 and 2, the padding)
        cols = np.ascontiguousarray(x).reshape(group, cg, n_out)
    else:
        # The im2col matrix (G, Cg, K..., N, O...), so that the matmul result (G, Mg, N*O) is
        # already channel-major; filled one kernel tap at a time from a strided view of the input
        # (no padded copy, no gather: a transposing gather of a large input thrashes the cache,
        # 3 s for one 160x160 depthwise conv); padding's entries keep the zeros it starts with.
        cols = np.zeros((group, cg, *kernel, n, *out_sizes), dtype=x.dtype)
        source = x.reshape(n, group, cg, *x.shape[2:]).transpose(1, 2, 0, *range(3, 3 + d))  # (G, Cg, N, I...)
        for tap in np.ndindex(*kernel):
            written, read = [], []
            for i in range(d):
                first, end, start = _tap_reach(x.shape[2 + i], out_sizes[i], strides[i], begins[i],
                                               tap[i] * dilations[i])
                written.append(slice(first, end))
                read.append(slice(start, start + (end - first - 1) * strides[i] + 1, strides[i]) if end > first
                            else slice(0, 0))
            cols[(slice(None), slice(None), *tap, slice(None), *written)] = source[(slice(None),) * 3 + tuple(read)]
        cols = cols.reshape(group, cg * k_size, n * n_out)
    weights = w.reshape(group, mg, cg * k_size)
    out = np.matmul(weights, cols)  # (G, Mg, N*O)
    out = out.reshape(group * mg, n, *out_sizes)
    out = np.moveaxis(out, 1, 0) if n > 1 else out.reshape(1, m, *out_sizes)
    if bias is not None:
        out = out + bias.reshape((1, m) + (1,) * d)
    return np.ascontiguousarray(out)


def _conv(call):
    x, w = call.inputs[0], call.inputs[1]
    bias = call.input(2)
    strides, dilations, _, begins, ends = _geometry(call, x, w.shape[2:])
    return [conv(x, w, bias, strides, dilations, begins, ends, call.attr("group", 1))]


def _conv_transpose(call):
    x, w = call.inputs[0], call.inputs[1]
    bias = call.input(2)
    group = call.attr("group", 1)
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    d = len(kernel)
    cg, mg = c // group, w.shape[1]
    m = mg * group
    in_sizes = x.shape[2:]
    strides = list(call.attr("strides") or [1] * d)
    dilations = list(call.attr("dilations") or [1] * d)
    out_pad = list(call.attr("output_padding") or [0] * d)
    effective = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations)]
    full = [(i - 1) * s + e + op for i, s, e, op in zip(in_sizes, strides, effective, out_pad)]
    auto_pad = call.attr("auto_pad", "NOTSET")
    output_shape = call.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            target = list(output_shape)[-d:]
        else:
            target = [i * s for i, s in zip(in_sizes, strides)]
        totals = [f - t for f, t in zip(full, target)]
        if auto_pad == "SAME_UPPER":
            begins = [t // 2 for t in totals]
        else:
            begins = [t - t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins)]
    elif auto_pad == "VALID":
        begins, ends = [0] * d, [0] * d
    else:
        pads = list(call.attr("pads") or [0] * (2 * d))
        begins, ends = pads[:d], pads[d:]
    k_size = int(np.prod(kernel, dtype=np.int64))
    n_in = int(np.prod(in_sizes, dtype=np.int64))
    weights = w.reshape(group, cg, mg * k_size).transpose(0, 2, 1)  # (G, Mg*K, Cg)
    xs = x.reshape(n, group, cg, n_in).transpose(1, 2, 0, 3).reshape(group, cg, n * n_in)
    cols = np.matmul(weights, xs).reshape(group * mg, *kernel, n, *in_sizes)
    buffer = np.zeros((group * mg, n, *full), dtype=cols.dtype)
    for position in np.ndindex(*kernel):
        target = (slice(None), slice(None)) + tuple(
            slice(p * dl, p * dl + (i - 1) * s + 1, s)
            for p, dl, i, s in zip(position, dilations, in_sizes, strides)
        )
        buffer[target] += cols[(slice(None), *position)]
    if min(begins + ends) < 0:  # negative padding (e.g. from output_shape) means extra zeros
        grow = [(0, 0), (0, 0)] + [(max(-b, 0), max(-e, 0)) for b, e in zip(begins, ends)]
        buffer = np.pad(buffer, grow)
        full = list(buffer.shape[2:])
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    crop = (slice(None), slice(None)) + tuple(
        slice(b, f - e) for b, e, f in zip(begins, ends, full)
    )
    out = np.moveaxis(buffer[crop], 1, 0)
    if bias is not None:
        out = out + bias.reshape((1, m) + (1,) * d)
    return [np.ascontiguousarray(out)]


def _pool_setup(call, x, pad_value):
    kernel = list(call.attr("kernel_shape"))
    d = len(kernel)
    strides, dilations, effective, begins, ends = _geometry(call, x, kernel)
    ceil_mode = call.attr("ceil_mode", 0)
    out_sizes = []
    for i in range(d):
        span = x.shape[2 + i] + begins[i] + ends[i] - effective[i]
        if ceil_mode:
            out = -(-span // strides[i]) + 1
            if (out - 1) * strides[i] >= x.shape[2 + i] + begins[i]:
                out -= 1  # the last window would start inside the end padding only
        else:
            out = span // strides[i] + 1
        out_sizes.append(out)
    extra = [max((o - 1) * s + e - (size + b + en), 0)
             for o, s, e, size, b, en in zip(out_sizes, strides, effective, x.shape[2:], begins, ends)]
    widths = [(0, 0), (0, 0)] + [(b, en + ex) for b, en, ex in zip(begins, ends, extra)]
    xp = np.pad(x, widths, constant_values=pad_value) if any(w for pair in widths for w in pair) else x
    win = _windows(xp, effective, strides, dilations, out_sizes)
    return win, (kernel, strides, dilations, effective, begins, ends, extra, out_sizes)


def _max_pool(call):
    x = call.inputs[0]
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    nan = x.dtype.kind == "f" and bool(np.isnan(x).any())
    # NaN in a window: the spec does not say; onnx's reference implementation (its general path)
    # and onnxruntime's 1-D kernels skip NaN elements (its 2-D kernels keep a NaN met first: no
    # reading matches all of onnxruntime). Padding is no element either, so NaN is padded in.
    win, geometry = _pool_setup(call, x, np.nan if nan else low)
    kernel, strides, dilations, _, begins, _, _, out_sizes = geometry
    d = len(kernel)
    k_axes = tuple(range(2 + d, 2 + 2 * d))
    if nan:
        out = _nan_skipping_max(call, win, k_axes)
        win = np.where(np.isnan(win), -np.inf, win)  # for the indices: NaN is never the maximum
    else:
        out = window_max(win, d)
    results = [np.ascontiguousarray(out)]
    if call.num_outputs > 1:
        flat = win.reshape(*win.shape[: 2 + d], -1)
        arg = np.argmax(flat, axis=-1)
        k_pos = np.unravel_index(arg, kernel)
        n, c = x.shape[:2]
        spatial = x.shape[2:]
        coords = []
        for i in range(d):
            shape = [1] * d
            shape[i] = out_sizes[i]
            starts = (np.arange(out_sizes[i]) * strides[i]).reshape(shape) - begins[i]
            coords.append(starts + k_pos[i] * dilations[i])
        if call.attr("storage_order", 0):
            flat_spatial = sum(coords[i] * int(np.prod(spatial[:i], dtype=np.int64)) for i in range(d))
        else:
            flat_spatial = np.ravel_multi_index(tuple(coords), spatial, mode="clip")
        base = (np.arange(n).reshape(n, 1) * c + np.arange(c).reshape(1, c)) * int(np.prod(spatial))
        results.append((base.reshape(n, c, *([1] * d)) + flat_spatial).astype(np.int64))
    return results


def window_max(win: np.ndarray, d: int) -> np.ndarray:
    """The maximum of each window of `win` (its last `d` axes) where no element is NaN, as one
    np.maximum per window position: a reduction over the strided window axes runs about 5x slower
    (resnet50's 3x3 stride-2 MaxPool on 64x114x114, float64: 24 -> 4 ms). A window holding both
    zeros gives +0, IEEE 754's maximum (np.maximum keeps whichever comes second, np.max whichever
    its SIMD lanes meet last)."""
    positions = list(np.ndindex(*win.shape[win.ndim - d:]))
    out = np.array(win[(Ellipsis, *positions[0])])
    for position in positions[1:]:
        np.maximum(out, win[(Ellipsis, *position)], out=out)
    if out.dtype.kind == "f":
        negative_zero = (out == 0) & np.signbit(out)
        if negative_zero.any():
            positive = np.zeros(out.shape, dtype=bool)
            for position in positions:
                values = win[(Ellipsis, *position)]
                positive |= (values == 0) & ~np.signbit(values)
            out[negative_zero & positive] = 0.0
    return out


def _nan_skipping_max(call, win, k_axes):
    """The maximum of each window's non-NaN elements. A window with none (NaN and padding only) has
    no maximum; onnxruntime's float32 kernel gives its initial value there, the lowest finite
    float32 (its float16 kernel -inf), and the reference takes that reading: the other one, NaN,
    would make a model whose original overflows behind it (a folded scale) look wrong for staying
    finite (fuzz case 487 of seed 1000000)."""
    out = np.fmax.reduce(win.reshape(*win.shape[: win.ndim - len(k_axes)], -1), axis=-1)
    empty = np.isnan(out)
    if empty.any():
        narrow = call.node.output[0] in getattr(call.evaluator, "narrow_types", {})
        out = np.where(empty, -np.inf if narrow else -float(np.finfo(np.float32).max), out)
    return out


def _average_pool(call):
    x = call.inputs[0]
    win, geometry = _pool_setup(call, x, 0.0)
    kernel, strides, dilations, effective, begins, ends, extra, out_sizes = geometry
    d = len(kernel)
    total = np.sum(win, axis=tuple(range(2 + d, 2 + 2 * d)))
    include_pad = call.attr("count_include_pad", 0)
    count = np.ones((1,) * (2 + d))
    for i in range(d):
        size = x.shape[2 + i]
        mask = np.zeros(size + begins[i] + ends[i] + extra[i])
        if include_pad:
            mask[: size + begins[i] + ends[i]] = 1
        else:
            mask[begins[i] : begins[i] + size] = 1
        windows = sliding_window_view(mask, effective[i])[: (out_sizes[i] - 1) * strides[i] + 1 : strides[i], :: dilations[i]]
        shape = [1] * (2 + d)
        shape[2 + i] = out_sizes[i]
        count = count * windows.sum(axis=-1).reshape(shape)
    with np.errstate(all="ignore"):
        return [np.ascontiguousarray(total / count)]


def _lp_pool(call):
    x = call.inputs[0]
    p = call.attr("p", 2)
    win, geometry = _pool_setup(call, np.abs(x), 0.0)
    d = len(geometry[0])
    return [np.power(np.sum(np.power(win, p), axis=tuple(range(2 + d, 2 + 2 * d))), 1.0 / p)]


def _global(fn):
    def handler(call):
        x = call.inputs[0]
        return [fn(x, axis=tuple(range(2, x.ndim)), keepdims=True)]
    return handler


def _global_lp(call):
    x = call.inputs[0]
    p = call.attr("p", 2)
    return [np.power(np.sum(np.power(np.abs(x), p), axis=tuple(range(2, x.ndim)), keepdims=True), 1.0 / p)]


def _channel_shape(param, x):
    if param.ndim > 1:  # opset < 9 "spatial=0" parameters already carry per-position values
        return param.reshape((1, *param.shape))
    return param.reshape((1, -1) + (1,) * (x.ndim - 2))


def _batch_norm(call):
    x, scale, bias, mean, var = call.inputs[:5]
    eps = call.attr("epsilon", 1e-5)
    training = call.attr("training_mode", 0) and call.opset >= 14
    outs = []
    if training:
        axes = (0, *range(2, x.ndim))
        batch_mean = np.mean(x, axis=axes)
        batch_var = np.var(x, axis=axes)
        momentum = call.attr("momentum", 0.9)
        y = (x - _channel_shape(batch_mean, x)) / np.sqrt(_channel_shape(batch_var, x) + eps)
        y = y * _channel_shape(scale, x) + _channel_shape(bias, x)
        outs = [y, mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum)]
        return outs[: call.num_outputs]
    y = (x - _channel_shape(mean, x)) / np.sqrt(_channel_shape(var, x) + eps)
    y = y * _channel_shape(scale, x) + _channel_shape(bias, x)
    return [y] + [None] * (call.num_outputs - 1)


def _instance_norm(call):
    x, scale, bias = call.inputs
    eps = call.attr("epsilon", 1e-5)
    axes = tuple(range(2, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return [y * _channel_shape(scale, x) + _channel_shape(bias, x)]


def _layer_norm(call):
    x, scale = call.inputs[0], call.inputs[1]
    bias = call.input(2)
    axis = call.attr("axis", -1) % x.ndim
    eps = call.attr("epsilon", 1e-5)
    axes = tuple(range(axis, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * inv_std * scale
    if bias is not None:
        y = y + bias
    return [y, mean, inv_std][: call.num_outputs]


HANDLERS = register_kernels({
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "LpPool": _lp_pool,
    "GlobalAveragePool": _global(np.mean),
    "GlobalMaxPool": _global(np.max),
    "GlobalLpPool": _global_lp,
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    **_RESIZE_HANDLERS,
})


@kernel("GroupNormalization")
def _group_norm(call):
    x, scale, bias = call.inputs
    groups = call.attr("num_groups")
    eps = call.attr("epsilon", 1e-5)
    n, c = x.shape[:2]
    grouped = x.reshape(n, groups, -1)
    mean = np.mean(grouped, axis=-1, keepdims=True)
    var = np.mean(np.square(grouped - mean), axis=-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + eps)).reshape(x.shape)
    if scale.shape[0] != c:  # opset 18: one scale/bias per group
        scale = np.repeat(scale, c // groups)
        bias = np.repeat(bias, c // groups)
    return [y * _channel_shape(scale, x) + _channel_shape(bias, x)]


@kernel("MeanVarianceNormalization")
def _mean_variance_norm(call):
    x = call.inputs[0]
    axes = tuple(a % x.ndim for a in (call.attr("axes") or [0, 2, 3]))
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x), axis=axes, keepdims=True) - np.square(mean)
    return [(x - mean) / (np.sqrt(var) + 1e-9)]


@kernel("LRN")
def _lrn(call):
    # Native because onnx.reference's LRN (1.23) iterates over the batch axis instead of the channels.
    x = call.inputs[0]
    size = call.attr("size")
    alpha, beta, bias = call.attr("alpha", 1e-4), call.attr("beta", 0.75), call.attr("bias", 1.0)
    c = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = np.pad(np.square(x), [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    cumulative = np.concatenate([np.zeros_like(squares[:, :1]), np.cumsum(squares, axis=1)], axis=1)
    window_sum = cumulative[:, size : size + c] - cumulative[:, :c]
    return [x / np.power(bias + (alpha / size) * window_sum, beta)]

