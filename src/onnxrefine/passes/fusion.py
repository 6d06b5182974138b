"""Fusions under onnxoptimizer's names: chains of layout operators composed into one, Pad folded
into Conv/pooling, MatMul+Add into Gemm, Log(Softmax) into LogSoftmax, sibling MatMuls merged.

Exact fusions move no arithmetic (a composed permutation, merged axes, padding the consumer does
itself). Reassociating ones change how a result is rounded (LogSoftmax's own formula; a Gemm or a
wider MatMul that runtimes may block and accumulate differently), and are declared so.

Guards against the known mistakes of other optimizers: negative Squeeze/Unsqueeze axes resolved
against the rank at their own step; a zero Pad is never folded into MaxPool (its padding acts as
-inf), nor into an AveragePool that excludes padding from its count; a Reshape target keeps 0
(copy) only where it copies the very dim it stands for.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.quantization import refuse_quantized_layer
from onnxrefine.ir.signed_zero import refuse_if_observable
from onnxrefine.ir.static_shapes import Sym
from onnxrefine.passes.opargs import (
    attr,
    axes_arg,
    axes_node_args,
    dtypes_of,
    input_at,
    int64_constant,
    int_list_arg,
    normalize_axes,
    shapes_of,
)
from onnxrefine.passes.registry import PassSpec, register
from onnxrefine.rewrite.pattern import Const, Match, Op, Opt, Rest, Var
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING, Replacement, RewriteContext, Rule


def _rank(ctx: RewriteContext, value: ir.Value) -> int | None:
    return shapes_of(ctx).rank(value)


def _nth_not_in(n: int, excluded: set[int]) -> int:
    """The n-th (0-based) non-negative integer that is not in `excluded`."""
    candidate = -1
    for _ in range(n + 1):
        candidate += 1
        while candidate in excluded:
            candidate += 1
    return candidate


# --- fuse_consecutive_transposes ----------------------------------------------------------------


def compose_perms(inner: list[int], outer: list[int]) -> list[int]:
    """Transpose(Transpose(x, inner), outer) == Transpose(x, result): out axis i is inner[outer[i]]."""
    return [inner[axis] for axis in outer]


def _perm(node: ir.Node, rank: int | None) -> list[int]:
    perm = attr(node, "perm")
    if perm is None:
        if rank is None:
            raise RewriteRefused("Transpose without perm reverses axes of an input of unknown rank")
        return list(range(rank))[::-1]
    return [int(p) for p in perm]


def fuse_transposes(m: Match, ctx: RewriteContext) -> Replacement:
    rank = _rank(ctx, m["x"])
    inner, outer = _perm(m["t1"], rank), _perm(m["t2"], rank)
    if sorted(inner) != list(range(len(inner))) or sorted(outer) != list(range(len(inner))):
        raise RewriteRefused("the permutations are not permutations of one rank")
    new = ctx.node("Transpose", [m["x"]], {"perm": compose_perms(inner, outer)}, hint=m["t2"].name or None)
    return Replacement([new], {m["t2"].outputs[0]: new.outputs[0]})


TRANSPOSES = Rule(
    "fuse_consecutive_transposes",
    Op("Transpose", Op("Transpose", Var("x"), name="t1"), name="t2"),
    fuse_transposes,
)


# --- fuse_consecutive_squeezes / unsqueezes ---------------------------------------------------


def _explicit_axes(node: ir.Node) -> list[int]:
    axes = axes_arg(node)
    if axes is None:
        raise RewriteRefused(f"{node.op_type} without axes depends on which dims are 1 at run time")
    return axes


def compose_squeezes(first: list[int], second: list[int], rank: int | None) -> list[int] | None:
    """Axes of x for Squeeze(Squeeze(x, first), second); None when the rank needed is unknown."""
    first_n = normalize_axes(first, rank)
    if first_n is None:
        return None
    second_n = normalize_axes(second, None if rank is None else rank - len(first_n))
    if second_n is None:
        return None
    removed = set(first_n)
    return sorted(first_n + [_nth_not_in(j, removed) for j in second_n])


def compose_unsqueezes(first: list[int], second: list[int], rank: int | None) -> list[int] | None:
    """Output axes for Unsqueeze(Unsqueeze(x, first), second); None when the rank needed is unknown."""
    first_n = normalize_axes(first, None if rank is None else rank + len(first))
    if first_n is None:
        return None
    second_n = normalize_axes(second, None if rank is None else rank + len(first) + len(second))
    if second_n is None:
        return None
    inserted = set(second_n)
    # The middle tensor's axis k lands on the k-th output position not taken by `second`.
    return sorted(second_n + [_nth_not_in(k, inserted) for k in first_n])


def _fuse_axes_chain(m: Match, ctx: RewriteContext, compose) -> Replacement:
    inner, outer = m["inner"], m["outer"]
    axes = compose(_explicit_axes(inner), _explicit_axes(outer), _rank(ctx, m["x"]))
    if axes is None:
        raise RewriteRefused("negative axes need the input's rank, which is not known from trusted facts")
    extra_inputs, attributes = axes_node_args(ctx, outer, axes, f"{outer.name or outer.op_type}_axes")
    new = ctx.node(outer.op_type, [m["x"], *extra_inputs], attributes, hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]})


SQUEEZES = Rule(
    "fuse_consecutive_squeezes",
    Op("Squeeze", Op("Squeeze", Var("x"), Opt(Var("a1")), name="inner"), Opt(Var("a2")), name="outer"),
    lambda m, ctx: _fuse_axes_chain(m, ctx, compose_squeezes),
)
UNSQUEEZES = Rule(
    "fuse_consecutive_unsqueezes",
    Op("Unsqueeze", Op("Unsqueeze", Var("x"), Opt(Var("a1")), name="inner"), Opt(Var("a2")), name="outer"),
    lambda m, ctx: _fuse_axes_chain(m, ctx, compose_unsqueezes),
)


# --- fuse_consecutive_slices ------------------------------------------------------------------


def _slice_params(m: Match, suffix: str, rank: int | None):
    starts = m.array(f"starts{suffix}").reshape(-1).astype(np.int64)
    ends = m.array(f"ends{suffix}").reshape(-1).astype(np.int64)
    axes = m.array(f"axes{suffix}")
    axes = list(range(starts.size)) if axes is None else axes.reshape(-1).tolist()
    steps = m.array(f"steps{suffix}")
    steps = np.ones(starts.size, np.int64) if steps is None else steps.reshape(-1).astype(np.int64)
    normalized = normalize_axes(axes, rank)
    if normalized is None or not (starts.size == ends.size == len(normalized) == steps.size):
        raise RewriteRefused("slice axes are negative with an unknown rank, repeated, or inconsistent")
    return starts, ends, normalized, steps


def fuse_slices(m: Match, ctx: RewriteContext) -> Replacement:
    if ctx.opset() < 10:
        return None
    rank = _rank(ctx, m["x"])
    s1, e1, a1, st1 = _slice_params(m, "1", rank)
    s2, e2, a2, st2 = _slice_params(m, "2", rank)
    if set(a1) & set(a2):
        raise RewriteRefused("both Slices cut the same axis; composing them needs the axis length")
    hint = m["outer"].name or "slice"
    inputs = [
        m["x"],
        int64_constant(ctx, np.concatenate([s1, s2]), f"{hint}_starts"),
        int64_constant(ctx, np.concatenate([e1, e2]), f"{hint}_ends"),
        int64_constant(ctx, a1 + a2, f"{hint}_axes"),
        int64_constant(ctx, np.concatenate([st1, st2]), f"{hint}_steps"),
    ]
    new = ctx.node("Slice", inputs, hint=m["outer"].name or None)
    return Replacement([new], {m["outer"].outputs[0]: new.outputs[0]})


def _slice_pattern(inner_or_x, suffix: str, name: str) -> Op:
    return Op(
        "Slice", inner_or_x, Const(f"starts{suffix}"), Const(f"ends{suffix}"), Opt(Const(f"axes{suffix}")),
        Opt(Const(f"steps{suffix}")), name=name,
    )


SLICES = Rule("fuse_consecutive_slices", _slice_pattern(_slice_pattern(Var("x"), "1", "inner"), "2", "outer"), fuse_slices)


# --- fuse_consecutive_concats -----------------------------------------------------------------

MAX_FUSED_CONCAT_INPUTS = 1024


def fuse_concats(m: Match, ctx: RewriteContext) -> Replacement | None:
    outer: ir.Node = m["outer"]
    rank = _rank(ctx, outer.outputs[0])
    axis = int(attr(outer, "axis", 0))
    flat: list[ir.Value] = []
    absorbed: list[ir.Node] = []
    for value in m["inputs"]:
        inner = value.producer() if value is not None else None
        if (
            inner is None
            or inner.op_type != "Concat"
            or inner.domain not in STANDARD_DOMAINS
            or inner.graph is not outer.graph
            or value.is_graph_output()
            or any(use.node is not outer for use in value.uses())
        ):
            flat.append(value)
            continue
        inner_axis = int(attr(inner, "axis", 0))
        if inner_axis != axis and (rank is None or (inner_axis - axis) % rank != 0):
            flat.append(value)
            continue
        flat.extend(inner.inputs)
        if inner not in absorbed:
            absorbed.append(inner)
    if not absorbed:
        return None
    if len(flat) > MAX_FUSED_CONCAT_INPUTS:
        # Concat(c, c) of an inner Concat repeats its inputs: a chain of such doublings would fuse
        # into 2^depth inputs (issue 13's Concat-doubling bomb).
        raise RewriteRefused(f"the fused Concat would read {len(flat)} inputs (more than {MAX_FUSED_CONCAT_INPUTS})")
    new = ctx.node("Concat", flat, dict(outer.attributes), hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]}, also_removed=absorbed)


CONCATS = Rule("fuse_consecutive_concats", Op("Concat", Rest("inputs"), name="outer"), fuse_concats)


# --- fuse_consecutive_log_softmax -------------------------------------------------------------


def fuse_log_softmax(m: Match, ctx: RewriteContext) -> Replacement:
    # Softmax and LogSoftmax of one opset share the axis convention (2-D coercion before 13,
    # a single axis from 13 on) and the default axis, so the attributes carry over as they are.
    softmax: ir.Node = m["softmax"]
    dtype = dtypes_of(ctx).dtype(m["x"])
    if dtype is None:
        raise RewriteRefused("the input's element type is not known from trusted facts")
    if dtype == ir.DataType.DOUBLE:
        # onnxruntime's float64 LogSoftmax returns finite values (x - max + log(1e20)) in a row
        # holding a NaN after its first element, where Log(Softmax) gives NaN.
        raise RewriteRefused("onnxruntime's float64 LogSoftmax turns rows holding a NaN into finite values")
    if _feeds_discrete_op(m["log"].outputs[0], ctx.model.graph):
        # Where the float Softmax underflows, Log gives -inf (ties); LogSoftmax gives distinct
        # finite values, which an ArgMax or a comparison downstream tells apart (the same reason
        # Exp/Softmax before ArgMax are not dropped).
        raise RewriteRefused("the result reaches a discrete op, which the -inf ties of an "
                             "underflowing Log(Softmax) would decide differently")
    new = ctx.node("LogSoftmax", [m["x"]], dict(softmax.attributes), hint=m["log"].name or None)
    return Replacement([new], {m["log"].outputs[0]: new.outputs[0]})


# Ops whose result jumps between neighbouring inputs (ties, thresholds, rounding to integers).
_DISCRETE_OPS = frozenset({
    "ArgMax", "ArgMin", "Floor", "Ceil", "Round", "Sign", "TopK", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Mod", "NonZero", "Unique", "QuantizeLinear",
    "DynamicQuantizeLinear", "IsInf", "IsNaN", "Hardmax",
})


def _feeds_discrete_op(value: ir.Value, main_graph: ir.Graph) -> bool:
    """Whether any node downstream of `value` is discrete (a Cast to a non-float type included).
    Subgraph consumers, and outputs of a subgraph or function (whose users are not followed),
    count as discrete."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        current = stack.pop()
        if current.is_graph_output() and current.graph is not main_graph:
            return True
        for use in current.uses():
            node = use.node
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type in _DISCRETE_OPS or node.domain not in STANDARD_DOMAINS:
                return True
            if node.op_type == "Cast":
                to = node.attributes.get("to")
                if to is None or not ir.DataType(to.value).is_floating_point():
                    return True
            if node.graph is not value.graph or any(
                    a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
                return True
            stack.extend(node.outputs)
    return False


LOG_SOFTMAX = Rule(
    "fuse_consecutive_log_softmax",
    Op("Log", Op("Softmax", Var("x"), name="softmax"), name="log"),
    fuse_log_softmax,
    kind=REASSOCIATING,
)


# --- fuse_consecutive_reduce_unsqueeze --------------------------------------------------------

REDUCE_OPS = (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)


def fuse_reduce_unsqueeze(m: Match, ctx: RewriteContext) -> Replacement | None:
    reduce: ir.Node = m["reduce"]
    unsqueeze: ir.Node = m["unsqueeze"]
    if int(attr(reduce, "keepdims", 1)) != 0:
        return None
    rank = _rank(ctx, m["x"])
    reduce_axes = axes_arg(reduce)
    if not reduce_axes:
        if attr(reduce, "noop_with_empty_axes", 0):
            raise RewriteRefused("the reduction has no axes and noop_with_empty_axes=1")
        if rank is None:
            raise RewriteRefused("reducing all axes of an input of unknown rank")
        reduce_axes = list(range(rank))
    reduced = normalize_axes(reduce_axes, rank)
    restored = normalize_axes(_explicit_axes(unsqueeze), rank)
    if reduced is None or restored is None:
        raise RewriteRefused("negative axes need the input's rank, which is not known from trusted facts")
    if sorted(reduced) != sorted(restored):
        return None
    attributes = dict(reduce.attributes)
    attributes["keepdims"] = ir.AttrInt64("keepdims", 1)
    new = ctx.node(reduce.op_type, list(reduce.inputs), attributes, hint=reduce.name or None)
    return Replacement([new], {unsqueeze.outputs[0]: new.outputs[0]})


REDUCE_UNSQUEEZE = Rule(
    "fuse_consecutive_reduce_unsqueeze",
    Op("Unsqueeze", Op(REDUCE_OPS, Var("x"), Rest("reduce_args"), name="reduce"), Opt(Var("axes")), name="unsqueeze"),
    fuse_reduce_unsqueeze,
)


# --- fuse_matmul_add_bias_into_gemm -----------------------------------------------------------

_GEMM_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)


