"""Run a model in onnxruntime (`ModelRunner`): in this process, or in a watched child process
(child.py) where the resource budget says so, with the run settings of settings.py, from the model
files of files.py.
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.verify.ort.errors import describe as describe_ort_failure
from onnxrefine.verify.ort.files import ModelFile, open_model
from onnxrefine.verify.ort.mapvalues import MapOutputs
from onnxrefine.verify.ort.settings import RunSettings, session_options


def session_over(model_file: ModelFile, options, providers):
    """An onnxruntime session over `model_file`, its weights mapped from the file where it embeds
    them (child.open_session)."""
    from onnxrefine.runtime import require_onnxruntime
    from onnxrefine.verify.ort.child import open_session

    return open_session(require_onnxruntime(), model_file.session_source(), model_file.mapped_source(),
                        options, providers)


def inference_session(model, options, providers=("CPUExecutionProvider",)):
    """An onnxruntime session over a path (used as is), a ModelFile, or an in-memory model (its
    bytes when small, else a temp file removed once the session holds the weights)."""
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    if isinstance(model, (str, os.PathLike)):
        return ort.InferenceSession(os.fspath(model), options, providers=list(providers))
    opened = open_model(model)
    try:
        return session_over(opened, options, providers)
    finally:
        if opened is not model:
            opened.close()  # onnxruntime copied the weights while creating the session


class ModelRunner:
    """One onnxruntime session over a model; `run(feeds)` returns output name -> array.

    `model`: a ModelFile, path, ModelProto or onnx_ir.Model (anything but a ModelFile is opened
    here and its temp folder removed by `close()`). `settings`: strict by default.

    Resource budget (resources.py): the model's peak tensor memory is estimated from shapes before
    the session is made (symbolic dims as 1) and before each run with new input shapes; over the
    memory budget, or a Loop over the trip-count limit, is a ResourceLimitError. Where the estimate
    is uncertain (Loop/Scan, unknown shapes) or close to the budget, the session lives in a watched
    child process (ort/child.py) with an RSS cap and a wall-clock limit; otherwise in this one
    (no start-up cost)."""

    def __init__(self, model, role: str = "model", settings: RunSettings | None = None,
                 custom_op_library: str | None = None, scoped: bool = False):
        from onnxrefine.runtime import require_onnxruntime
        ort = require_onnxruntime()

        from onnxrefine import resources

        self.role = role
        self.settings = settings or RunSettings.strict()
        self.custom_op_library = custom_op_library
        self.session = self.watched = None
        self.scoped = scoped  # closed soon after a few runs: a watched session gets a forked child
        self._owned = None if isinstance(model, ModelFile) else open_model(model, role)
        self.source = model if isinstance(model, ModelFile) else self._owned
        self.output_names = [out.name for out in self.source.proto.graph.output]
        self.map_outputs = MapOutputs(self.source.proto.graph)  # judged as their values (mapvalues.py)
        try:
            estimate = peak_estimate(self.source, None)
            resources.check_runnable(estimate, role)
            if resources.needs_watch(estimate):
                self._watch()
                return
            options = session_options(self.settings, custom_op_library)
            self.session = session_over(self.source, options, self.settings.providers)
        except resources.ResourceLimitError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise BadInputError(describe_ort_failure(exc, "load", role)) from None

    def _watch(self) -> None:
        """Move the session into a watched child process (see resources.py)."""
        from onnxrefine import resources
        from onnxrefine.verify.ort.child import ChildFailed, WatchedSession

        self.session = None
        limits = resources.current_limits()
        try:
            self.watched = WatchedSession(self.source.session_source(), self.settings, self.custom_op_library,
                                          self.role, resources.memory_budget(), limits.time_limit_s,
                                          scoped=self.scoped, mapped=self.source.mapped_source())
        except ChildFailed as exc:
            raise BadInputError(str(exc)) from None
        except RuntimeError as exc:
            raise resources.ResourceLimitError(str(exc)) from None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from onnxrefine import resources
        from onnxrefine.verify.ort.child import ChildFailed

        estimate = peak_estimate(self.source, feeds)
        resources.check_runnable(estimate, self.role)
        if self.watched is None and resources.needs_watch(estimate):
            self._watch()
        try:
            if self.watched is not None:
                results = self.watched.run(self.output_names, feeds)
            else:
                results = self.session.run(self.output_names, dict(feeds))
        except ChildFailed as exc:
            raise RunFailedError(str(exc)) from None
        except RuntimeError as exc:
            if self.watched is not None:  # the child died (an OOM kill, a crash): a resource problem
                raise resources.ResourceLimitError(str(exc)) from None
            raise RunFailedError(describe_ort_failure(exc, "run", self.role)) from None
        except resources.ResourceLimitError:
            raise
        except Exception as exc:
            raise RunFailedError(describe_ort_failure(exc, "run", self.role)) from None
        outputs = self.map_outputs.as_tensors(dict(zip(self.output_names, results)))
        return {name: np.asarray(value) for name, value in outputs.items()}

    def run_outputs(self, names, feeds) -> list:
        """The named values of one run, as onnxruntime returns them (any graph outputs)."""
        if self.watched is not None:
            from onnxrefine.verify.ort.child import ChildFailed

            try:
                return self.watched.run(names, feeds)
            except ChildFailed as exc:
                raise RunFailedError(str(exc)) from None
        return self.session.run(list(names), dict(feeds))

    def close(self) -> None:
        """Release the session (and its copy of the weights) now, not when garbage collected."""
        self.session = None
        if self.watched is not None:
            self.watched.close()
            self.watched = None
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> "ModelRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def peak_estimate(model_file: ModelFile, feeds, dims=None):
    """ir.peak.estimate_peak for the model with the inputs' shapes (when `feeds` is None:
    symbolic dims at `dims`, else 1), cached on the ModelFile per input shapes."""
    from onnxrefine.ir import peak

    if feeds is None:
        feeds = _unit_feeds(model_file.proto, dims or {})
    key = tuple(sorted((name, tuple(np.shape(value))) for name, value in feeds.items()))
    cache = model_file.__dict__.setdefault("_peak_estimates", {})
    if key not in cache:
        cache[key] = peak.estimate_peak(model_file.proto, feeds)
    return cache[key]


def _unit_feeds(model: onnx.ModelProto, dims=None) -> dict:
    """Shape-only stand-ins for the graph inputs (no data), symbolic dims at `dims` (the user's
    --dims), other symbolic or unknown dims as 1."""
    dims = dims or {}
    initializers = {init.name for init in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0
                      else int(dims.get(d.dim_param, 1)) if d.HasField("dim_param") else 1
                      for d in tensor_type.shape.dim)
        feeds[value.name] = np.broadcast_to(np.zeros((), np.uint8), shape)
    return feeds


class RunFailedError(BadInputError):
    """A loaded model failed at run time (bad input for the original, a finding for a candidate)."""
