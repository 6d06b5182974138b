"""Float64-reference kernels for shape, layout and indexing ops (exact: they move values, never round)."""

from __future__ import annotations

import numpy as np

from onnxrefine.verify.reference.base import register_kernels
from onnxrefine.verify.reference.kernels.tensor import to_internal


def _ints(value) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _reshape(call):
    x = call.inputs[0]
    shape = _ints(call.attr("shape") if call.opset < 5 else call.inputs[1])
    allowzero = call.attr("allowzero", 0)
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


def _transpose(call):
    x = call.inputs[0]
    perm = call.attr("perm")
    return [np.transpose(x, perm if perm is not None else None)]


def _axes(call, attr_until_opset: int, index: int = 1):
    if call.opset < attr_until_opset:
        axes = call.attr("axes")
        return None if axes is None else list(axes)
    value = call.input(index)
    return None if value is None else _ints(value)


def _squeeze(call):
    x = call.inputs[0]
    axes = _axes(call, 13)
    if axes is None:
        return [np.squeeze(x)] if x.ndim else [x]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _unsqueeze(call):
    x = call.inputs[0]
    axes = _axes(call, 13)
    rank = x.ndim + len(axes)
    out = x
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return [out]


def _concat(call):
    values = [v for v in call.inputs if v is not None]
    axis = call.attr("axis", 0)
    return [np.concatenate(values, axis=axis % values[0].ndim)]


def _split(call):
    x = call.inputs[0]
    axis = call.attr("axis", 0) % x.ndim
    n_out = call.num_outputs
    split = call.attr("split") if call.opset < 13 else call.input(1)
    dim = x.shape[axis]
    if split is not None and len(_ints(split)):
        sizes = _ints(split)
    elif call.attr("num_outputs") is not None:
        chunk = -(-dim // call.attr("num_outputs"))
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(call.attr("num_outputs"))]
    else:
        sizes = [dim // n_out] * n_out
    bounds = np.cumsum(sizes)[:-1]
    return list(np.split(x, bounds, axis=axis))


def _slice_index(dim: int, start: int, end: int, step: int) -> slice:
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end == -1 else end, step)


def _slice(call):
    x = call.inputs[0]
    if call.opset < 10:
        starts, ends = call.attr("starts"), call.attr("ends")
        axes = call.attr("axes")
        steps = None
    else:
        starts, ends = _ints(call.inputs[1]), _ints(call.inputs[2])
        axes = None if call.input(3) is None else _ints(call.input(3))
        steps = None if call.input(4) is None else _ints(call.input(4))
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.ndim
        index[axis] = _slice_index(x.shape[axis], int(start), int(end), int(step))
    return [x[tuple(index)]]


def _gather(call):
    x, idx = call.inputs
    axis = call.attr("axis", 0) % x.ndim
    return [np.take(x, idx.astype(np.int64), axis=axis)]


def _gather_elements(call):
    x, idx = call.inputs
    axis = call.attr("axis", 0) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take_along_axis(x, idx.astype(np.int64), axis=axis)]


def _gather_nd(call):
    data, indices = call.inputs
    b = call.attr("batch_dims", 0)
    indices = indices.astype(np.int64)
    k = indices.shape[-1]
    batch_shape = data.shape[:b]
    n_batch = int(np.prod(batch_shape, dtype=np.int64))
    data_r = data.reshape((n_batch, *data.shape[b:]))
    idx_r = indices.reshape((n_batch, -1, k))
    idx_r = np.where(idx_r < 0, idx_r + np.array(data.shape[b : b + k]), idx_r)
    gathered = data_r[(np.arange(n_batch)[:, None], *np.moveaxis(idx_r, -1, 0))]
    return [gathered.reshape((*indices.shape[:-1], *data.shape[b + k :]))]


_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd(call):
    data, indices, updates = call.inputs
    out = data.copy()
    index = tuple(np.moveaxis(indices.astype(np.int64), -1, 0))
    reduction = call.attr("reduction", "none")
    if reduction == "none":
        out[index] = updates
    else:
        _REDUCTIONS[reduction].at(out, index, updates)
    return [out]


def _scatter_elements(call):
    data, indices, updates = call.inputs
    axis = call.attr("axis", 0) % data.ndim
    indices = indices.astype(np.int64)
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices
    out = data.copy()
    reduction = call.attr("reduction", "none")
    if reduction == "none":
        out[tuple(grid)] = updates
    else:
        _REDUCTIONS[reduction].at(out, tuple(grid), updates)
    return [out]


def _shape(call):
    shape = np.array(call.inputs[0].shape, dtype=np.int64)
    rank = len(shape)
    start = call.attr("start", 0)
    end = call.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [shape[start:end]]


def _size(call):
    return [np.array(call.inputs[0].size, dtype=np.int64)]


