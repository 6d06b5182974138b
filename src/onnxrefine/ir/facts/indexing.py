"""Operators that select, join or grow along axes: Concat, Split, Gather, Slice, Pad, Resize."""

from __future__ import annotations

import numpy as np

from onnxrefine.ir.attrs import attr, text_attr
from onnxrefine.ir.facts.core import Site, Sym, dtype_rule, normalize_axis, shape_rule
from onnxrefine.ir.foldmath import constant_array

# Output 0 has input 0's element type.
_SAME_DTYPE = tuple("Concat Gather GatherElements GatherND Slice Pad Resize ReverseSequence".split())


@dtype_rule(_SAME_DTYPE)
def same_dtype(site: Site):
    return site.dtype(0)


@dtype_rule("Split", all_outputs=True)
def split_dtype(site: Site):
    return site.dtype(0)


@shape_rule("Concat")
def concat_rule(site: Site):
    return concat_shape([site.shape(i) for i in range(len(site.inputs))], int(site.attr("axis", 0)))


def concat_shape(shapes, axis: int) -> tuple | None:
    if shapes and any(s is None for s in shapes) and any(s is not None for s in shapes):
        # Parity: an input of unknown shape still has the others' dims off the axis (Concat
        # rejects anything else); the axis' size is unknown.
        known_shapes = [s for s in shapes if s is not None]
        rank = len(known_shapes[0])
        axis_index = normalize_axis(axis, rank)
        if axis_index is None or any(len(s) != rank for s in known_shapes):
            return None
        merged = concat_shape(known_shapes, axis)
        return None if merged is None else merged[:axis_index] + (Sym("concat"),) + merged[axis_index + 1:]
    if not shapes or any(s is None for s in shapes):
        return None
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        return None
    axis = normalize_axis(axis, rank)
    if axis is None:
        return None
    dims = []
    for i in range(rank):
        column = [s[i] for s in shapes]
        if i == axis:
            dims.append(_sum(column))
        else:
            known = [d for d in column if isinstance(d, int)]
            dims.append(known[0] if known else column[0])
    return tuple(dims)


def _sum(dims):
    if all(isinstance(d, int) for d in dims):
        return sum(dims)
    nonzero = [d for d in dims if not (isinstance(d, int) and d == 0)]
    return nonzero[0] if len(nonzero) == 1 else Sym("concat")


@shape_rule("Split", all_outputs=True)
def split_shape(site: Site):
    shape, split_input, node, index = site.shape(0), site.elements(1), site.node, site.index
    if shape is None:
        return None
    axis = normalize_axis(attr(node, "axis", 0), len(shape))
    if axis is None:
        return None
    split = attr(node, "split")
    if split is None and site.present(1):
        # Sizes given as an input whose value is not known: the outputs may be uneven (read as
        # "no sizes", they were once taken for an even split).
        if split_input is None or not split_input.known():
            return None
        split = list(split_input.items)
    dims = list(shape)
    if split is not None:
        if index >= len(split):
            return None
        dims[axis] = int(split[index])
        return tuple(dims)
    count = len(node.outputs)
    total = shape[axis]
    if not isinstance(total, int) or attr(node, "num_outputs") is not None and total % count:
        return None  # uneven splits: leave to the runtime
    if total % count:
        return None
    dims[axis] = total // count
    return tuple(dims)


@shape_rule("Gather")
def gather_shape(site: Site):
    data, indices = site.shape(0), site.shape(1)
    if data is None or indices is None:
        return None
    axis = normalize_axis(site.attr("axis", 0), len(data))
    return None if axis is None else data[:axis] + indices + data[axis + 1:]


@shape_rule("Slice")
def slice_rule(site: Site):
    return slice_shape(site.node, site.shape(0), [site.elements(i) for i in range(1, 5)])


