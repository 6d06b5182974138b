"""Shared by the quantized / half-precision / contrib-op tests: run a model under onnxruntime's
default optimization level and with optimizations off, and read the element type of every value."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort

LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "default": ort.SessionOptions().graph_optimization_level,  # what a user gets without asking
}


def run_at(model: onnx.ModelProto, feeds: dict, level: str) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_same_outputs(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict,
                        exact: bool = True, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Both levels: bit-identical outputs (`exact`) or within tolerance."""
    for level in LEVELS:
        want, got = run_at(original, feeds, level), run_at(optimized, feeds, level)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and w.shape == g.shape, (level, w.dtype, g.dtype, w.shape, g.shape)
            if exact:
                assert np.array_equal(w, g, equal_nan=True), (level, np.max(np.abs(w.astype(np.float64) - g)))
            else:
                np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=level)


def op_counts(model: onnx.ModelProto, domain: str | None = None) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node if domain is None or n.domain == domain)


def value_dtypes(model: onnx.ModelProto) -> dict[str, int]:
    """name -> element type of every typed value: inputs, outputs, initializers, and node outputs
    as onnx's shape inference (with contrib-op rules where onnxruntime ships them) types them."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    types = {}
    for info in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    for init in inferred.graph.initializer:
        types[init.name] = init.data_type
    return types


def assert_dtypes_kept(original: onnx.ModelProto, optimized: onnx.ModelProto) -> int:
    """Every value the two models share by name has the same element type; returns how many."""
    before, after = value_dtypes(original), value_dtypes(optimized)
    shared = set(before) & set(after)
    changed = {n: (before[n], after[n]) for n in shared if before[n] != after[n]}
    assert not changed, changed
    # a value computed in a new precision would show up as a new dtype anywhere in the graph
    assert set(after.values()) <= set(before.values()), (set(before.values()), set(after.values()))
    return len(shared)
