"""Verdict and localisation false alarms from the fuzz campaigns (bench/FUZZ_FINDINGS.md), each with
the real bug its fix must still catch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from onnx import TensorProto

import onnxrefine
from onnxrefine.verify import verify_models
from onnxrefine.verify.reference import evaluate_float64

NAN, INF = np.nan, np.inf


# -- MaxPool over NaN (case 487 of seed 1000000, onnxrefine pipeline) ---------------------------------

def _pool_model(**attrs) -> onnx.ModelProto:
    nodes = [onnx.helper.make_node("MaxPool", ["x"], ["y"], **attrs)]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [1, 1, 9])],
                      [value_info("y", TensorProto.FLOAT, None)], opset=13)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[2], strides=[2]),
                                   dict(kernel_shape=[2], strides=[2], ceil_mode=1),
                                   dict(kernel_shape=[3], strides=[2], pads=[1, 1])])
def test_reference_max_pool_skips_nan_as_onnxruntime_does(attrs):
    # windows: NaN with numbers (the numbers' maximum), NaN only, NaN and padding only (no maximum:
    # onnxruntime's float32 kernel gives the lowest float32, and so does the reference)
    x = np.array([-3, 2, NAN, NAN, NAN, 1, 1, NAN, NAN], np.float32).reshape(1, 1, 9)
    model = _pool_model(**attrs)
    expected = run(model, {"x": x})[0]
    got = evaluate_float64(model, {"x": x})["y"]
    np.testing.assert_array_equal(got, expected.astype(np.float64))


def _pool_conv_bn(scale_into_weight: float | None = None) -> onnx.ModelProto:
    """MaxPool (ceil_mode: the last window holds one element) -> Conv (weight 2) -> BN (scale 1/4).
    With `scale_into_weight`, the Conv+BN pair is replaced by one Conv of that weight (a fold)."""
    pool = onnx.helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2], ceil_mode=1)
    inits = [tensor("w", np.full((1, 1, 1), 2.0, np.float32)), tensor("b", np.zeros(1, np.float32))]
    if scale_into_weight is None:
        nodes = [pool, onnx.helper.make_node("Conv", ["p", "w", "b"], ["c"]),
                 onnx.helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"], epsilon=0.0)]
        inits += [tensor("s", np.array([0.25], np.float32)), tensor("bb", np.zeros(1, np.float32)),
                  tensor("m", np.zeros(1, np.float32)), tensor("v", np.ones(1, np.float32))]
    else:
        inits[0] = tensor("w", np.full((1, 1, 1), scale_into_weight, np.float32))
        nodes = [pool, onnx.helper.make_node("Conv", ["p", "w", "b"], ["y"])]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [1, 1, 5])],
                      [value_info("y", TensorProto.FLOAT, [1, 1, 3])], inits, opset=13)


def _nan_window_inputs():
    # the last window holds NaN alone: onnxruntime's MaxPool gives -FLT_MAX there, which the
    # original's Conv overflows to -inf before BN scales it; the folded Conv stays finite
    return [{"x": np.array([0.5, -1.0, 3.0, 0.25, NAN], np.float32).reshape(1, 1, 5)}]


def test_bn_fold_behind_a_nan_only_max_pool_window_is_not_a_mismatch():
    original = _pool_conv_bn()
    candidate = onnxrefine.optimize(original, ["fuse_bn_into_conv"])
    assert "BatchNormalization" not in op_types(candidate)
    feeds = _nan_window_inputs()
    o, c = run(original, feeds[0])[0], run(candidate, feeds[0])[0]
    assert o[0, 0, 2] == -np.inf and np.isfinite(c[0, 0, 2])  # the case: the original overflows
    report = verify_models(original, candidate, inputs=feeds)
    assert report.verdict in ("rounding", "exact"), report.to_dict()


def test_wrong_fold_behind_a_nan_only_max_pool_window_is_still_a_mismatch():
    # the fold with a 20% wrong scale: on the window the reference now evaluates, it is off
    report = verify_models(_pool_conv_bn(), _pool_conv_bn(scale_into_weight=0.6), inputs=_nan_window_inputs())
    assert report.verdict == "mismatch"
    assert report.localisation["first_bad"]["name"] == "y"
