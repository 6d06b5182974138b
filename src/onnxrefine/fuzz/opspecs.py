"""Operator specs for the random model generator, written against the ONNX operator definitions.

An `OpSpec` says which element types and ranks an operator's main input may have (restricted to
what onnxruntime's CPU provider implements, measured with ort 1.32), the lowest opset at which we
emit it, and a `build` function that draws attributes and constant inputs from the RNG, applies the
operator's type and shape rule, and emits the node. `build` returns None when the chosen input does
not fit (for example Squeeze on a tensor with no static size-1 axis); the generator then tries
another operator. Shapes are valid by construction: each rule computes the concrete output size
for the case's symbol bindings and keeps a dim static only when ONNX shape inference can know it.

Layout and tensor-movement ops live here; convolution, pooling, matrix products, normalisation and
control flow are in `opspecs_nn`. `OP_SPECS` joins both.
"""

from __future__ import annotations

import numpy as np

from onnx import numpy_helper

from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, BOOL, F16, F32, FLOATS, I32, I64, MAX_NUMEL, MAX_RANK, NP_TYPES, NUMERIC,
    Dim, GraphBuilder, OpSpec, Value, broadcast_dims, maybe_negative, numel, product, scalar,
)
from onnxrefine.fuzz.opspecs_nn import NN_SPECS, build_pad, build_reshape

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# --- operands ---------------------------------------------------------------------------------

def const_broadcast_shape(g: GraphBuilder, x: Value) -> list[int]:
    """A constant shape that broadcasts against x without growing it (mostly)."""
    keep = g.randint(0, x.rank)
    shape = []
    for dim in x.dims[x.rank - keep:]:
        shape.append(dim.size if dim.is_static and g.chance(0.6) else 1)
    if (g.chance(0.05) and x.rank < MAX_RANK and 2 * x.numel <= MAX_NUMEL and keep == x.rank
            and x.shape_vals is None):
        shape = [2] + shape
    return shape


def flat_compatible(x: Value, other_dims, other_flat: bool = False) -> bool:
    """ONNX data propagation flattens int64 operands of Add/Sub/Mul (shape arithmetic), and
    unsqueezed vectors of any type, then needs equal element counts or a single element; other
    broadcasts of such operands fail strict inference with data_prop although they are valid."""
    if x.dtype != I64 and not x.flat_data and not other_flat:
        return True
    if x.dtype == I64 and (x.flat_data or other_flat) and x.rank != len(other_dims):
        # onnxruntime's data propagation miscounts an unsqueezed int64 (shape) vector against an
        # operand of another rank ("Invalid rank for Mul broadcasting: (3) vs (5)").
        return False
    sizes = {x.numel, numel(other_dims)}
    return len(sizes) == 1 or 1 in sizes


def operand(g: GraphBuilder, x: Value, *, pool_ok: bool = True, values=None) -> tuple[str, tuple]:
    """A second operand of x's type that broadcasts with x: a pool value, x itself, or a constant."""
    if pool_ok and g.chance(0.5):
        def fits(v: Value) -> bool:
            dims = broadcast_dims(x.dims, v.dims) if v.dtype == x.dtype and v is not x else None
            # ONNX data propagation treats Shape-derived operands as 1-D and rejects other ranks.
            mixes_shape = (x.shape_vals is not None or v.shape_vals is not None) and v.rank != x.rank
            return (dims is not None and numel(dims) <= MAX_NUMEL and not mixes_shape
                    and flat_compatible(x, v.dims, v.flat_data))
        other = g.pick(fits)
        if other is not None:
            return other.name, other.dims
    if pool_ok and g.chance(0.1):
        return x.name, x.dims
    shape = const_broadcast_shape(g, x)
    if not flat_compatible(x, [Dim.static(d) for d in shape]):
        shape = [1] * len(shape)
    if values is not None:
        array = np.array(g.choice(values), dtype=NP_TYPES[x.dtype]).reshape([1] * len(shape))
        array = np.broadcast_to(array, shape).copy()
    else:
        array = g.random_array(x.dtype, shape)
    return g.const(array), tuple(Dim.static(s) for s in shape)


# --- elementwise ------------------------------------------------------------------------------

def unary(op: str, guard_domain: bool = False):
    def build(g: GraphBuilder, x: Value):
        if guard_domain and g.chance(0.5):
            x = g.node1("Abs", [x.name], x.dtype, x.dims)
        return [g.node1(op, [x.name], x.dtype, x.dims)]
    return build


def binary(op: str):
    def build(g: GraphBuilder, x: Value):
        if op == "Div" and x.dtype == I64:
            # A computed integer divisor could be 0 (or -1 against INT64_MIN): both trap at run time.
            other, dims = operand(g, x, pool_ok=False, values=[2, 3, -2, 5, 7])
        elif op == "Pow" and x.dtype == I64:
            other, dims = operand(g, x, pool_ok=False, values=[0, 1, 2])
        elif op == "Pow" and g.chance(0.8):
            other, dims = operand(g, x, pool_ok=False, values=[2.0, 3.0, 0.5, -1.0, 1.0])
        else:
            other, dims = operand(g, x)
        out = broadcast_dims(x.dims, dims)
        if numel(out) > MAX_NUMEL:
            return None
        swap = g.chance(0.3) and not (op in ("Div", "Pow") and x.dtype == I64)
        inputs = [other, x.name] if swap else [x.name, other]
        return [g.node1(op, inputs, x.dtype, out)]
    return build