def fuse_matmul_add(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["matmul"], m["add"].outputs[0])  # quantized units stay as they are
    if ctx.opset() < 11:
        raise RewriteRefused("Gemm before opset 11 has other broadcast and optional-input rules")
    weight, bias = m.array("b"), m.array("c")
    if weight.ndim != 2:
        raise RewriteRefused("MatMul's constant operand is not a matrix")
    if ir.DataType.from_numpy(weight.dtype) not in _GEMM_FLOATS or bias.dtype != weight.dtype:
        raise RewriteRefused(f"dtypes {weight.dtype}/{bias.dtype} are not a float32 or float64 pair")
    if _rank(ctx, m["a"]) != 2:
        raise RewriteRefused("MatMul's input is not known to be 2-D (Gemm would reject it)")
    n = weight.shape[1]
    if bias.ndim > 2 or (bias.ndim >= 1 and bias.shape[-1] not in (1, n)) or (bias.ndim == 2 and bias.shape[0] != 1):
        raise RewriteRefused(f"bias of shape {bias.shape} does not broadcast onto [M, {n}] without enlarging it")
    new = ctx.node("Gemm", [m["a"], m["b"], m["c"]], hint=m["add"].name or None)
    return Replacement([new], {m["add"].outputs[0]: new.outputs[0]})


