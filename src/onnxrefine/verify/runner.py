"""Run a model in onnxruntime the same way every time: CPU, no graph optimizations, one thread.

onnxruntime's own optimizations are off so that the model we run is the model we were given;
one thread so that reductions sum in the same order on every run.
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.verify.ort_errors import describe as describe_ort_failure


def load_model(model: onnx.ModelProto | str | os.PathLike, role: str = "model") -> onnx.ModelProto:
    """A ModelProto from a proto or a path; BadInputError for a missing or non-ONNX file."""
    if isinstance(model, onnx.ModelProto):
        return model
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise BadInputError(f"{role} not found: {path}")
    try:
        loaded = onnx.load(path)
    except Exception as exc:
        raise BadInputError(f"{role} {path} is not an ONNX model: {_first_line(exc)}") from None
    if not loaded.graph.node and not loaded.graph.output:
        raise BadInputError(f"{role} {path} is not an ONNX model (empty graph)")
    return loaded


class ModelRunner:
    """One onnxruntime session over a model; `run(feeds)` returns output name -> array."""

    def __init__(self, model: onnx.ModelProto, role: str = "model"):
        import onnxruntime as ort

        self.role = role
        self.output_names = [out.name for out in model.graph.output]
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 4  # failures come back as exceptions; no console noise
        try:
            self.session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise BadInputError(describe_ort_failure(exc, "load", role)) from None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.session.run(self.output_names, dict(feeds))
        except Exception as exc:
            raise RunFailedError(describe_ort_failure(exc, "run", self.role)) from None
        return {name: np.asarray(value) for name, value in zip(self.output_names, results)}


class RunFailedError(BadInputError):
    """A loaded model failed at run time (bad input for the original, a finding for a candidate)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