def variadic(op: str):
    def build(g: GraphBuilder, x: Value):
        inputs, dims = [x.name], x.dims
        for _ in range(g.randint(0, 2)):
            name, other = operand(g, x)
            merged = broadcast_dims(dims, other)
            if merged is None or numel(merged) > MAX_NUMEL:
                continue
            inputs.append(name)
            dims = merged
        return [g.node1(op, inputs, x.dtype, dims)]
    return build


def build_clip(g: GraphBuilder, x: Value):
    lo = hi = ""
    low_value, high_value = (-2, 3) if x.dtype == I64 else (round(-2 * g.rng.random(), 2), 6.0)
    if g.chance(0.7):
        lo = scalar(g, x.dtype, low_value)
    if g.chance(0.7):
        hi = scalar(g, x.dtype, high_value)
    inputs = [x.name, lo, hi] if hi else ([x.name, lo] if lo else [x.name])
    return [g.node1("Clip", inputs, x.dtype, x.dims)]


def bool_condition(g: GraphBuilder, x: Value) -> tuple[str, tuple]:
    """A bool tensor that broadcasts with x."""
    def fits(v):
        return v.dtype == BOOL and broadcast_dims(x.dims, v.dims) is not None
    cond = g.pick(fits) if g.chance(0.5) else None
    if cond is not None:
        return cond.name, cond.dims
    shape = const_broadcast_shape(g, x)
    return g.const(g.random_array(BOOL, shape), "cond"), tuple(Dim.static(s) for s in shape)


def build_where(g: GraphBuilder, x: Value):
    cond, cdims = bool_condition(g, x)
    other, odims = operand(g, x)
    dims = broadcast_dims(broadcast_dims(x.dims, odims), cdims)
    if dims is None or numel(dims) > MAX_NUMEL:
        return None
    branches = [x.name, other] if g.chance(0.5) else [other, x.name]
    return [g.node1("Where", [cond] + branches, x.dtype, dims)]


def build_cast(g: GraphBuilder, x: Value):
    if x.dtype in FLOATS and g.chance(0.3):
        # Lossy round trips: the values change, and rewriting them away is a bug.
        middle = g.choice([I32, F16, I64, BOOL]) if x.dtype != F16 else g.choice([I32, I64, BOOL])
        y = g.node1("Cast", [x.name], middle, x.dims, to=middle)
        return [g.node1("Cast", [y.name], x.dtype, x.dims, to=x.dtype)]
    to = g.choice(sorted(ALL_TYPES))
    return [g.node1("Cast", [x.name], to, x.dims, to=to)]


def build_softmax(op: str):
    def build(g: GraphBuilder, x: Value):
        axis = maybe_negative(g, g.randint(0, x.rank - 1), x.rank)
        attrs = {} if g.chance(0.3) and x.rank and axis in (-1, x.rank - 1) else {"axis": axis}
        return [g.node1(op, [x.name], x.dtype, x.dims, **attrs)]
    return build


def build_argmax(g: GraphBuilder, x: Value):
    axis = g.randint(0, x.rank - 1)
    keepdims = g.choice([0, 1])
    attrs = {"axis": maybe_negative(g, axis, x.rank), "keepdims": keepdims}
    if g.chance(0.3):
        attrs["select_last_index"] = 1
    dims = list(x.dims)
    if keepdims:
        dims[axis] = Dim.static(1)
    else:
        del dims[axis]
    return [g.node1("ArgMax", [x.name], I64, dims, **attrs)]


def emit_reduce(g: GraphBuilder, op: str, x: Value, axes, keepdims: int, noop_empty: int = 0):
    """Reduce over `axes` (None: all axes), with axes as an input from opset 18 (13 for ReduceSum)."""
    attrs = {"keepdims": keepdims}
    inputs = [x.name]
    norm = sorted({a % x.rank for a in axes}) if axes else []
    if axes:
        if g.opset >= 18 or op == "ReduceSum":
            inputs.append(g.ints(axes, "axes"))
        else:
            attrs["axes"] = list(axes)
    if noop_empty and not axes:
        attrs["noop_with_empty_axes"] = 1
        dims = x.dims
    else:
        reduced = norm if axes else list(range(x.rank))
        dims = [Dim.static(1) if i in reduced else d for i, d in enumerate(x.dims)
                if keepdims or i not in reduced]
    return g.node1(op, inputs, x.dtype, dims, **attrs)