def _expand(call):
    x, shape = call.inputs
    target = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
    return [np.array(np.broadcast_to(x, target))]


def _tile(call):
    x, repeats = call.inputs
    return [np.tile(x, _ints(repeats))]


def _constant_of_shape(call):
    value = call.attr("value")
    value = np.zeros(1, dtype=np.float64) if value is None else to_internal(value)
    return [np.full(_ints(call.inputs[0]), value.reshape(-1)[0], dtype=value.dtype)]


def _range(call):
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in call.inputs)
    if start.dtype.kind == "f":
        n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        return [float(start) + np.arange(n, dtype=np.float64) * float(delta)]
    s, lim, d = int(start), int(limit), int(delta)
    n = max(-(-(lim - s) // d), 0)
    return [(s + np.arange(n, dtype=np.int64) * d).astype(start.dtype)]


def _pad(call):
    x = call.inputs[0]
    if call.opset < 11:
        pads = list(call.attr("pads"))
        value = call.attr("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = _ints(call.inputs[1])
        value = call.input(2)
        value = 0 if value is None or np.asarray(value).size == 0 else np.asarray(value).reshape(-1)[0]
        axes_in = call.input(3)
        axes = list(range(x.ndim)) if axes_in is None else [a % x.ndim for a in _ints(axes_in)]
    mode = call.attr("mode", "constant")
    n = len(axes)
    begin = {a: pads[i] for i, a in enumerate(axes)}
    end = {a: pads[i + n] for i, a in enumerate(axes)}
    crop = tuple(
        slice(max(-begin.get(a, 0), 0), x.shape[a] - max(-end.get(a, 0), 0)) for a in range(x.ndim)
    )
    x = x[crop]
    widths = [(max(begin.get(a, 0), 0), max(end.get(a, 0), 0)) for a in range(x.ndim)]
    if mode == "constant":
        return [np.pad(x, widths, mode="constant", constant_values=np.asarray(value, dtype=x.dtype))]
    return [np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _flatten(call):
    x = call.inputs[0]
    axis = call.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(rows, -1) if x.size or rows else x.reshape(rows, int(np.prod(x.shape[axis:])))]


def _depth_to_space(call):
    x = call.inputs[0]
    b = call.attr("blocksize")
    n, c, h, w = x.shape
    if call.attr("mode", "DCR") == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [t.reshape(n, c // (b * b), h * b, w * b)]


def _space_to_depth(call):
    x = call.inputs[0]
    b = call.attr("blocksize")
    n, c, h, w = x.shape
    order = (0, 1, 3, 5, 2, 4) if call.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(order)
    return [t.reshape(n, c * b * b, h // b, w // b)]


def _trilu(call):
    x = call.inputs[0]
    k = int(np.asarray(call.input(1)).reshape(-1)[0]) if call.input(1) is not None else 0
    return [np.triu(x, k) if call.attr("upper", 1) else np.tril(x, k)]


def _nonzero(call):
    x = call.inputs[0]
    if x.ndim == 0:
        return [np.zeros((0, int(bool(x))), dtype=np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


def _one_hot(call):
    indices, depth, values = call.inputs
    depth = int(np.asarray(depth).reshape(-1)[0])
    axis = call.attr("axis", -1)
    rank = indices.ndim + 1
    axis %= rank
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([-1 if i == axis else 1 for i in range(rank)])
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    return [np.where(hot, on, off).astype(values.dtype)]


def _topk(call):
    x = call.inputs[0]
    k = call.attr("k") if call.opset < 10 else int(np.asarray(call.inputs[1]).reshape(-1)[0])
    axis = call.attr("axis", -1) % x.ndim
    n = x.shape[axis]
    if call.attr("largest", 1):
        # Stable sort of the reversed axis, read backwards: descending values, ties by ascending index.
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = n - 1 - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def _compress(call):
    x, cond = call.inputs
    axis = call.attr("axis")
    return [np.compress(cond.astype(bool), x, axis=axis)]


def _eye_like(call):
    x = call.inputs[0]
    dtype_attr = call.attr("dtype")
    from onnxrefine.verify.reference.kernels.tensor import internal_dtype_for

    dtype = internal_dtype_for(dtype_attr) if dtype_attr is not None else x.dtype
    return [np.eye(x.shape[0], x.shape[1], k=call.attr("k", 0), dtype=dtype)]


HANDLERS = register_kernels({
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "ScatterND": _scatter_nd,
    "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements,
    "Shape": _shape,
    "Size": _size,
    "Expand": _expand,
    "Tile": _tile,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Pad": _pad,
    "Flatten": _flatten,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "Trilu": _trilu,
    "NonZero": _nonzero,
    "OneHot": _one_hot,
    "TopK": _topk,
    "Compress": _compress,
    "EyeLike": _eye_like,
})
