"""Operators whose output has input 0's shape (activations, normalizations, casts, ...) and the
broadcasting operators (arithmetic, comparisons, logic, Where)."""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.facts.core import Site, broadcast_shapes, dtype_rule, shape_rule

# Output 0 has input 0's shape.
SAME_SHAPE = tuple(
    """Relu LeakyRelu Sigmoid Tanh Exp Log Sqrt Abs Neg Erf Gelu Softplus Softsign Elu Selu Celu
    HardSigmoid HardSwish Clip Identity Cast CastLike InstanceNormalization LayerNormalization
    BatchNormalization Softmax LogSoftmax Hardmax Floor Ceil Round Sign Reciprocal Not IsNaN IsInf
    LRN CumSum Mish Trilu Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh ThresholdedRelu
    Shrink BitwiseNot MeanVarianceNormalization EyeLike QuantizeLinear DequantizeLinear
    GroupNormalization RMSNormalization""".split()
)
# Output 0 is the broadcast of every input's shape.
BROADCASTING = tuple(
    """Add Sub Mul Div Pow Mod Max Min Sum Mean Where Equal Less Greater LessOrEqual GreaterOrEqual
    And Or Xor PRelu BitShift BitwiseAnd BitwiseOr BitwiseXor""".split()
)
BOOL_RESULT = tuple("Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not IsNaN IsInf".split())
# Output 0 has input 0's element type. Not: the casts, the predicates, the quantizers (their
# types come from attributes or zero points: quantized.py has DequantizeLinear's) and EyeLike.
_SAME_DTYPE = tuple(
    op for op in SAME_SHAPE + BROADCASTING
    if op not in BOOL_RESULT and op not in ("Cast", "CastLike", "Where", "EyeLike", "QuantizeLinear", "DequantizeLinear")
)


@shape_rule(SAME_SHAPE)
def same_shape(site: Site):
    return site.shape(0)


@shape_rule("Dropout", all_outputs=True)
def dropout_shape(site: Site):
    return site.shape(0)  # the mask (output 1) too


@shape_rule(BROADCASTING)
def broadcast_shape(site: Site):
    return broadcast_shapes([site.shape(i) for i in range(len(site.inputs)) if site.inputs[i] is not None])


@dtype_rule(_SAME_DTYPE)
def same_dtype(site: Site):
    return site.dtype(0)


@dtype_rule(BOOL_RESULT)
def bool_dtype(site: Site):
    return ir.DataType.BOOL


@dtype_rule("Dropout", all_outputs=True)
def dropout_dtype(site: Site):
    return site.dtype(0) if site.index == 0 else ir.DataType.BOOL if site.index == 1 else None


@dtype_rule("Cast")
def cast_dtype(site: Site):
    return ir.DataType(attr(site.node, "to", 0)) or None


@dtype_rule("CastLike")
def cast_like_dtype(site: Site):
    return site.dtype(1)


@dtype_rule("Where")
def where_dtype(site: Site):
    return site.dtype(1)
