"""Ranks we can vouch for, derived from trusted facts only.

Declared value_info shapes are not evidence: exporters and other optimizers write wrong ones.
What is trusted: the main graph's input types (onnxruntime checks feeds against them), constant
tensors, and the shape rules of the operators that produce a value.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS

_SAME_RANK_AS_FIRST_INPUT = frozenset(
    """Relu LeakyRelu Sigmoid Tanh Exp Log Sqrt Abs Neg Erf Gelu Softplus Softsign Elu Selu Celu
    HardSigmoid HardSwish Clip Identity Cast CastLike Dropout BatchNormalization InstanceNormalization
    LayerNormalization Softmax LogSoftmax Floor Ceil Round Sign Reciprocal Not IsNaN IsInf Transpose
    LRN MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool Pad Slice CumSum Mish Trilu""".split()
)
_BROADCASTING = frozenset(
    "Add Sub Mul Div Pow Mod Max Min Sum Mean Where Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor PRelu".split()
)
_MAX_DEPTH = 64


class RankOracle:
    def __init__(self, model: ir.Model):
        self._main_inputs = {id(v) for v in model.graph.inputs}
        self._memo: dict[int, int | None] = {}

    def rank(self, value: ir.Value | None, _depth: int = 0) -> int | None:
        if value is None:
            return None
        key = id(value)
        if key not in self._memo:
            self._memo[key] = self._infer(value, _depth) if _depth < _MAX_DEPTH else None
        return self._memo[key]

    def forget(self) -> None:
        self._memo.clear()

    def _infer(self, value: ir.Value, depth: int) -> int | None:
        if id(value) in self._main_inputs:
            return len(value.shape) if value.shape is not None else None
        array = constant_array(value)
        if array is not None:
            return array.ndim
        node = value.producer()
        if node is None or node.domain not in STANDARD_DOMAINS:
            return None
        op = node.op_type
        inputs = node.inputs

        def rank_of(index: int) -> int | None:
            if index >= len(inputs) or inputs[index] is None:
                return None
            return self.rank(inputs[index], depth + 1)

        if value.index() != 0 and op not in ("Split",):
            return None
        if op in _SAME_RANK_AS_FIRST_INPUT:
            return rank_of(0)
        if op in ("Conv", "ConvTranspose"):
            weight = constant_array(inputs[1]) if len(inputs) > 1 else None
            return weight.ndim if weight is not None else rank_of(0)
        if op in _BROADCASTING:
            ranks = [rank_of(i) for i in range(len(inputs))]
            return None if any(r is None for r in ranks) else max(ranks)
        if op in ("Gemm", "Flatten"):
            return 2
        if op == "MatMul":
            a, b = rank_of(0), rank_of(1)
            if a is None or b is None:
                return None
            if a == 1 and b == 1:
                return 0
            if a == 1 or b == 1:
                return max(a, b) - 1
            return max(a, b)
        if op == "Reshape":
            target = constant_array(inputs[1]) if len(inputs) > 1 else None
            return int(target.size) if target is not None else None
        if op in ("Concat", "Split", "Tile"):
            return rank_of(0)
        if op == "Shape":
            return 1
        if op == "Size":
            return 0
        return None
