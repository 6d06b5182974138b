"""The ONNX semantics of the layout operators, in numpy, written from the operator specification
(not from the rules' code): the ground truth the exhaustive algebra proofs compare rewrites against.

Each function raises `Invalid` where the operator rejects its input (the model fails at run
time). Where the specification is silent and onnxruntime decides (Squeeze/Unsqueeze with an
empty axes list), the function follows onnxruntime: a rewrite must keep what the runtime computes.
tests/test_onnx_semantics.py cross-checks every function against onnxruntime on a sample, so the
ground truth is not itself wrong.
"""

from __future__ import annotations

import math

import numpy as np


class Invalid(Exception):
    """The operator rejects this input (onnxruntime raises)."""


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Invalid(f"axis {axis} outside rank {rank}")
    return axis + rank if axis < 0 else axis


def _axes(axes, rank: int) -> list[int]:
    normalized = [_axis(a, rank) for a in axes]
    if len(set(normalized)) != len(normalized):
        raise Invalid(f"repeated axes {list(axes)}")
    return normalized


def transpose(x: np.ndarray, perm=None) -> np.ndarray:
    """Output axis i is input axis perm[i]; no perm reverses the axes."""
    perm = list(range(x.ndim))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(x.ndim)):
        raise Invalid(f"perm {perm} is not a permutation of rank {x.ndim}")
    return x.transpose(perm)


def reshape_shape(shape, target, allowzero: bool = False) -> tuple:
    """Reshape's output shape: 0 copies the input dim at its position (allowzero=0) or is a zero
    dim (allowzero=1); one -1 is inferred from the element count."""
    shape, target = [int(d) for d in shape], [int(t) for t in target]
    if target.count(-1) > 1 or any(t < -1 for t in target):
        raise Invalid(f"target {target}")
    if allowzero and 0 in target and -1 in target:
        raise Invalid("allowzero with both 0 and -1")
    dims = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            if i >= len(shape):
                raise Invalid(f"0 at {i} copies a dim the input lacks")
            dims.append(shape[i])
        else:
            dims.append(t)
    total = math.prod(shape)
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        if rest == 0 or total % rest:
            raise Invalid(f"cannot infer -1 for {total} elements from {dims}")
        dims[dims.index(-1)] = total // rest
    if math.prod(dims) != total:
        raise Invalid(f"{dims} does not hold {total} elements")
    return tuple(dims)


def reshape(x: np.ndarray, target, allowzero: bool = False) -> np.ndarray:
    return x.reshape(reshape_shape(x.shape, target, allowzero))


def squeeze_shape(shape, axes=None) -> tuple:
    """No axes, or an empty list (onnxruntime): every size-1 dim goes."""
    shape = tuple(int(d) for d in shape)
    if axes is None or len(axes) == 0:
        return tuple(d for d in shape if d != 1)
    removed = _axes(axes, len(shape))
    if any(shape[a] != 1 for a in removed):
        raise Invalid(f"squeezing a dim that is not 1: {shape} axes {list(axes)}")
    return tuple(d for i, d in enumerate(shape) if i not in removed)


def unsqueeze_shape(shape, axes) -> tuple:
    """Axes are positions in the output (of rank len(shape) + len(axes))."""
    rank = len(shape) + len(axes)
    inserted = set(_axes(axes, rank))
    rest = iter(shape)
    return tuple(1 if i in inserted else next(rest) for i in range(rank))


def flatten_shape(shape, axis: int = 1) -> tuple:
    if not -len(shape) <= axis <= len(shape):
        raise Invalid(f"Flatten axis {axis} outside rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


# onnxruntime reads these ends of a backward Slice as "to the beginning"; the specification
# clamps them to dim-1 (an empty slice). A rewrite must keep what the runtime computes, and a
# value computed ahead of time must be what every runtime computes: see slice_indices.
RUNTIME_BACKWARD_TO_BEGINNING = (2**31 - 1, 2**63 - 1)


def slice_indices(dim: int, start: int, end: int, step: int, runtime: bool = True) -> range:
    """The positions one axis of Slice keeps: negatives count from the end, then start and end
    are clamped to [0, dim] (step > 0) or start to [0, dim-1] and end to [-1, dim-1] (step < 0).
    `runtime`: onnxruntime's reading of INT_MAX ends of a backward slice; else the specification's."""
    if step == 0:
        raise Invalid("step 0")
    if runtime and step < 0 and end in RUNTIME_BACKWARD_TO_BEGINNING:
        end = -dim - 1
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return range(start, end, step)


def slice_(x: np.ndarray, starts, ends, axes=None, steps=None) -> np.ndarray:
    starts, ends = list(starts), list(ends)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Invalid("starts, ends, axes and steps differ in length")
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, _axes(axes, x.ndim), steps):
        kept = slice_indices(x.shape[axis], int(start), int(end), int(step))
        # the same positions as a Python slice (a stop of -1 would count from the end: None)
        index[axis] = slice(kept.start, kept.stop if kept.stop >= 0 else None, kept.step) if kept else slice(0, 0)
    return x[tuple(index)]


def concat(parts: list[np.ndarray], axis: int) -> np.ndarray:
    rank = parts[0].ndim
    if any(p.ndim != rank for p in parts):
        raise Invalid("Concat inputs differ in rank")
    axis = _axis(axis, rank)
    for p in parts:
        if any(p.shape[i] != parts[0].shape[i] for i in range(rank) if i != axis):
            raise Invalid("Concat inputs differ off the axis")
    return np.concatenate(parts, axis=axis)


