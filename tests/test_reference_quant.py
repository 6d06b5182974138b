"""The float64 reference's QuantizeLinear / DequantizeLinear against onnxruntime: per tensor, per
axis and blocked scales, int8/uint8/int16 and float8, at the opsets exporters write (13-21).
onnx's own reference has these ops from opset 19 only, so without native kernels a QDQ model at
opset 13-18 had no float64 reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify.reference import evaluate_float64


def _model(op: str, x_type: int, shape, scale: np.ndarray, zero: np.ndarray | None, opset: int, out_type: int,
           **attrs) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(scale, "s")]
    inputs = ["x", "s"]
    if zero is not None:
        inits.append(numpy_helper.from_array(zero, "z"))
        inputs.append("z")
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", x_type, shape)],
                              [helper.make_tensor_value_info("y", out_type, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _ort(model, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


CASES = [  # (opset, zero dtype, scale shape, attrs)
    (13, np.uint8, (), {}),
    (13, np.int8, (3,), {"axis": 1}),
    (17, np.int8, (4,), {"axis": -1}),
    (19, np.uint8, (), {}),
    (21, np.int16, (), {}),
    (21, np.int8, (2, 3, 2), {"axis": 2, "block_size": 2}),
]


@pytest.mark.parametrize("opset,zero_dtype,scale_shape,attrs", CASES)
def test_dequantize_and_quantize_match_onnxruntime(opset, zero_dtype, scale_shape, attrs):
    rng = np.random.default_rng(opset)
    shape = (2, 3, 4)
    scale = rng.uniform(0.01, 0.1, scale_shape).astype(np.float32)
    info = np.iinfo(zero_dtype)
    zero = rng.integers(max(info.min, -5), min(info.max, 5) + 1, scale_shape).astype(zero_dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(zero_dtype))
    q = rng.integers(info.min, info.max + 1, shape).astype(zero_dtype)
    dq = _model("DequantizeLinear", elem, shape, scale, zero, opset, TensorProto.FLOAT, **attrs)
    ours = evaluate_float64(dq, {"x": q})["y"]
    np.testing.assert_allclose(ours, _ort(dq, {"x": q}), rtol=2 ** -23, atol=0)
    x = rng.uniform(-3, 3, shape).astype(np.float32)
    quantize = _model("QuantizeLinear", TensorProto.FLOAT, shape, scale, zero, opset, elem, **attrs)
    ours = evaluate_float64(quantize, {"x": x})["y"]
    theirs = _ort(quantize, {"x": x})
    assert ours.dtype == theirs.dtype
    # float32 division may round a value within an ulp of a .5 tie to the other side: only there
    # may the two differ, by one step.
    fraction = np.abs(np.modf(x.astype(np.float64) / np.broadcast_to(_expanded(scale, shape, attrs), shape))[0])
    away_from_ties = np.abs(fraction - 0.5) > 1e-4
    np.testing.assert_array_equal(ours[away_from_ties], theirs[away_from_ties])
    assert np.all(np.abs(ours.astype(np.int64) - theirs.astype(np.int64)) <= 1)


def _expanded(scale, shape, attrs):
    if scale.ndim == 0:
        return scale
    axis = attrs.get("axis", 1) % len(shape)
    if "block_size" in attrs:
        return np.repeat(scale, attrs["block_size"], axis=axis)[tuple(slice(0, n) for n in shape)]
    view = [1] * len(shape)
    view[axis] = scale.shape[0]
    return scale.reshape(view)


def test_quantize_saturates_and_defaults_to_uint8():
    scale = np.array(0.5, np.float32)
    model = _model("QuantizeLinear", TensorProto.FLOAT, (5,), scale, None, 13, TensorProto.UINT8)
    x = np.array([-10.0, 0.25, 0.75, 1.25, 1000.0], np.float32)  # 0.5 and 2.5 round half to even
    ours = evaluate_float64(model, {"x": x})["y"]
    assert ours.dtype == np.uint8
    np.testing.assert_array_equal(ours, _ort(model, {"x": x}))
    np.testing.assert_array_equal(ours, [0, 0, 2, 2, 255])


def test_float8_dequantize_matches_onnxruntime_and_quantize_is_not_guessed():
    """DequantizeLinear of float8 is exact in float64. QuantizeLinear to a float8 type named only by
    its zero point (held as float64 here) is refused, not guessed: that value has no reference."""
    from onnxrefine.verify.reference import UnsupportedOperatorError

    scale = np.array(0.25, np.float32)
    x = np.random.default_rng(2).uniform(-40, 40, (16,)).astype(np.float32)
    q = _model("QuantizeLinear", TensorProto.FLOAT, (16,), scale, None, 19, TensorProto.FLOAT8E4M3FN)
    zero = numpy_helper.from_array(np.array(0, np.uint8), "z")
    zero.data_type = TensorProto.FLOAT8E4M3FN
    q.graph.initializer.append(zero)
    q.graph.node[0].input.append("z")
    bits = _ort(q, {"x": x}).view(np.uint8)  # onnxruntime hands float8 back as its bit patterns
    # DequantizeLinear of those float8 values, held as a float8 initializer (onnxruntime takes no
    # float8 feed from numpy).
    stored = numpy_helper.from_array(bits, "q8")
    stored.data_type = TensorProto.FLOAT8E4M3FN
    dq = helper.make_model(helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q8", "s"], ["y"])], "dq", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (16,))],
        [stored, numpy_helper.from_array(scale, "s")]), opset_imports=[helper.make_opsetid("", 19)])
    dq.ir_version = 10
    expected = bits.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * np.float64(scale)
    np.testing.assert_array_equal(evaluate_float64(dq, {})["y"], expected)
    np.testing.assert_array_equal(_ort(dq, {}), expected.astype(np.float32))
    with pytest.raises(UnsupportedOperatorError):
        evaluate_float64(q, {"x": x})
