"""Transposes that move no data: a Transpose whose permutation keeps the order of every axis that
may be longer than 1 only moves size-1 axes, so its output holds the input's elements in the same
row-major order; it is a Reshape to the permuted shape (ORT's transpose optimizer does the same).

    Conv -> Reshape [1,6,4,1,1] -> Transpose(perm 0,3,4,1,2) -> Reshape [1,-1,4]     (SSD heads at 1x1)
    becomes Conv -> Reshape -> Reshape -> Reshape, and idempotent_reshape_chain leaves one Reshape.

Guards: the input's shape comes from trusted facts (ir/static_shapes.py; a symbolic dim counts as
possibly longer than 1); no dim is known to be 0; the Reshape target is written with positive
ints, 0 ("copy the input dim", allowzero=0) only for a symbolic dim that stays on its axis, and -1
only for a single other symbolic dim when every other target element is a positive int (a -1 next
to a copied dim could be ambiguous on an empty tensor). Pure data movement: EXACT.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.passes.opargs import attr, shapes_of
from onnxrefine.passes.registry import PassSpec, register
from onnxrefine.rewrite.pattern import Match, Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, RewriteContext, Rule


def reshape_target(shape: tuple, perm: list[int]) -> list[int]:
    """The Reshape target equal to Transpose(perm) on a tensor of `shape`; RewriteRefused if the
    Transpose moves data or the target cannot be written without ambiguity."""
    if sorted(perm) != list(range(len(shape))):
        raise RewriteRefused(f"perm {perm} is not a permutation of rank {len(shape)}")
    if any(isinstance(d, int) and d == 0 for d in shape):
        raise RewriteRefused("the tensor is empty (a 0 in a Reshape target would copy a dim)")
    moving = [axis for axis in perm if not (isinstance(shape[axis], int) and shape[axis] == 1)]
    if moving != sorted(moving):
        raise RewriteRefused(f"perm {perm} reorders axes that may be longer than 1 (shape {_text(shape)})")
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
            raise RewriteRefused(f"more than one moved symbolic dim (shape {_text(shape)}, perm {perm})")
        target[free[0]] = -1
    return target


def _text(shape) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + "]"


def transpose_to_reshape(m: Match, ctx: RewriteContext) -> Replacement:
    node: ir.Node = m["t"]
    if node.domain not in ("", "ai.onnx"):
        return None
    shape = shapes_of(ctx).symbolic_shape(m["x"])
    if shape is None:
        raise RewriteRefused("the input's shape is not known from trusted facts")
    perm = attr(node, "perm")
    perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
    if perm == list(range(len(shape))):
        return None  # the identity permutation is eliminate_nop_transpose's case
    target = reshape_target(shape, perm)
    shape_value = ctx.constant(np.array(target, dtype=np.int64), hint=f"{node.name or 'transpose'}_as_reshape")
    new = ctx.node("Reshape", [m["x"], shape_value], hint=node.name or None)
    return Replacement([new], {node.outputs[0]: new.outputs[0]})


TRANSPOSE_TO_RESHAPE = Rule("transpose_to_reshape", Op("Transpose", Var("x"), name="t"), transpose_to_reshape)

register(PassSpec(
    "transpose_to_reshape", EXACT,
    "Transpose that only moves size-1 axes (the order of every other axis kept) -> Reshape, which "
    "then merges with neighbouring Reshapes",
    rules=(TRANSPOSE_TO_RESHAPE,), order=22,
))
