"""One small model per operator the fuzz generator does not produce (so test_facts.py's
onnxruntime comparison never reaches its rule): every shape and element type the oracle vouches
for must be what onnxruntime computes, and the rule must know something (a rule that silently
answers None everywhere would pass the first check alone)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from helpers import make_model
from onnx import helper, numpy_helper

from onnxrefine.ir.facts import StaticShapes

F = np.float32
X = np.linspace(-2, 2, 24, dtype=F).reshape(2, 3, 4)
X4 = np.linspace(-2, 2, 2 * 4 * 4 * 4, dtype=F).reshape(2, 4, 4, 4)
I32 = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
U8 = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
B = (np.arange(24) % 3 == 0).reshape(2, 3, 4)


def c(array):
    """An input given as a constant initializer (the others are fed)."""
    return ("const", np.asarray(array))


# (op, inputs, attributes, opset, outputs, what the oracle must know: "shape", "dtype" or both)
CASES = [
    *[(op, [X], {}, 18, 1, "shape dtype") for op in
      "Acos Acosh Asin Asinh Atan Atanh Ceil Celu Cos Cosh Elu Erf Floor HardSigmoid HardSwish Hardmax LeakyRelu "
      "Mish Reciprocal Round Selu Shrink Sign Sin Sinh Softplus Softsign Tan ThresholdedRelu".split()],
    ("Gelu", [X], {}, 20, 1, "shape dtype"),
    ("MeanVarianceNormalization", [X4], {}, 18, 1, "shape dtype"),
    ("LRN", [X4], {"size": 3}, 18, 1, "shape dtype"),
    ("InstanceNormalization", [X, c(np.ones(3, F)), c(np.zeros(3, F))], {}, 18, 1, "shape dtype"),
    ("LayerNormalization", [X, c(np.ones(4, F)), c(np.zeros(4, F))], {}, 18, 1, "shape dtype"),
    ("GroupNormalization", [X4, c(np.ones(4, F)), c(np.zeros(4, F))], {"num_groups": 2}, 21, 1, "shape dtype"),
    ("CumSum", [X, c(np.array(1, np.int64))], {}, 18, 1, "shape dtype"),
    ("Trilu", [X], {"upper": 0}, 18, 1, "shape dtype"),
    ("EyeLike", [X[0]], {}, 18, 1, "shape"),
    ("CastLike", [X, c(np.zeros(1, np.int32))], {}, 18, 1, "shape dtype"),
    *[(op, [X], {}, 18, 1, "shape dtype") for op in "IsNaN IsInf".split()],
    ("Not", [B], {}, 18, 1, "shape dtype"),
    ("BitwiseNot", [I32], {}, 18, 1, "shape dtype"),
    ("QuantizeLinear", [X, c(np.array(0.1, F)), c(np.array(3, np.uint8))], {}, 18, 1, "shape"),
    ("DequantizeLinear", [U8, c(np.array(0.1, F)), c(np.array(3, np.uint8))], {}, 18, 1, "shape dtype"),
    *[(op, [X, X[0]], {}, 18, 1, "shape dtype") for op in "Less LessOrEqual GreaterOrEqual Equal Sum Mean".split()],
    ("Mod", [X, c(np.full((3, 1), 0.75, F))], {"fmod": 1}, 18, 1, "shape dtype"),
    ("PRelu", [X, c(np.full((4,), 0.5, F))], {}, 18, 1, "shape dtype"),
    *[(op, [B, B[:, :1]], {}, 18, 1, "shape dtype") for op in "And Or Xor".split()],
    *[(op, [I32, I32[0]], {}, 18, 1, "shape dtype") for op in "BitwiseAnd BitwiseOr BitwiseXor".split()],
    ("BitShift", [U8, c(np.ones(4, np.uint8))], {"direction": "LEFT"}, 18, 1, "shape dtype"),
    *[(op, [X, c(np.array([1], np.int64))], {"keepdims": 0}, 18, 1, "shape dtype") for op in
      "ReduceL1 ReduceL2 ReduceLogSum ReduceProd ReduceSumSquare".split()],
    ("ReduceLogSumExp", [X, c(np.array([-1, 0], np.int64))], {}, 18, 1, "shape dtype"),
    ("ArgMin", [X], {"axis": -1, "keepdims": 0}, 18, 1, "shape dtype"),
    ("TopK", [X, c(np.array([2], np.int64))], {"axis": 1}, 18, 2, "dtype"),
    ("NonZero", [X], {}, 18, 1, "dtype"),
    ("GatherElements", [X, c(np.zeros((2, 3, 2), np.int64))], {"axis": 2}, 18, 1, "dtype"),
    ("GatherND", [X, c(np.zeros((2, 1), np.int64))], {}, 18, 1, "dtype"),
    ("Einsum", [X, c(np.ones((4, 5), F))], {"equation": "abc,cd->abd"}, 18, 1, "dtype"),
    ("ReverseSequence", [X, c(np.array([1, 3], np.int64))], {"batch_axis": 0, "time_axis": 1}, 18, 1, "dtype"),
    ("DepthToSpace", [X4], {"blocksize": 2}, 18, 1, "dtype"),
    ("SpaceToDepth", [X4], {"blocksize": 2}, 18, 1, "dtype"),
    *[(op, [X4], {}, 18, 1, "shape dtype") for op in "GlobalAveragePool GlobalMaxPool GlobalLpPool".split()],
    ("LpPool", [X4], {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 1]}, 18, 1, "shape dtype"),
    ("Resize", [X4, c(np.zeros(0, F)), c(np.array([1, 1, 2, 3], F))], {"mode": "nearest"}, 18, 1, "shape dtype"),
    ("Resize", [X4, c(np.zeros(0, F)), c(np.zeros(0, F)), c(np.array([2, 4, 3, 8], np.int64))], {}, 18, 1,
     "shape dtype"),
    ("MatMulInteger", [U8, c(np.ones((4, 5), np.uint8))], {}, 18, 1, "shape dtype"),
    ("QLinearMatMul", [U8, c(np.array(0.5, F)), c(np.array(1, np.uint8)), c(np.ones((4, 5), np.uint8)),
                       c(np.array(0.5, F)), c(np.array(1, np.uint8)), c(np.array(2.0, F)), c(np.array(0, np.uint8))],
     {}, 18, 1, "shape dtype"),
    ("DynamicQuantizeLinear", [X], {}, 18, 3, "shape dtype"),
]


def _ids():
    seen: dict[str, int] = {}
    for op, *_ in CASES:
        seen[op] = seen.get(op, 0) + 1
        yield op if seen[op] == 1 else f"{op}-{seen[op]}"


@pytest.mark.parametrize("op, inputs, attributes, opset, outputs, must_know", CASES, ids=list(_ids()))
def test_facts_of_one_operator_match_onnxruntime(op, inputs, attributes, opset, outputs, must_know):
    names, graph_inputs, initializers, feeds = [], [], [], {}
    for i, spec in enumerate(inputs):
        name = f"in{i}"
        names.append(name)
        if isinstance(spec, tuple):
            initializers.append(numpy_helper.from_array(spec[1], name))
        else:
            dtype = helper.np_dtype_to_tensor_dtype(spec.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, dtype, list(spec.shape)))
            feeds[name] = spec
    out_names = [f"out{k}" for k in range(outputs)]
    node = helper.make_node(op, names, out_names, **attributes)
    model = make_model([node], graph_inputs, [helper.make_value_info(o, helper.TypeProto()) for o in out_names],
                       initializers, opset=opset)
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = session.run(None, feeds)
    ir_model = ir.serde.deserialize_model(model)
    facts = StaticShapes(ir_model)
    for value, actual in zip(ir_model.graph.outputs, results):
        shape, dtype = facts.static_shape(value), facts.dtype(value)
        if shape is not None:
            assert shape == actual.shape
        if dtype is not None:
            assert dtype.numpy() == actual.dtype
        if "shape" in must_know:
            assert shape is not None
        if "dtype" in must_know:
            assert dtype is not None