def slice_shape(node, shape, params) -> tuple | None:
    """Slice's output from `params` (the partial values of starts, ends, axes, steps; read from
    the attributes before opset 10). Also applied to a 1-D value's items by values.py."""
    if shape is None:
        return None
    if len(node.inputs) > 1:
        starts, ends, axes, steps = params
        if starts is None or ends is None or not starts.known() or not ends.known():
            return None
        starts, ends = list(starts.items), list(ends.items)
        axes = list(axes.items) if axes is not None and axes.known() else (
            None if len(node.inputs) > 3 and node.inputs[3] is not None else list(range(len(starts))))
        steps = list(steps.items) if steps is not None and steps.known() else (
            None if len(node.inputs) > 4 and node.inputs[4] is not None else [1] * len(starts))
    else:
        starts, ends = list(attr(node, "starts", [])), list(attr(node, "ends", []))
        axes = list(attr(node, "axes", range(len(starts))))
        steps = [1] * len(starts)
    if axes is None or steps is None or not (len(starts) == len(ends) == len(axes) == len(steps)):
        return None
    dims = list(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = normalize_axis(axis, len(shape))
        if axis is None or step == 0:
            return None
        dim = shape[axis]
        positions = slice_positions(dim, start, end, step) if isinstance(dim, int) else None
        if positions is not None:
            dims[axis] = len(positions)
        elif start == 0 and step == 1 and end >= 2**31 - 1:
            dims[axis] = dim
        else:
            dims[axis] = Sym("slice")
    return tuple(dims)


# onnxruntime reads an end of INT32_MAX or INT64_MAX of a backward Slice as "to the beginning",
# where the specification clamps it to the last position (an empty slice): no fact there.
_DISPUTED_BACKWARD_ENDS = (2**31 - 1, 2**63 - 1)


def slice_positions(dim: int, start: int, end: int, step: int) -> range | None:
    """The positions Slice keeps of an axis of `dim`: negative bounds count from the end, then
    start and end are clamped to [0, dim] (forward) or [0, dim-1] and [-1, dim-1] (backward).
    Python's slice clamps a backward start before the first position to an empty slice, which is
    why this is not `slice(...).indices`. None for step 0 and where runtimes disagree."""
    if step == 0 or (step < 0 and end in _DISPUTED_BACKWARD_ENDS):
        return None
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return range(min(max(start, 0), dim), min(max(end, 0), dim), step)
    return range(min(max(start, 0), dim - 1), min(max(end, -1), dim - 1), step)


@shape_rule("Pad")
def pad_shape(site: Site):
    shape, node = site.shape(0), site.node
    pads_input, axes_input = site.elements(1), site.elements(3)
    if shape is None:
        return None
    pads = attr(node, "pads")
    if pads is None:
        if pads_input is None or not pads_input.known():
            return None
        pads = list(pads_input.items)
    axes = list(range(len(shape)))
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        if axes_input is None or not axes_input.known():
            return None
        axes = [normalize_axis(a, len(shape)) for a in axes_input.items]
        if None in axes:
            return None
    if len(pads) != 2 * len(axes):
        return None
    dims = list(shape)
    for k, axis in enumerate(axes):
        grow = int(pads[k]) + int(pads[k + len(axes)])
        dims[axis] = dims[axis] + grow if isinstance(dims[axis], int) else (dims[axis] if grow == 0 else Sym("pad"))
    return tuple(dims)


@shape_rule("Resize")
def resize_shape(site: Site):
    if len(site.inputs) <= 3 or site.inputs[3] is None:  # parity: Resize given constant scales
        return _resize_scales_shape(site.node, site.shape(0), site.inputs[2] if len(site.inputs) > 2 else None)
    return _resize_sizes_shape(site.node, site.shape(0), site.elements(3))


def _resize_sizes_shape(node, shape, sizes) -> tuple | None:
    """Resize given explicit `sizes` over every axis (scales are left unknown)."""
    if shape is None or sizes is None or sizes.scalar or len(sizes.items) != len(shape):
        return None
    if attr(node, "axes") is not None or text_attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return None
    return tuple(e if isinstance(e, int) else Sym("resize") for e in sizes.items)


def _resize_scales_shape(node, shape, scales_value) -> tuple | None:
    """Resize by constant whole-number scales: each dim times its scale.
    Only whole-number scales and products below 2**24: then onnxruntime's float32 product
    `scale * dim` and the spec's floor(dim * scale) are the same integer."""
    if shape is None or scales_value is None:
        return None
    scales = constant_array(scales_value)
    if scales is None or scales.dtype != np.float32 or scales.shape != (len(shape),):
        return None
    if attr(node, "axes") is not None or text_attr(node, "coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        return None
    dims = []
    for dim, scale in zip(shape, scales.tolist()):
        if not (scale >= 1 and scale == int(scale) and scale < 2**24):
            return None
        if scale == 1:
            dims.append(dim)
        elif isinstance(dim, int) and dim * int(scale) < 2**24:
            dims.append(dim * int(scale))
        else:
            dims.append(Sym("resize"))
    return tuple(dims)
