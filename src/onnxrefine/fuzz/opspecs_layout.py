"""Operator specs for layout and tensor-movement operators: Transpose, Squeeze, Unsqueeze, Flatten,
Concat, Split, Slice, Gather, Shape, Size, Expand, Tile, ConstantOfShape.

Same contract as `opspecs` (which lists them in `OP_SPECS`): each build function applies the
ONNX shape rule for the concrete symbol bindings and emits a node that is valid by construction,
or returns None.
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, F32, I64, MAX_NUMEL, MAX_RANK, Dim, GraphBuilder, Value, broadcast_dims, maybe_negative, numel,
    product,
)

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# --- layout -----------------------------------------------------------------------------------

def build_transpose(g: GraphBuilder, x: Value):
    roll = g.rng.random()
    if roll < 0.1:
        return [g.node1("Transpose", [x.name], x.dtype, x.dims[::-1])]
    perm = list(range(x.rank)) if roll < 0.2 else [int(p) for p in g.rng.permutation(x.rank)]
    return [g.node1("Transpose", [x.name], x.dtype, [x.dims[p] for p in perm], perm=perm)]


def emit_squeeze(g: GraphBuilder, x: Value, axes):
    norm = {a % x.rank for a in axes}
    dims = [d for i, d in enumerate(x.dims) if i not in norm]
    return g.node1("Squeeze", [x.name, g.ints(axes, "axes")], x.dtype, dims)


def build_squeeze(g: GraphBuilder, x: Value):
    ones = [i for i, d in enumerate(x.dims) if d.is_static and d.size == 1]
    if not ones:
        return None
    if x.is_static and g.chance(0.2):
        return [g.node1("Squeeze", [x.name], x.dtype, [d for d in x.dims if d.size != 1])]
    axes = [maybe_negative(g, a, x.rank) for a in g.sample(ones, g.randint(1, len(ones)))]
    return [emit_squeeze(g, x, axes)]


def emit_unsqueeze(g: GraphBuilder, x: Value, axes):
    out_rank = x.rank + len(axes)
    norm = {a % out_rank for a in axes}
    rest = iter(x.dims)
    dims = [Dim.static(1) if i in norm else next(rest) for i in range(out_rank)]
    y = g.node1("Unsqueeze", [x.name, g.ints(axes, "axes")], x.dtype, dims)
    y.flat_data = x.rank <= 1
    return y


def build_unsqueeze(g: GraphBuilder, x: Value):
    count = g.randint(1, min(2, MAX_RANK - x.rank)) if x.rank < MAX_RANK else 0
    if count == 0:
        return None
    out_rank = x.rank + count
    axes = [maybe_negative(g, a, out_rank) for a in g.sample(range(out_rank), count)]
    return [emit_unsqueeze(g, x, axes)]


def build_flatten(g: GraphBuilder, x: Value):
    axis = g.randint(0, x.rank)
    attrs = {} if axis == 1 and g.chance(0.3) else {"axis": maybe_negative(g, axis, x.rank)}
    dims = [product(x.dims[:axis]), product(x.dims[axis:])]
    return [g.node1("Flatten", [x.name], x.dtype, dims, **attrs)]


def build_concat(g: GraphBuilder, x: Value):
    if x.shape_vals is not None and g.chance(0.6):
        return build_shape_concat(g, x)
    axis = g.randint(0, x.rank - 1)
    parts, axis_dims = [x.name], [x.dims[axis]]
    fixed_static = all(d.is_static for i, d in enumerate(x.dims) if i != axis)

    def matches(v: Value) -> bool:
        return (v.dtype == x.dtype and v.rank == x.rank
                and all(a.key == b.key for i, (a, b) in enumerate(zip(v.dims, x.dims)) if i != axis))
    for _ in range(g.randint(1, 2)):
        roll = g.rng.random()
        other = g.pick(matches) if roll < 0.5 else None
        if other is not None:
            parts.append(other.name)
            axis_dims.append(other.dims[axis])
        elif roll < 0.75 or not fixed_static:
            parts.append(x.name)
            axis_dims.append(x.dims[axis])
        else:
            shape = list(x.sizes)
            shape[axis] = g.randint(1, 3)
            parts.append(g.const(g.random_array(x.dtype, shape)))
            axis_dims.append(Dim.static(shape[axis]))
    total = Dim.static(sum(d.size for d in axis_dims)) if all(d.is_static for d in axis_dims) \
        else Dim.computed(sum(d.size for d in axis_dims))
    dims = list(x.dims)
    dims[axis] = total
    if numel(dims) > MAX_NUMEL:
        return None
    return [g.node1("Concat", parts, x.dtype, dims, axis=maybe_negative(g, axis, x.rank))]


def build_shape_concat(g: GraphBuilder, x: Value):
    """Concat of shape tensors: the result still holds known dims."""
    parts, vals = [x.name], list(x.shape_vals)
    other = g.pick(lambda v: v.shape_vals is not None and v is not x)
    if other is not None and g.chance(0.6):
        parts.append(other.name)
        vals += other.shape_vals
    else:
        extra = [g.randint(1, 3)]
        parts.insert(g.randint(0, 1), g.ints(extra, "dims"))
        vals = vals + [Dim.static(extra[0])] if parts[0] == x.name else [Dim.static(extra[0])] + vals
    if len(vals) > MAX_RANK:
        return None
    return [g.node1("Concat", parts, I64, [Dim.static(len(vals))], tuple(vals), axis=0)]


def build_split(g: GraphBuilder, x: Value):
    axes = [i for i, d in enumerate(x.dims) if d.is_static and d.size >= 2]
    if not axes:
        return None
    axis = g.choice(axes)
    size = x.dims[axis].size
    attrs = {"axis": maybe_negative(g, axis, x.rank)}
    inputs = [x.name]
    count = g.randint(2, min(3, size))
    chunk = -(-size // count)
    if g.opset >= 18 and g.chance(0.4) and chunk * (count - 1) < size:
        attrs["num_outputs"] = count
        sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
    else:
        cuts = sorted(g.sample(range(1, size), count - 1))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [size])]
        inputs.append(g.ints(sizes, "split"))
    outs = []
    for piece in sizes:
        dims = list(x.dims)
        dims[axis] = Dim.static(piece)
        outs.append((x.dtype, dims))
    return g.node("Split", inputs, outs, **attrs)


def slice_length(size: int, start: int, end: int, step: int) -> int:
    # ONNX Slice clamps like Python slicing, including the -1 end for negative steps.
    return len(range(size)[slice(start, end, step)])


def draw_slice(g: GraphBuilder, size: int) -> tuple[int, int, int]:
    for _ in range(10):
        step = g.choice([1, 1, 1, 2, -1, -2])
        start = g.choice([g.randint(-size - 1, size), 0, -1, INT64_MIN if step < 0 else 0])
        end = g.choice([g.randint(-size - 2, size + 1), INT64_MAX if step > 0 else INT64_MIN, -1])
        if start == INT64_MIN:
            start = INT64_MAX
        if slice_length(size, start, end, step) >= 1:
            return start, end, step
    return 0, size, 1


def build_slice(g: GraphBuilder, x: Value):
    if x.shape_vals is not None and g.chance(0.6):
        start, end, step = draw_slice(g, len(x.shape_vals))
        vals = x.shape_vals[slice(start, end, step)]
        inputs = [x.name, g.ints([start]), g.ints([end])]
        if step != 1:
            inputs += [g.ints([0]), g.ints([step])]
        return [g.node1("Slice", inputs, I64, [Dim.static(len(vals))], tuple(vals))]
    dims = list(x.dims)
    if x.rank and g.opset >= 15 and g.chance(0.2):
        # Ends computed from the input's own shape: Slice(x, s, Shape(x)[a:a+1], [a]).
        axis = g.randint(0, x.rank - 1)
        size = dims[axis].size
        start = g.randint(0, size - 1)
        end = g.node1("Shape", [x.name], I64, [Dim.static(1)], (dims[axis],),
                      start=axis, end=axis + 1)
        dims[axis] = Dim.static(size - start) if dims[axis].is_static else Dim.computed(size - start)
        inputs = [x.name, g.ints([start]), end.name, g.ints([maybe_negative(g, axis, x.rank)])]
        return [g.node1("Slice", inputs, x.dtype, dims)]
    axes = sorted(g.sample(range(x.rank), g.randint(1, x.rank)))
    starts, ends, steps = [], [], []
    for axis in axes:
        start, end, step = draw_slice(g, dims[axis].size)
        starts.append(start), ends.append(end), steps.append(step)
        length = slice_length(dims[axis].size, start, end, step)
        dims[axis] = Dim.static(length) if dims[axis].is_static else Dim.computed(length)
    inputs = [x.name, g.ints(starts, "starts"), g.ints(ends, "ends")]
    default_axes = axes == list(range(len(axes)))
    if not default_axes or any(s != 1 for s in steps) or g.chance(0.5):
        inputs.append(g.ints([maybe_negative(g, a, x.rank) for a in axes], "axes"))
        if any(s != 1 for s in steps) or g.chance(0.3):
            inputs.append(g.ints(steps, "steps"))
    return [g.node1("Slice", inputs, x.dtype, dims)]


def build_gather(g: GraphBuilder, x: Value):
    axis = g.randint(0, x.rank - 1)
    size = x.dims[axis].size
    form = g.choice(["scalar", "vector", "vector", "matrix"])
    shape = {"scalar": (), "vector": (g.randint(1, 3),), "matrix": (2, 2)}[form]
    indices = g.rng.integers(-size, size, size=shape).astype(np.int64)
    dims = x.dims[:axis] + tuple(Dim.static(s) for s in shape) + x.dims[axis + 1:]
    if numel(dims) > MAX_NUMEL:
        return None
    vals = None
    if x.shape_vals is not None and form == "vector":
        vals = tuple(x.shape_vals[int(i)] for i in indices)
    attrs = {"axis": maybe_negative(g, axis, x.rank)} if axis or g.chance(0.5) else {}
    return [g.node1("Gather", [x.name, g.ints(indices, "idx")], x.dtype, dims, vals, **attrs)]


def build_shape(g: GraphBuilder, x: Value):
    if g.opset >= 15 and x.rank and g.chance(0.4):
        start = g.randint(-x.rank, x.rank - 1)
        end = g.choice([g.randint(-x.rank, x.rank), x.rank, None])
        vals = x.dims[start:end]
        if not vals:
            return None
        attrs = {"start": start} if end is None else {"start": start, "end": end}
    else:
        vals, attrs = x.dims, {}
    return [g.node1("Shape", [x.name], I64, [Dim.static(len(vals))], tuple(vals), **attrs)]


def build_size(g: GraphBuilder, x: Value):
    return [g.node1("Size", [x.name], I64, [])]


def emit_expand(g: GraphBuilder, x: Value, target: list[int]):
    dims = broadcast_dims(x.dims, tuple(Dim.static(t) for t in target))
    return g.node1("Expand", [x.name, g.ints(target, "shape")], x.dtype, dims)


def build_expand(g: GraphBuilder, x: Value):
    if g.chance(0.3):
        def fits(v):
            dims = broadcast_dims(x.dims, v.dims)
            return v.rank and dims is not None and numel(dims) <= MAX_NUMEL
        other = g.pick(fits)
        if other is not None:
            shape = g.node1("Shape", [other.name], I64, [Dim.static(other.rank)], other.dims)
            return [g.node1("Expand", [x.name, shape.name], x.dtype,
                            broadcast_dims(x.dims, other.dims))]
    target = [g.randint(1, 3) if d.is_static and d.size == 1 and g.chance(0.5)
              else (d.size if d.is_static and g.chance(0.5) else 1) for d in x.dims]
    if g.chance(0.2) and x.rank < MAX_RANK:
        target = [g.randint(1, 2)] + target
    if numel([Dim.static(t) for t in target]) * x.numel > MAX_NUMEL:
        return None
    return [emit_expand(g, x, target)]


def build_tile(g: GraphBuilder, x: Value):
    repeats = [g.choice([1, 1, 2]) for _ in x.dims]
    dims = [d if r == 1 else (Dim.static(d.size * r) if d.is_static else Dim.computed(d.size * r))
            for d, r in zip(x.dims, repeats)]
    if numel(dims) > MAX_NUMEL:
        return None
    return [g.node1("Tile", [x.name, g.ints(repeats, "repeats")], x.dtype, dims)]


def build_constant_of_shape(g: GraphBuilder, x: Value):
    if x.shape_vals is None:
        if x.rank == 0:
            return None
        x = g.node1("Shape", [x.name], I64, [Dim.static(x.rank)], x.dims)
    if numel(x.shape_vals) > MAX_NUMEL:
        return None
    if g.chance(0.2):
        return [g.node1("ConstantOfShape", [x.name], F32, x.shape_vals)]
    dtype = g.choice(sorted(ALL_TYPES))
    fill = g.random_array(dtype, (1,))
    return [g.node1("ConstantOfShape", [x.name], dtype, x.shape_vals,
                    value=numpy_helper.from_array(fill))]