MATMUL_ADD = Rule(
    "fuse_matmul_add_bias_into_gemm",
    Op("Add", Op("MatMul", Var("a"), Const("b"), name="matmul"), Const("c"), name="add"),
    fuse_matmul_add,
    kind=REASSOCIATING,
)


# --- fuse_transpose_into_gemm -----------------------------------------------------------------


def _transpose_into_gemm(m: Match, ctx: RewriteContext, flag: str) -> Replacement:
    perm = attr(m["transpose"], "perm")
    if perm is not None and list(perm) != [1, 0]:
        raise RewriteRefused(f"Transpose perm {list(perm)} is not a matrix transpose")
    gemm: ir.Node = m["gemm"]
    attributes = dict(gemm.attributes)
    attributes[flag] = ir.AttrInt64(flag, 1 - int(attr(gemm, flag, 0)))
    inputs = list(gemm.inputs)
    inputs[0 if flag == "transA" else 1] = m["t_in"]
    new = ctx.node("Gemm", inputs, attributes, hint=gemm.name or None)
    return Replacement([new], {gemm.outputs[0]: new.outputs[0]})


TRANSPOSE_GEMM_A = Rule(
    "fuse_transpose_into_gemm_a",
    Op("Gemm", Op("Transpose", Var("t_in"), name="transpose"), Var("other"), Opt(Var("c")), name="gemm"),
    lambda m, ctx: _transpose_into_gemm(m, ctx, "transA"),
)
TRANSPOSE_GEMM_B = Rule(
    "fuse_transpose_into_gemm_b",
    Op("Gemm", Var("other"), Op("Transpose", Var("t_in"), name="transpose"), Opt(Var("c")), name="gemm"),
    lambda m, ctx: _transpose_into_gemm(m, ctx, "transB"),
)


