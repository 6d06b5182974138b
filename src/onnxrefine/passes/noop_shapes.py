"""No-ops that trusted shape facts reveal: a Flatten of a row or a column, a Slice that selects the
whole tensor, Concat inputs with nothing along the axis. Each needs the dims it reads known from
trusted facts (constants, declared main-graph inputs, operator rules: ir/facts/), never value_info.

The rules join the passes of noop.py (eliminate_nop_flatten, eliminate_nop_concat) and declare
eliminate_nop_slice here. A Concat input is only dropped where its other dims are known to match
what the Concat keeps: otherwise onnxruntime rejects the original, and dropping it would turn
that error into a result.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.opargs import known_dim, normalize_axes
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Const, Match, Op, Opt, Rest, Var
from onnxrefine.rewrite.rule import Replacement, RewriteContext, Rule

# --- Flatten of a row (axis 0) or a column (axis 2) -------------------------------------------


def drop_flatten_of_row(m: Match, ctx: RewriteContext) -> Replacement | None:
    """Flatten(x, axis) is [prod(dims[:axis]), prod(dims[axis:])]: x itself for a 2-D x at axis 0
    when dims[0] is 1, at axis 2 when dims[1] is 1 (axis 1 is eliminate_nop_flatten's own case)."""
    shape = ctx.facts.symbolic_shape(m["x"])
    if shape is None or len(shape) != 2:
        return None
    axis = int(attr(m["node"], "axis", 1))
    axis = axis + 2 if axis < 0 else axis
    if axis not in (0, 2):
        return None
    if known_dim(shape[0 if axis == 0 else 1]) != 1:
        raise RewriteRefused("flatten_row.dim_not_one",
                             f"Flatten(axis={axis}) keeps a 2-D input only when its dim {0 if axis == 0 else 1} is 1")
    return Replacement([], {m["node"].outputs[0]: m["x"]})


FLATTEN_ROW = Rule("eliminate_nop_flatten_row", Op("Flatten", Var("x"), name="node"), drop_flatten_of_row)


# --- eliminate_nop_slice ----------------------------------------------------------------------

# An end at or past this selects to the end of any axis onnxruntime can hold.
_TO_THE_END = 2**31 - 1


def drop_whole_slice(m: Match, ctx: RewriteContext) -> Replacement | None:
    """A Slice whose every sliced axis starts at 0, steps by 1 and ends at or past the axis's end."""
    if ctx.opset() < 10:
        return None  # starts/ends as attributes: left alone
    starts, ends = m.array("starts").reshape(-1), m.array("ends").reshape(-1)
    axes = m.array("axes")
    steps = m.array("steps")
    shape = ctx.facts.symbolic_shape(m["x"])
    rank = None if shape is None else len(shape)
    axes = normalize_axes(range(starts.size) if axes is None else axes.reshape(-1), rank)
    if axes is None or len(axes) != starts.size or ends.size != starts.size:
        return None
    steps = np.ones(starts.size, np.int64) if steps is None else steps.reshape(-1)
    for axis, start, end, step in zip(axes, starts.tolist(), ends.tolist(), steps.tolist()):
        if step != 1:
            return None
        dim = None if shape is None else known_dim(shape[axis])
        if start != 0 and not (start < 0 and dim is not None and start <= -dim):
            if dim is None and start < 0:
                raise RewriteRefused("nop_slice.start_dim_unknown", f"a negative start needs axis {axis}'s size, not known")
            return None
        if end < _TO_THE_END and (dim is None or end < dim):
            if dim is None:
                raise RewriteRefused("nop_slice.end_dim_unknown", f"whether end {end} reaches the end of axis {axis} needs its size")
            return None
    return Replacement([], {m["node"].outputs[0]: m["x"]})


NOP_SLICE = Rule(
    "eliminate_nop_slice",
    Op("Slice", Var("x"), Const("starts"), Const("ends"), Opt(Const("axes")), Opt(Const("steps")), name="node"),
    drop_whole_slice,
)


# --- Concat inputs with nothing along the axis ------------------------------------------------


def drop_empty_concat_inputs(m: Match, ctx: RewriteContext) -> Replacement | None:
    node: ir.Node = m["node"]
    inputs = [m["first"], *m["rest"]]
    if len(inputs) < 2 or any(v is None for v in inputs):
        return None
    shapes = [ctx.facts.symbolic_shape(v) for v in inputs]
    ranks = {len(s) for s in shapes if s is not None}
    if len(ranks) != 1:
        return None
    rank = ranks.pop()
    axis = int(attr(node, "axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    empty = [i for i, s in enumerate(shapes) if s is not None and known_dim(s[axis]) == 0]
    kept = [i for i in range(len(inputs)) if i not in empty]
    if not empty or not kept:
        return None  # nothing empty, or everything: the result is empty either way
    reference = shapes[kept[0]]
    for i in empty:
        others = [d for j, d in enumerate(shapes[i]) if j != axis]
        wanted = None if reference is None else [d for j, d in enumerate(reference) if j != axis]
        if wanted is None or any(known_dim(a) is None or known_dim(a) != known_dim(b) for a, b in zip(others, wanted)):
            raise RewriteRefused("concat_empty.other_dims",
                                 "an empty input's other dims are not known to match the rest (onnxruntime would reject a mismatch)")
    if len(kept) == 1:
        return Replacement([], {node.outputs[0]: inputs[kept[0]]})
    new = ctx.node("Concat", [inputs[i] for i in kept], dict(node.attributes), hint=node.name or None)
    return Replacement([new], {node.outputs[0]: new.outputs[0]})


CONCAT_EMPTY = Rule(
    "eliminate_nop_concat_empty",
    Op("Concat", Var("first"), Rest("rest"), name="node"),
    drop_empty_concat_inputs,
)


# --- an Expand that the binary op after it would broadcast anyway ----------------------------

# Elementwise operators that broadcast both operands the same (multidirectional) way; PRelu
# broadcasts one way only and Where has three operands: not here.
BROADCASTING_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater",
                       "LessOrEqual", "GreaterOrEqual", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor")


def drop_expand_before_broadcast(m: Match, ctx: RewriteContext) -> Replacement | None:
    """op(Expand(x, s), y) -> op(x, y) where op's broadcast alone gives the same output shape:
    each output element reads the same x element either way (exact)."""
    node: ir.Node = m["node"]
    slots = [i for i, v in enumerate(node.inputs[:2]) if v is not None and v.producer() is not None
             and v.producer().op_type == "Expand" and v.producer().domain in ("", "ai.onnx")
             and v.producer().graph is node.graph]
    if len(node.inputs) != 2 or not slots:
        return None
    slot = slots[0]
    expand = node.inputs[slot].producer()
    other = node.inputs[1 - slot]
    x_shape, other_shape = ctx.facts.static_shape(expand.inputs[0]), ctx.facts.static_shape(other)
    out_shape = ctx.facts.static_shape(node.outputs[0])
    if x_shape is None or other_shape is None or out_shape is None:
        raise RewriteRefused("expand_broadcast.shape_unknown", "the operands' or the output's shape is not static")
    try:
        without = tuple(np.broadcast_shapes(tuple(x_shape), tuple(other_shape)))
    except ValueError:
        without = None
    if without != tuple(out_shape):
        raise RewriteRefused("expand_broadcast.shape_changes", f"without the Expand the output would be {without}, not {tuple(out_shape)}")
    inputs = list(node.inputs)
    inputs[slot] = expand.inputs[0]
    new = ctx.node(node.op_type, inputs, dict(node.attributes), hint=node.name or None)
    return Replacement([new], {node.outputs[0]: new.outputs[0]}, also_removed=[expand])


EXPAND_BROADCAST = Rule(
    "eliminate_expand_before_broadcast",
    Op(BROADCASTING_BINARY, Var("a"), Var("b"), name="node"),
    drop_expand_before_broadcast,
)


PASSES = (
    PassSpec("eliminate_nop_slice", "Remove Slice that selects the whole tensor (start 0, step 1, end at or past "
             "the axis's trusted size)", rules=(NOP_SLICE,), order=20, not_fuzzed=NO_PATTERN_YET),
)
