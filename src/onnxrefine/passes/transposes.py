"""Transposes and reshapes that move no data, and the chains they leave.

transpose_to_reshape. Transposes that move no data: a Transpose whose permutation keeps the order of every axis that
may be longer than 1 only moves size-1 axes, so its output holds the input's elements in the same
row-major order; it is a Reshape to the permuted shape (ORT's transpose optimizer does the same).

    Conv -> Reshape [1,6,4,1,1] -> Transpose(perm 0,3,4,1,2) -> Reshape [1,-1,4]     (SSD heads at 1x1)
    becomes Conv -> Reshape -> Reshape -> Reshape, and idempotent_reshape_chain leaves one Reshape.

Guards: the input's shape comes from trusted facts (ir/facts/; a symbolic dim counts as
possibly longer than 1); no dim is known to be 0; the Reshape target is written with positive
ints, 0 ("copy the input dim", allowzero=0) only for a symbolic dim that stays on its axis, and -1
only for a single other symbolic dim when every other target element is a positive int (a -1 next
to a copied dim could be ambiguous on an empty tensor). Pure data movement: EXACT.

merge_reshape_unit_axes: Unsqueeze/Squeeze/Flatten of a Reshape's output (read only there) is one
Reshape of the Reshape's input to the final shape: all four keep row-major order. Needs the final
shape static and non-empty from trusted facts. EXACT.

reshape_through_transpose: Reshape(Transpose(Reshape(x, _), p), S) where S only adds or removes
size-1 axes of the Transpose's output -> Transpose(Reshape(x, R), q): R is the middle shape with its
size-1 axes dropped and len(S) - (axes left) size-1 axes appended, q puts each axis where S wants
it. The order of the axes longer than 1 is the same either way, so every element lands where it
did; three nodes become two (vision transformers' attention: 4 per layer with the consecutive
Transposes merged). Needs both shapes static and non-empty. EXACT.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Match, Op, Rest, Var
from onnxrefine.rewrite.rule import Replacement, RewriteContext, Rule


def reshape_target(shape: tuple, perm: list[int]) -> list[int]:
    """The Reshape target equal to Transpose(perm) on a tensor of `shape`; RewriteRefused if the
    Transpose moves data or the target cannot be written without ambiguity."""
    if sorted(perm) != list(range(len(shape))):
        raise RewriteRefused("transpose_reshape.perm_rank", f"perm {perm} is not a permutation of rank {len(shape)}")
    if any(isinstance(d, int) and d == 0 for d in shape):
        raise RewriteRefused("transpose_reshape.empty", "the tensor is empty (a 0 in a Reshape target would copy a dim)")
    moving = [axis for axis in perm if not (isinstance(shape[axis], int) and shape[axis] == 1)]
    if moving != sorted(moving):
        raise RewriteRefused("transpose_reshape.reorders", f"perm {perm} reorders axes that may be longer than 1 (shape {_text(shape)})")
    target: list = []
    free = []
    for out_axis, in_axis in enumerate(perm):
        dim = shape[in_axis]
        if isinstance(dim, int):
            target.append(dim)
        elif out_axis == in_axis:
            target.append(0)  # a symbolic dim on its own axis: Reshape copies it
        else:
            target.append(None)
            free.append(out_axis)
    if free:
        if len(free) > 1 or any(t == 0 for t in target):
            raise RewriteRefused("transpose_reshape.symbolic_dims", f"more than one moved symbolic dim (shape {_text(shape)}, perm {perm})")
        target[free[0]] = -1
    return target


def _text(shape) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"


def transpose_to_reshape(m: Match, ctx: RewriteContext) -> Replacement:
    node: ir.Node = m["t"]
    if node.domain not in STANDARD_DOMAINS:
        return None
    shape = ctx.facts.symbolic_shape(m["x"])
    if shape is None:
        raise RewriteRefused("transpose_reshape.shape_unknown", "the input's shape is not known from trusted facts")
    perm = attr(node, "perm")
    perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
    if perm == list(range(len(shape))):
        return None  # the identity permutation is eliminate_nop_transpose's case
    target = reshape_target(shape, perm)
    shape_value = ctx.constant(np.array(target, dtype=np.int64), hint=f"{node.name or 'transpose'}_as_reshape")
    new = ctx.node("Reshape", [m["x"], shape_value], hint=node.name or None)
    return Replacement([new], {node.outputs[0]: new.outputs[0]})


def _static_nonempty(ctx: RewriteContext, value: ir.Value, what: str) -> list[int]:
    shape = ctx.facts.symbolic_shape(value)
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise RewriteRefused("reshape_transpose.shape_not_static", f"the {what} shape is not static from trusted facts")
    if any(d == 0 for d in shape):
        raise RewriteRefused("reshape_transpose.empty", f"the {what} is empty")
    return list(shape)


def merge_reshape_unit_axes(m: Match, ctx: RewriteContext) -> Replacement:
    outer: ir.Node = m["outer"]
    if outer.domain not in STANDARD_DOMAINS:
        return None
    target = _static_nonempty(ctx, outer.outputs[0], f"{outer.op_type} output")
    shape_value = ctx.constant(np.array(target, dtype=np.int64), hint=f"{outer.name or 'reshape'}_shape")
    new = ctx.node("Reshape", [m["x"], shape_value], hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]})


def through_transpose(middle: list[int], perm: list[int], target: list[int]) -> tuple[list[int], list[int]]:
    """(R, q) with Transpose(Reshape(x, R), q) == Reshape(Transpose(x', perm), target) for any x'
    of shape `middle`; RewriteRefused unless `target` is the transposed shape up to size-1 axes."""
    if sorted(perm) != list(range(len(middle))):
        raise RewriteRefused("reshape_transpose.perm_rank", f"perm {perm} is not a permutation of rank {len(middle)}")
    sources = [axis for axis in perm if middle[axis] != 1]  # middle axes longer than 1, in output order
    if [middle[a] for a in sources] != [d for d in target if d != 1]:
        raise RewriteRefused("reshape_transpose.not_unit_axes", f"the Reshape to {target} does more than add or remove size-1 axes")
    kept = sorted(sources)  # R: those axes in their own order, then size-1 axes
    ones = len(target) - len(kept)
    reshape = [middle[a] for a in kept] + [1] * ones
    order, next_one, queue = [], len(kept), iter(sources)
    for dim in target:
        if dim == 1:
            order.append(next_one)
            next_one += 1
        else:
            order.append(kept.index(next(queue)))
    return reshape, order


def reshape_through_transpose(m: Match, ctx: RewriteContext) -> Replacement:
    transpose: ir.Node = m["t"]
    outer: ir.Node = m["r1"]
    if any(n.domain not in STANDARD_DOMAINS for n in (transpose, outer, m["r0"])):
        return None
    middle = _static_nonempty(ctx, transpose.inputs[0], "Transpose input")
    target = _static_nonempty(ctx, outer.outputs[0], "Reshape output")
    perm = attr(transpose, "perm")
    perm = list(range(len(middle)))[::-1] if perm is None else [int(p) for p in perm]
    reshape, order = through_transpose(middle, perm, target)
    shape_value = ctx.constant(np.array(reshape, dtype=np.int64), hint=f"{outer.name or 'reshape'}_shape")
    new_reshape = ctx.node("Reshape", [m["x"], shape_value], hint=m["r0"].name or None)
    new_transpose = ctx.node("Transpose", [new_reshape.outputs[0]], {"perm": order}, hint=transpose.name or None)
    return Replacement([new_reshape, new_transpose], {outer.outputs[0]: new_transpose.outputs[0]})


MERGE_RESHAPE_UNIT_AXES = Rule(
    "merge_reshape_unit_axes",
    Op(("Unsqueeze", "Squeeze", "Flatten"), Op("Reshape", Var("x"), Var("s"), name="inner"), Rest("rest"),
       name="outer"),
    merge_reshape_unit_axes,
)
RESHAPE_THROUGH_TRANSPOSE = Rule(
    "reshape_through_transpose",
    Op("Reshape", Op("Transpose", Op("Reshape", Var("x"), Var("s0"), name="r0"), name="t"), Var("s"), name="r1"),
    reshape_through_transpose,
)

TRANSPOSE_TO_RESHAPE = Rule("transpose_to_reshape", Op("Transpose", Var("x"), name="t"), transpose_to_reshape)


PASSES = (
    PassSpec(
        "transpose_to_reshape",
        "Transpose that only moves size-1 axes (the order of every other axis kept) -> Reshape, which "
        "then merges with neighbouring Reshapes",
        rules=(TRANSPOSE_TO_RESHAPE,), order=22, not_fuzzed=NO_PATTERN_YET,
    ),
    PassSpec(
        "merge_reshape_unit_axes",
        "Unsqueeze/Squeeze/Flatten of a Reshape's output -> one Reshape to the (static) final shape",
        rules=(MERGE_RESHAPE_UNIT_AXES,), order=22, not_fuzzed=NO_PATTERN_YET,
    ),
    PassSpec(
        "reshape_through_transpose",
        "Reshape -> Transpose -> Reshape that only adds/removes size-1 axes -> Reshape -> Transpose (static shapes)",
        rules=(RESHAPE_THROUGH_TRANSPOSE,), order=22, not_fuzzed=NO_PATTERN_YET,
    ),
)
