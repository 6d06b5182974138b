"""Operator specs for convolution, padding, pooling, matrix products, normalisation, Reshape, If.

Same contract as `opspecs`: each build function applies the ONNX shape rule for the concrete
symbol bindings and emits a node that is valid by construction, or returns None.
"""

from __future__ import annotations

import numpy as np

from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, BOOL, F16, F32, F64, FLOATS, I64, MAX_NUMEL, NUMERIC,
    Dim, GraphBuilder, OpSpec, Value, maybe_negative, numel, product, scalar,
)

CONV_TYPES = frozenset({F32, F16})   # onnxruntime CPU has no float64 Conv
AVGPOOL_TYPES = frozenset({F32, F16})
MAXPOOL_TYPES = FLOATS


def spatial(size: int, static: bool) -> Dim:
    return Dim.static(size) if static else Dim.computed(size)


def draw_window(g: GraphBuilder, size: int, *, allow_dilation: bool, pad_below_kernel: bool,
                min_kernel: int = 1, max_pad: int = 2):
    """Kernel, stride, dilation and pads along one spatial axis with at least one output."""
    for _ in range(8):
        kernel = g.randint(min_kernel, max(3, min_kernel))
        dilation = 2 if allow_dilation and g.chance(0.2) else 1
        stride = g.choice([1, 1, 2])
        limit = min(kernel - 1 if pad_below_kernel else 2, max_pad)
        begin = g.randint(0, limit) if g.chance(0.5) else 0
        end = g.randint(0, limit) if g.chance(0.5) else 0
        span = size + begin + end - ((kernel - 1) * dilation + 1)
        if span >= 0:
            return kernel, stride, dilation, begin, end, span
    return 1, 1, 1, 0, 0, size - 1


