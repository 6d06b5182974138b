"""The standard-domain quantized operators, so that no-ops around MatMulInteger / QLinearConv are
recognised like those around MatMul / Conv. (QuantizeLinear and DequantizeLinear keep their
input's shape: elementwise.py.)"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.facts.core import Site, dtype_rule, shape_rule
from onnxrefine.ir.facts.linalg import matmul_shape
from onnxrefine.ir.facts.window import window_shape

# (data input, weight input) of each operator.
_MATMUL_LIKE = {"MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
_CONV_LIKE = {"ConvInteger": (0, 1), "QLinearConv": (0, 3)}


@shape_rule("DynamicQuantizeLinear", all_outputs=True)
def dynamic_quantize_shape(site: Site):
    return site.shape(0) if site.index == 0 else ()  # y; then the scalars y_scale, y_zero_point


@dtype_rule("DynamicQuantizeLinear", all_outputs=True)
def dynamic_quantize_dtype(site: Site):
    return (ir.DataType.UINT8, ir.DataType.FLOAT, ir.DataType.UINT8)[site.index] if site.index < 3 else None


@shape_rule(tuple(_MATMUL_LIKE))
def matmul_like_shape(site: Site):
    a, b = _MATMUL_LIKE[site.op]
    return matmul_shape(site.shape(a), site.shape(b))


@shape_rule(tuple(_CONV_LIKE))
def conv_like_shape(site: Site):
    x, w = _CONV_LIKE[site.op]
    return window_shape(site.node, site.shape(x), site.shape(w), conv=True)


@dtype_rule("MatMulInteger ConvInteger")
def int32_dtype(site: Site):
    return ir.DataType.INT32


@dtype_rule("QLinearMatMul QLinearConv")
def output_zero_point_dtype(site: Site):
    return site.dtype(7)  # the output zero point's type


@dtype_rule("DequantizeLinear")
def dequantize_dtype(site: Site):
    return site.dtype(1) if "output_dtype" not in site.node.attributes else None  # the scale's type