def reduce(op: str):
    def build(g: GraphBuilder, x: Value):
        if x.rank == 0 or g.chance(0.1):
            axes = None
        else:
            axes = [maybe_negative(g, a, x.rank)
                    for a in sorted(g.sample(range(x.rank), g.randint(1, x.rank)))]
        noop = 1 if axes is None and g.chance(0.2) and (g.opset >= 18 or op == "ReduceSum") else 0
        return [emit_reduce(g, op, x, axes, g.choice([0, 1]), noop)]
    return build


def build_dropout(g: GraphBuilder, x: Value):
    inputs = [x.name]
    if g.chance(0.4):
        inputs.append(scalar(g, F32, g.choice([0.0, 0.1, 0.5])))
        if g.chance(0.5):
            inputs.append(g.const(np.array(False)))
    attrs = {"seed": g.randint(0, 100)} if g.chance(0.2) else {}
    if g.chance(0.15):
        return g.node("Dropout", inputs, [(x.dtype, x.dims), (BOOL, x.dims)], **attrs)
    return [g.node1("Dropout", inputs, x.dtype, x.dims, **attrs)]


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


OP_SPECS: tuple[OpSpec, ...] = (
    OpSpec("Add", NUMERIC, (0, 6), binary("Add"), 2.0),
    OpSpec("Sub", NUMERIC, (0, 6), binary("Sub")),
    OpSpec("Mul", NUMERIC, (0, 6), binary("Mul"), 1.5),
    OpSpec("Div", NUMERIC, (0, 6), binary("Div")),
    OpSpec("Pow", NUMERIC, (0, 6), binary("Pow"), 0.5),
    OpSpec("Min", NUMERIC, (0, 6), variadic("Min"), 0.5),
    OpSpec("Max", NUMERIC, (0, 6), variadic("Max"), 0.5),
    OpSpec("Relu", FLOATS, (0, 6), unary("Relu"), 1.5),
    OpSpec("Sigmoid", FLOATS, (0, 6), unary("Sigmoid")),
    OpSpec("Tanh", FLOATS, (0, 6), unary("Tanh"), 0.5),
    OpSpec("Exp", FLOATS, (0, 6), unary("Exp"), 0.7),
    OpSpec("Log", FLOATS, (0, 6), unary("Log", guard_domain=True), 0.5),
    OpSpec("Sqrt", FLOATS, (0, 6), unary("Sqrt", guard_domain=True), 0.5),
    OpSpec("Abs", NUMERIC, (0, 6), unary("Abs"), 0.5),
    OpSpec("Neg", NUMERIC, (0, 6), unary("Neg"), 0.5),
    OpSpec("Clip", NUMERIC, (0, 6), build_clip, 0.7),
    OpSpec("Identity", ALL_TYPES, (0, 6), unary("Identity"), 0.4),
    OpSpec("Where", NUMERIC, (0, 6), build_where, 0.7),
    OpSpec("Cast", ALL_TYPES, (0, 6), build_cast),
    OpSpec("Softmax", FLOATS, (1, 6), build_softmax("Softmax"), 0.7),
    OpSpec("LogSoftmax", FLOATS, (1, 6), build_softmax("LogSoftmax"), 0.5),
    OpSpec("ArgMax", NUMERIC, (1, 6), build_argmax, 0.7),
    OpSpec("ReduceSum", NUMERIC, (0, 6), reduce("ReduceSum"), 0.6),
    OpSpec("ReduceMean", NUMERIC, (0, 6), reduce("ReduceMean"), 0.5),
    OpSpec("ReduceMax", NUMERIC, (0, 6), reduce("ReduceMax"), 0.5),
    OpSpec("ReduceMin", NUMERIC, (0, 6), reduce("ReduceMin"), 0.4),
    OpSpec("Dropout", FLOATS, (0, 6), build_dropout, 0.4),
    OpSpec("Transpose", ALL_TYPES, (1, 6), build_transpose, 1.0),
    OpSpec("Squeeze", ALL_TYPES, (1, 6), build_squeeze, 1.0),
    OpSpec("Unsqueeze", ALL_TYPES, (0, 5), build_unsqueeze, 0.8),
    OpSpec("Flatten", ALL_TYPES, (1, 6), build_flatten, 0.5),
    OpSpec("Reshape", ALL_TYPES, (0, 6), build_reshape, 1.5),
    OpSpec("Concat", ALL_TYPES, (1, 6), build_concat, 1.0),
    OpSpec("Split", ALL_TYPES, (1, 6), build_split, 0.6),
    OpSpec("Slice", ALL_TYPES, (1, 6), build_slice, 1.0),
    OpSpec("Gather", ALL_TYPES, (1, 6), build_gather, 0.8),
    OpSpec("Shape", ALL_TYPES, (1, 6), build_shape, 0.8),
    OpSpec("Size", ALL_TYPES, (0, 6), build_size, 0.2),
    OpSpec("Expand", ALL_TYPES, (0, 6), build_expand, 0.6),
    OpSpec("Tile", ALL_TYPES, (1, 6), build_tile, 0.4),
    OpSpec("ConstantOfShape", ALL_TYPES, (1, 6), build_constant_of_shape, 0.4),
    OpSpec("Pad", ALL_TYPES, (1, 6), build_pad, 0.8),
) + NN_SPECS
