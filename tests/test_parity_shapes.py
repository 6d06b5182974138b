"""Shape facts the parity work added to the shape oracle (ir/facts/): Resize by constant whole-number scales,
and Concat with one input of unknown shape (the other dims still known). Folds checked in ORT."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, op_types, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass


def resize_shape_model(scales, mode="asymmetric", gather=None, concat_with=None):
    """x [1, 2, 4, 4] -> Resize(scales) [-> Concat(axis 1) with y] -> Shape [-> Gather(gather)]."""
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest",
                              coordinate_transformation_mode=mode)]
    inputs = [value_info("x", shape=[1, 2, 4, 4])]
    current = "r"
    if concat_with is not None:
        nodes.append(helper.make_node("Concat", ["r", "y"], ["c"], axis=1))
        inputs.append(value_info("y", shape=concat_with))
        current = "c"
    nodes.append(helper.make_node("Shape", [current], ["s"]))
    out = "s"
    inits = [tensor("scales", np.array(scales, np.float32))]
    if gather is not None:
        inits.append(tensor("index", np.array(gather, np.int64)))
        nodes.append(helper.make_node("Gather", ["s", "index"], ["g"], axis=0))
        out = "g"
    return make_model(nodes, inputs, [value_info(out, TensorProto.INT64, None if gather is not None else [4])], inits)


def feeds(concat=None):
    rng = np.random.default_rng(0)
    result = {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)}
    if concat is not None:
        result["y"] = rng.standard_normal(concat).astype(np.float32)
    return result


def test_resize_by_whole_scales_folds_its_shape():
    model = resize_shape_model([1, 1, 2, 3])
    optimized = check_pass(model, ["fold_shapes", "eliminate_deadend"], [feeds()])
    assert op_types(optimized) == []  # the output is a constant [1, 2, 8, 12]


@pytest.mark.parametrize("scales, mode", [
    ([1, 1, 1.5, 2], "asymmetric"),  # not a whole number: runtimes' float rounding decides
    ([1, 1, 0.5, 1], "asymmetric"),  # downscaling
    ([1, 1, 2, 2], "tf_crop_and_resize"),  # the output size depends on roi
])
def test_resize_shape_left_unknown(scales, mode):
    model = resize_shape_model(scales, mode)
    if mode == "tf_crop_and_resize":  # needs a roi input to run
        model.graph.node[0].input[1] = "roi"
        model.graph.initializer.append(tensor("roi", np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)))
    optimized = check_pass(model, ["fold_shapes"], [feeds()], changed=False)
    assert "Shape" in op_types(optimized)


def test_concat_with_an_unknown_input_keeps_the_other_dims():
    # Resize by 1.5 leaves its shape unknown; Concat on axis 1 with y [1, 3, 6, 6] still has
    # dims 2 and 3 from y (Concat rejects anything else), so Gather(Shape, 2) folds to 6 ...
    model = resize_shape_model([1, 1, 1.5, 1.5], gather=2, concat_with=[1, 3, 6, 6])
    optimized = check_pass(model, ["fold_shapes", "eliminate_deadend"], [feeds([1, 3, 6, 6])])
    assert op_types(optimized) == []
    # ... while the axis' own size (2 + 3, the Resize's channels unknown here) is not folded.
    model = resize_shape_model([1, 1, 1.5, 1.5], gather=1, concat_with=[1, 3, 6, 6])
    optimized = check_pass(model, ["fold_shapes"], [feeds([1, 3, 6, 6])], changed=False)
    assert "Gather" in op_types(optimized)
