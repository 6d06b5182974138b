"""Pad folded into the Conv or pooling node that reads it. Registered in passes/fusion.py.

A zero Pad is never folded into MaxPool (its padding acts as -inf), nor into an AveragePool that
excludes padding from its count.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.signed_zero import refuse_if_observable
from onnxrefine.passes.opargs import attr, input_at, int_list_arg, normalize_axes
from onnxrefine.rewrite.pattern import Match, Op, Rest, Var
from onnxrefine.rewrite.rule import REASSOCIATING, Replacement, RewriteContext, Rule


# --- fuse_pad_into_conv / fuse_pad_into_pool --------------------------------------------------


def _spatial_pads(pad: ir.Node, ctx: RewriteContext, x: ir.Value) -> tuple[list[int], float | None]:
    """(pads on the spatial dims as [begins..., ends...], pad value) of a constant-mode Pad that
    leaves the batch and channel dims alone; refused otherwise."""
    if attr(pad, "mode", "constant") != "constant":
        raise RewriteRefused("pad_fuse.mode", f"Pad mode '{attr(pad, 'mode')}' is not constant padding")
    pads = int_list_arg(pad, "pads", 1, "pads")
    if pads is None:
        raise RewriteRefused("pad_fuse.no_pads", "Pad has no pads")
    if "value" in pad.attributes:
        fill = float(attr(pad, "value", 0.0))
    else:
        fill_value = input_at(pad, 2)
        fill_array = constant_array(fill_value) if fill_value is not None else np.zeros(())
        if fill_array is None:
            raise RewriteRefused("pad_fuse.value_not_constant", "Pad's constant value is not a constant")
        fill = float(fill_array.reshape(-1)[0]) if fill_array.size else 0.0
        if fill_array.size and np.signbit(fill_array.reshape(-1)[0]) and fill == 0:
            fill = -0.0
    rank = len(pads) // 2
    axes_value = input_at(pad, 3)
    if axes_value is not None:
        axes = int_list_arg(pad, "_no_attr", 3, "axes")
        full_rank = ctx.facts.rank(x)
        normalized = normalize_axes(axes, full_rank)
        if normalized is None or full_rank is None:
            raise RewriteRefused("pad_fuse.axes_rank", "Pad axes need the input's rank, which is not known from trusted facts")
        full = [0] * (2 * full_rank)
        for i, axis in enumerate(normalized):
            full[axis], full[axis + full_rank] = pads[i], pads[i + len(normalized)]
        pads, rank = full, full_rank
    if any(p < 0 for p in pads):
        raise RewriteRefused("pad_fuse.negative", "negative pads crop the input")
    if rank < 3 or pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
        raise RewriteRefused("pad_fuse.batch_channel", "Pad touches the batch or channel dims")
    return pads[2:rank] + pads[rank + 2:], fill


def _consumer_pads(node: ir.Node, spatial: int) -> list[int]:
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", b"NOTSET"):
        raise RewriteRefused("pad_fuse.auto_pad", f"{node.op_type} auto_pad is {auto_pad}")
    pads = attr(node, "pads")
    pads = [0] * (2 * spatial) if pads is None else [int(p) for p in pads]
    if len(pads) != 2 * spatial:
        raise RewriteRefused("pad_fuse.consumer_pads_rank", f"{node.op_type} pads do not match the Pad's {spatial} spatial dims")
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
        raise RewriteRefused("pad_conv.fill", f"Pad value {fill} is not +0.0, the value Conv pads with")
    pads = _consumer_pads(conv, len(added) // 2)
    return _with_pads(ctx, conv, m["x"], [a + b for a, b in zip(pads, added)])


def fuse_pad_pool(m: Match, ctx: RewriteContext) -> Replacement:
    pool: ir.Node = m["pool"]
    added, fill = _spatial_pads(m["pad"], ctx, m["x"])
    if pool.op_type == "AveragePool":
        if int(attr(pool, "count_include_pad", 0)) != 1:
            raise RewriteRefused("pad_pool.count_include_pad", "AveragePool with count_include_pad=0 would stop counting the padded zeros")
        if fill != 0 or np.signbit(fill):
            raise RewriteRefused("pad_pool.fill", f"Pad value {fill} is not +0.0, the value AveragePool pads with")
    else:
        # A -inf Pad is MaxPool's own padding in ONNX semantics, yet onnxruntime's padded MaxPool
        # kernel differs from its unpadded one on NaN and on all -inf windows (-FLT_MAX).
        raise RewriteRefused("pad_pool.maxpool",
            "MaxPool padding is not a zero Pad, and even a -inf Pad changes NaN/-inf results in onnxruntime"
        )
    if int(attr(pool, "ceil_mode", 0)):
        raise RewriteRefused("pad_pool.ceil_mode", "ceil_mode windows may overhang the padding differently")
    kernel = [int(k) for k in attr(pool, "kernel_shape", [])]
    spatial = len(added) // 2
    if len(kernel) != spatial:
        raise RewriteRefused("pad_pool.kernel_rank", "kernel_shape does not match the Pad's spatial dims")
    pads = [a + b for a, b in zip(_consumer_pads(pool, spatial), added)]
    if any(p >= kernel[i % spatial] for i, p in enumerate(pads)):
        raise RewriteRefused("pad_pool.pads_reach_kernel", "the merged pads would reach the kernel size, which pooling rejects")
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