# --- fuse_pad_into_conv / fuse_pad_into_pool --------------------------------------------------


def _spatial_pads(pad: ir.Node, ctx: RewriteContext, x: ir.Value) -> tuple[list[int], float | None]:
    """(pads on the spatial dims as [begins..., ends...], pad value) of a constant-mode Pad that
    leaves the batch and channel dims alone; refused otherwise."""
    if attr(pad, "mode", "constant") != "constant":
        raise RewriteRefused(f"Pad mode '{attr(pad, 'mode')}' is not constant padding")
    pads = int_list_arg(pad, "pads", 1, "pads")
    if pads is None:
        raise RewriteRefused("Pad has no pads")
    if "value" in pad.attributes:
        fill = float(attr(pad, "value", 0.0))
    else:
        fill_value = input_at(pad, 2)
        fill_array = constant_array(fill_value) if fill_value is not None else np.zeros(())
        if fill_array is None:
            raise RewriteRefused("Pad's constant value is not a constant")
        fill = float(fill_array.reshape(-1)[0]) if fill_array.size else 0.0
        if fill_array.size and np.signbit(fill_array.reshape(-1)[0]) and fill == 0:
            fill = -0.0
    rank = len(pads) // 2
    axes_value = input_at(pad, 3)
    if axes_value is not None:
        axes = int_list_arg(pad, "_no_attr", 3, "axes")
        full_rank = _rank(ctx, x)
        normalized = normalize_axes(axes, full_rank)
        if normalized is None or full_rank is None:
            raise RewriteRefused("Pad axes need the input's rank, which is not known from trusted facts")
        full = [0] * (2 * full_rank)
        for i, axis in enumerate(normalized):
            full[axis], full[axis + full_rank] = pads[i], pads[i + len(normalized)]
        pads, rank = full, full_rank
    if any(p < 0 for p in pads):
        raise RewriteRefused("negative pads crop the input")
    if rank < 3 or pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
        raise RewriteRefused("Pad touches the batch or channel dims")
    return pads[2:rank] + pads[rank + 2:], fill


