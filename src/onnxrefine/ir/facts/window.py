"""Sliding-window operators: Conv, ConvTranspose and the pools (and the global pools)."""

from __future__ import annotations

from onnxrefine.ir.attrs import attr, text_attr
from onnxrefine.ir.facts.core import Site, Sym, dtype_rule, shape_rule

_SAME_DTYPE = tuple("Conv ConvTranspose MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool".split())


@dtype_rule(_SAME_DTYPE)
def same_dtype(site: Site):
    return site.dtype(0)


@shape_rule("Conv")
def conv_shape(site: Site):
    return window_shape(site.node, site.shape(0), site.shape(1), conv=True)


@shape_rule("ConvTranspose")
def conv_transpose_shape(site: Site):
    """ONNX's formula without output_shape and with explicit pads: stride * (in - 1) +
    output_padding + dilation * (kernel - 1) + 1 - pad_begin - pad_end; channels: the weight's
    second dim times group. Other forms (output_shape, auto_pad, an output_padding not below its
    stride) are left unknown."""
    node, shape, weight = site.node, site.shape(0), site.shape(1)
    if shape is None or len(shape) < 3 or weight is None or len(weight) != len(shape):
        return None
    if attr(node, "output_shape") is not None or text_attr(node, "auto_pad", "NOTSET") not in ("NOTSET", ""):
        return None
    spatial = len(shape) - 2
    group = attr(node, "group", 1)
    kernel = list(attr(node, "kernel_shape") or weight[2:])
    strides = list(attr(node, "strides") or [1] * spatial)
    dilations = list(attr(node, "dilations") or [1] * spatial)
    pads = list(attr(node, "pads") or [0] * (2 * spatial))
    extra = list(attr(node, "output_padding") or [0] * spatial)
    if not all(len(v) == spatial for v in (kernel, strides, dilations, extra)) or len(pads) != 2 * spatial:
        return None
    if not all(isinstance(k, int) and k > 0 for k in kernel) or not isinstance(weight[1], int):
        return None
    if any(pad >= stride for pad, stride in zip(extra, strides)):
        return None  # onnxruntime refuses output_padding of a stride or more: no shape to vouch for
    out = []
    for i, size in enumerate(shape[2:]):
        if not isinstance(size, int) or strides[i] < 1 or dilations[i] < 1:
            out.append(Sym(node.op_type))
            continue
        full = strides[i] * (size - 1) + extra[i] + dilations[i] * (kernel[i] - 1) + 1 - pads[i] - pads[i + spatial]
        out.append(full if full > 0 else Sym("empty"))
    return (shape[0], weight[1] * group) + tuple(out)


@shape_rule("MaxPool AveragePool LpPool")
def pool_shape(site: Site):
    return window_shape(site.node, site.shape(0), None, conv=False)


@shape_rule("GlobalAveragePool GlobalMaxPool GlobalLpPool")
def global_pool_shape(site: Site):
    shape = site.shape(0)
    return None if shape is None or len(shape) < 2 else shape[:2] + (1,) * (len(shape) - 2)


def window_shape(node, shape, weight_shape, *, conv: bool) -> tuple | None:
    """Conv (`conv`: also ConvInteger, QLinearConv) and pooling outputs: (N, channels, spatial...)
    with ONNX's output-size formulas. A convolution's channels are its weight's first dim (the
    quantized ones once took the pooling branch: input channels, when kernel_shape was given).
    ceil_mode is left unknown (runtimes differ on windows that start in the padding)."""
    if shape is None or len(shape) < 3:
        return None
    spatial = len(shape) - 2
    if conv:
        if weight_shape is None or len(weight_shape) != len(shape) or not isinstance(weight_shape[0], int):
            return None
        kernel = attr(node, "kernel_shape") or weight_shape[2:]
        channels = weight_shape[0]
    else:
        kernel = attr(node, "kernel_shape")
        channels = shape[1]
        if attr(node, "ceil_mode", 0):
            return shape[:2] + tuple(Sym("ceil_mode") for _ in range(spatial))
    kernel = list(kernel or ())
    if len(kernel) != spatial or not all(isinstance(k, int) and k > 0 for k in kernel):
        return None
    strides = list(attr(node, "strides") or [1] * spatial)
    dilations = list(attr(node, "dilations") or [1] * spatial)
    pads = list(attr(node, "pads") or [0] * (2 * spatial))
    auto_pad = text_attr(node, "auto_pad", "NOTSET")
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
        return None
    out = []
    for i, size in enumerate(shape[2:]):
        if not isinstance(size, int) or strides[i] < 1 or dilations[i] < 1:
            out.append(Sym(node.op_type))
            continue
        extent = dilations[i] * (kernel[i] - 1) + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // strides[i]))
        elif auto_pad == "VALID":
            out.append((size - extent) // strides[i] + 1 if size >= extent else Sym("empty"))
        elif auto_pad in ("NOTSET", ""):
            padded = size + pads[i] + pads[i + spatial]
            out.append((padded - extent) // strides[i] + 1 if padded >= extent else Sym("empty"))
        else:
            return None
    return (shape[0], channels) + tuple(out)
