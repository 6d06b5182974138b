"""Fusions of consecutive layout operators (Transpose, Squeeze/Unsqueeze, Slice, Concat, a
keepdims=0 reduction and its Unsqueeze, a Concat-built Reshape target) and Log(Softmax) into
LogSoftmax. Registered in passes/fusion.py.

Negative Squeeze/Unsqueeze axes are resolved against the rank at their own step; a Reshape target
keeps 0 (copy) only where it copies the very dim it stands for.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.facts import Sym
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.opargs import (
    axes_arg,
    axes_node_args,
    int64_constant,
    normalize_axes,
)
from onnxrefine.rewrite.pattern import Const, Match, Op, Opt, Rest, Var
from onnxrefine.rewrite.rule import REASSOCIATING, Replacement, RewriteContext, Rule


def _rank(ctx: RewriteContext, value: ir.Value) -> int | None:
    return ctx.facts.rank(value)


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
            raise RewriteRefused("transposes.perm_rank", "Transpose without perm reverses axes of an input of unknown rank")
        return list(range(rank))[::-1]
    return [int(p) for p in perm]


def fuse_transposes(m: Match, ctx: RewriteContext) -> Replacement:
    rank = _rank(ctx, m["x"])
    inner, outer = _perm(m["t1"], rank), _perm(m["t2"], rank)
    if sorted(inner) != list(range(len(inner))) or sorted(outer) != list(range(len(inner))):
        raise RewriteRefused("transposes.not_perms", "the permutations are not permutations of one rank")
    new = ctx.node("Transpose", [m["x"]], {"perm": compose_perms(inner, outer)}, hint=m["t2"].name or None)
    return Replacement([new], {m["t2"].outputs[0]: new.outputs[0]})


TRANSPOSES = Rule(
    "fuse_consecutive_transposes",
    Op("Transpose", Op("Transpose", Var("x"), name="t1"), name="t2"),
    fuse_transposes,
)


def transposes_to_identity(m: Match, ctx: RewriteContext) -> Replacement | None:
    """Transpose(Transpose(x)) whose perms compose to the identity reads x, even where the inner
    Transpose has other readers (it stays for them)."""
    rank = _rank(ctx, m["x"])
    inner, outer = _perm(m["t1"], rank), _perm(m["t2"], rank)
    if compose_perms(inner, outer) != list(range(len(inner))) or sorted(inner) != list(range(len(inner))):
        return None
    return Replacement([], {m["t2"].outputs[0]: m["x"]})


TRANSPOSES_IDENTITY = Rule(
    "transposes_to_identity",
    Op("Transpose", Op("Transpose", Var("x"), name="t1"), name="t2"),
    transposes_to_identity,
    keeps_intermediates=True,
)


# --- fuse_consecutive_squeezes / unsqueezes ---------------------------------------------------
# These rules and the squeeze/unsqueeze pairs below keep their intermediates: where the inner node
# has other readers it stays for them, and only the reader that fuses is repointed (onnxoptimizer
# leaves such a chain whole).


def _explicit_axes(node: ir.Node) -> list[int]:
    axes = axes_arg(node)
    if axes is None:
        raise RewriteRefused("squeeze_chain.no_axes", f"{node.op_type} without axes depends on which dims are 1 at run time")
    return axes


def compose_squeezes(first: list[int], second: list[int], rank: int | None) -> list[int] | None:
    """Axes of x for Squeeze(Squeeze(x, first), second); None when the rank needed is unknown."""
    if not first or not second:
        # onnxruntime reads an empty axes list as "every size-1 dim", which depends on the dims
        raise RewriteRefused("squeeze_chain.empty_axes", "an empty axes list squeezes whichever dims are 1 at run time")
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
        raise RewriteRefused("squeeze_chain.negative_axes", "negative axes need the input's rank, which is not known from trusted facts")
    extra_inputs, attributes = axes_node_args(ctx, outer, axes, f"{outer.name or outer.op_type}_axes")
    new = ctx.node(outer.op_type, [m["x"], *extra_inputs], attributes, hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]})


SQUEEZES = Rule(
    "fuse_consecutive_squeezes",
    Op("Squeeze", Op("Squeeze", Var("x"), Opt(Var("a1")), name="inner"), Opt(Var("a2")), name="outer"),
    lambda m, ctx: _fuse_axes_chain(m, ctx, compose_squeezes),
    keeps_intermediates=True,
)
UNSQUEEZES = Rule(
    "fuse_consecutive_unsqueezes",
    Op("Unsqueeze", Op("Unsqueeze", Var("x"), Opt(Var("a1")), name="inner"), Opt(Var("a2")), name="outer"),
    lambda m, ctx: _fuse_axes_chain(m, ctx, compose_unsqueezes),
    keeps_intermediates=True,
)


# --- fuse_consecutive_squeeze_unsqueeze -------------------------------------------------------


def squeeze_then_unsqueeze(m: Match, ctx: RewriteContext) -> Replacement:
    """Unsqueeze(Squeeze(x, a), a) -> x where x's dims at a are known to be 1 (where one is not,
    the Squeeze fails: the pair is an error, not x). Both axes lists are of x's rank."""
    x, rank = m["x"], _rank(ctx, m["x"])
    first, second = normalize_axes(_explicit_axes(m["inner"]), rank), normalize_axes(_explicit_axes(m["outer"]), rank)
    if first is None or second is None:
        raise RewriteRefused("squeeze_unsqueeze.negative_axes", "negative axes need the input's rank, which is not known from trusted facts")
    if sorted(first) != sorted(second):
        raise RewriteRefused("squeeze_unsqueeze.axes_differ", "the Unsqueeze does not restore the axes the Squeeze removed")
    shape = ctx.facts.symbolic_shape(x)
    if shape is None or any(shape[axis] != 1 for axis in first):
        raise RewriteRefused("squeeze_unsqueeze.dim_not_one",
                             "a squeezed dim is not known to be 1: the Squeeze may fail where x would not")
    return Replacement([], {m["outer"].outputs[0]: x})


