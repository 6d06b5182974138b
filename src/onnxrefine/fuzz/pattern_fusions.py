"""Targeted builders for the fusion passes (Conv+BN, Pad into Conv/pool, MatMul+Add, chains of
layout ops, LogSoftmax, QKV); PATTERNS in fuzz/patterns.py names them."""

from __future__ import annotations

from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, F16, F32, F64, I64, MAX_NUMEL, Dim, GraphBuilder, Value, broadcast_dims, maybe_negative, numel, scalar,
)
from onnxrefine.fuzz import opspecs as ops
from onnxrefine.fuzz import opspecs_nn as nn
from onnxrefine.fuzz.pattern_sources import source, image, tensor, matrix


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
