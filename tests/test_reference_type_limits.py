"""The float64 reference follows the spec's type limits: Clip's omitted bounds are the tensor
type's lowest()/max() (FLT_MAX for float32, 65504 for float16), not float64's, so a Clip of an
infinity is finite in the reference exactly where onnxruntime makes it so."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify.reference.evaluator import evaluate_float64


@pytest.mark.parametrize("elem, top", [(TensorProto.FLOAT, float(np.finfo(np.float32).max)),
                                       (TensorProto.FLOAT16, 65504.0),
                                       (TensorProto.DOUBLE, float(np.finfo(np.float64).max))])
def test_clip_with_omitted_bounds_takes_the_tensor_types_limits(elem, top):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    only_low = make_model([helper.make_node("Clip", ["x", "lo"], ["y"])], [value_info("x", elem, [3])],
                          [value_info("y", elem, None)], [tensor("lo", np.asarray(-1.0, dtype))])
    none = make_model([helper.make_node("Clip", ["x"], ["y"])], [value_info("x", elem, [3])],
                      [value_info("y", elem, None)])
    x = np.array([np.inf, -np.inf, 0.5], dtype)
    assert evaluate_float64(only_low, {"x": x})["y"].tolist() == [top, -1.0, 0.5]
    assert evaluate_float64(none, {"x": x})["y"].tolist() == [top, -top, 0.5]
