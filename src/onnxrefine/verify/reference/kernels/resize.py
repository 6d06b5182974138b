"""Float64-reference Resize/Upsample for the common modes (nearest, (bi/tri)linear, no antialias).

Less common configurations (cubic, antialias, tf_crop_and_resize, keep_aspect_ratio_policy) go to the
onnx.reference fallback through ``call.evaluator``.
"""

from __future__ import annotations

import math

import numpy as np

from onnxrefine.verify.reference.base import register_kernels


def _source_coordinates(mode: str, out_len: int, in_len: int, scale: float) -> np.ndarray:
    # Like onnx.reference, align_corners divides by the unrounded resized length in_len * scale - 1.
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        resized = in_len * scale
        return x * (in_len - 1) / (resized - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        center = in_len / 2
        offset = center * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    raise ValueError(mode)


def _nearest_index(coords: np.ndarray, rule: str, in_len: int) -> np.ndarray:
    if rule == "floor":
        idx = np.floor(coords)
    elif rule == "ceil":
        idx = np.ceil(coords)
    elif rule == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    else:  # round_prefer_floor
        idx = np.ceil(coords - 0.5)
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _resize(call):
    x = call.inputs[0]
    opset = call.opset
    mode = call.attr("mode", "nearest")
    if call.node.op_type == "Upsample":
        scales_in = call.attr("scales") if opset < 9 else call.inputs[1]
        sizes_in, roi, axes = None, None, None
        transform = "asymmetric"
        nearest_rule = "floor"
    else:
        if opset < 11:
            roi, scales_in, sizes_in = None, call.inputs[1], None
            transform = "asymmetric"
            nearest_rule = "floor"
        else:
            roi, scales_in, sizes_in = call.input(1), call.input(2), call.input(3)
            transform = call.attr("coordinate_transformation_mode", "half_pixel")
            nearest_rule = call.attr("nearest_mode", "round_prefer_floor")
        axes = call.attr("axes")
    needs_fallback = (
        mode not in ("nearest", "linear", "bilinear", "trilinear")
        or call.attr("antialias", 0)
        or transform == "tf_crop_and_resize"
        or call.attr("keep_aspect_ratio_policy", "stretch") != "stretch"
    )
    if needs_fallback:
        return call.evaluator._run_fallback(call)
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    scales = [1.0] * rank
    out_shape = list(x.shape)
    if sizes_in is not None and np.asarray(sizes_in).size:
        sizes = [int(v) for v in np.asarray(sizes_in).reshape(-1)]
        for a, size in zip(axes, sizes):
            out_shape[a] = size
            scales[a] = size / x.shape[a]
    else:
        values = [float(v) for v in np.asarray(scales_in).reshape(-1)]
        for a, s in zip(axes, values):
            scales[a] = s
            out_shape[a] = int(math.floor(x.shape[a] * s))
    out = x
    for axis in range(rank):
        if out_shape[axis] == x.shape[axis] and scales[axis] == 1.0:
            continue
        coords = _source_coordinates(transform, out_shape[axis], x.shape[axis], scales[axis])
        if mode == "nearest":
            out = np.take(out, _nearest_index(coords, nearest_rule, x.shape[axis]), axis=axis)
            continue
        coords = np.clip(coords, 0, x.shape[axis] - 1)
        low = np.floor(coords).astype(np.int64)
        high = np.minimum(low + 1, x.shape[axis] - 1)
        frac = coords - low
        shape = [1] * rank
        shape[axis] = -1
        frac = frac.reshape(shape)
        out = np.take(out, low, axis=axis) * (1 - frac) + np.take(out, high, axis=axis) * frac
    return [np.ascontiguousarray(out)]


HANDLERS = register_kernels({"Resize": _resize, "Upsample": _resize})