def unsqueeze_then_squeeze(m: Match, ctx: RewriteContext) -> Replacement:
    """Squeeze(Unsqueeze(x, a), a) -> x: the Squeeze removes exactly the dims of 1 the Unsqueeze
    added. Both axes lists are of the wider rank."""
    inner_axes, rank = _explicit_axes(m["inner"]), _rank(ctx, m["x"])
    wide = None if rank is None else rank + len(inner_axes)
    first, second = normalize_axes(inner_axes, wide), normalize_axes(_explicit_axes(m["outer"]), wide)
    if first is None or second is None:
        raise RewriteRefused("unsqueeze_squeeze.negative_axes", "negative axes need the input's rank, which is not known from trusted facts")
    if sorted(first) != sorted(second):
        raise RewriteRefused("unsqueeze_squeeze.axes_differ", "the Squeeze does not remove the axes the Unsqueeze added")
    return Replacement([], {m["outer"].outputs[0]: m["x"]})


SQUEEZE_UNSQUEEZE = Rule(
    "fuse_consecutive_squeeze_unsqueeze",
    Op("Unsqueeze", Op("Squeeze", Var("x"), Opt(Var("a1")), name="inner"), Opt(Var("a2")), name="outer"),
    squeeze_then_unsqueeze,
    keeps_intermediates=True,
)
UNSQUEEZE_SQUEEZE = Rule(
    "fuse_consecutive_unsqueeze_squeeze",
    Op("Squeeze", Op("Unsqueeze", Var("x"), Opt(Var("a1")), name="inner"), Opt(Var("a2")), name="outer"),
    unsqueeze_then_squeeze,
    keeps_intermediates=True,
)


# --- fuse_consecutive_slices ------------------------------------------------------------------


def _slice_params(m: Match, suffix: str, rank: int | None):
    return slice_params(m.array(f"starts{suffix}"), m.array(f"ends{suffix}"), m.array(f"axes{suffix}"),
                        m.array(f"steps{suffix}"), rank)


def slice_params(starts, ends, axes, steps, rank: int | None):
    """(starts, ends, axes resolved against `rank`, steps) of one Slice from its constant inputs
    (`axes`, `steps` None when absent)."""
    starts = starts.reshape(-1).astype(np.int64)
    ends = ends.reshape(-1).astype(np.int64)
    axes = list(range(starts.size)) if axes is None else axes.reshape(-1).tolist()
    steps = np.ones(starts.size, np.int64) if steps is None else steps.reshape(-1).astype(np.int64)
    normalized = normalize_axes(axes, rank)
    if normalized is None or not (starts.size == ends.size == len(normalized) == steps.size):
        raise RewriteRefused("slices.axes", "slice axes are negative with an unknown rank, repeated, or inconsistent")
    return starts, ends, normalized, steps


