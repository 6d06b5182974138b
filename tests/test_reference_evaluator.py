"""The float64 reference evaluator against onnxruntime (float32) on small models built in code."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.errors import OnnxRefineError
from onnxrefine.verify.reference.evaluator import (
    UnsupportedOperatorError,
    evaluate_float64,
    supported_op_types,
)

RNG = np.random.default_rng(1234)
F = TensorProto.FLOAT


def _info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)


def make_model(nodes, feeds: dict, outputs, *, opset: int = 17, initializers=None, functions=None):
    """Model with ``feeds`` as inputs; ``outputs`` is a list of names (types left for ORT to infer)."""
    if isinstance(nodes, onnx.NodeProto):
        nodes = [nodes]
    graph = helper.make_graph(
        nodes, "test", [_info(k, v) for k, v in feeds.items()],
        [helper.make_value_info(name, onnx.TypeProto()) for name in outputs],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    if functions:
        opsets.append(helper.make_opsetid(functions[0].domain, 1))
    model = helper.make_model(graph, opset_imports=opsets, functions=functions or [])
    model.ir_version = 8 if opset <= 18 else 9
    return model


def run_ort(model: onnx.ModelProto, feeds: dict) -> dict:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, session.run(names, feeds)))


def assert_matches_ort(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5) -> dict:
    expected = run_ort(model, feeds)
    got = evaluate_float64(model, feeds)
    assert set(got) == set(expected)
    for name, want in expected.items():
        value = got[name]
        if want.dtype.kind == "f":
            assert value.dtype == np.float64, f"{name}: {value.dtype}"
            assert value.shape == want.shape, f"{name}: {value.shape} vs {want.shape}"
            scale = max(1.0, float(np.max(np.abs(value[np.isfinite(value)]), initial=0.0)))
            np.testing.assert_allclose(value, want.astype(np.float64), rtol=rtol, atol=1e-6 * scale, err_msg=name)
        else:
            assert value.dtype == want.dtype, f"{name}: {value.dtype} vs {want.dtype}"
            np.testing.assert_array_equal(value, want, err_msg=name)
    return got


def rand(*shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def i64(values):
    return np.array(values, dtype=np.int64)


# (id, op_type, feeds, attributes, opset, number of outputs)
X = rand(2, 3, 4)
POS = rand(2, 3, 4, low=0.1, high=4.0)
UNARY = ["Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign", "Softplus",
         "Softsign", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Sin", "Cos", "Atan", "Sinh", "IsNaN"]
CASES = [(op, op, {"x": X}, {}, 18, 1) for op in UNARY]
CASES += [(op, op, {"x": POS}, {}, 17, 1) for op in ["Log", "Sqrt", "Reciprocal"]]
CASES += [
    ("Mish", "Mish", {"x": X}, {}, 18, 1),
    ("Gelu", "Gelu", {"x": X}, {}, 20, 1),
    ("Gelu-tanh", "Gelu", {"x": X}, {"approximate": "tanh"}, 20, 1),
    ("LeakyRelu", "LeakyRelu", {"x": X}, {"alpha": 0.2}, 17, 1),
    ("ThresholdedRelu", "ThresholdedRelu", {"x": X}, {"alpha": 0.5}, 17, 1),
    ("Round-halves", "Round", {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)}, {}, 17, 1),
    ("Add-bcast", "Add", {"a": X, "b": rand(4)}, {}, 17, 1),
    ("Sub-bcast", "Sub", {"a": X, "b": rand(3, 1)}, {}, 17, 1),
    ("Mul", "Mul", {"a": X, "b": rand(2, 1, 4)}, {}, 17, 1),
    ("Div", "Div", {"a": X, "b": POS}, {}, 17, 1),
    ("Div-int", "Div", {"a": i64([-7, 7, -7, 7, 0]), "b": i64([2, 2, -2, -2, 3])}, {}, 17, 1),
    ("Pow", "Pow", {"a": POS, "b": rand(4)}, {}, 17, 1),
    ("Max3", "Max", {"a": X, "b": rand(4), "c": rand(3, 1)}, {}, 17, 1),
    ("Min", "Min", {"a": X, "b": rand(4)}, {}, 17, 1),
    ("Sum3", "Sum", {"a": X, "b": rand(4), "c": rand(3, 4)}, {}, 17, 1),
    ("Mean", "Mean", {"a": X, "b": rand(4)}, {}, 17, 1),
    ("PRelu", "PRelu", {"x": X, "s": rand(3, 1, low=0, high=1)}, {}, 17, 1),
    ("Mod-fmod", "Mod", {"a": X, "b": POS}, {"fmod": 1}, 17, 1),
    ("Mod-int", "Mod", {"a": i64([-7, 7, -7, 7]), "b": i64([3, -3, -3, 3])}, {}, 17, 1),
    ("Equal-int", "Equal", {"a": i64([1, 2, 3]), "b": i64([1, 0, 3])}, {}, 17, 1),
    ("Less", "Less", {"a": X, "b": rand(4)}, {}, 17, 1),
    ("GreaterOrEqual", "GreaterOrEqual", {"a": X, "b": rand(4)}, {}, 17, 1),
    ("LessOrEqual", "LessOrEqual", {"a": X, "b": rand(4)}, {}, 17, 1),
    ("Where", "Where", {"c": X > 0, "a": X, "b": rand(4)}, {}, 17, 1),
    ("Xor", "Xor", {"a": X > 0, "b": X < 1}, {}, 17, 1),
    ("Not", "Not", {"a": X > 0}, {}, 17, 1),
    ("Clip-attr", "Clip", {"x": X}, {"min": -1.0, "max": 0.5}, 6, 1),
    ("Clip-inputs", "Clip", {"x": X, "lo": np.array(-1, np.float32), "hi": np.array(2, np.float32)}, {}, 13, 1),
    ("Softmax-11-coerced", "Softmax", {"x": X}, {"axis": 1}, 11, 1),
    ("Softmax-13-axis", "Softmax", {"x": X}, {"axis": 1}, 13, 1),
    ("LogSoftmax-11", "LogSoftmax", {"x": X}, {}, 11, 1),
    ("LogSoftmax-13", "LogSoftmax", {"x": X}, {}, 13, 1),
    ("Hardmax-13", "Hardmax", {"x": X}, {"axis": 1}, 13, 1),
    ("MatMul", "MatMul", {"a": rand(2, 3, 5), "b": rand(5, 4)}, {}, 17, 1),
    ("Gemm", "Gemm", {"a": rand(5, 3), "b": rand(4, 5), "c": rand(4)},
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, 17, 1),
    ("Gemm-noC", "Gemm", {"a": rand(3, 5), "b": rand(5, 4)}, {}, 13, 1),
    ("Reshape", "Reshape", {"x": X, "s": i64([0, -1])}, {}, 17, 1),
    ("Transpose", "Transpose", {"x": X}, {"perm": [2, 0, 1]}, 17, 1),
    ("Squeeze-11", "Squeeze", {"x": rand(1, 3, 1)}, {"axes": [-1]}, 11, 1),
    ("Squeeze-13", "Squeeze", {"x": rand(1, 3, 1), "a": i64([0, -1])}, {}, 13, 1),
    ("Unsqueeze-11", "Unsqueeze", {"x": X}, {"axes": [0, -1]}, 11, 1),
    ("Unsqueeze-13", "Unsqueeze", {"x": X, "a": i64([-1, 1])}, {}, 13, 1),
    ("Concat", "Concat", {"a": X, "b": rand(2, 3, 2)}, {"axis": -1}, 17, 1),
    ("Split-11", "Split", {"x": X}, {"axis": 2, "split": [1, 3]}, 11, 2),
    ("Split-13", "Split", {"x": X, "s": i64([3, 1])}, {"axis": 2}, 13, 2),
    ("Split-18-num", "Split", {"x": rand(2, 7)}, {"axis": 1, "num_outputs": 3}, 18, 3),
    ("Slice-9", "Slice", {"x": X}, {"starts": [1, -3], "ends": [100, -1], "axes": [1, 2]}, 9, 1),
    ("Slice-13-neg", "Slice", {"x": X, "s": i64([-1, 10]), "e": i64([-100, 0]), "a": i64([1, 2]),
                              "t": i64([-1, -2])}, {}, 13, 1),
    ("Gather", "Gather", {"x": X, "i": i64([[0, -1], [2, 1]])}, {"axis": 1}, 13, 1),
    ("GatherElements", "GatherElements", {"x": X, "i": RNG.integers(-4, 4, (2, 3, 2))}, {"axis": 2}, 13, 1),
    ("GatherND-b1", "GatherND", {"x": X, "i": i64([[[1, 2]], [[0, 3]]])}, {"batch_dims": 1}, 13, 1),
    ("ScatterND", "ScatterND", {"x": X, "i": i64([[0, 1], [1, 2]]), "u": rand(2, 4)}, {}, 13, 1),
    ("ScatterElements-add", "ScatterElements", {"x": X, "i": i64([[[0, 1, 0, 1]]]), "u": rand(1, 1, 4)},
     {"axis": 1, "reduction": "add"}, 16, 1),
    ("Shape-15", "Shape", {"x": X}, {"start": 1, "end": -0}, 15, 1),
    ("Shape-15-neg", "Shape", {"x": X}, {"start": -2}, 15, 1),
    ("Size", "Size", {"x": X}, {}, 13, 1),
    ("Expand", "Expand", {"x": rand(3, 1), "s": i64([2, 1, 4])}, {}, 13, 1),
    ("Tile", "Tile", {"x": X, "r": i64([1, 2, 3])}, {}, 13, 1),
    ("ConstantOfShape", "ConstantOfShape", {"s": i64([2, 3])},
     {"value": numpy_helper.from_array(np.array([1.5], np.float32))}, 13, 1),
    ("Range-float", "Range", {"a": np.array(1.0, np.float32), "b": np.array(3.1, np.float32),
                              "c": np.array(0.3, np.float32)}, {}, 13, 1),
    ("Range-int", "Range", {"a": np.array(10, np.int64), "b": np.array(-3, np.int64),
                            "c": np.array(-4, np.int64)}, {}, 13, 1),
    ("Pad-2-attr", "Pad", {"x": X}, {"pads": [0, 1, 2, 0, 0, 1], "value": 2.0}, 2, 1),
    ("Pad-13-reflect", "Pad", {"x": X, "p": i64([0, 1, 2, 0, 1, 2])}, {"mode": "reflect"}, 13, 1),
    ("Pad-13-edge-neg", "Pad", {"x": X, "p": i64([0, -1, 2, 0, 1, -1])}, {"mode": "edge"}, 13, 1),
    ("Pad-19-wrap", "Pad", {"x": X, "p": i64([0, 1, 2, 0, 1, 2])}, {"mode": "wrap"}, 19, 1),
    ("Pad-18-axes", "Pad", {"x": X, "p": i64([1, 2, 3, 4]), "v": np.array(-1, np.float32),
                            "a": i64([-1, 0])}, {}, 18, 1),
    ("Cast-int32", "Cast", {"x": X * 10}, {"to": TensorProto.INT32}, 13, 1),
    ("Cast-bool", "Cast", {"x": np.array([0.0, -0.0, 0.5, np.nan], np.float32)}, {"to": TensorProto.BOOL}, 13, 1),
    ("Cast-uint8", "Cast", {"x": np.array([0.9, 200.7, 3.2], np.float32)}, {"to": TensorProto.UINT8}, 13, 1),
    ("Flatten", "Flatten", {"x": rand(2, 3, 4, 5)}, {"axis": -2}, 13, 1),
    ("ReduceSum-13", "ReduceSum", {"x": X, "a": i64([-1])}, {"keepdims": 0}, 13, 1),
    ("ReduceSum-13-noop", "ReduceSum", {"x": X, "a": np.zeros(0, np.int64)}, {"noop_with_empty_axes": 1}, 13, 1),
    ("ReduceMean-13-attr", "ReduceMean", {"x": X}, {"axes": [0, 2]}, 13, 1),
    ("ReduceMax-18", "ReduceMax", {"x": X, "a": i64([1])}, {}, 18, 1),
    ("ReduceMin-all", "ReduceMin", {"x": X}, {"keepdims": 0}, 18, 1),
    ("ReduceProd", "ReduceProd", {"x": X}, {"axes": [1]}, 13, 1),
    ("ReduceL1", "ReduceL1", {"x": X}, {"axes": [1]}, 13, 1),
    ("ReduceL2", "ReduceL2", {"x": X, "a": i64([2])}, {}, 18, 1),
    ("ReduceLogSumExp", "ReduceLogSumExp", {"x": X * 30}, {"axes": [2]}, 13, 1),
    ("ReduceSumSquare", "ReduceSumSquare", {"x": X}, {"axes": [0]}, 13, 1),
    ("ArgMax-ties", "ArgMax", {"x": np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)}, {"axis": 1}, 13, 1),
    ("ArgMax-last", "ArgMax", {"x": np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)},
     {"axis": 1, "select_last_index": 1, "keepdims": 0}, 13, 1),
    ("ArgMin", "ArgMin", {"x": X}, {"axis": -1}, 13, 1),
    ("TopK", "TopK", {"x": np.array([[1, 3, 3, 0, 3], [2, 2, 1, 2, 5]], np.float32), "k": i64([3])},
     {"axis": 1}, 11, 2),
    ("TopK-smallest", "TopK", {"x": np.array([[1, 3, 3, 0, 3], [2, 2, 1, 2, 5]], np.float32), "k": i64([2])},
     {"largest": 0}, 11, 2),
    ("CumSum", "CumSum", {"x": X, "a": np.array(1, np.int64)}, {"exclusive": 1, "reverse": 1}, 14, 1),
    ("Einsum", "Einsum", {"a": rand(2, 3, 4), "b": rand(2, 4, 5)}, {"equation": "bij,bjk->bik"}, 13, 1),
    ("DepthToSpace-CRD", "DepthToSpace", {"x": rand(1, 8, 2, 3)}, {"blocksize": 2, "mode": "CRD"}, 13, 1),
    ("DepthToSpace-DCR", "DepthToSpace", {"x": rand(1, 8, 2, 3)}, {"blocksize": 2}, 13, 1),
    ("SpaceToDepth", "SpaceToDepth", {"x": rand(1, 2, 4, 6)}, {"blocksize": 2}, 13, 1),
    ("Trilu", "Trilu", {"x": rand(2, 4, 5), "k": np.array(1, np.int64)}, {"upper": 0}, 14, 1),
    ("NonZero", "NonZero", {"x": np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)}, {}, 13, 1),
    ("OneHot", "OneHot", {"i": i64([[0, -1], [2, 5]]), "d": np.array(4, np.int64),
                          "v": np.array([-1, 3], np.float32)}, {"axis": 1}, 11, 1),
    ("Resize-nearest", "Resize", {"x": rand(1, 2, 3, 4), "r": np.zeros(0, np.float32),
                                  "s": np.array([1, 1, 2, 1.5], np.float32)}, {"mode": "nearest"}, 13, 1),
    ("Resize-linear", "Resize", {"x": rand(1, 2, 3, 4), "r": np.zeros(0, np.float32),
                                 "s": np.array([1, 1, 2, 1.5], np.float32)}, {"mode": "linear"}, 13, 1),
    ("Resize-linear-sizes-ac", "Resize", {"x": rand(1, 2, 3, 4), "r": np.zeros(0, np.float32),
                                          "": None, "z": i64([1, 2, 5, 3])},
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 13, 1),
    ("Resize-nearest-asym-floor", "Resize", {"x": rand(1, 1, 4, 4), "r": np.zeros(0, np.float32),
                                             "s": np.array([1, 1, 0.6, 1.7], np.float32)},
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 13, 1),
    ("BatchNorm", "BatchNormalization", {"x": rand(2, 3, 4, 5), "s": rand(3), "b": rand(3), "m": rand(3),
                                         "v": rand(3, low=0.5, high=2)}, {"epsilon": 1e-3}, 15, 1),
    ("InstanceNorm", "InstanceNormalization", {"x": rand(2, 3, 4, 5), "s": rand(3), "b": rand(3)}, {}, 13, 1),
    ("LayerNorm", "LayerNormalization", {"x": rand(2, 3, 4), "s": rand(3, 4), "b": rand(3, 4)}, {"axis": 1}, 17, 1),
    ("GlobalAveragePool", "GlobalAveragePool", {"x": rand(2, 3, 4, 5)}, {}, 13, 1),
    ("GlobalMaxPool", "GlobalMaxPool", {"x": rand(2, 3, 4, 5)}, {}, 13, 1),
    ("Identity", "Identity", {"x": X}, {}, 13, 1),
    ("Dropout", "Dropout", {"x": X}, {}, 13, 1),
    ("LRN", "LRN", {"x": rand(1, 5, 3, 3)}, {"size": 3}, 13, 1),
    ("LpNormalization-fallback", "LpNormalization", {"x": X}, {"axis": -1}, 13, 1),
    ("ReverseSequence-fallback", "ReverseSequence", {"x": X, "l": i64([2, 3])},
     {"batch_axis": 0, "time_axis": 1}, 13, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(case):
    _, op_type, feeds, attrs, opset, n_out = case
    outputs = [f"y{i}" for i in range(n_out)]
    inputs = list(feeds)  # a None feed stands for an omitted optional input
    feeds = {k: v for k, v in feeds.items() if v is not None}
    model = make_model(helper.make_node(op_type, inputs, outputs, **attrs), feeds, outputs, opset=opset)
    assert_matches_ort(model, feeds)


# -- convolution and pooling, property-based ---------------------------------------------------------------
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def conv_configs(draw, transpose: bool = False):
    dims = draw(st.sampled_from([1, 2, 2, 3]))
    batch = draw(st.integers(1, 2))
    group_kind = draw(st.sampled_from(["one", "two", "depthwise"]))
    groups = {"one": 1, "two": 2, "depthwise": draw(st.integers(2, 4))}[group_kind]
    c_in = groups * (1 if group_kind == "depthwise" else draw(st.integers(1, 3)))
    m_per_group = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    dilations = [draw(st.integers(1, 2)) for _ in range(dims)]
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    size_cap = 7 if dims < 3 else 5
    spatial = [draw(st.integers(max(e, 1), max(e, size_cap))) for e in effective]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad.startswith("SAME"):
        dilations = [1] * dims  # onnxruntime refuses (Conv) or mis-sizes (pools) SAME with dilations
        effective = list(kernel)
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": groups}
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, 2)) for _ in range(2 * dims)]
    else:
        attrs["auto_pad"] = auto_pad
    if transpose:
        out_pad = [0] * dims
        if draw(st.booleans()):
            # the spec allows < max(stride, dilation); onnxruntime only < stride
            out_pad = [draw(st.integers(0, s - 1)) for s in strides]
            attrs["output_padding"] = out_pad
        pads = attrs.get("pads", [0] * (2 * dims))
        full = [(i - 1) * s + e + p for i, s, e, p in zip(spatial, strides, effective, out_pad)]
        assume(all(f - pads[i] - pads[i + dims] > 0 for i, f in enumerate(full)))
        if auto_pad.startswith("SAME"):
            # With less kernel than stride, the spec's SAME output (in * stride) needs negative padding,
            # which onnxruntime clamps to 0; test_conv_transpose_same_follows_spec covers that case.
            assume(all(f >= i * s for f, i, s in zip(full, spatial, strides)))
        weight_shape = [c_in, m_per_group, *kernel]
    else:
        weight_shape = [groups * m_per_group, c_in // groups, *kernel]
    x = rand(batch, c_in, *spatial)
    w = rand(*weight_shape)
    bias = rand(weight_shape[0] if not transpose else m_per_group * groups) if draw(st.booleans()) else None
    return x, w, bias, attrs


def _conv_case(op_type, config):
    x, w, bias, attrs = config
    feeds = {"x": x, "w": w}
    if bias is not None:
        feeds["b"] = bias
    model = make_model(helper.make_node(op_type, list(feeds), ["y"], **attrs), feeds, ["y"], opset=17)
    assert_matches_ort(model, feeds)


@_SETTINGS
@given(conv_configs())
def test_conv_matches_onnxruntime(config):
    _conv_case("Conv", config)


def test_a_strided_pointwise_conv_whose_end_padding_keeps_the_size_reads_the_padding():
    # H 2, stride 2, pads end 1: the output keeps the input's size but its second row is padding,
    # not the input's second row (the pointwise shortcut took it as the input read as is)
    x = np.array([-1.2815634, 2.547252, -1.898576, 0.325791], np.float32).reshape(1, 2, 2, 1)
    w = np.array([1.610153, -1.9886012], np.float32).reshape(2, 1, 1, 1)
    _conv_case("Conv", (x, w, None, {"kernel_shape": [1, 1], "strides": [2, 1], "dilations": [1, 1], "group": 2,
                                     "pads": [0, 0, 1, 0]}))


@_SETTINGS
@given(conv_configs(transpose=True))
def test_conv_transpose_matches_onnxruntime(config):
    _conv_case("ConvTranspose", config)


def _padded_im2col_conv(x, w, strides, dilations, begins, ends, group):
    """The convolution as the textbook im2col: pad the input, take every window, one matmul."""
    from numpy.lib.stride_tricks import sliding_window_view

    d = w.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(begins, ends)))
    effective = [(k - 1) * dl + 1 for k, dl in zip(w.shape[2:], dilations)]
    win = sliding_window_view(xp, effective, axis=tuple(range(2, 2 + d)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
              + tuple(slice(None, None, dl) for dl in dilations)]  # (N, C, O..., K...)
    n, out_sizes, cg, m = x.shape[0], win.shape[2:2 + d], w.shape[1], w.shape[0]
    win = win.reshape((n, group, cg) + win.shape[2:])
    cols = np.ascontiguousarray(win.transpose([1, 2, *range(3 + d, 3 + 2 * d), 0, *range(3, 3 + d)]))
    out = np.matmul(w.reshape(group, m // group, -1), cols.reshape(group, cg * int(np.prod(w.shape[2:])), -1))
    return np.moveaxis(out.reshape(m, n, *out_sizes), 1, 0)


@_SETTINGS
@given(st.data())
def test_conv_kernel_is_the_padded_im2col_bit_for_bit(data):
    """The kernel fills its im2col matrix tap by tap without padding the input (padding wider than
    the input, strides, dilations, groups): the same matrix, so the same float64 result exactly."""
    from onnxrefine.verify.reference.kernels import nn

    dims = data.draw(st.integers(1, 3))
    group = data.draw(st.integers(1, 3))
    cg, mg, n = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(dims)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(dims)]
    dilations = [data.draw(st.integers(1, 3)) for _ in range(dims)]
    begins = [data.draw(st.integers(0, 5)) for _ in range(dims)]
    ends = [data.draw(st.integers(0, 5)) for _ in range(dims)]
    spatial = [max(1, (k - 1) * dl + 1 - b - e + data.draw(st.integers(0, 4)))
               for k, dl, b, e in zip(kernel, dilations, begins, ends)]
    x = rand(n, group * cg, *spatial)
    w = rand(group * mg, cg, *kernel)
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    got = nn.conv(x.astype(dtype), w, None, strides, dilations, begins, ends, group)
    assert np.array_equal(got, _padded_im2col_conv(x.astype(dtype), w, strides, dilations, begins, ends, group))


@st.composite
def pool_configs(draw, op_type: str):
    dims = draw(st.sampled_from([1, 2, 2, 3]))
    kernel = [draw(st.integers(1, 3)) for _ in range(dims)]
    strides = [draw(st.integers(1, 3)) for _ in range(dims)]
    dilations = [draw(st.integers(1, 2)) for _ in range(dims)]
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    spatial = [draw(st.integers(e, max(e, 7 if dims < 3 else 5))) for e in effective]
    attrs = {"kernel_shape": kernel, "strides": strides}
    if op_type == "MaxPool" or draw(st.booleans()):
        attrs["dilations"] = dilations
    else:
        effective = kernel
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad.startswith("SAME"):
        attrs.pop("dilations", None)
        # When SAME needs negative total padding (kernel < stride), onnxruntime errors in 1-D and shifts the
        # windows in 3-D; the reference clamps the padding at 0 like Conv. Compare only the defined cases.
        assume(all((-(-n // s) - 1) * s + k >= n for n, s, k in zip(spatial, strides, kernel)))
    if auto_pad == "NOTSET":
        # onnxruntime rejects pads at least as large as the kernel
        attrs["pads"] = [draw(st.integers(0, k - 1)) for k in kernel] * 2
        attrs["ceil_mode"] = draw(st.integers(0, 1))
    else:
        attrs["auto_pad"] = auto_pad
    if op_type == "AveragePool":
        attrs["count_include_pad"] = draw(st.integers(0, 1))
    return rand(draw(st.integers(1, 2)), 2, *spatial), attrs


@_SETTINGS
@given(pool_configs("MaxPool"))
def test_max_pool_matches_onnxruntime(config):
    x, attrs = config
    model = make_model(helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs), {"x": x}, ["y", "i"], opset=12)
    assert_matches_ort(model, {"x": x})


@_SETTINGS
@given(pool_configs("AveragePool"))
def test_average_pool_matches_onnxruntime(config):
    x, attrs = config
    model = make_model(helper.make_node("AveragePool", ["x"], ["y"], **attrs), {"x": x}, ["y"], opset=19)
    assert_matches_ort(model, {"x": x})


def test_conv_transpose_same_follows_spec():
    """SAME output is input * stride even when the kernel is smaller than the stride (onnx.reference agrees;
    onnxruntime 1.32 clamps the padding and returns a smaller output)."""
    from onnx.reference import ReferenceEvaluator

    x, w = rand(1, 2, 2, 3), rand(2, 1, 1, 1)
    for auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[1, 2], group=2, auto_pad=auto_pad)
        model = make_model(node, {"x": x, "w": w}, ["y"])
        got = evaluate_float64(model, {"x": x, "w": w})["y"]
        want = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float64), "w": w.astype(np.float64)})[0]
        assert got.shape == (1, 2, 2, 6)
        np.testing.assert_allclose(got, want, rtol=1e-12)


# -- float64 for real ------------------------------------------------------------------------------------------
def test_reference_is_really_float64():
    """(1e8 + 1) - 1e8 is 0 in float32 (ulp at 1e8 is 8) and 1 in float64."""
    x = np.array([1e8], np.float32)
    nodes = [
        helper.make_node("Add", ["x", "one"], ["t"]),
        helper.make_node("Sub", ["t", "x"], ["y"]),
    ]
    model = make_model(nodes, {"x": x}, ["y"], initializers={"one": np.array([1.0], np.float32)})
    assert run_ort(model, {"x": x})["y"][0] == 0.0
    got = evaluate_float64(model, {"x": x})["y"]
    assert got.dtype == np.float64 and got[0] == 1.0


def test_casts_to_narrow_floats_round_and_int_casts_truncate():
    x = np.array([0.1, -2.7, 2.7, 70000.0], np.float32)
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
    ]
    got = evaluate_float64(make_model(nodes, {"x": x}, ["f", "i"]), {"x": x})
    # float16 rounding and overflow to inf, as the spec says (tests/test_reference_narrow_types.py)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got["f"], x.astype(np.float16).astype(np.float64))
    np.testing.assert_array_equal(got["i"], np.array([0, -2, 2, 70000], np.int64))


def test_float16_feeds_and_initializers_are_upcast():
    x = np.array([1.5, 2.25], np.float16)
    node = helper.make_node("Mul", ["x", "w"], ["y"])
    model = make_model(node, {"x": x}, ["y"], initializers={"w": np.array([0.1, 3], np.float16)})
    got = evaluate_float64(model, {"x": x})["y"]
    assert got.dtype == np.float64
    exact = x.astype(np.float64) * np.array([0.1, 3], np.float16).astype(np.float64)
    # the float16 Mul's result is a float16 value (kernels/dtype.py), carried as float64
    np.testing.assert_array_equal(got, exact.astype(np.float16).astype(np.float64))


# -- graph-level behaviour ----------------------------------------------------------------------------------
def test_feeds_override_initializers_and_outputs_selection():
    x = rand(3)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"]), helper.make_node("Neg", ["y"], ["z"])], "g",
        [_info("x", x), _info("b", x)],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("z", F, None)],
        [numpy_helper.from_array(np.ones(3, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    np.testing.assert_allclose(evaluate_float64(model, {"x": x})["y"], x + 1.0)
    b = rand(3)
    got = evaluate_float64(model, {"x": x, "b": b}, outputs=["z"])
    assert list(got) == ["z"]
    np.testing.assert_allclose(got["z"], -(x.astype(np.float64) + b))


def test_optional_inputs_as_empty_names():
    x = rand(2, 5)
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    model = make_model(node, {"x": x}, ["y"], opset=13, initializers={"hi": np.array(0.5, np.float32)})
    assert_matches_ort(model, {"x": x})


def test_if_with_outer_scope_capture():
    x = rand(2, 3)
    then_graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                                   [helper.make_tensor_value_info("t", F, None)])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [helper.make_tensor_value_info("e", F, None)])
    for flag in (True, False):
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)]
        feeds = {"x": x, "c": np.array(flag)}
        assert_matches_ort(make_model(nodes, feeds, ["y"]), feeds)


def test_loop_with_scan_output_and_outer_capture():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Mul", ["acc_out", "i_f"], ["scan"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3]),
         helper.make_tensor_value_info("scan", F, [3])],
    )
    feeds = {"x": rand(3), "n": np.array(4, np.int64), "acc0": rand(3)}
    node = helper.make_node("Loop", ["n", "", "acc0"], ["acc", "scans"], body=body)
    assert_matches_ort(make_model(node, feeds, ["acc", "scans"]), feeds)


def test_scan_opset9():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])],
    )
    feeds = {"s0": rand(2), "xs": rand(4, 2)}
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[1])
    assert_matches_ort(make_model(node, feeds, ["s", "ys"], opset=16), feeds)


def test_model_local_function_with_attribute_reference():
    scale_attr = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    leaky = helper.make_node("LeakyRelu", ["a"], ["r"])
    leaky.attribute.append(scale_attr)
    function = helper.make_function(
        "custom", "ScaledLeaky", ["a", "b"], ["out"],
        [leaky, helper.make_node("Mul", ["r", "b"], ["out"])],
        [helper.make_opsetid("", 17)], attributes=["alpha"],
    )
    feeds = {"x": rand(2, 3), "w": rand(3)}
    node = helper.make_node("ScaledLeaky", ["x", "w"], ["y"], domain="custom", alpha=0.3)
    model = make_model(node, feeds, ["y"], functions=[function])
    assert_matches_ort(model, feeds)


def test_unknown_domain_and_random_ops_are_refused():
    feeds = {"x": rand(2)}
    model = make_model(helper.make_node("Mystery", ["x"], ["y"], domain="com.example"), feeds, ["y"])
    with pytest.raises(UnsupportedOperatorError, match="com.example::Mystery"):
        evaluate_float64(model, feeds)
    model = make_model(helper.make_node("RandomUniformLike", ["x"], ["y"]), feeds, ["y"])
    with pytest.raises(UnsupportedOperatorError, match="random"):
        evaluate_float64(model, feeds)
    assert issubclass(UnsupportedOperatorError, OnnxRefineError)


def test_missing_feed_is_reported():
    model = make_model(helper.make_node("Relu", ["x"], ["y"]), {"x": rand(2)}, ["y"])
    with pytest.raises(OnnxRefineError, match="missing feeds"):
        evaluate_float64(model, {})


def test_supported_op_types_covers_common_ops():
    ops = supported_op_types()
    for op in ("Conv", "ConvTranspose", "MaxPool", "Gemm", "Resize", "If", "Loop", "Scan", "LSTM", "Unique"):
        assert op in ops
    assert "RandomNormal" not in ops and "BitCast" not in ops


def test_fallback_stays_float64():
    x = rand(2, 3, 4)
    model = make_model(helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1),
                       {"x": x, "l": i64([1, 3])}, ["y"])
    got = evaluate_float64(model, {"x": x, "l": i64([1, 3])})["y"]
    assert got.dtype == np.float64


@pytest.mark.parametrize("seed", range(60))
def test_window_max_is_the_windows_maximum_with_ieee_zeros(seed):
    """The MaxPool kernel's per-position np.maximum gives np.max's values over any window geometry
    (1-3 spatial axes, windows up to 10 wide, strides) and dtype where no element is NaN, and a
    window holding both zeros gives +0 (IEEE 754's maximum; np.max's choice follows its lanes)."""
    from numpy.lib.stride_tricks import sliding_window_view

    from onnxrefine.verify.reference.kernels.nn import window_max

    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    sizes = tuple(int(v) for v in rng.integers(3, 12 if d == 1 else 8, d))
    kernel = tuple(int(rng.integers(1, size + 1)) for size in sizes)
    dtype = [np.float64, np.float32, np.int8, np.int64][seed % 4]
    pool = [0.0, -0.0, -0.0, -1.0, 3.5, -2e30] if dtype in (np.float64, np.float32) else [0, -1, 1, 7, -7]
    x = rng.choice(np.asarray(pool), size=(2, 3) + sizes).astype(dtype)
    win = sliding_window_view(x, kernel, axis=tuple(range(2, 2 + d)))
    stride = tuple(slice(None, None, int(rng.integers(1, 3))) for _ in range(d))
    win = win[(slice(None), slice(None)) + stride]
    axes = tuple(range(2 + d, 2 + 2 * d))
    got = window_max(win, d)
    assert got.dtype == win.dtype and got.shape == win.shape[:2 + d]
    assert np.array_equal(got, np.max(win, axis=axes))
    if win.dtype.kind == "f":
        plus_zero = np.any((win == 0) & ~np.signbit(win), axis=axes)
        zero = got == 0
        assert np.array_equal(np.signbit(got)[zero], ~plus_zero[zero])
