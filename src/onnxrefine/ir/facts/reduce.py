"""Reductions over axes (Reduce*, ArgMax, ArgMin) and TopK's element types."""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.facts.core import Site, dtype_rule, normalize_axis, shape_rule

REDUCE = tuple(
    """ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceSumSquare""".split()
)


@shape_rule(REDUCE + ("ArgMax", "ArgMin"))
def reduce_shape(site: Site):
    shape, node = site.shape(0), site.node
    axes_input = site.elements(1)
    if shape is None:
        return None
    keepdims = bool(attr(node, "keepdims", 1))
    if node.op_type in ("ArgMax", "ArgMin"):
        axes = [attr(node, "axis", 0)]
    else:
        axes = attr(node, "axes")
        if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
            if axes_input is None or not axes_input.known():
                return None
            axes = list(axes_input.items)
        if not axes:
            if attr(node, "noop_with_empty_axes", 0):
                return shape
            axes = list(range(len(shape)))
    normalized = {normalize_axis(a, len(shape)) for a in axes}
    if None in normalized:
        return None
    if keepdims:
        return tuple(1 if i in normalized else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in normalized)


@dtype_rule(REDUCE)
def reduce_dtype(site: Site):
    return site.dtype(0)


@dtype_rule("ArgMax ArgMin")
def index_dtype(site: Site):
    return ir.DataType.INT64


@dtype_rule("TopK", all_outputs=True)
def top_k_dtype(site: Site):
    return ir.DataType.INT64 if site.index == 1 else site.dtype(0)