def fuse_slices(m: Match, ctx: RewriteContext) -> Replacement:
    if ctx.opset() < 10:
        return None
    rank = _rank(ctx, m["x"])
    fused = fused_slice_params(_slice_params(m, "1", rank), _slice_params(m, "2", rank))
    hint = m["outer"].name or "slice"
    inputs = [m["x"], *(int64_constant(ctx, values, f"{hint}_{part}")
                        for values, part in zip(fused, ("starts", "ends", "axes", "steps")))]
    new = ctx.node("Slice", inputs, hint=m["outer"].name or None)
    return Replacement([new], {m["outer"].outputs[0]: new.outputs[0]})


def fused_slice_params(first, second):
    """The (starts, ends, axes, steps) of one Slice equal to Slice(Slice(x, *first), *second),
    each given as slice_params returns it."""
    s1, e1, a1, st1 = first
    s2, e2, a2, st2 = second
    if set(a1) & set(a2):
        raise RewriteRefused("slices.same_axis", "both Slices cut the same axis; composing them needs the axis length")
    return np.concatenate([s1, s2]), np.concatenate([e1, e2]), a1 + a2, np.concatenate([st1, st2])


def _slice_pattern(inner_or_x, suffix: str, name: str) -> Op:
    return Op(
        "Slice", inner_or_x, Const(f"starts{suffix}"), Const(f"ends{suffix}"), Opt(Const(f"axes{suffix}")),
        Opt(Const(f"steps{suffix}")), name=name,
    )


# An inner Slice read by several outer ones (a Swin patch merging takes rows 0::2 once, then columns
# 0::2 and 1::2 of them) stays until each reader has fused: the last one removes it.
SLICES = Rule("fuse_consecutive_slices", _slice_pattern(_slice_pattern(Var("x"), "1", "inner"), "2", "outer"), fuse_slices,
              keeps_intermediates=True)


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
        if not same_concat_axis(inner_axis, axis, rank):
            flat.append(value)
            continue
        flat.extend(inner.inputs)
        if inner not in absorbed:
            absorbed.append(inner)
    if not absorbed:
        return None
    if len(flat) > MAX_FUSED_CONCAT_INPUTS:
        # Concat(c, c) of an inner Concat repeats its inputs: a chain of such doublings would fuse
        # into 2^depth inputs (a Concat-doubling bomb: each Concat of a value with itself doubles it).
        raise RewriteRefused("concats.too_many_inputs", f"the fused Concat would read {len(flat)} inputs (more than {MAX_FUSED_CONCAT_INPUTS})")
    new = ctx.node("Concat", flat, dict(outer.attributes), hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]}, also_removed=absorbed)


def same_concat_axis(inner_axis: int, outer_axis: int, rank: int | None) -> bool:
    """Whether two Concat axes name one axis of tensors of `rank` (None: unknown)."""
    return inner_axis == outer_axis or (rank is not None and (inner_axis - outer_axis) % rank == 0)


CONCATS = Rule("fuse_consecutive_concats", Op("Concat", Rest("inputs"), name="outer"), fuse_concats)


# --- fuse_consecutive_log_softmax -------------------------------------------------------------


