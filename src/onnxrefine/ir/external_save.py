"""Writing a model with its weights embedded or in an external-data file, weights copied file to file.

The model file is written the way wire.py writes it: the graph without its initializers, serialized
once, then each main-graph initializer as its own length-prefixed field (repeated fields concatenate
on the wire). An embedded initializer's raw_data and an external one's bytes in the data file come
from `tensordata.write_tensor`: a weight still in its input file is copied by the kernel
(copy_file_range / sendfile) and never passes through Python objects or this process's memory.

Which initializers go to the data file (`Layout`):
- "same layout" (the default): a weight external in the input stays external, one embedded stays
  embedded (also when the lazy loader of wire.py left it in the input model file), and a new
  constant (folded, fused) of at least EXTERNAL_MIN_BYTES goes external when the input had any
  external data;
- external on request (`--external-data`): every initializer of at least EXTERNAL_MIN_BYTES;
- everything embedded on request (`--no-external-data`), refused when over the protobuf limit.
Whatever the request, a model file that would exceed the protobuf limit moves its weights out.
Data offsets are aligned to 4 KiB so onnxruntime can memory-map them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import onnx
import onnx_ir as ir

from onnxrefine.errors import BadInputError
from onnxrefine.ir import tensordata, wire
from onnxrefine.ir.wire import _GRAPH_INITIALIZER, _LEN, _MODEL_GRAPH, _TENSOR_RAW_DATA, _encode_varint

# onnx's own default for save_as_external_data: smaller tensors stay in the model file.
EXTERNAL_MIN_BYTES = 1024
ALIGNMENT = 4096


@dataclass
class Layout:
    """mode: "same" (as the input), "external" (at `location`) or "embedded"."""

    mode: str = "same"
    location: str | None = None


def check_location(location: str) -> str:
    """A data-file name for --external-data: a plain file name in the model's folder."""
    if not location or location in (".", "..") or os.sep in location or (os.altsep and os.altsep in location):
        raise BadInputError(f"--external-data {location!r}: give a file name (it is written beside the model)")
    return location


def default_location(path: Path) -> str:
    return path.name + ".data"


def is_input_external(tensor, input_path: str | os.PathLike | None) -> bool:
    """A weight kept in an external-data file by the input (not in the input model file itself,
    where the lazy loader leaves an embedded model's large weights)."""
    source = tensordata.external_source(tensor)
    if source is None:
        return False
    if input_path is None:
        return True
    try:
        return not os.path.samefile(source[0], input_path)
    except OSError:
        return True


def _has_input_external(model: ir.Model, input_path) -> bool:
    return any(is_input_external(v.const_value, input_path) for v in model.graph.initializers.values())


def data_files(model: ir.Model, model_path: str | os.PathLike | None = None) -> list[str]:
    """Distinct external-data files the model's initializers live in (the model file excluded)."""
    seen: dict[str, None] = {}
    for value in model.graph.initializers.values():
        source = tensordata.external_source(value.const_value)
        if source is not None and is_input_external(value.const_value, model_path):
            seen.setdefault(os.path.realpath(source[0]))
    return list(seen)


def stored_size(model_path: str | os.PathLike, model: ir.Model) -> tuple[int, int]:
    """(model file bytes, external-data bytes) of a model as loaded from `model_path`."""
    data = 0
    for name in data_files(model, model_path):
        with contextlib.suppress(OSError):
            data += os.stat(name).st_size
    return os.stat(model_path).st_size, data


def _external_choice(model: ir.Model, layout: Layout, input_path) -> dict[str, bool]:
    """Initializer name -> goes to the data file."""
    values = [v for v in model.graph.initializers.values() if v.const_value is not None]

    def big(value: ir.Value) -> bool:
        tensor = value.const_value
        return tensor.dtype != ir.DataType.STRING and tensor.nbytes >= EXTERNAL_MIN_BYTES

    if layout.mode == "external":
        choice = {v.name: big(v) for v in values}
    elif layout.mode == "embedded":
        choice = {v.name: False for v in values}
    else:
        any_external = _has_input_external(model, input_path)
        choice = {}
        for value in values:
            tensor = value.const_value
            if isinstance(tensor, (ir.ExternalTensor, ir.TensorProtoTensor)):
                choice[value.name] = is_input_external(tensor, input_path)  # as it was in the input
            else:
                choice[value.name] = any_external and big(value)  # a new constant
    embedded = sum(v.const_value.nbytes for v in values if not choice[v.name])
    if embedded > _limit():
        if layout.mode == "embedded":
            raise BadInputError(f"the model's {embedded / 2**30:.1f} GiB of weights exceed protobuf's 2 GiB "
                                "limit for one file; save them with --external-data")
        choice = {v.name: choice[v.name] or big(v) for v in values}
    return choice


def _limit() -> int:
    from onnxrefine.ir.io import EXTERNAL_DATA_THRESHOLD_BYTES

    return EXTERNAL_DATA_THRESHOLD_BYTES


