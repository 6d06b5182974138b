"""Operator specs for the random model generator, written against the ONNX operator definitions.

An `OpSpec` says which element types and ranks an operator's main input may have (restricted to
what onnxruntime's CPU provider implements, measured with ort 1.32), the lowest opset at which we
emit it, and a `build` function that draws attributes and constant inputs from the RNG, applies the
operator's type and shape rule, and emits the node. `build` returns None when the chosen input does
not fit (for example Squeeze on a tensor with no static size-1 axis); the generator then tries
another operator. Shapes are valid by construction: each rule computes the concrete output size
for the case's symbol bindings and keeps a dim static only when ONNX shape inference can know it.

Elementwise, reduction and softmax-like ops live here; layout and tensor movement in
`opspecs_layout`; convolution, pooling, matrix products, normalisation and control flow in
`opspecs_nn`. `OP_SPECS` joins them.
"""

from __future__ import annotations

import numpy as np

from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, BOOL, F16, F32, FLOATS, I32, I64, MAX_NUMEL, MAX_RANK, NP_TYPES, NUMERIC,
    Dim, GraphBuilder, OpSpec, Value, broadcast_dims, maybe_negative, numel, scalar,
)
from onnxrefine.fuzz.opspecs_layout import (  # noqa: F401 - draw_slice, emit_*: fuzz/patterns.py uses ops.*
    build_concat, build_constant_of_shape, build_expand, build_flatten, build_gather,
    build_shape, build_size, build_slice, build_split, build_squeeze, build_tile, build_transpose,
    build_unsqueeze, draw_slice, emit_expand, emit_squeeze, emit_unsqueeze,
)
from onnxrefine.fuzz.opspecs_nn import NN_SPECS, build_pad, build_reshape


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
