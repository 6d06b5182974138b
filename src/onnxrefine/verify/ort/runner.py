"""Run a model in onnxruntime: the strict way (CPU, no graph optimizations, one thread) or the way
it will be deployed (`RunSettings`: optimization level, execution providers, custom-op library).

Strict: onnxruntime's own optimizations are off so that the model we run is the model we were
given; one thread so that reductions sum in the same order on every run.

Sessions are created from a model FILE with its external data (`ModelFile`), never from the
serialized bytes of a whole model: protobuf cannot serialize a message over 2 GiB, and the bytes
would hold every weight a second time. A path stays a path (its weights stay on disk); an
in-memory model is written to a temp folder by the project's streaming saver (large tensors as
external data) unless it is small enough that serializing it costs nothing
(`IN_MEMORY_SESSION_MAX_BYTES`; never above `io.EXTERNAL_DATA_THRESHOLD_BYTES`, the size that
simulates the protobuf limit and that tests lower).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxrefine.errors import BadInputError
from onnxrefine.verify.ort.errors import describe as describe_ort_failure

# Tensors up to this many bytes in all may be handed to onnxruntime as serialized bytes; above
# it the model goes through a temp file. Measured here (session creation, best of 3; a one-MatMul
# model; bench/session_cost.py): 10 KiB: bytes 0.2 ms, file 20 ms
# (a fold session per node must stay in memory); 1 MiB: 13 vs 21 ms; 16 MiB: 139 vs 193 ms;
# 64 MiB: 1.7 s vs 0.85 s. From ~16 MiB on the file costs no more and holds no second copy.
IN_MEMORY_SESSION_MAX_BYTES = 16 * 1024 * 1024
# External tensors up to this size are read into the light graph proto (graph-level facts such
# as small shape constants need their values); larger ones stay on disk.
SMALL_TENSOR_BYTES = 4096

ORT_LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class RunSettings:
    """How onnxruntime runs a model: graph optimization level, execution providers (in order of
    preference) and thread count (0: onnxruntime's default, one per physical core)."""

    level: str = "all"
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    threads: int = 0

    @classmethod
    def strict(cls) -> "RunSettings":
        return cls(level="disable", providers=("CPUExecutionProvider",), threads=1)

    def describe(self) -> str:
        threads = "default threads" if self.threads == 0 else f"{self.threads} thread(s)"
        return f"level {self.level}, {', '.join(self.providers)}, {threads}"

    def to_dict(self) -> dict:
        return {"level": self.level, "providers": list(self.providers), "threads": self.threads}


def check_run_settings(settings: RunSettings | None, custom_op_library: str | None = None) -> None:
    """BadInputError (one line) for an unknown level or provider, a provider this onnxruntime
    build lacks, or a custom-op library that is missing or does not load."""
    if custom_op_library is None and (settings is None or settings.providers == ("CPUExecutionProvider",)) \
            and (settings is None or (settings.level in ORT_LEVELS and settings.threads >= 0)):
        return  # nothing to ask onnxruntime (every build has the CPU provider): spare its import
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    if settings is not None:
        if settings.level not in ORT_LEVELS:
            raise BadInputError(f"--ort-level: unknown level {settings.level!r} (choose from {', '.join(ORT_LEVELS)})")
        if not settings.providers:
            raise BadInputError("--providers: no execution provider given")
        known, available = ort.get_all_providers(), ort.get_available_providers()
        for provider in settings.providers:
            if provider not in known:
                raise BadInputError(f"--providers: unknown execution provider {provider!r}")
            if provider not in available:
                raise BadInputError(f"--providers: {provider} is not available in this onnxruntime build "
                                    f"(available: {', '.join(available)})")
        if settings.threads < 0:
            raise BadInputError("threads must not be negative")
    if custom_op_library is not None:
        if not os.path.isfile(custom_op_library):
            raise BadInputError(f"--custom-op-library: no such file: {custom_op_library}")
        try:
            ort.SessionOptions().register_custom_ops_library(os.path.abspath(custom_op_library))
        except Exception as exc:
            raise BadInputError(f"--custom-op-library: {custom_op_library} does not load: {_first_line(exc)}") from None


class ModelFile:
    """A model as onnxruntime and the float64 reference read it.

    `proto`: the graph with its large tensors left on disk (external references, resolved against
    `base_dir`); `path`: the file a session is created from (None: a small in-memory model whose
    serialized bytes are used). A temp folder, if one was written, goes away on `close()`.
    """

    def __init__(self, proto: onnx.ModelProto, path: str | None, base_dir: str | None,
                 temp_dir: str | None = None):
        self.proto = proto
        self.path = path
        self.base_dir = base_dir
        self.temp_dir = temp_dir
        self._cleanup = weakref.finalize(self, shutil.rmtree, temp_dir, True) if temp_dir else None

    def session_source(self):
        return self.path if self.path is not None else self.proto.SerializeToString()

    def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> "ModelFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_model(model, role: str = "model") -> ModelFile:
    """A ModelFile for a path, an onnx.ModelProto or an onnx_ir.Model (see the module docstring)."""
    if isinstance(model, ModelFile):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        proto = light_proto(path, role)
        path = os.path.realpath(path)  # onnxruntime reads external data beside the real file too
        return ModelFile(proto, path, os.path.dirname(path))
    if isinstance(model, onnx.ModelProto):
        if _fits_in_memory(proto_tensor_bytes(model)):
            return ModelFile(model, None, None)
        return _write_temp(_proto_as_ir(model), role)
    if isinstance(model, ir.Model):
        from onnxrefine.ir import io

        if _fits_in_memory(io.tensor_bytes(model)):
            return ModelFile(io.to_proto(model), None, None)
        return _write_temp(model, role)
    raise BadInputError(f"{role}: expected a path, onnx.ModelProto or onnx_ir.Model, got {type(model).__name__}")


def load_model(model: onnx.ModelProto | str | os.PathLike, role: str = "model") -> onnx.ModelProto:
    """A ModelProto from a proto or a path (large tensors left on disk, see `light_proto`)."""
    if isinstance(model, onnx.ModelProto):
        return model
    return light_proto(os.fspath(model), role)


def light_proto(path: str, role: str = "model") -> onnx.ModelProto:
    """The model at `path` without its large tensors' bytes: external tensors stay external,
    large embedded ones become references into the model file itself (ir/wire.py). BadInputError
    for a missing or non-ONNX file or a bad external-data reference."""
    from onnxrefine.ir import load, validate

    # ir/load.py: the real path (a symlinked model's weights are its target folder's), the same
    # checks as optimize's loading (tensor sizes, external data, UTF-8), one line each.
    try:
        proto, base_dir, _ = load.load_checked_proto(path)
    except BadInputError as exc:
        raise BadInputError(f"{role}: {exc}") from None
    if not proto.graph.node and not proto.graph.output:
        raise BadInputError(f"{role} {path} is not an ONNX model (empty graph)")
    try:
        validate.check_graph_structure(proto)
    except BadInputError as exc:
        raise BadInputError(f"{role}: {exc}") from None
    _embed_small_external(proto.graph, base_dir)
    return proto


def _embed_small_external(graph: onnx.GraphProto, base_dir: str) -> None:
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for tensor in graph.initializer:
        if uses_external_data(tensor) and _external_length(tensor) <= SMALL_TENSOR_BYTES:
            load_external_data_for_tensor(tensor, base_dir)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _external_length(tensor: onnx.TensorProto) -> int:
    info = {entry.key: entry.value for entry in tensor.external_data}
    if "length" in info:
        return int(info["length"])
    return _nbytes(tensor)


def _nbytes(tensor: onnx.TensorProto) -> int:
    count = 1
    for dim in tensor.dims:
        count *= int(dim)
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:
        itemsize = 1
    return count * max(itemsize, 1)


def proto_tensor_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer and Constant tensor in the model (all graphs and functions)."""
    total = 0
    graphs = [model.graph]
    for function in model.functions:
        total += sum(_node_tensor_bytes(node, graphs) for node in function.node)
    while graphs:
        graph = graphs.pop()
        total += sum(_nbytes(tensor) for tensor in graph.initializer)
        total += sum(_node_tensor_bytes(node, graphs) for node in graph.node)
    return total


def _node_tensor_bytes(node: onnx.NodeProto, graphs: list) -> int:
    total = 0
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            total += _nbytes(attr.t)
        elif attr.type == onnx.AttributeProto.GRAPH:
            graphs.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attr.graphs)
    return total


def _fits_in_memory(tensor_bytes: int) -> bool:
    from onnxrefine.ir import io

    return tensor_bytes <= min(IN_MEMORY_SESSION_MAX_BYTES, io.EXTERNAL_DATA_THRESHOLD_BYTES)


def _proto_as_ir(model: onnx.ModelProto) -> ir.Model:
    """An onnx-ir view of `model` for the saver; its tensors wrap the proto's, nothing is copied
    (saving does not modify the model)."""
    from onnxrefine.ir import io

    return io.proto_to_ir(model)


def _write_temp(model: ir.Model, role: str) -> ModelFile:
    """Write `model` into a fresh temp folder and describe the written file.

    Weights still memory-mapped from a file (an onnx-ir model loaded from a path: the unchanged
    weights of an optimized model) are not copied: their file is hard-linked into the folder
    (onnxruntime refuses symbolic links that leave the model's folder) and referenced in place;
    only tensors held in memory are written. Where linking fails (another file system), the
    streaming saver writes everything (external data above the threshold)."""
    from onnxrefine.ir import io

    folder = tempfile.mkdtemp(prefix="onnxrefine-session-")
    try:
        path = os.path.join(folder, "model.onnx")
        if not _save_linked(model, folder, path):
            io.save_model(model, path)
        return ModelFile(light_proto(path, role), path, folder, temp_dir=folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _save_linked(model: ir.Model, folder: str, path: str) -> bool:
    """Save with the main graph's external tensors referenced through hard links; False (nothing
    written) when the model has none or a link cannot be made."""
    from onnxrefine.ir import wire

    values = list(model.graph.initializers.values())
    # Small external tensors are embedded, not linked: light_proto reads them with onnx's loader,
    # which refuses a file with several hard links.
    external = [v for v in values if isinstance(v.const_value, ir.ExternalTensor)
                and v.const_value.nbytes > SMALL_TENSOR_BYTES]
    if not external:
        return False
    links: dict[str, str] = {}
    for value in external:
        source = os.path.realpath(value.const_value.path)
        if source not in links:
            name = f"linked{len(links)}.data"
            try:
                os.link(source, os.path.join(folder, name))
            except OSError:
                return False
            links[source] = name
    wire.embed_external_tensors(model, main_graph=False)  # subgraph weights are small: embedded
    saved = {v.name: v.const_value for v in values}
    try:
        with open(os.path.join(folder, "model.onnx.data"), "wb") as data:
            for value in values:
                tensor = value.const_value
                if isinstance(tensor, ir.ExternalTensor) and tensor.nbytes <= SMALL_TENSOR_BYTES:
                    value.const_value = ir.Tensor(np.array(tensor.numpy()), name=tensor.name)
                elif isinstance(tensor, ir.ExternalTensor):
                    value.const_value = ir.ExternalTensor(
                        links[os.path.realpath(tensor.path)], tensor.offset, tensor.length, tensor.dtype,
                        shape=tensor.shape, name=tensor.name, base_dir=folder)
                elif tensor is not None and tensor.dtype != ir.DataType.STRING and tensor.nbytes >= SMALL_TENSOR_BYTES:
                    # In-memory tensors (rewritten weights) go to a data file of their own, one at a time.
                    data.write(b"\0" * (-data.tell() % 4096))
                    offset = data.tell()
                    data.write(tensor.tobytes())
                    value.const_value = ir.ExternalTensor(
                        "model.onnx.data", offset, tensor.nbytes, tensor.dtype, shape=tensor.shape,
                        name=tensor.name, base_dir=folder)
        ir.save(model, path)  # tensors already external keep their references
    finally:
        for value in values:
            value.const_value = saved[value.name]
    return True


def inference_session(model, options, providers=("CPUExecutionProvider",)):
    """An onnxruntime session over a path (used as is), a ModelFile, or an in-memory model (its
    bytes when small, else a temp file removed once the session holds the weights)."""
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    if isinstance(model, (str, os.PathLike)):
        return ort.InferenceSession(os.fspath(model), options, providers=list(providers))
    opened = open_model(model)
    try:
        return ort.InferenceSession(opened.session_source(), options, providers=list(providers))
    finally:
        if opened is not model:
            opened.close()  # onnxruntime copied the weights while creating the session


def session_options(settings: RunSettings, custom_op_library: str | None = None):
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[settings.level]
    if settings.threads:
        options.intra_op_num_threads = settings.threads
        options.inter_op_num_threads = settings.threads
    if settings.threads == 1:
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 4  # failures come back as exceptions; no console noise
    if custom_op_library is not None:
        options.register_custom_ops_library(os.path.abspath(custom_op_library))
    return options


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
                 custom_op_library: str | None = None):
        from onnxrefine.runtime import require_onnxruntime
        ort = require_onnxruntime()

        from onnxrefine import resources

        self.role = role
        self.settings = settings or RunSettings.strict()
        self.custom_op_library = custom_op_library
        self.session = self.watched = None
        self._owned = None if isinstance(model, ModelFile) else open_model(model, role)
        self.source = model if isinstance(model, ModelFile) else self._owned
        self.output_names = [out.name for out in self.source.proto.graph.output]
        try:
            estimate = peak_estimate(self.source, None)
            resources.check_runnable(estimate, role)
            if resources.needs_watch(estimate):
                self._watch()
                return
            options = session_options(self.settings, custom_op_library)
            self.session = ort.InferenceSession(self.source.session_source(), sess_options=options,
                                                providers=list(self.settings.providers))
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
                                          self.role, resources.memory_budget(), limits.time_limit_s)
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
        return {name: np.asarray(value) for name, value in zip(self.output_names, results)}

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
    """resources.estimate_peak for the model with the inputs' shapes (when `feeds` is None:
    symbolic dims at `dims`, else 1), cached on the ModelFile per input shapes."""
    from onnxrefine import resources

    if feeds is None:
        feeds = _unit_feeds(model_file.proto, dims or {})
    key = tuple(sorted((name, tuple(np.shape(value))) for name, value in feeds.items()))
    cache = model_file.__dict__.setdefault("_peak_estimates", {})
    if key not in cache:
        cache[key] = resources.estimate_peak(model_file.proto, feeds)
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