def broadcast_shape(*shapes) -> tuple:
    """Multidirectional (numpy-style) broadcasting: dims aligned from the right, 1 stretches."""
    rank = max((len(s) for s in shapes), default=0)
    dims = []
    for i in range(rank):
        column = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(column) > 1:
            raise Invalid(f"shapes {shapes} do not broadcast")
        dims.append(column.pop() if column else 1)
    return tuple(dims)


def expand_shape(shape, target) -> tuple:
    return broadcast_shape(tuple(shape), tuple(target))


def pad_widths(rank: int, pads, axes=None) -> list[tuple[int, int]]:
    """Pad's (begin, end) of every axis from pads = [begin of each axis..., end of each axis...]
    over `axes` (default: every axis)."""
    axes = list(range(rank)) if axes is None else _axes(axes, rank)
    if len(pads) != 2 * len(axes):
        raise Invalid(f"{len(pads)} pads for {len(axes)} axes")
    widths = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        widths[axis] = (int(pads[k]), int(pads[k + len(axes)]))
    return widths


def pad_zeros(x: np.ndarray, pads, axes=None) -> np.ndarray:
    """Pad (constant mode, value 0); negative pads crop."""
    widths = pad_widths(x.ndim, pads, axes)
    shape = [d + b + e for d, (b, e) in zip(x.shape, widths)]
    if any(d < 0 for d in shape):
        raise Invalid(f"pads {list(pads)} crop more than the dims {x.shape}")
    result = np.zeros(shape, dtype=x.dtype)
    source = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths))
    target = tuple(slice(max(b, 0), max(b, 0) + len(range(d)[s])) for d, (b, e), s in zip(x.shape, widths, source))
    result[target] = x[source]
    return result


def window_input(x: np.ndarray, pads) -> np.ndarray:
    """What Conv and AveragePool(count_include_pad=1) slide their window over: the input with
    `pads` ([begin of each spatial axis..., end of each...]) zeros around the spatial axes (all
    axes after batch and channel). The window arithmetic after that is the same on both sides of
    a Pad fusion, so the fusion is exact iff this padded input is."""
    spatial = x.ndim - 2
    if len(pads) != 2 * spatial or any(p < 0 for p in pads):
        raise Invalid(f"pads {list(pads)} for {spatial} spatial axes")
    return pad_zeros(x, [0, 0, *pads[:spatial], 0, 0, *pads[spatial:]])


def split(x: np.ndarray, sizes, axis: int = 0) -> list[np.ndarray]:
    axis = _axis(axis, x.ndim)
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise Invalid(f"split {list(sizes)} of a dim of {x.shape[axis]}")
    bounds = np.cumsum([0, *sizes])
    return [np.take(x, np.arange(bounds[i], bounds[i + 1]), axis=axis) for i in range(len(sizes))]


def shape_op(shape, start: int = 0, end: int | None = None) -> tuple:
    """Shape with start/end (opset 15): negatives count from the end, both clamped to [0, rank]."""
    rank = len(shape)
    end = rank if end is None else end
    start, end = start + rank if start < 0 else start, end + rank if end < 0 else end
    start, end = min(max(start, 0), rank), min(max(end, 0), rank)
    return tuple(shape[start:end])


def gather(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    axis = _axis(axis, data.ndim)
    indices = np.asarray(indices, dtype=np.int64)
    size = data.shape[axis]
    if np.any((indices < -size) | (indices >= size)):
        raise Invalid("index out of range")
    return np.take(data, np.where(indices < 0, indices + size, indices), axis=axis)


def reduce_sum(x: np.ndarray, axes=None, keepdims: bool = True, noop_with_empty_axes: bool = False) -> np.ndarray:
    """A repeated axis is reduced once (onnxruntime accepts repeats; the specification is silent)."""
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            return x
        axes = range(x.ndim)
    return np.sum(x, axis=tuple(sorted({_axis(a, x.ndim) for a in axes})), keepdims=keepdims)


def gemm(a: np.ndarray, b: np.ndarray, trans_a: int = 0, trans_b: int = 0) -> np.ndarray:
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise Invalid("Gemm operands do not multiply")
    return a @ b


def split_to_sequence(x: np.ndarray, chunk: int, axis: int = 0) -> list[np.ndarray]:
    """SplitToSequence with a scalar split: pieces of `chunk`, the last one smaller when `chunk`
    does not divide the axis."""
    axis = _axis(axis, x.ndim)
    if chunk <= 0:
        raise Invalid(f"chunk {chunk}")
    dim = x.shape[axis]
    sizes = [min(chunk, dim - start) for start in range(0, dim, chunk)]
    return split(x, sizes, axis)


def sequence_at(sequence: list, position: int):
    """Negative positions count from the end."""
    if not -len(sequence) <= position < len(sequence):
        raise Invalid(f"position {position} outside {len(sequence)} pieces")
    return sequence[position]


INT_LIMITS = {np.dtype(np.int64): 2**63, np.dtype(np.int32): 2**31}


def integer_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Add, Sub, Mul, Div, Max, Min and Equal of integer tensors (broadcast): Div truncates
    toward zero, results wrap to the element type as onnxruntime's CPU kernels do."""
    a, b = np.broadcast_arrays(a, b)
    limit = INT_LIMITS[a.dtype]
    out = []
    for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()):
        if op == "Div":
            if y == 0:
                raise Invalid("integer division by zero")
            quotient = abs(x) // abs(y)
            out.append(quotient if (x >= 0) == (y >= 0) else -quotient)
        else:
            out.append({"Add": x + y, "Sub": x - y, "Mul": x * y, "Max": max(x, y), "Min": min(x, y),
                        "Equal": int(x == y)}[op])
    if op == "Equal":
        return np.array(out, dtype=bool).reshape(a.shape)
    wrapped = [(v + limit) % (2 * limit) - limit for v in out]
    return np.array(wrapped, dtype=a.dtype).reshape(a.shape)