def emit_conv(g: GraphBuilder, x: Value, *, bias: bool | None = None, group: int | None = None):
    channels = x.dims[1].size
    if group is None:
        divisors = [d for d in range(1, channels + 1) if channels % d == 0]
        group = g.choice([1, 1] + divisors)
    out_channels = group * g.randint(1, max(1, 6 // group))
    kernels, strides, dilations, begins, ends, dims = [], [], [], [], [], [x.dims[0], Dim.static(out_channels)]
    for dim in x.dims[2:]:
        k, s, d, b, e, span = draw_window(g, dim.size, allow_dilation=True, pad_below_kernel=False)
        kernels.append(k), strides.append(s), dilations.append(d), begins.append(b), ends.append(e)
        dims.append(spatial(span // s + 1, dim.is_static))
    fan_in = channels // group * int(np.prod(kernels))
    weight = g.random_array(x.dtype, [out_channels, channels // group] + kernels, 1 / np.sqrt(fan_in))
    inputs = [x.name, g.const(weight, "w")]
    if bias if bias is not None else g.chance(0.6):
        inputs.append(g.const(g.random_array(x.dtype, [out_channels]), "b"))
    attrs = {"kernel_shape": kernels} if g.chance(0.7) else {}
    if any(s != 1 for s in strides) or g.chance(0.3):
        attrs["strides"] = strides
    if any(d != 1 for d in dilations):
        attrs["dilations"] = dilations
    if any(begins + ends) or g.chance(0.3):
        attrs["pads"] = begins + ends
    if group != 1:
        attrs["group"] = group
    if numel(dims) > MAX_NUMEL:
        return None
    return g.node1("Conv", inputs, x.dtype, dims, **attrs)


def has_static_channels(x: Value) -> bool:
    return x.rank >= 3 and x.dims[1].is_static


def build_conv(g: GraphBuilder, x: Value):
    if not has_static_channels(x):
        return None
    y = emit_conv(g, x)
    return None if y is None else [y]


def build_conv_transpose(g: GraphBuilder, x: Value):
    if not has_static_channels(x):
        return None
    channels = x.dims[1].size
    group = g.choice([1, 1, channels])
    per_group = g.randint(1, 2)
    kernels, strides, pads_begin, pads_end, out_pads, dims = [], [], [], [], [], []
    for dim in x.dims[2:]:
        k, s = g.randint(1, 3), g.choice([1, 2])
        b, e = g.randint(0, k - 1) if g.chance(0.3) else 0, g.randint(0, k - 1) if g.chance(0.3) else 0
        op = 1 if s == 2 and g.chance(0.3) else 0
        size = s * (dim.size - 1) + op + k - b - e
        if size < 1:
            b = e = 0
            size = s * (dim.size - 1) + op + k
        kernels.append(k), strides.append(s), pads_begin.append(b), pads_end.append(e), out_pads.append(op)
        dims.append(spatial(size, dim.is_static))
    dims = [x.dims[0], Dim.static(group * per_group)] + dims
    if numel(dims) > MAX_NUMEL:
        return None
    weight = g.random_array(x.dtype, [channels, per_group] + kernels, 0.5)
    inputs = [x.name, g.const(weight, "w")]
    if g.chance(0.5):
        inputs.append(g.const(g.random_array(x.dtype, [group * per_group]), "b"))
    attrs = {"kernel_shape": kernels, "strides": strides, "pads": pads_begin + pads_end}
    if any(out_pads):
        attrs["output_padding"] = out_pads
    if group != 1:
        attrs["group"] = group
    return [g.node1("ConvTranspose", inputs, x.dtype, dims, **attrs)]


def emit_batchnorm(g: GraphBuilder, x: Value) -> Value:
    channels = x.dims[1].size
    params = [g.random_array(x.dtype, [channels]) for _ in range(3)]
    variance = np.abs(g.random_array(x.dtype, [channels])) + np.asarray(0.1, dtype=params[0].dtype)
    names = [g.const(a, hint) for a, hint in zip(params + [variance], ["scale", "bias", "mean", "var"])]
    attrs = {}
    if g.chance(0.3):
        attrs["epsilon"] = float(g.choice([1e-3, 1e-2, 1e-6]))
    if g.opset >= 14 and g.chance(0.2):
        attrs["training_mode"] = 0
    return g.node1("BatchNormalization", [x.name] + names, x.dtype, x.dims, **attrs)


def build_batchnorm(g: GraphBuilder, x: Value):
    if not x.dims[1].is_static:
        return None
    return [emit_batchnorm(g, x)]


def emit_pool(g: GraphBuilder, op: str, x: Value, *, min_kernel: int = 1, max_pad: int = 2) -> Value:
    kernels, strides, dilations, begins, ends, dims = [], [], [], [], [], list(x.dims[:2])
    ceil_mode = 1 if g.chance(0.3) else 0
    for dim in x.dims[2:]:
        k, s, d, b, e, span = draw_window(g, dim.size, allow_dilation=op == "MaxPool",
                                          pad_below_kernel=True, min_kernel=min_kernel, max_pad=max_pad)
        floor_out, ceil_out = span // s + 1, -(-span // s) + 1
        # With ceil_mode a last window that would start in the end padding is dropped; runtimes
        # and shape inference disagree there, so such windows are not generated.
        if ceil_mode and ceil_out != floor_out and (ceil_out - 1) * s >= dim.size + b:
            ceil_mode = 0
        kernels.append(k), strides.append(s), dilations.append(d), begins.append(b), ends.append(e)
        dims.append((floor_out, ceil_out, dim.is_static))
    dims = dims[:2] + [spatial(c if ceil_mode else f, st) for f, c, st in dims[2:]]
    attrs = {"kernel_shape": kernels}
    if any(s != 1 for s in strides) or g.chance(0.3):
        attrs["strides"] = strides
    if any(d != 1 for d in dilations):
        attrs["dilations"] = dilations
    if any(begins + ends) or g.chance(0.2):
        attrs["pads"] = begins + ends
    if ceil_mode:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and g.chance(0.6):
        attrs["count_include_pad"] = g.choice([0, 1])
    return g.node1(op, [x.name], x.dtype, dims, **attrs)


def pool(op: str):
    def build(g: GraphBuilder, x: Value):
        return [emit_pool(g, op, x)]
    return build


def emit_gemm(g: GraphBuilder, x: Value, *, bias: bool | None = None, trans_a: bool | None = None):
    trans_a = g.chance(0.2) if trans_a is None else trans_a
    rows, inner = (x.dims[1], x.dims[0]) if trans_a else (x.dims[0], x.dims[1])
    if not inner.is_static:
        return None
    cols = g.randint(1, 8)
    trans_b = g.chance(0.4)
    weight = g.random_array(x.dtype, [cols, inner.size] if trans_b else [inner.size, cols],
                            1 / np.sqrt(inner.size))
    inputs = [x.name, g.const(weight, "w")]
    if bias if bias is not None else g.chance(0.7):
        shapes = [[cols], [1, cols], []] + ([[rows.size, cols], [rows.size, 1]] if rows.is_static else [])
        inputs.append(g.const(g.random_array(x.dtype, g.choice(shapes)), "c"))
    attrs = {}
    if trans_a:
        attrs["transA"] = 1
    if trans_b:
        attrs["transB"] = 1
    if g.chance(0.3):
        attrs["alpha"] = float(g.choice([0.5, 2.0, -1.0]))
    if len(inputs) == 3 and g.chance(0.3):
        attrs["beta"] = float(g.choice([0.5, 2.0, 0.0]))
    return g.node1("Gemm", inputs, x.dtype, [rows, Dim.static(cols)], **attrs)


def build_gemm(g: GraphBuilder, x: Value):
    y = emit_gemm(g, x)
    return None if y is None else [y]


def emit_matmul(g: GraphBuilder, x: Value, cols: int | None = None) -> Value | None:
    inner = x.dims[-1]
    cols = g.randint(1, 8) if cols is None else cols
    if inner.is_static:
        weight = g.random_array(x.dtype, [inner.size, cols], 1 / np.sqrt(inner.size))
        other, out_last = g.const(weight, "w"), Dim.static(cols)
    else:
        partner = g.pick(lambda v: v.dtype == x.dtype and v.rank == 2 and v.dims[0].key == inner.key)
        if partner is None:
            return None
        other, out_last = partner.name, partner.dims[1]
    dims = x.dims[:-1] + (out_last,)
    if numel(dims) > MAX_NUMEL:
        return None
    inputs = [x.name, other]
    return g.node1("MatMul", inputs, x.dtype, dims)


def build_matmul(g: GraphBuilder, x: Value):
    y = emit_matmul(g, x)
    return None if y is None else [y]


def build_pad(g: GraphBuilder, x: Value):
    mode = g.weighted([("constant", 0.5), ("reflect", 0.25), ("edge", 0.25)])
    begins, ends = [0] * x.rank, [0] * x.rank
    for i, dim in enumerate(x.dims):
        if g.chance(0.5):
            continue
        limit = 2 if mode != "reflect" else (min(2, dim.size - 1) if dim.is_static else 0)
        begins[i], ends[i] = g.randint(0, limit), g.randint(0, limit)
        if mode == "constant" and dim.is_static and dim.size > 2 and g.chance(0.15):
            begins[i] = -1  # negative pads crop
    dims = []
    for dim, b, e in zip(x.dims, begins, ends):
        if b == 0 and e == 0:
            dims.append(dim)
        else:
            size = dim.size + b + e
            dims.append(Dim.static(size) if dim.is_static else Dim.computed(size))
    if numel(dims) > MAX_NUMEL:
        return None
    axes = [i for i in range(x.rank) if begins[i] or ends[i]]
    inputs = [x.name]
    if g.opset >= 18 and axes and g.chance(0.3):
        pads = [begins[a] for a in axes] + [ends[a] for a in axes]
        axes_input = g.ints([maybe_negative(g, a, x.rank) for a in axes], "axes")
    else:
        pads, axes_input = begins + ends, ""
    inputs.append(g.ints(pads, "pads"))
    value = scalar(g, x.dtype, g.random_array(x.dtype, ())) \
        if mode == "constant" and g.chance(0.4) else ""
    if value or axes_input:
        inputs.append(value)
    if axes_input:
        inputs.append(axes_input)
    attrs = {"mode": mode} if mode != "constant" or g.chance(0.3) else {}
    return [g.node1("Pad", inputs, x.dtype, dims, **attrs)]


# --- Reshape ----------------------------------------------------------------------------------

def propose_reshape(g: GraphBuilder, x: Value) -> list[tuple[Dim, int | None]]:
    """Output dims of a random reshape of x, each with the input axis it copies (or None)."""
    dims = [(d, i) for i, d in enumerate(x.dims)]
    for _ in range(g.randint(1, 2)):
        move = g.choice(["merge", "merge", "split", "insert", "drop", "flatten", "same"])
        if move == "merge" and len(dims) >= 2:
            i = g.randint(0, len(dims) - 2)
            j = g.randint(i + 1, min(len(dims) - 1, i + 2))
            dims[i:j + 1] = [(product(d for d, _ in dims[i:j + 1]), None)]
        elif move == "split":
            options = [(i, f) for i, (d, _) in enumerate(dims) if d.is_static
                       for f in range(2, d.size) if d.size % f == 0]
            if options and len(dims) < 6:
                i, f = g.choice(options)
                dims[i:i + 1] = [(Dim.static(f), None), (Dim.static(dims[i][0].size // f), None)]
        elif move == "insert" and len(dims) < 6:
            dims.insert(g.randint(0, len(dims)), (Dim.static(1), None))
        elif move == "drop":
            ones = [i for i, (d, _) in enumerate(dims) if d.is_static and d.size == 1]
            if ones:
                del dims[g.choice(ones)]
        elif move == "flatten":
            dims = [(product(x.dims), None)]
    return dims


def encode_target(g: GraphBuilder, target) -> list[int] | None:
    """Constant target using 0 (copy the input dim at this position) and at most one -1."""
    entries, inferred = [], False
    for position, (dim, source) in enumerate(target):
        if source == position and (not dim.is_static or g.chance(0.4)):
            entries.append(0)
        elif dim.is_static and not (not inferred and g.chance(0.25)):
            entries.append(dim.size)
        elif not inferred:
            entries.append(-1)
            inferred = True
        else:
            return None
    return entries


def computed_target(g: GraphBuilder, x: Value, target) -> str | None:
    """Shape(x) -> Gather/Slice -> Concat(with constants) feeding Reshape."""
    shape = None
    pieces, inferred = [], False
    for dim, source in target:
        if source is not None:
            if g.opset >= 15 and g.chance(0.4):
                own = g.node1("Shape", [x.name], I64, [Dim.static(1)], (dim,),
                              start=source, end=source + 1)
                pieces.append(own.name)
            else:
                if shape is None:
                    shape = g.node1("Shape", [x.name], I64, [Dim.static(x.rank)], x.dims)
                index = g.ints([maybe_negative(g, source, x.rank)], "idx")
                pieces.append(g.node1("Gather", [shape.name, index], I64, [Dim.static(1)],
                                      (dim,), axis=0).name)
        elif dim.is_static:
            pieces.append(g.ints([dim.size], "dim"))
        elif not inferred:
            pieces.append(g.ints([-1], "dim"))
            inferred = True
        else:
            return None
    if len(pieces) == 1:
        return pieces[0]
    return g.node1("Concat", pieces, I64, [Dim.static(len(pieces))], axis=0).name


def build_reshape(g: GraphBuilder, x: Value):
    target = propose_reshape(g, x)
    dims = [d for d, _ in target]
    entries = None if g.chance(0.25) and target else encode_target(g, target)
    if entries is not None:
        shape_input = g.ints(entries, "shape")
    else:
        shape_input = computed_target(g, x, target) if target else None
        if shape_input is None:
            shape_input, dims = g.ints([-1], "shape"), [product(x.dims)]
    attrs = {"allowzero": 0} if g.opset >= 14 and g.chance(0.2) else {}
    return [g.node1("Reshape", [x.name, shape_input], x.dtype, dims, **attrs)]


# --- If ---------------------------------------------------------------------------------------

def branch_body(g: GraphBuilder, x: Value):
    def build():
        if x.dtype == BOOL:
            return [g.node1(g.choice(["Identity", "Not"]), [x.name], BOOL, x.dims)]
        roll = g.rng.random()
        if roll < 0.3:
            return [g.node1("Identity", [x.name], x.dtype, x.dims)]
        if roll < 0.6:
            return [g.node1(g.choice(["Neg", "Abs"]), [x.name], x.dtype, x.dims)]
        shape = [d.size if d.is_static and g.chance(0.5) else 1 for d in x.dims]
        other = g.const(g.random_array(x.dtype, shape), "k")
        return [g.node1(g.choice(["Add", "Mul"]), [x.name, other], x.dtype, x.dims)]
    return build


def condition(g: GraphBuilder, constant: bool) -> str:
    if constant:
        return g.const(np.array(g.chance(0.5)) if g.chance(0.7) else np.array([g.chance(0.5)]), "cond")
    source = g.pick(lambda v: v.dtype in (F32, F64, I64))
    if source is None:
        return g.const(np.array(True), "cond")
    total = g.node1("ReduceSum", [source.name], source.dtype, [], keepdims=0)
    return g.node1("Greater", [total.name, scalar(g, source.dtype, 0)], BOOL, []).name


def emit_if(g: GraphBuilder, x: Value, constant_condition: bool) -> Value:
    cond = condition(g, constant_condition)
    then_graph = g.subgraph("then", branch_body(g, x))
    else_graph = g.subgraph("else", branch_body(g, x))
    return g.node1("If", [cond], x.dtype, x.dims, then_branch=then_graph, else_branch=else_graph)


def build_if(g: GraphBuilder, x: Value):
    if g.in_subgraph:
        return None
    return [emit_if(g, x, g.chance(0.4))]


NN_SPECS: tuple[OpSpec, ...] = (
    OpSpec("Conv", CONV_TYPES, (3, 4), build_conv, 2.0),
    OpSpec("ConvTranspose", CONV_TYPES, (3, 4), build_conv_transpose, 0.6),
    OpSpec("BatchNormalization", FLOATS, (2, 4), build_batchnorm, 1.0),
    OpSpec("MaxPool", MAXPOOL_TYPES, (3, 4), pool("MaxPool"), 1.0),
    OpSpec("AveragePool", AVGPOOL_TYPES, (3, 4), pool("AveragePool"), 0.8),
    OpSpec("Gemm", FLOATS, (2, 2), build_gemm, 1.0),
    OpSpec("MatMul", NUMERIC, (2, 4), build_matmul, 1.2),
    OpSpec("If", ALL_TYPES, (0, 6), build_if, 0.5),
)
