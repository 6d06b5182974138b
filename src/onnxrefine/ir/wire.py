"""Reading and writing large models without holding their weights twice.

Protobuf parses and serializes whole messages, so `onnx.load` + `onnx.save` of a 100 MB model
holds its weights two or three times over. Two small pieces of protobuf wire format avoid that:

- `lazy_proto_from_buffer`: parses a model file but leaves each large initializer's `raw_data`
  where it is, turning the tensor into an external reference to the model file itself at that
  offset. onnx-ir then memory-maps it, and only weights a rewrite reads are ever paged in.
- `serialize_skeleton` + `tensor_chunks`: the model without its main-graph initializers, which
  a writer (ir/external_save.py) then streams one tensor at a time (a length-prefixed GraphProto
  field may be written in pieces: repeated fields are concatenated on the wire).

Wire format: tag = field_number << 3 | wire_type; wire type 2 is length-delimited.
ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.raw_data = 9.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.ir import traversal

MODEL_GRAPH = 7
GRAPH_INITIALIZER = 5
TENSOR_RAW_DATA = 9
LEN = 2
LAZY_THRESHOLD_BYTES = 4096


class WireFormatError(ValueError):
    pass


def _read_varint(buffer, position: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= end or shift > 63:
            raise WireFormatError("truncated or malformed varint")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buffer, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, payload start, field end) for each field."""
    position = start
    while position < end:
        field_start = position
        tag, position = _read_varint(buffer, position, end)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, position = _read_varint(buffer, position, end)
            payload = position
        elif wire_type == 1:
            payload, position = position, position + 8
        elif wire_type == 2:
            length, payload = _read_varint(buffer, position, end)
            position = payload + length
        elif wire_type == 5:
            payload, position = position, position + 4
        else:
            raise WireFormatError(f"unsupported wire type {wire_type}")
        if position > end:
            raise WireFormatError("field runs past the end of its message")
        yield field, wire_type, field_start, payload, position


def lazy_proto_from_buffer(buffer, size: int, location: str, threshold: int) -> onnx.ModelProto:
    """The model serialized in `buffer` (`size` bytes), main-graph initializers' raw_data of at
    least `threshold` bytes turned into external references to `location` (the file itself)."""
    model_rest, graph_rest, tensors = bytearray(), bytearray(), []
    for field, wire_type, start, payload, end in _fields(buffer, 0, size):
        if field != MODEL_GRAPH or wire_type != LEN:
            model_rest += buffer[start:end]
            continue
        for g_field, g_type, g_start, g_payload, g_end in _fields(buffer, payload, end):
            if g_field == GRAPH_INITIALIZER and g_type == LEN:
                tensors.append(_lazy_tensor(buffer, g_payload, g_end, location, threshold))
            else:
                graph_rest += buffer[g_start:g_end]
    model = onnx.ModelProto.FromString(bytes(model_rest))
    graph = onnx.GraphProto.FromString(bytes(graph_rest))
    graph.initializer.extend(tensors)
    model.graph.CopyFrom(graph)
    return model


def _lazy_tensor(buffer, start: int, end: int, location: str, threshold: int) -> onnx.TensorProto:
    rest = bytearray()
    raw = None
    for field, wire_type, f_start, payload, f_end in _fields(buffer, start, end):
        if field == TENSOR_RAW_DATA and wire_type == LEN and f_end - payload >= threshold:
            raw = (payload, f_end - payload)
        else:
            rest += buffer[f_start:f_end]
    tensor = onnx.TensorProto.FromString(bytes(rest))
    if raw is not None:
        offset, length = raw
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return tensor


def tensor_header(value: ir.Value) -> tuple[bytes, int]:
    """A numeric initializer's TensorProto without its data, and the data's size in bytes."""
    tensor = value.const_value
    proto = onnx.TensorProto()
    proto.name = value.name
    proto.data_type = tensor.dtype.value
    proto.dims.extend(int(d) for d in tensor.shape)
    if tensor.doc_string:
        proto.doc_string = tensor.doc_string
    return proto.SerializeToString(), tensor.nbytes


def tensor_chunks(value: ir.Value) -> list:
    """The serialized TensorProto of an initializer as byte chunks, data embedded as raw_data.

    The data chunk is a view of the tensor's own buffer where possible (memory-mapped weights go
    from the input file to the output file without an extra copy)."""
    tensor = value.const_value
    if tensor.dtype == ir.DataType.STRING:
        proto = ir.serde.serialize_tensor(tensor)
        proto.name = value.name
        return [proto.SerializeToString()]
    header, nbytes = tensor_header(value)
    if not nbytes:
        return [header]
    array = tensor.numpy()
    if array.dtype.byteorder == ">" or tensor.dtype.bitwidth < 8:
        data = tensor.tobytes()  # sub-byte types are packed; big-endian arrays are swapped
    else:
        try:
            data = memoryview(np.ascontiguousarray(array)).cast("B")
        except (TypeError, ValueError):  # dtypes the buffer protocol does not know (ml_dtypes)
            data = tensor.tobytes()
    if len(data) != nbytes:
        raise WireFormatError(f"tensor {value.name}: {len(data)} data bytes, expected {nbytes}")
    return [header, bytes([TENSOR_RAW_DATA << 3 | LEN]) + encode_varint(nbytes), data]


def embed_external_tensors(model: ir.Model, *, main_graph: bool = True) -> None:
    """Replace external tensors by in-memory copies (in subgraphs always, main graph if asked)."""
    graphs = [site.graph for site in traversal.graphs(model) if main_graph or site.graph is not model.graph]
    for graph in graphs:
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                value.const_value = ir.Tensor(value.const_value.numpy(), name=value.name)


def serialize_skeleton(model: ir.Model) -> tuple[onnx.ModelProto, bytes, list[ir.Value]]:
    """`model` serialized without its main-graph initializers, which writers then stream one at a
    time: (the model proto without its graph, the graph's bytes, the initializers in order)."""
    initializers = list(model.graph.initializers.values())
    for value in initializers:
        model.graph.initializers.pop(value.name)
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value in initializers:
            model.graph.register_initializer(value)
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    return proto, graph_bytes, initializers
