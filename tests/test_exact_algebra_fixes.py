"""What the exhaustive algebra proofs found wrong, each shown on a small model against
onnxruntime: an empty Squeeze axes list composed as if it squeezed nothing, and Slice bounds
read with Python's slice clamping (a backward start before the first position, an INT_MAX end
of a backward slice) in the shape facts fold_shapes trusts."""

from __future__ import annotations

import numpy as np
import pytest
from guardutil import expect_guard, expect_refused
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass

from onnxrefine.passes import fusion_pad


def test_squeeze_chain_with_empty_axes_is_refused():
    """onnxruntime squeezes every size-1 dim for an empty axes list: Squeeze(Squeeze(x, [1]), [])
    is not Squeeze(x, [1])."""
    nodes = [helper.make_node("Squeeze", ["x", "a1"], ["m"]), helper.make_node("Squeeze", ["m", "a2"], ["y"])]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, [2, 1, 1, 3])], [value_info("y", TensorProto.FLOAT, None)],
                       [tensor("a1", np.array([1], np.int64)), tensor("a2", np.array([], np.int64))])
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 1, 3)
    expect_guard(model, "fuse_consecutive_squeezes", "squeeze_chain.empty_axes", {"x": x})


def test_pad_axes_with_pads_of_another_length_are_refused():
    expect_refused("pad_fuse.pads_length", fusion_pad.spatial_pads, [0, 1, 0, 1, 0, 1], [2, 3], 4)


def _shape_of_slice(starts, ends, steps, of_shape: bool):
    """Shape(x)[starts:ends:steps] (of_shape) or Shape(x[starts:ends:steps] on axis 0), x of shape
    [3, 4]: fold_shapes folds either from the shape facts."""
    inits = [tensor("s", np.array(starts, np.int64)), tensor("e", np.array(ends, np.int64)),
             tensor("a", np.array([0], np.int64)), tensor("st", np.array(steps, np.int64))]
    if of_shape:
        nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Slice", ["shape", "s", "e", "a", "st"], ["y"])]
    else:
        nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["sliced"]), helper.make_node("Shape", ["sliced"], ["y"])]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [3, 4])], [value_info("y", TensorProto.INT64, None)], inits)


@pytest.mark.parametrize("of_shape", [True, False], ids=["slice_of_shape", "shape_of_slice"])
@pytest.mark.parametrize("starts, ends, steps", [
    ([-10], [-10], [-1]),          # a backward start before the first position keeps position 0
    ([-1], [2**63 - 1], [-1]),     # onnxruntime: an INT64_MAX end of a backward slice runs to the beginning
    ([2], [2**31 - 1], [-2]),      # ... and so does INT32_MAX
], ids=["start_before_first", "int64_max_end", "int32_max_end"])
def test_backward_slice_bounds_fold_to_what_onnxruntime_computes(starts, ends, steps, of_shape):
    model = _shape_of_slice(starts, ends, steps, of_shape)
    x = np.zeros((3, 4), np.float32)
    check_pass(model, "fold_shapes", [{"x": x}], changed=None)
