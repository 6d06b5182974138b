"""Helpers for the no-op and fusion pass tests: optimize one pass, check, compare with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from helpers import op_types, run

import onnxrefine


def complete_output_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """Fill in graph output shapes the test left open (the checker requires them) from onnx's
    own shape inference, in place."""
    missing = [o for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
    if missing:
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except onnx.shape_inference.InferenceError:
            return model
        known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for output in missing:
            found = known.get(output.name)
            if found is not None and found.type.tensor_type.HasField("shape"):
                output.type.CopyFrom(found.type)
    return model


def optimize(model: onnx.ModelProto, *passes: str) -> onnx.ModelProto:
    complete_output_types(model)
    optimized = onnxrefine.optimize(model, list(passes))
    onnx.checker.check_model(optimized, full_check=True)
    return optimized


def assert_bit_identical(expected: list[np.ndarray], actual: list[np.ndarray]) -> None:
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        assert e.dtype == a.dtype and e.shape == a.shape, (e.dtype, e.shape, a.dtype, a.shape)
        if e.dtype.kind == "f":
            assert np.array_equal(e, a, equal_nan=True), (e, a)
            assert np.array_equal(np.signbit(e), np.signbit(a)), "signs of zero differ"
        else:
            assert np.array_equal(e, a), (e, a)


def assert_close(expected, actual, rtol=1e-5, atol=1e-6) -> None:
    for e, a in zip(expected, actual):
        assert e.dtype == a.dtype and e.shape == a.shape
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)


def check_pass(model, passes, feeds_list, *, changed=True, exact=True, **tolerance) -> onnx.ModelProto:
    """Optimize with `passes`, assert the graph changed (or not) and the outputs agree."""
    if isinstance(passes, str):
        passes = [passes]
    optimized = optimize(model, *passes)
    if changed is None:
        pass
    elif changed:
        assert op_types(optimized) != op_types(model) or len(optimized.graph.node) != len(model.graph.node)
    else:
        assert op_types(optimized) == op_types(model)
    for feeds in feeds_list:
        expected, actual = run(model, feeds), run(optimized, feeds)
        if exact:
            assert_bit_identical(expected, actual)
        else:
            assert_close(expected, actual, **tolerance)
    return optimized


def special_floats(shape, dtype=np.float32, seed: int = 0) -> np.ndarray:
    """Normal values sprinkled with +-0, +-inf and NaN."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=dtype)
    mask = rng.random(shape) < 0.3
    values[mask] = rng.choice(specials, size=int(mask.sum()))
    return values
