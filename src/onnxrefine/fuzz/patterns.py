"""Targeted generation: grow graphs around the pattern an optimizer pass looks for.

`PATTERNS` holds each `Pattern` by name: a builder that emits the pattern on a suitable pool value
(or on a fresh graph input), and the op chains of which at least one must appear in the graph.
Builders deliberately mix the forms a pass may rewrite with near misses it must leave alone
(Reshape's 0 after a Reshape, Shape with start/end, Squeeze with negative axes, Pad values other
than zero, bias shapes that do not broadcast per channel), since those are where rewrites go wrong.
`TARGET_PATTERNS` maps pass names to them as each pass's declaration says (its `fuzz` field:
passes/registry.py); the pass names users know from onnxoptimizer (the 39 of its default
fuse-and-elimination set) all have one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, BOOL, F16, F32, F64, FLOATS, I64, MAX_NUMEL, NP_TYPES, NUMERIC, Dim, GraphBuilder, Value,
    broadcast_dims, maybe_negative, numel, scalar,
)
from onnxrefine.fuzz import graphquery as q
from onnxrefine.fuzz import opspecs as ops
from onnxrefine.fuzz import opspecs_nn as nn


class UnknownTargetError(BadInputError, ValueError):
    """A targeted-generation name that no pattern is registered for."""


@dataclass(frozen=True)
class Pattern:
    build: Callable[[GraphBuilder], None]
    chains: tuple[tuple[str, ...], ...]
    check: Callable[[onnx.ModelProto], bool] | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        return self.chains[0] if self.chains else ()

    def present(self, model: onnx.ModelProto) -> bool:
        """Whether the model contains the pattern (one of the chains, or the structural check)."""
        if self.check is not None and not self.check(model):
            return False
        return not self.chains or any(q.has_chain(model, chain) for chain in self.chains)


# --- sources ----------------------------------------------------------------------------------

def source(g: GraphBuilder, accept, make_dims, dtypes=(F32,)) -> Value:
    """A pool value `accept` takes (half the time), else a fresh graph input."""
    found = g.pick(accept) if g.chance(0.5) else None
    if found is not None:
        return found
    return g.add_input(g.choice(dtypes), make_dims(g))


def image_dims(g: GraphBuilder, rank: int = 4, min_spatial: int = 3) -> tuple[Dim, ...]:
    batch = g.symbol("N") if g.chance(0.4) else Dim.static(g.randint(1, 2))
    spatial = [Dim.static(g.randint(min_spatial, 7)) for _ in range(rank - 2)]
    if g.chance(0.15):
        spatial[-1] = g.symbol("L", 3, 6)
    return (batch, Dim.static(g.randint(1, 4)), *spatial)


def image(g: GraphBuilder, dtypes=(F32, F32, F16), min_spatial: int = 3) -> Value:
    def fits(v: Value) -> bool:
        return (v.dtype in dtypes and v.rank in (3, 4) and v.dims[1].is_static
                and all(d.size >= min_spatial for d in v.dims[2:]) and v.numel <= MAX_NUMEL // 4)
    return source(g, fits, lambda g: image_dims(g, g.choice([4, 4, 3]), min_spatial), dtypes)


def any_dims(g: GraphBuilder) -> tuple[Dim, ...]:
    rank = g.randint(1, 4)
    dims = [Dim.static(g.choice([1, 2, 3, 4, 6])) for _ in range(rank)]
    if rank >= 2 and g.chance(0.4):
        dims[0] = g.symbol("N")
    return tuple(dims)


def tensor(g: GraphBuilder, dtypes=(F32,), min_rank: int = 1, max_rank: int = 6) -> Value:
    def fits(v: Value) -> bool:
        return v.dtype in dtypes and min_rank <= v.rank <= max_rank and v.numel <= MAX_NUMEL // 4
    def dims(g):
        d = any_dims(g)
        while len(d) < min_rank:
            d = d + (Dim.static(g.randint(1, 4)),)
        return d[:max_rank]
    return source(g, fits, dims, dtypes)


def matrix(g: GraphBuilder, dtypes=(F32,)) -> Value:
    def fits(v: Value) -> bool:
        return v.dtype in dtypes and v.rank == 2 and v.dims[1].is_static
    return source(g, fits, lambda g: (g.symbol("N") if g.chance(0.4) else Dim.static(g.randint(1, 5)),
                                      Dim.static(g.randint(1, 8))), dtypes)


# --- fusions ----------------------------------------------------------------------------------

def conv_bn(g: GraphBuilder):
    x = image(g)
    y = (nn.build_conv_transpose(g, x) or [None])[0] if g.chance(0.2) else None
    for _ in range(4):
        y = y or nn.emit_conv(g, x)
    if y is not None:
        nn.emit_batchnorm(g, y)


def conv_add_bias(g: GraphBuilder):
    y = nn.emit_conv(g, image(g), bias=g.chance(0.3))
    if y is None:
        return
    channels = y.dims[1].size
    shapes = [[channels, 1, 1][: y.rank - 1], [1, channels] + [1] * (y.rank - 2), [1]]
    if y.dims[-1].is_static:
        shapes.append([1] * (y.rank - 1) + [y.dims[-1].size])   # broadcasts along width, not channels
    shape = g.choice(shapes)
    bias = g.const(g.random_array(y.dtype, shape), "bias")
    dims = broadcast_dims(y.dims, tuple(Dim.static(s) for s in shape))
    g.node1("Add", [y.name, bias] if g.chance(0.7) else [bias, y.name], y.dtype, dims)


def pad_before(g: GraphBuilder, x: Value, *, spatial_only: bool) -> Value:
    """A Pad on x: mostly zero constant padding of spatial axes, sometimes the near misses."""
    rank = x.rank
    begins = [0] * rank
    ends = [0] * rank
    for axis in range(2, rank):
        begins[axis], ends[axis] = g.randint(0, 2), g.randint(0, 2)
    if not spatial_only and g.chance(0.15):
        begins[1] = 1
    mode = g.weighted([("constant", 0.8), ("reflect", 0.1), ("edge", 0.1)])
    if mode == "reflect":
        begins = [min(b, max(d.size - 1, 0)) if d.is_static else 0 for b, d in zip(begins, x.dims)]
        ends = [min(e, max(d.size - 1, 0)) if d.is_static else 0 for e, d in zip(ends, x.dims)]
    inputs = [x.name, g.ints(begins + ends, "pads")]
    if mode == "constant" and g.chance(0.4):
        inputs.append(scalar(g, x.dtype, g.choice([0.0, 0.0, 1.5, -2.0])))
    dims = [d if b == e == 0 else (Dim.static(d.size + b + e) if d.is_static else Dim.computed(d.size + b + e))
            for d, b, e in zip(x.dims, begins, ends)]
    attrs = {"mode": mode} if mode != "constant" or g.chance(0.3) else {}
    return g.node1("Pad", inputs, x.dtype, dims, **attrs)


def pad_conv(g: GraphBuilder):
    x = image(g)
    nn.emit_conv(g, pad_before(g, x, spatial_only=False)) or nn.emit_conv(g, x)


def pad_pool(g: GraphBuilder):
    x = image(g, dtypes=(F32, F32, F16))
    padded = pad_before(g, x, spatial_only=True)
    op = g.choice(["MaxPool", "AveragePool"])
    if g.chance(0.3):
        nn.emit_pool(g, op, padded)
        return
    # A kernel longer than the Pad's and the pool's own padding together: a fold then gives pads
    # below the kernel, which onnxruntime accepts, so a wrong fold shows as wrong values (own
    # pads excluded by count_include_pad=0, say) instead of a model that does not load.
    widest = max((p.size - d.size for p, d in zip(padded.dims[2:], x.dims[2:])), default=0)
    own = g.randint(0, 1)
    nn.emit_pool(g, op, padded, min_kernel=min(widest, 2) + own + 1, max_pad=own)


def matmul_add(g: GraphBuilder):
    x = matrix(g, (F32, F32, F64)) if g.chance(0.8) else tensor(g, (F32,), 3, 3)
    if not x.dims[-1].is_static:
        x = matrix(g)
    y = nn.emit_matmul(g, x)
    if y is None:
        return
    cols = y.dims[-1].size
    shape = g.choice([[cols], [1, cols], [1]] + ([[y.dims[0].size, cols]] if y.rank == 2 and y.dims[0].is_static else []))
    bias = g.const(g.random_array(y.dtype, shape), "bias")
    dims = broadcast_dims(y.dims, tuple(Dim.static(s) for s in shape))
    g.node1("Add", [y.name, bias] if g.chance(0.7) else [bias, y.name], y.dtype, dims)


def transpose_gemm(g: GraphBuilder):
    x = source(g, lambda v: v.dtype == F32 and v.rank == 2 and v.dims[0].is_static,
               lambda g: (Dim.static(g.randint(1, 6)), Dim.static(g.randint(1, 6))))
    t = g.node1("Transpose", [x.name], x.dtype, x.dims[::-1], perm=[1, 0])
    nn.emit_gemm(g, t, trans_a=g.chance(0.3))


def consecutive_transposes(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 2)
    for _ in range(g.randint(2, 3)):
        x = ops.build_transpose(g, x)[0]


def with_ones(g: GraphBuilder, x: Value, count: int) -> Value:
    axes = [maybe_negative(g, a, x.rank + count) for a in g.sample(range(x.rank + count), count)]
    return ops.emit_unsqueeze(g, x, axes)


def consecutive_squeezes(g: GraphBuilder):
    x = with_ones(g, tensor(g, tuple(ALL_TYPES), 0, 4), 2)
    for _ in range(2):
        ones = [i for i, d in enumerate(x.dims) if d.is_static and d.size == 1]
        if not ones:
            return
        picked = g.sample(ones, 1 if len(ones) < 2 else g.randint(1, len(ones) - 1))
        x = ops.emit_squeeze(g, x, [maybe_negative(g, a, x.rank) for a in picked])


def consecutive_unsqueezes(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0, 3)
    for _ in range(2):
        x = with_ones(g, x, g.randint(1, 2 if x.rank < 4 else 1))


def consecutive_slices(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    for _ in range(2):
        x = ops.build_slice(g, x)[0]


def consecutive_concats(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1, 4)
    axis = g.randint(0, x.rank - 1)
    for _ in range(2):
        other = g.pick(lambda v: v.dtype == x.dtype and v.rank == x.rank and all(
            a.key == b.key for i, (a, b) in enumerate(zip(v.dims, x.dims)) if i != axis))
        parts = [x.name, (other or x).name] if g.chance(0.7) else [(other or x).name, x.name]
        dims = list(x.dims)
        total = x.dims[axis].size + (other or x).dims[axis].size
        dims[axis] = Dim.static(total) if x.dims[axis].is_static and (other or x).dims[axis].is_static \
            else Dim.computed(total)
        if numel(dims) > MAX_NUMEL:
            return
        x = g.node1("Concat", parts, x.dtype, dims, axis=maybe_negative(g, axis, x.rank))
        if g.chance(0.3):
            axis = g.randint(0, x.rank - 1)


def log_softmax(g: GraphBuilder):
    x = tensor(g, (F32, F32, F64, F16), 1)
    y = ops.build_softmax("Softmax")(g, x)[0]
    g.node1("Log", [y.name], y.dtype, y.dims)


def reduce_unsqueeze(g: GraphBuilder):
    x = tensor(g, (F32, F64, I64), 1, 4)
    axes = sorted(g.sample(range(x.rank), g.randint(1, x.rank)))
    op = g.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
    y = ops.emit_reduce(g, op, x, [maybe_negative(g, a, x.rank) for a in axes], 0)
    if g.chance(0.8):
        ops.emit_unsqueeze(g, y, [maybe_negative(g, a, x.rank) for a in axes])
    else:
        with_ones(g, y, len(axes))


def concat_into_reshape(g: GraphBuilder):
    # Sometimes an empty tensor (a static 0 dim): a folded target then holds a 0 that must stay a
    # real 0 (allowzero=1), and a -1 next to it cannot be inferred.
    empty = g.opset >= 14 and g.chance(0.25)
    if empty:
        dims = [Dim.static(g.choice([1, 2, 3, 4, 6])) for _ in range(g.randint(2, 4))]
        dims[g.randint(0, len(dims) - 1)] = Dim.static(0)
        x = g.add_input(g.choice([F32, F32, I64]), tuple(dims))
    else:
        x = tensor(g, tuple(ALL_TYPES), 2)
    for _ in range(4):
        target = nn.propose_reshape(g, x)
        if len(target) >= 2 and any(source is not None for _, source in target):
            break
    else:
        target = [(d, i) for i, d in enumerate(x.dims)]
    shape = nn.computed_target(g, x, target)
    if shape is not None:
        g.allow_empty = empty
        g.node1("Reshape", [x.name, shape], x.dtype, [d for d, _ in target], **({"allowzero": 1} if empty else {}))
        g.allow_empty = False


def qkv(g: GraphBuilder):
    x = tensor(g, (F32,), 2, 3)
    if not x.dims[-1].is_static:
        x = matrix(g)
    cols = g.randint(1, 6)
    for _ in range(3):
        nn.emit_matmul(g, x, cols)


# --- no-ops -----------------------------------------------------------------------------------

def nop_cast(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0)
    y = g.node1("Cast", [x.name], x.dtype, x.dims, to=x.dtype)
    if g.chance(0.5):
        middle = g.choice([F32, F16, I64]) if x.dtype != F32 else g.choice([F16, I64])
        y = g.node1("Cast", [y.name], middle, x.dims, to=middle)
        g.node1("Cast", [y.name], x.dtype, x.dims, to=x.dtype)


def nop_dropout(g: GraphBuilder):
    ops.build_dropout(g, tensor(g, tuple(FLOATS), 0))


def nop_flatten(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1, 4)
    axis = 1 if x.rank == 2 and g.chance(0.7) else g.randint(0, x.rank)
    dims = [nn.product(x.dims[:axis]), nn.product(x.dims[axis:])]
    g.node1("Flatten", [x.name], x.dtype, dims, axis=maybe_negative(g, axis, x.rank))


def nop_pad(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    inputs = [x.name, g.ints([0] * (2 * x.rank), "pads")]
    if g.chance(0.3):
        inputs.append(scalar(g, x.dtype, 1))
    g.node1("Pad", inputs, x.dtype, x.dims, mode=g.choice(["constant", "edge", "reflect"]))


def nop_concat(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    g.node1("Concat", [x.name], x.dtype, x.dims, axis=maybe_negative(g, g.randint(0, x.rank - 1), x.rank))


def nop_split(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    axis = g.randint(0, x.rank - 1)
    if x.dims[axis].is_static and g.chance(0.5):
        g.node("Split", [x.name, g.ints([x.dims[axis].size], "split")], [(x.dtype, x.dims)], axis=axis)
    elif g.opset >= 18:
        g.node("Split", [x.name], [(x.dtype, x.dims)], axis=axis, num_outputs=1)
    else:
        g.node("Split", [x.name], [(x.dtype, x.dims)], axis=axis)


def nop_expand(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0, 5)
    choice = g.rng.random()
    if choice < 0.4:
        ops.emit_expand(g, x, [1])
    elif choice < 0.8:
        ops.emit_expand(g, x, [d.size if d.is_static else 1 for d in x.dims])
    elif not ops.build_expand(g, x):
        ops.emit_expand(g, x, [1])


def nop_transpose(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    g.node1("Transpose", [x.name], x.dtype, x.dims, perm=list(range(x.rank)))


def nop_reshape(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    roll = g.rng.random()
    if roll < 0.4:
        target = [0 if (not d.is_static or g.chance(0.5)) else d.size for d in x.dims]
        shape = g.ints(target, "shape")
    elif roll < 0.7 and x.is_static:
        shape = g.ints([d.size for d in x.dims], "shape")
    else:
        shape = g.node1("Shape", [x.name], I64, [Dim.static(x.rank)], x.dims).name
    g.node1("Reshape", [x.name, shape], x.dtype, x.dims)


UNITS = {"Add": 0, "Sub": 0, "Mul": 1, "Div": 1, "Pow": 1}


def nop_with_unit(g: GraphBuilder):
    x = tensor(g, tuple(NUMERIC), 0)
    op = g.choice(sorted(UNITS))
    shape = g.choice([[], [1], [1] * x.rank])
    if g.chance(0.15) and x.rank < 5 and x.numel * 2 <= MAX_NUMEL and x.dtype != I64 and not x.flat_data:
        shape = [2] + [d.size if d.is_static else 1 for d in x.dims]   # the unit grows the output
    unit = g.const(np.full(shape, UNITS[op], dtype=NP_TYPES[x.dtype]), "unit")
    dims = broadcast_dims(x.dims, tuple(Dim.static(s) for s in shape))
    inputs = [unit, x.name] if op in ("Add", "Mul") and g.chance(0.4) else [x.name, unit]
    g.node1(op, inputs, x.dtype, dims)


def monotone_argmax(g: GraphBuilder):
    x = tensor(g, (F32, F32, F16, F64), 1)
    big = g.node1("Mul", [x.name, scalar(g, x.dtype, g.choice([10.0, 50.0, 100.0]))], x.dtype, x.dims) \
        if g.chance(0.6) else x
    y = g.node1(g.choice(["Exp", "Exp", "Softmax", "Sigmoid"]), [big.name], x.dtype, x.dims)
    ops.build_argmax(g, y)


def identity(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0)
    for _ in range(g.randint(1, 2)):
        x = g.node1("Identity", [x.name], x.dtype, x.dims)


def shape_op(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    s = shape_with_start(g, x)
    if g.chance(0.5):
        ops.build_constant_of_shape(g, s)


def shape_with_start(g: GraphBuilder, x: Value) -> Value:
    if g.opset >= 15 and g.chance(0.7):
        start = g.randint(-x.rank, x.rank - 1)
        end = g.choice([None, x.rank, g.randint(start % x.rank + 1, x.rank)])
        vals = x.dims[start:end]
        attrs = {"start": start} if end is None else {"start": start, "end": end}
        return g.node1("Shape", [x.name], I64, [Dim.static(len(vals))], tuple(vals), **attrs)
    return g.node1("Shape", [x.name], I64, [Dim.static(x.rank)], x.dims)


def shape_gather(g: GraphBuilder):
    ops.build_gather(g, shape_with_start(g, tensor(g, tuple(ALL_TYPES), 1)))


def slice_after_shape(g: GraphBuilder):
    s = shape_with_start(g, tensor(g, tuple(ALL_TYPES), 1))
    start, end, step = ops.draw_slice(g, s.dims[0].size)
    vals = s.shape_vals[slice(start, end, step)]
    inputs = [s.name, g.ints([start]), g.ints([end])] + ([g.ints([0]), g.ints([step])] if step != 1 else [])
    g.node1("Slice", inputs, I64, [Dim.static(len(vals))], tuple(vals))


# --- cleanup ----------------------------------------------------------------------------------

def deadend(g: GraphBuilder):
    x = tensor(g, tuple(FLOATS), 0)
    y = g.node1(g.choice(["Relu", "Neg", "Exp"]), [x.name], x.dtype, x.dims)
    z = g.node1("Identity", [y.name], y.dtype, y.dims) if g.chance(0.5) else y
    g.no_output.update({y.name, z.name})
    g.pool.remove(z)
    if z is not y:
        g.pool.remove(y)


def unused_initializer(g: GraphBuilder):
    g.allow_constant_nodes, saved = False, g.allow_constant_nodes
    g.const(g.random_array(F32, [g.randint(1, 4)]), "unused")
    g.allow_constant_nodes = saved


def duplicate_initializer(g: GraphBuilder):
    x = tensor(g, (F32,), 1)
    array = g.random_array(F32, [d.size if d.is_static else 1 for d in x.dims])
    g.allow_constant_nodes, saved = False, g.allow_constant_nodes
    for op in (g.choice(["Add", "Mul"]), g.choice(["Sub", "Mul", "Max"])):
        g.node1(op, [x.name, g.const(array.copy(), "dup")], x.dtype, x.dims)
    g.allow_constant_nodes = saved


def common_subexpression(g: GraphBuilder):
    x = tensor(g, (F32, F16, F64), 1)
    op = g.choice(["Relu", "Exp", "Transpose", "Softmax"])
    attrs = {"axis": -1} if op == "Softmax" else {}
    first = g.node1(op, [x.name], x.dtype, x.dims[::-1] if op == "Transpose" else x.dims, **attrs)
    second = g.node1(op, [x.name], x.dtype, first.dims, **attrs)
    g.node1("Add", [first.name, second.name], x.dtype, first.dims)


def constant_to_initializer(g: GraphBuilder):
    x = tensor(g, (F32, F64, I64), 0)
    name = g.fresh("const")
    array = g.random_array(x.dtype, [d.size if d.is_static else 1 for d in x.dims])
    g._scopes[-1].nodes.append(onnx.helper.make_node(
        "Constant", [], [name], name=f"n_{name}", value=onnx.numpy_helper.from_array(array, name)))
    g.node1(g.choice(["Add", "Mul"]), [x.name, name], x.dtype, x.dims)


def if_const_cond(g: GraphBuilder):
    nn.emit_if(g, tensor(g, tuple(ALL_TYPES), 0), constant_condition=True)


def idempotent(g: GraphBuilder):
    x = tensor(g, (F32, F16, F64), 1)
    if g.chance(0.3):
        for _ in range(2):
            x = g.node1("Relu", [x.name], x.dtype, x.dims)
        return
    for _ in range(2):
        x = nn.build_reshape(g, x)[0]


def where_not(g: GraphBuilder):
    x = tensor(g, tuple(NUMERIC), 0)
    cond, cdims = ops.bool_condition(g, x)
    negated = g.node1("Not", [cond], BOOL, cdims)
    other, odims = ops.operand(g, x)
    dims = broadcast_dims(x.dims, odims)
    dims = broadcast_dims(dims, cdims) if dims is not None else None
    if dims is None or numel(dims) > MAX_NUMEL:
        # the operand broadcasts with x and the condition with x, but not with each other
        other, dims = x.name, broadcast_dims(x.dims, cdims)
    g.node1("Where", [negated.name, x.name, other], x.dtype, dims)


PATTERNS: dict[str, Pattern] = {
    "conv_bn": Pattern(conv_bn, (("Conv", "BatchNormalization"), ("ConvTranspose", "BatchNormalization"))),
    "conv_add_bias": Pattern(conv_add_bias, (("Conv", "Add"),)),
    "pad_conv": Pattern(pad_conv, (("Pad", "Conv"),)),
    "pad_pool": Pattern(pad_pool, (("Pad", "MaxPool"), ("Pad", "AveragePool"))),
    "matmul_add": Pattern(matmul_add, (("MatMul", "Add"),)),
    "transpose_gemm": Pattern(transpose_gemm, (("Transpose", "Gemm"),)),
    "consecutive_transposes": Pattern(consecutive_transposes, (("Transpose", "Transpose"),)),
    "consecutive_squeezes": Pattern(consecutive_squeezes, (("Squeeze", "Squeeze"),)),
    "consecutive_unsqueezes": Pattern(consecutive_unsqueezes, (("Unsqueeze", "Unsqueeze"),)),
    "consecutive_slices": Pattern(consecutive_slices, (("Slice", "Slice"),)),
    "consecutive_concats": Pattern(consecutive_concats, (("Concat", "Concat"),)),
    "log_softmax": Pattern(log_softmax, (("Softmax", "Log"),)),
    "reduce_unsqueeze": Pattern(reduce_unsqueeze, tuple(
        (op, "Unsqueeze") for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"))),
    "concat_into_reshape": Pattern(concat_into_reshape, (("Concat", "Reshape"), ("Gather", "Reshape"), ("Shape", "Reshape"))),
    "qkv": Pattern(qkv, (("MatMul",),), q.has_shared_matmul_input),
    "nop_cast": Pattern(nop_cast, (("Cast",),)),
    "nop_dropout": Pattern(nop_dropout, (("Dropout",),)),
    "nop_flatten": Pattern(nop_flatten, (("Flatten",),)),
    "nop_pad": Pattern(nop_pad, (("Pad",),)),
    "nop_concat": Pattern(nop_concat, (("Concat",),)),
    "nop_split": Pattern(nop_split, (("Split",),)),
    "nop_expand": Pattern(nop_expand, (("Expand",),)),
    "nop_transpose": Pattern(nop_transpose, (("Transpose",),)),
    "nop_reshape": Pattern(nop_reshape, (("Reshape",),)),
    "nop_with_unit": Pattern(nop_with_unit, tuple((op,) for op in sorted(UNITS))),
    "monotone_argmax": Pattern(monotone_argmax, (("Exp", "ArgMax"), ("Softmax", "ArgMax"), ("Sigmoid", "ArgMax"))),
    "identity": Pattern(identity, (("Identity",),)),
    "shape_op": Pattern(shape_op, (("Shape",),)),
    "shape_gather": Pattern(shape_gather, (("Shape", "Gather"),)),
    "slice_after_shape": Pattern(slice_after_shape, (("Shape", "Slice"),)),
    "deadend": Pattern(deadend, (), q.has_dead_node),
    "unused_initializer": Pattern(unused_initializer, (), q.has_unused_initializer),
    "duplicate_initializer": Pattern(duplicate_initializer, (), q.has_duplicate_initializers),
    "common_subexpression": Pattern(common_subexpression, (), q.has_common_subexpression),
    "constant_to_initializer": Pattern(constant_to_initializer, (("Constant",),)),
    "if_const_cond": Pattern(if_const_cond, (("If",),), q.has_constant_condition_if),
    "idempotent": Pattern(idempotent, (("Reshape", "Reshape"), ("Relu", "Relu"))),
    "where_not": Pattern(where_not, (("Not", "Where"),)),
}


def _targets() -> dict[str, Pattern]:
    """Each pass's pattern, as its declaration names it (passes/registry.py: `fuzz`)."""
    from onnxrefine.passes.registry import all_passes

    targets = {}
    for spec in all_passes():
        if spec.fuzz is not None:
            if spec.fuzz not in PATTERNS:
                raise ValueError(f"pass {spec.name} names fuzz pattern {spec.fuzz!r}, which does not exist")
            targets[spec.name] = PATTERNS[spec.fuzz]
    return targets


# Pass name -> its pattern, read from the pass declarations.
TARGET_PATTERNS: dict[str, Pattern] = _targets()


def pattern_for(target: str) -> Pattern:
    try:
        return TARGET_PATTERNS[target]
    except KeyError:
        known = ", ".join(sorted(TARGET_PATTERNS))
        raise UnknownTargetError(f"no generator pattern for pass {target!r}; known: {known}") from None