def _consumer_pads(node: ir.Node, spatial: int) -> list[int]:
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", b"NOTSET"):
        raise RewriteRefused(f"{node.op_type} auto_pad is {auto_pad}")
    pads = attr(node, "pads")
    pads = [0] * (2 * spatial) if pads is None else [int(p) for p in pads]
    if len(pads) != 2 * spatial:
        raise RewriteRefused(f"{node.op_type} pads do not match the Pad's {spatial} spatial dims")
    return pads


def _with_pads(ctx: RewriteContext, node: ir.Node, x: ir.Value, pads: list[int]) -> Replacement:
    attributes = dict(node.attributes)
    attributes["pads"] = ir.AttrInt64s("pads", pads)
    attributes.pop("auto_pad", None)
    new = ctx.node(node.op_type, [x, *node.inputs[1:]], attributes, num_outputs=len(node.outputs),
                   hint=node.name or None)
    return Replacement([new], {old: fresh for old, fresh in zip(node.outputs, new.outputs)})


def fuse_pad_conv(m: Match, ctx: RewriteContext) -> Replacement:
    conv: ir.Node = m["conv"]
    added, fill = _spatial_pads(m["pad"], ctx, m["x"])
    if fill != 0 or np.signbit(fill):
        raise RewriteRefused(f"Pad value {fill} is not +0.0, the value Conv pads with")
    pads = _consumer_pads(conv, len(added) // 2)
    return _with_pads(ctx, conv, m["x"], [a + b for a, b in zip(pads, added)])


def fuse_pad_pool(m: Match, ctx: RewriteContext) -> Replacement:
    pool: ir.Node = m["pool"]
    added, fill = _spatial_pads(m["pad"], ctx, m["x"])
    if pool.op_type == "AveragePool":
        if int(attr(pool, "count_include_pad", 0)) != 1:
            raise RewriteRefused("AveragePool with count_include_pad=0 would stop counting the padded zeros")
        if fill != 0 or np.signbit(fill):
            raise RewriteRefused(f"Pad value {fill} is not +0.0, the value AveragePool pads with")
    else:
        # A -inf Pad is MaxPool's own padding in ONNX semantics, yet onnxruntime's padded MaxPool
        # kernel differs from its unpadded one on NaN and on all -inf windows (-FLT_MAX).
        raise RewriteRefused(
            "MaxPool padding is not a zero Pad, and even a -inf Pad changes NaN/-inf results in onnxruntime"
        )
    if int(attr(pool, "ceil_mode", 0)):
        raise RewriteRefused("ceil_mode windows may overhang the padding differently")
    kernel = [int(k) for k in attr(pool, "kernel_shape", [])]
    spatial = len(added) // 2
    if len(kernel) != spatial:
        raise RewriteRefused("kernel_shape does not match the Pad's spatial dims")
    pads = [a + b for a, b in zip(_consumer_pads(pool, spatial), added)]
    if any(p >= kernel[i % spatial] for i, p in enumerate(pads)):
        raise RewriteRefused("the merged pads would reach the kernel size, which pooling rejects")
    # onnxruntime's padded AveragePool sums only the real elements: a window of -0.0 values and
    # padding gives -0.0 where the explicit +0.0 Pad gave +0.0.
    refuse_if_observable(ctx, pool.outputs[0], "merging the Pad into AveragePool's padding")
    return _with_pads(ctx, pool, m["x"], pads)


PAD_CONV = Rule(
    "fuse_pad_into_conv",
    Op("Conv", Op("Pad", Var("x"), Rest("pad_args"), name="pad"), Rest("conv_args"), name="conv"),
    fuse_pad_conv,
)
PAD_POOL = Rule(
    "fuse_pad_into_pool",
    Op(("AveragePool", "MaxPool"), Op("Pad", Var("x"), Rest("pad_args"), name="pad"), name="pool"),
    fuse_pad_pool,
    kind=REASSOCIATING,
)


# --- fuse_concat_into_reshape -----------------------------------------------------------------


def fuse_concat_reshape(m: Match, ctx: RewriteContext) -> Replacement:
    reshape: ir.Node = m["reshape"]
    if ctx.opset() < 5:
        return None
    allowzero = bool(attr(reshape, "allowzero", 0))
    shapes = shapes_of(ctx)
    data_shape = shapes.symbolic_shape(m["x"])
    target: list[int] = []
    from_sizes: list[bool] = []  # entry came from a run-time size rather than a constant
    for part in m["parts"]:
        array = constant_array(part)
        if array is not None:
            target.extend(int(v) for v in array.reshape(-1))
            from_sizes.extend([False] * array.size)
            continue
        elements = shapes.elements(part)
        if elements is None:
            raise RewriteRefused("a Concat input is neither constant nor a known piece of a shape")
        for item in elements.items:
            position = len(target)
            if isinstance(item, int):
                target.append(item)
                from_sizes.append(True)
            elif (
                isinstance(item, Sym) and not allowzero and data_shape is not None
                and position < len(data_shape) and data_shape[position] is item
            ):
                target.append(0)  # copies the very dim it stands for
                from_sizes.append(False)
            else:
                raise RewriteRefused(f"target entry {position} is a run-time size that 0 cannot stand for")
    if -1 in target and any(v == 0 and sized for v, sized in zip(target, from_sizes)):
        raise RewriteRefused("a zero-size dim would sit next to -1, which runtimes reject")
    if not allowzero and any(v == 0 and sized for v, sized in zip(target, from_sizes)):
        raise RewriteRefused("a zero-size dim written as 0 would mean 'copy the input dim'")
    shape_value = int64_constant(ctx, target, f"{reshape.name or 'reshape'}_shape")
    new = ctx.node("Reshape", [m["x"], shape_value], dict(reshape.attributes), hint=reshape.name or None)
    return Replacement([new], {reshape.outputs[0]: new.outputs[0]})


CONCAT_RESHAPE = Rule(
    "fuse_concat_into_reshape",
    Op("Reshape", Var("x"), Op("Concat", Rest("parts"), name="concat"), name="reshape"),
    fuse_concat_reshape,
)


# --- fuse_qkv ---------------------------------------------------------------------------------


def _sibling_matmuls(x: ir.Value, graph: ir.Graph) -> list[ir.Node]:
    found = []
    for use in x.uses():
        node = use.node
        if node.op_type != "MatMul" or node.domain not in STANDARD_DOMAINS or use.idx != 0 or node.graph is not graph:
            continue
        weight = constant_array(node.inputs[1])
        if weight is None or weight.ndim != 2 or node in found:
            continue
        found.append(node)
    return found


def _graph_order(ctx: RewriteContext, graph: ir.Graph, nodes: list[ir.Node]) -> dict[ir.Node, int]:
    """Positions of the graph's nodes, numbered once per driver run and graph (numbering the whole
    graph on every fuse_qkv was quadratic: 28 of 58 s on a 400-layer decoder). Rewrites insert
    nodes but never reorder the ones present, so old numbers keep their order; the graph is
    numbered again only when one of `nodes` is newer than the numbering. Keyed by the node
    itself (held), so a removed node's id() can never be taken for a new node's."""
    cache = ctx.__dict__.setdefault("_graph_order", {})
    order = cache.get(id(graph))
    if order is None or order[0] is not graph or any(node not in order[1] for node in nodes):
        order = (graph, {node: i for i, node in enumerate(graph)})
        cache[id(graph)] = order
    return order[1]


def fuse_sibling_matmuls(m: Match, ctx: RewriteContext) -> Replacement | None:
    root: ir.Node = m["matmul"]
    graph = root.graph
    siblings = _sibling_matmuls(m["x"], graph)
    if len(siblings) < 2:
        return None
    order = _graph_order(ctx, graph, siblings)
    siblings.sort(key=lambda n: order[n])
    if siblings[0] is not root:
        return None  # the earliest one fuses the group, so every reader stays after the producer
    weights = [constant_array(node.inputs[1]) for node in siblings]
    for node in siblings:  # quantized units stay as they are (ir/quantization.py)
        refuse_quantized_layer(node, node.outputs[0])
    if len({w.dtype for w in weights}) != 1 or len({w.shape[0] for w in weights}) != 1:
        raise RewriteRefused("sibling MatMul weights differ in dtype or inner dimension")
    if ir.DataType.from_numpy(weights[0].dtype) not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
        raise RewriteRefused(f"weights of dtype {weights[0].dtype} are not floating point")
    hint = root.name or "qkv"
    merged = ctx.constant(np.concatenate(weights, axis=1), f"{hint}_merged_weight",
                          derived_from=[node.inputs[1] for node in siblings])
    matmul = ctx.node("MatMul", [m["x"], merged], hint=f"{hint}_merged")
    sizes = [w.shape[1] for w in weights]
    if ctx.opset() >= 13:
        split = ctx.node("Split", [matmul.outputs[0], int64_constant(ctx, sizes, f"{hint}_split_sizes")],
                         {"axis": -1}, num_outputs=len(siblings), hint=f"{hint}_split")
    else:
        split = ctx.node("Split", [matmul.outputs[0]], {"axis": -1, "split": sizes}, num_outputs=len(siblings),
                         hint=f"{hint}_split")
    outputs = {node.outputs[0]: out for node, out in zip(siblings, split.outputs)}
    return Replacement([matmul, split], outputs, also_removed=siblings[1:])


QKV = Rule(
    "fuse_qkv",
    Op("MatMul", Var("x"), Const("w"), name="matmul"),
    fuse_sibling_matmuls,
    kind=REASSOCIATING,
)


_FUSION_PASSES = (
    ("fuse_consecutive_transposes", EXACT, "Transpose(Transpose(x)) -> one Transpose with the composed perm", (TRANSPOSES,)),
    ("fuse_consecutive_squeezes", EXACT, "Squeeze(Squeeze(x)) -> one Squeeze (negative axes resolved per step)", (SQUEEZES,)),
    ("fuse_consecutive_unsqueezes", EXACT, "Unsqueeze(Unsqueeze(x)) -> one Unsqueeze (axes of the output rank)", (UNSQUEEZES,)),
    ("fuse_consecutive_slices", EXACT, "Slice(Slice(x)) on disjoint axes -> one Slice", (SLICES,)),
    ("fuse_consecutive_concats", EXACT, "Concat of a same-axis Concat read only there -> one Concat", (CONCATS,)),
    ("fuse_consecutive_log_softmax", REASSOCIATING, "Log(Softmax(x)) -> LogSoftmax(x) (more accurate, not identical)",
     (LOG_SOFTMAX,)),
    ("fuse_consecutive_reduce_unsqueeze", EXACT, "Unsqueeze(ReduceX(x, keepdims=0)) on the same axes -> keepdims=1",
     (REDUCE_UNSQUEEZE,)),
    ("fuse_matmul_add_bias_into_gemm", REASSOCIATING, "MatMul(A 2-D, constant B) + constant bias -> Gemm", (MATMUL_ADD,)),
    ("fuse_transpose_into_gemm", EXACT, "Transpose [1,0] feeding Gemm -> Gemm transA/transB", (TRANSPOSE_GEMM_A, TRANSPOSE_GEMM_B)),
    ("fuse_pad_into_conv", EXACT, "Constant zero Pad on spatial dims -> Conv pads", (PAD_CONV,)),
    ("fuse_pad_into_pool", REASSOCIATING,
     "Zero Pad -> AveragePool(count_include_pad=1) pads where a window's zero sign (which may flip) reaches no "
     "sign-sensitive use; never MaxPool",
     (PAD_POOL,)),
    ("fuse_concat_into_reshape", EXACT, "Reshape target built by Concat of constants/known sizes -> constant target",
     (CONCAT_RESHAPE,)),
    ("fuse_qkv", REASSOCIATING, "MatMuls of one input by constant weights -> one MatMul on merged weights + Split", (QKV,)),
)

for _name, _kind, _summary, _rules in _FUSION_PASSES:
    register(PassSpec(_name, _kind, _summary, rules=_rules, order=30))