def _embed_attribute_tensors(model: ir.Model) -> None:
    """Constant nodes whose tensor lives in the input's data file get it embedded: the output's data
    file holds initializers only (such tensors are rare and small)."""
    graphs = [model.graph, *model.graph.subgraphs()]
    for function in model.functions.values():
        graphs += [function.graph, *function.subgraphs()]
    for graph in graphs:
        for node in graph:
            for attr in node.attributes.values():
                if not attr.is_ref() and attr.type == ir.AttributeType.TENSOR \
                        and isinstance(attr.value, ir.ExternalTensor):
                    node.attributes[attr.name] = ir.AttrTensor(attr.name, ir.Tensor(attr.value.numpy(),
                                                                                     name=attr.value.name))


def _external_header(value: ir.Value, location: str, offset: int) -> bytes:
    tensor = value.const_value
    proto = onnx.TensorProto(name=value.name, data_type=tensor.dtype.value, dims=[int(d) for d in tensor.shape])
    if tensor.doc_string:
        proto.doc_string = tensor.doc_string
    proto.data_location = onnx.TensorProto.EXTERNAL
    for key, text in (("location", location), ("offset", str(offset)), ("length", str(tensor.nbytes))):
        entry = proto.external_data.add()
        entry.key, entry.value = key, text
    return proto.SerializeToString()


def _field(number: int, size: int) -> bytes:
    return bytes([number << 3 | _LEN]) + _encode_varint(size)


def write(model: ir.Model, model_handle: BinaryIO, data_handle: BinaryIO | None, location: str | None,
          external: dict[str, bool]) -> int:
    """Write the model file to `model_handle` and the weights chosen by `external` to `data_handle`
    (referenced as `location`); returns the bytes written to the data file."""
    wire.embed_external_tensors(model, main_graph=False)  # subgraph weights are small: embedded
    _embed_attribute_tensors(model)
    initializers = [v for v in model.graph.initializers.values()]
    for value in initializers:
        model.graph.initializers.pop(value.name)
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value in initializers:
            model.graph.register_initializer(value)
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    # Plan: each initializer's field (header bytes, then raw data bytes or none) and data offsets.
    plan, offset = [], 0
    for value in initializers:
        tensor = value.const_value
        if external.get(value.name) and data_handle is not None:
            offset += -offset % ALIGNMENT
            plan.append((value, _external_header(value, location, offset), 0, offset))
            offset += tensor.nbytes
        elif tensor.dtype == ir.DataType.STRING or not tensor.nbytes:
            whole = ir.serde.serialize_tensor(tensor)
            whole.name = value.name
            plan.append((value, whole.SerializeToString(), 0, None))
        else:
            header, nbytes = wire._tensor_header(value)
            plan.append((value, header + _field(_TENSOR_RAW_DATA, nbytes), nbytes, None))
    sizes = [len(header) + nbytes for _, header, nbytes, _ in plan]
    graph_length = len(graph_bytes) + sum(len(_field(_GRAPH_INITIALIZER, s)) + s for s in sizes)
    model_handle.write(proto.SerializeToString())
    model_handle.write(_field(_MODEL_GRAPH, graph_length))
    model_handle.write(graph_bytes)
    for (value, header, nbytes, data_offset), size in zip(plan, sizes):
        model_handle.write(_field(_GRAPH_INITIALIZER, size))
        model_handle.write(header)
        if nbytes:
            tensordata.write_tensor(value.const_value, model_handle)
        if data_offset is not None:
            data_handle.write(b"\0" * (data_offset - data_handle.tell()))
            tensordata.write_tensor(value.const_value, data_handle)
    return offset


def save(model: ir.Model, path: Path, *, input_path=None, layout: Layout | None = None) -> int:
    """Write `model` to `path` (+ its data file) through temp files and renames; returns the bytes
    written (model file and data file together)."""
    from onnxrefine.ir.io import _references_file, publish_mode

    layout = layout or Layout()
    folder = path.resolve().parent
    external = _external_choice(model, layout, input_path)
    location = layout.location or default_location(path)
    data_path = folder / location if any(external.values()) else None
    if data_path is not None:
        if data_path.resolve() == path.resolve() or (input_path is not None and data_path.exists() and (
                os.path.samefile(data_path, input_path) or _references_file(input_path, data_path))):
            raise BadInputError(f"{data_path}: would overwrite the input model or its external data; "
                                "choose another output path or --external-data name")
    temps: list[str] = []
    try:
        fd, model_tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        temps.append(model_tmp)
        data_tmp = None
        with os.fdopen(fd, "wb") as model_handle:
            if data_path is None:
                data_bytes = write(model, model_handle, None, None, external)
            else:
                fd_data, data_tmp = tempfile.mkstemp(prefix=f".{location}.", suffix=".tmp", dir=folder)
                temps.append(data_tmp)
                with os.fdopen(fd_data, "wb") as data_handle:
                    data_bytes = write(model, model_handle, data_handle, location, external)
        written = os.stat(model_tmp).st_size + data_bytes
        for name in temps:
            publish_mode(name)
        # The data file first: a model file is only ever visible beside complete data.
        if data_tmp is not None:
            os.replace(data_tmp, data_path)
        os.replace(model_tmp, path)
        return written
    except BaseException:
        for name in temps:
            with contextlib.suppress(OSError):
                os.unlink(name)
        raise
