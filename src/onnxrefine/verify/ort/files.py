"""Model files for onnxruntime sessions (`ModelFile`).

Sessions are created from a model FILE with its external data, never from the serialized bytes of
a whole model: protobuf cannot serialize a message over 2 GiB, and the bytes would hold every
weight a second time. A path stays a path (its weights stay on disk); an in-memory model is
written to a temp folder by the project's streaming saver (large tensors as external data) unless
it is small enough that serializing it costs nothing (`IN_MEMORY_SESSION_MAX_BYTES`; never above
`sizes.EXTERNAL_DATA_THRESHOLD_BYTES`, the size that simulates the protobuf limit and that tests lower).
A file that embeds large weights is given to a session as its light graph, those weights references
into the file itself (`ModelFile.mapped_source`): onnxruntime then maps them instead of copying them
out of the parsed protobuf on every session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.errors import BadInputError
from onnxrefine.ir import sizes

# Tensors up to this many bytes in all may be handed to onnxruntime as serialized bytes; above
# it the model goes through a temp file. Measured here (session creation, best of 3; a one-MatMul
# model; bench/session_cost.py): 10 KiB: bytes 0.2 ms, file 20 ms
# (a fold session per node must stay in memory); 1 MiB: 13 vs 21 ms; 16 MiB: 139 vs 193 ms;
# 64 MiB: 1.7 s vs 0.85 s. From ~16 MiB on the file costs no more and holds no second copy.
IN_MEMORY_SESSION_MAX_BYTES = 16 * 1024 * 1024

# External tensors up to this size are read into the light graph proto (graph-level facts such
# as small shape constants need their values); larger ones stay on disk.
SMALL_TENSOR_BYTES = 4096


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
        self._mapped: tuple[bytes, str] | bool | None = None
        self._cleanup = weakref.finalize(self, shutil.rmtree, temp_dir, True) if temp_dir else None

    def session_source(self):
        return self.path if self.path is not None else self.proto.SerializeToString()

    def mapped_source(self) -> tuple[bytes, str] | None:
        """(the light graph's bytes, the folder its references resolve against) where the file
        embeds large weights, else None. onnxruntime maps a weight it reads as external data from
        the file; one embedded in the protobuf it copies out of the parsed message, every session
        again (vit_b_16 at level disable: 0.42 s and 180k page faults a session from the path,
        0.055 s and 10k this way, the same outputs: bench/mapped_sessions.py). The light graph references those weights in
        the model file itself (light_proto), so the session reads exactly the file's bytes."""
        if self._mapped is None:
            own = os.path.basename(self.path) if self.path is not None else None
            itself = own is not None and self.base_dir is not None and any(
                entry.key == "location" and entry.value == own
                for tensor in self.proto.graph.initializer for entry in tensor.external_data)
            self._mapped = (self.proto.SerializeToString(), self.base_dir) if itself else False
        return self._mapped or None

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
        return write_temp(_proto_as_ir(model), role)
    if isinstance(model, ir.Model):
        from onnxrefine.ir import io

        if _fits_in_memory(io.tensor_bytes(model)):
            return ModelFile(io.to_proto(model), None, None)
        return write_temp(model, role)
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
    return tensor_bytes <= min(IN_MEMORY_SESSION_MAX_BYTES, sizes.EXTERNAL_DATA_THRESHOLD_BYTES)


def _proto_as_ir(model: onnx.ModelProto) -> ir.Model:
    """An onnx-ir view of `model` for the saver; its tensors wrap the proto's, nothing is copied
    (saving does not modify the model)."""
    from onnxrefine.ir import io

    return io.proto_to_ir(model)


def write_temp(model: ir.Model, role: str) -> ModelFile:
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
    from onnxrefine.ir import tensordata, wire

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
                    tensordata.write_tensor(tensor, data)  # a view of the array, not a copy of it
                    value.const_value = ir.ExternalTensor(
                        "model.onnx.data", offset, tensor.nbytes, tensor.dtype, shape=tensor.shape,
                        name=tensor.name, base_dir=folder)
        ir.save(model, path)  # tensors already external keep their references
    finally:
        for value in values:
            value.const_value = saved[value.name]
    return True


def whole_proto(given, role: str, max_bytes: int) -> onnx.ModelProto | None:
    """The model with every weight loaded, or None when its weights exceed `max_bytes`."""
    if isinstance(given, onnx.ModelProto):
        return given
    if not isinstance(given, (str, os.PathLike)):  # an onnx_ir.Model
        from onnxrefine.ir import io

        return io.to_proto(given) if io.tensor_bytes(given) <= max_bytes else None
    path = os.fspath(given)
    light = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    from onnxrefine.ir.load_checks import tensors_with_places

    files = {entry.value for tensor, _ in tensors_with_places(light)
             for entry in tensor.external_data if entry.key == "location"}
    size = os.path.getsize(path) + sum(os.path.getsize(os.path.join(folder, name)) for name in files
                                       if os.path.isfile(os.path.join(folder, name)))
    if size > max_bytes:
        return None
    try:
        return onnx.load(path)
    except Exception as exc:
        raise BadInputError(f"{role} {path}: {exc}") from None