def fuse_log_softmax(m: Match, ctx: RewriteContext) -> Replacement:
    # Softmax and LogSoftmax of one opset share the axis convention (2-D coercion before 13,
    # a single axis from 13 on) and the default axis, so the attributes carry over as they are.
    softmax: ir.Node = m["softmax"]
    dtype = ctx.facts.dtype(m["x"])
    if dtype is None:
        raise RewriteRefused("log_softmax.dtype_unknown", "the input's element type is not known from trusted facts")
    if dtype == ir.DataType.DOUBLE:
        # onnxruntime's float64 LogSoftmax returns finite values (x - max + log(1e20)) in a row
        # holding a NaN after its first element, where Log(Softmax) gives NaN.
        raise RewriteRefused("log_softmax.float64", "onnxruntime's float64 LogSoftmax turns rows holding a NaN into finite values")
    if _feeds_discrete_op(m["log"].outputs[0], ctx.model.graph):
        # Where the float Softmax underflows, Log gives -inf (ties); LogSoftmax gives distinct
        # finite values, which an ArgMax or a comparison downstream tells apart (the same reason
        # Exp/Softmax before ArgMax are not dropped).
        raise RewriteRefused("log_softmax.discrete_use", "the result reaches a discrete op, which the -inf ties of an "
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
                to = attr(node, "to")
                if to is None or not ir.DataType(to).is_floating_point():
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
    noop_empty = bool(attr(reduce, "noop_with_empty_axes", 0))
    if not unsqueeze_restores(axes_arg(reduce), noop_empty, _explicit_axes(unsqueeze), _rank(ctx, m["x"])):
        return None
    attributes = dict(reduce.attributes)
    attributes["keepdims"] = ir.AttrInt64("keepdims", 1)
    new = ctx.node(reduce.op_type, list(reduce.inputs), attributes, hint=reduce.name or None)
    return Replacement([new], {unsqueeze.outputs[0]: new.outputs[0]})


def unsqueeze_restores(reduce_axes: list[int] | None, noop_with_empty_axes: bool, unsqueeze_axes: list[int],
                       rank: int | None) -> bool:
    """Whether Unsqueeze(`unsqueeze_axes`) puts back exactly the axes a keepdims=0 reduction over
    `reduce_axes` of a rank-`rank` input removed (RewriteRefused when that is not known)."""
    if not reduce_axes:
        if noop_with_empty_axes:
            raise RewriteRefused("reduce_unsqueeze.noop_empty_axes", "the reduction has no axes and noop_with_empty_axes=1")
        if rank is None:
            raise RewriteRefused("reduce_unsqueeze.rank_unknown", "reducing all axes of an input of unknown rank")
        reduce_axes = list(range(rank))
    reduced = normalize_axes(reduce_axes, rank)
    restored = normalize_axes(unsqueeze_axes, rank)
    if reduced is None or restored is None:
        raise RewriteRefused("reduce_unsqueeze.negative_axes", "negative axes need the input's rank, which is not known from trusted facts")
    return sorted(reduced) == sorted(restored)


REDUCE_UNSQUEEZE = Rule(
    "fuse_consecutive_reduce_unsqueeze",
    Op("Unsqueeze", Op(REDUCE_OPS, Var("x"), Rest("reduce_args"), name="reduce"), Opt(Var("axes")), name="unsqueeze"),
    fuse_reduce_unsqueeze,
)


# --- fuse_concat_into_reshape -----------------------------------------------------------------


def fuse_concat_reshape(m: Match, ctx: RewriteContext) -> Replacement:
    reshape: ir.Node = m["reshape"]
    if ctx.opset() < 5:
        return None
    allowzero = bool(attr(reshape, "allowzero", 0))
    parts = []
    for part in m["parts"]:
        array = constant_array(part)
        if array is not None:
            parts.append(([int(v) for v in array.reshape(-1)], True))
            continue
        elements = ctx.facts.elements(part)
        if elements is None:
            raise RewriteRefused("concat_reshape.part_unknown", "a Concat input is neither constant nor a known piece of a shape")
        parts.append((list(elements.items), False))
    target = constant_reshape_target(parts, ctx.facts.symbolic_shape(m["x"]), allowzero)
    shape_value = int64_constant(ctx, target, f"{reshape.name or 'reshape'}_shape")
    new = ctx.node("Reshape", [m["x"], shape_value], dict(reshape.attributes), hint=reshape.name or None)
    return Replacement([new], {reshape.outputs[0]: new.outputs[0]})


def constant_reshape_target(parts: list[tuple[list, bool]], data_shape, allowzero: bool) -> list[int]:
    """A constant Reshape target equal to the Concat of `parts` at run time, for data of
    (symbolic) shape `data_shape`. Each part is (items, constant): a constant's ints, or the
    partial value of a computed piece (ints and Syms: known and unknown run-time sizes)."""
    target: list[int] = []
    from_sizes: list[bool] = []  # entry came from a run-time size rather than a constant
    for items, constant in parts:
        if constant:
            target.extend(items)
            from_sizes.extend([False] * len(items))
            continue
        for item in items:
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
                raise RewriteRefused("concat_reshape.runtime_size", f"target entry {position} is a run-time size that 0 cannot stand for")
    if -1 in target and any(v == 0 and sized for v, sized in zip(target, from_sizes)):
        raise RewriteRefused("concat_reshape.zero_with_minus_one", "a zero-size dim would sit next to -1, which runtimes reject")
    if not allowzero and any(v == 0 and sized for v, sized in zip(target, from_sizes)):
        raise RewriteRefused("concat_reshape.zero_copies", "a zero-size dim written as 0 would mean 'copy the input dim'")
    return target


CONCAT_RESHAPE = Rule(
    "fuse_concat_into_reshape",
    Op("Reshape", Var("x"), Op("Concat", Rest("parts"), name="concat"), name="reshape"),
    fuse_concat_reshape,
    # Only the Reshape's target is repointed: a Concat other nodes read stays for them (and goes
    # with its last reader).
    keeps_intermediates=True,
)
