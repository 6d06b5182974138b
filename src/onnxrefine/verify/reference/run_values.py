"""The run's values where float64 has none, for the magnitude of terms (bound.py's magnitude pass).

onnxruntime's float32 MaxPool starts each window at the lowest float32, so a window of only -inf gives
-FLT_MAX where the spec (and float64) gives -inf (judge/departures.py, rule maxpool-lowest). What the
run computes after it is finite, and a BatchNormalization fold there cancels terms of ~1e38: the
magnitude of those terms is what its rounding is relative to, and float64 has inf or NaN there. So the
MaxPool's value carries a run magnitude FLT_MAX where float64 is -inf, and the sums of products after it
(RUN_LINEAR) read such a value at the run's magnitude, with float64's sign. Every other op reads it as
float64 has it (not derived there): a Relu, Max or Softmax of the run's -FLT_MAX picks or drops it, and
a NaN says nothing of the run's sign (tests/test_false_alarm_rules.py, the cases after the lowest).
"""

from __future__ import annotations

import numpy as np
import onnx

# the ops whose magnitude of terms reads a run's value float64 does not have: sums of products
RUN_LINEAR = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "BatchNormalization"})
FLT_MAX = float(np.finfo(np.float32).max)


def lowest_magnitude(node, elem_type, out, magnitude) -> np.ndarray | None:
    """The run magnitude of a float32 MaxPool's output where float64 is -inf (FLT_MAX there, `magnitude`
    elsewhere); None for any other node or where no window is only -inf (float16 and float64 MaxPools
    give -inf in onnxruntime, as the spec does)."""
    if node.op_type != "MaxPool" or elem_type != onnx.TensorProto.FLOAT or not np.any(out == -np.inf):
        return None
    return np.where(out == -np.inf, FLT_MAX, magnitude)


def run_values_of(run_magnitudes, in_names, inputs) -> list:
    """The inputs a RUN_LINEAR op reads in the magnitude pass: where float64 has +-inf and a run magnitude
    is known, finite and positive, that magnitude with float64's sign; NaN is not read (no sign)."""
    values = list(inputs)
    for index, (name, value) in enumerate(zip(in_names, inputs)):
        known = run_magnitudes.get(name) if name else None
        if known is None or not isinstance(value, np.ndarray) or np.shape(known) != value.shape:
            continue
        with np.errstate(invalid="ignore"):
            run_value = np.isinf(value) & np.isfinite(known) & (known > 0)
        if run_value.any():
            values[index] = np.where(run_value, np.copysign(known, value), value)
    return values
