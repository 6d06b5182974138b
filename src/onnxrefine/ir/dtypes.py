"""Element types we can vouch for, derived from trusted facts only.

Same evidence as the rank and shape oracles (ir/shapes.py, ir/static_shapes.py): the main graph's
declared inputs (onnxruntime rejects a feed of another type), constant tensors, and the operators'
type rules (Cast's `to`, comparisons give bool, Shape gives int64, most operators keep input 0's
type). Declared value_info types are never read; inputs of subgraphs and functions are unknown.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.foldmath import constant_array

_STANDARD_DOMAINS = ("", "ai.onnx")
_MAX_DEPTH = 64

# Output 0 has the element type of input 0 (by the operator's type constraint).
_SAME_AS_FIRST = frozenset(
    """Relu LeakyRelu Sigmoid Tanh Exp Log Sqrt Abs Neg Erf Gelu Softplus Softsign Elu Selu Celu
    HardSigmoid HardSwish Clip Identity Dropout BatchNormalization InstanceNormalization
    LayerNormalization Softmax LogSoftmax Hardmax Floor Ceil Round Sign Reciprocal LRN CumSum Mish Trilu
    Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh ThresholdedRelu Shrink BitwiseNot
    Add Sub Mul Div Pow Mod Max Min Sum Mean PRelu BitShift BitwiseAnd BitwiseOr BitwiseXor
    Transpose Reshape Squeeze Unsqueeze Flatten Expand Pad Slice Concat Split Tile Gather GatherElements
    GatherND Conv ConvTranspose MatMul Gemm MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool
    ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceSumSquare DepthToSpace SpaceToDepth Resize""".split()
)
_BOOL_OUTPUT = frozenset("Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not IsNaN IsInf".split())
_INT64_OUTPUT = frozenset("Shape Size ArgMax ArgMin NonZero".split())
# Operators whose every output shares input 0's type.
_ALL_OUTPUTS_SAME = frozenset({"Split"})


def _attr(node: ir.Node, name: str):
    found = node.attributes.get(name)
    if found is None or found.is_ref():
        return None
    return found.value


class DtypeOracle:
    def __init__(self, model: ir.Model):
        self._main_inputs = {id(v) for v in model.graph.inputs}
        self._memo: dict[int, tuple[ir.Value, ir.DataType | None]] = {}

    def forget(self) -> None:
        self._memo.clear()

    def dtype(self, value: ir.Value | None, _depth: int = 0) -> ir.DataType | None:
        if value is None:
            return None
        hit = self._memo.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        self._memo[id(value)] = (value, None)  # cycle guard
        result = self._infer(value, _depth) if _depth < _MAX_DEPTH else None
        self._memo[id(value)] = (value, result)
        return result

    def _infer(self, value: ir.Value, depth: int) -> ir.DataType | None:
        if id(value) in self._main_inputs:
            return value.type.dtype if isinstance(value.type, ir.TensorType) else None
        if value.is_graph_input():
            return None
        if constant_array(value) is not None:
            return _constant_dtype(value)
        node = value.producer()
        if node is None or node.domain not in _STANDARD_DOMAINS:
            return None
        op = node.op_type
        inputs = node.inputs

        def dtype_of(index: int) -> ir.DataType | None:
            if index >= len(inputs) or inputs[index] is None:
                return None
            return self.dtype(inputs[index], depth + 1)

        if op == "Cast":
            to = _attr(node, "to")
            return None if to is None else ir.DataType(to)
        if op == "CastLike":
            return dtype_of(1)
        if op in _BOOL_OUTPUT:
            return ir.DataType.BOOL
        if op in _INT64_OUTPUT:
            return ir.DataType.INT64
        if op == "Dropout" and value.index() == 1:
            return ir.DataType.BOOL
        if value.index() != 0 and op not in _ALL_OUTPUTS_SAME:
            return None
        if op == "Where":
            return dtype_of(1)
        if op in _SAME_AS_FIRST or op in _ALL_OUTPUTS_SAME:
            return dtype_of(0)
        return None


def _constant_dtype(value: ir.Value) -> ir.DataType | None:
    if value.const_value is not None:
        return value.const_value.dtype
    producer = value.producer()
    if producer is not None:
        found = producer.attributes.get("value")
        if found is not None and found.type == ir.AttributeType.TENSOR:
            return found.as_tensor().dtype
    return None
