"""Shape rules the split into ir/facts/ corrected, each checked against onnxruntime: Squeeze
whose axes input is present but unknown (the old rule squeezed every 1, so a Reshape after it
looked like a no-op and was removed), Split whose sizes input is present but unknown (the old rule
assumed an even split), and ConvInteger / QLinearConv given kernel_shape (the old rule took the
pooling branch: output channels = input channels)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from helpers import make_model
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import onnxrefine
from onnxrefine.ir.facts import StaticShapes


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _facts(model: onnx.ModelProto) -> tuple[StaticShapes, ir.Model]:
    ir_model = ir.serde.deserialize_model(model)
    return StaticShapes(ir_model), ir_model


@st.composite
def _squeeze_case(draw):
    shape = draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=1, max_size=4))
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    axes = [a - len(shape) if draw(st.booleans()) else a for a in axes]
    how = draw(st.sampled_from(["attribute", "constant", "runtime", "none"]))
    return shape, axes, ("none" if how == "attribute" and not axes else how)


@settings(max_examples=60, deadline=None)
@given(_squeeze_case())
def test_squeeze_shape_is_known_only_from_known_axes(case):
    shape, axes, how = case
    opset = 11 if how == "attribute" else 13
    inputs = ["x"] + (["axes"] if how in ("constant", "runtime") else [])
    attributes = {"axes": axes} if how == "attribute" else {}
    node = helper.make_node("Squeeze", inputs, ["y"], **attributes)
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    initializers = []
    feeds = {"x": np.zeros(shape, np.float32)}
    if how == "runtime":
        graph_inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
        feeds["axes"] = np.array(axes, np.int64)
    elif how == "constant":
        initializers.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    model = make_model([node], graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                       initializers, opset=opset)
    facts, ir_model = _facts(model)
    known = facts.static_shape(ir_model.graph.outputs[0])
    if how == "runtime" or (how == "constant" and not axes):
        # Run-time axes: any of the 1s may stay. Empty axes: onnxruntime squeezes every 1, the
        # ONNX reference none.
        assert known is None
    else:
        assert known == _run(model, feeds)[0].shape


def test_reshape_after_squeeze_by_runtime_axes_is_kept():
    nodes = [helper.make_node("Squeeze", ["x", "axes"], ["y"]), helper.make_node("Reshape", ["y", "target"], ["z"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1]),
                               helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                       [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                       [numpy_helper.from_array(np.array([3], np.int64), "target")], opset=13)
    feeds = {"x": np.ones((1, 3, 1), np.float32), "axes": np.array([0], np.int64)}
    optimized = onnxrefine.optimize(model)
    assert [n.op_type for n in optimized.graph.node] == ["Squeeze", "Reshape"]
    assert _run(optimized, feeds)[0].shape == _run(model, feeds)[0].shape == (3,)


@st.composite
def _conv_case(draw):
    channels_in, channels_out = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    kernel = draw(st.lists(st.integers(1, 3), min_size=2, max_size=2))
    size = draw(st.lists(st.integers(3, 7), min_size=2, max_size=2))
    strides = draw(st.lists(st.integers(1, 2), min_size=2, max_size=2))
    pads = draw(st.lists(st.integers(0, 1), min_size=4, max_size=4))
    return (channels_in, channels_out, kernel, size, strides, pads, draw(st.booleans()),
            draw(st.sampled_from(["ConvInteger", "QLinearConv"])))


@settings(max_examples=40, deadline=None)
@given(_conv_case())
def test_quantized_conv_shape_matches_onnxruntime(case):
    channels_in, channels_out, kernel, size, strides, pads, give_kernel, op = case
    weight = np.ones((channels_out, channels_in, *kernel), np.uint8)
    attributes = {"strides": strides, "pads": pads, **({"kernel_shape": kernel} if give_kernel else {})}
    scalar = lambda name, value, dtype: numpy_helper.from_array(np.array(value, dtype), name)  # noqa: E731
    initializers = [numpy_helper.from_array(weight, "w")]
    if op == "ConvInteger":
        inputs = ["x", "w"]
    else:
        inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
        initializers += [scalar("xs", 0.5, np.float32), scalar("xz", 0, np.uint8), scalar("ws", 0.5, np.float32),
                         scalar("wz", 0, np.uint8), scalar("ys", 1.0, np.float32), scalar("yz", 0, np.uint8)]
    node = helper.make_node(op, inputs, ["y"], **attributes)
    x_shape = [1, channels_in, *size]
    out_type = TensorProto.INT32 if op == "ConvInteger" else TensorProto.UINT8
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                       [helper.make_tensor_value_info("y", out_type, None)], initializers, opset=13)
    facts, ir_model = _facts(model)
    actual = _run(model, {"x": np.ones(x_shape, np.uint8)})[0]
    assert facts.static_shape(ir_model.graph.outputs[0]) == actual.shape
    assert facts.dtype(ir_model.graph.outputs[0]).numpy() == actual.dtype


@st.composite
def _split_case(draw):
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    return sizes, draw(st.sampled_from(["attribute", "constant", "runtime", "even"]))


@settings(max_examples=40, deadline=None)
@given(_split_case())
def test_split_shapes_are_known_only_from_known_sizes(case):
    sizes, how = case
    if how == "even":
        sizes = [sizes[0]] * len(sizes)
    outputs = [f"y{i}" for i in range(len(sizes))]
    opset = 11 if how == "attribute" else 13
    inputs = ["x"] + (["split"] if how in ("constant", "runtime") else [])
    node = helper.make_node("Split", inputs, outputs, axis=1, **({"split": sizes} if how == "attribute" else {}))
    x_shape = [2, sum(sizes)]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    feeds = {"x": np.zeros(x_shape, np.float32)}
    initializers = []
    if how == "runtime":
        graph_inputs.append(helper.make_tensor_value_info("split", TensorProto.INT64, [len(sizes)]))
        feeds["split"] = np.array(sizes, np.int64)
    elif how == "constant":
        initializers.append(numpy_helper.from_array(np.array(sizes, np.int64), "split"))
    model = make_model([node], graph_inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                       initializers, opset=opset)
    facts, ir_model = _facts(model)
    known = [facts.static_shape(v) for v in ir_model.graph.outputs]
    if how == "runtime":
        assert known == [None] * len(sizes)
    else:
        assert known == [a.shape for a in _run(model, feeds)]
