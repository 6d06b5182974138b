"""Reading operator arguments that moved from attributes to inputs across opsets (axes, pads,
split, Reshape's shape), and writing them back in the form the model's opset expects."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.attrs import attr
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.rewrite.rule import RewriteContext

# Shapes and element types: the rewrite context's oracle, `ctx.facts` (ir/facts/).


def known_dim(dim) -> int | None:
    """A dim of `ctx.facts.symbolic_shape` as an int, or None when it is symbolic."""
    return dim if isinstance(dim, int) else None


def normalize_axes(axes, rank: int | None) -> list[int] | None:
    """Axes with negatives resolved against `rank`; None when that needs an unknown rank, an axis
    is out of range or repeated."""
    result = []
    for axis in (int(a) for a in axes):
        if axis < 0:
            if rank is None:
                return None
            axis += rank
        if axis < 0 or (rank is not None and axis >= rank):
            return None
        result.append(axis)
    return result if len(set(result)) == len(result) else None


def input_at(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def int_list_arg(node: ir.Node, attr_name: str, input_index: int, what: str) -> list[int] | None:
    """An int list given as attribute `attr_name` or as constant input `input_index`.

    None when neither is given; RewriteRefused when the input is there but not a constant.
    """
    if attr_name in node.attributes:
        return [int(v) for v in attr(node, attr_name)]
    value = input_at(node, input_index)
    if value is None:
        return None
    array = constant_array(value)
    if array is None:
        raise RewriteRefused("args.not_constant", f"{node.op_type} {what} is not a constant")
    return [int(v) for v in array.reshape(-1)]


def axes_arg(node: ir.Node) -> list[int] | None:
    """`axes` of Squeeze/Unsqueeze/Reduce*/Slice: attribute in old opsets, input 1 in new ones."""
    return int_list_arg(node, "axes", 1, "axes")


def int64_constant(ctx: RewriteContext, values: Sequence[int], hint: str) -> ir.Value:
    return ctx.constant(np.asarray(list(values), dtype=np.int64), hint)


def axes_node_args(
    ctx: RewriteContext, template: ir.Node, axes: Sequence[int], hint: str
) -> tuple[list[ir.Value | None], dict]:
    """(inputs after the data input, attributes) carrying `axes` the way `template` did."""
    attributes = {k: v for k, v in template.attributes.items() if k != "axes"}
    if "axes" in template.attributes:
        attributes["axes"] = ir.AttrInt64s("axes", list(axes))
        return [], attributes
    return [int64_constant(ctx, axes, hint)], attributes
