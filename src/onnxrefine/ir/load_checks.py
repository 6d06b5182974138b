"""Checks on a parsed ModelProto before any of its bytes are used (ir/load.py runs them).

Each defect is one BadInputError naming the tensor, node or field:
- strings that are not UTF-8 (protobuf's proto2 parser keeps them; reading one raises later);
- tensors: a known data type, dims >= 0, and data whose size is exactly dtype x dims (raw_data,
  the typed fields, or an external range); a sparse tensor's indices in range;
- external data: a location without NUL bytes, relative, inside the model's real folder once links
  are followed, naming a regular file, with a non-negative offset, a length equal to dtype x dims
  and a range inside the file. Each file is opened once (openfile.OpenFile) and checked through that
  descriptor; the open files are returned so the weights are read from exactly those;
- the main graph's inputs: a known element type, no negative dims.
An onnx_ir.Model given to the API gets the same checks on its serialized form (`check_ir_model`).
Graph structure (undefined names, cycles, a name written twice) is validate.py's.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor

from onnxrefine.errors import BadInputError
from onnxrefine.ir import validate

T = onnx.TensorProto
_BITS = {T.FLOAT: 32, T.UINT8: 8, T.INT8: 8, T.UINT16: 16, T.INT16: 16, T.INT32: 32, T.INT64: 64,
         T.BOOL: 8, T.FLOAT16: 16, T.DOUBLE: 64, T.UINT32: 32, T.UINT64: 64, T.COMPLEX64: 64,
         T.COMPLEX128: 128, T.BFLOAT16: 16}
for _name, _bits in (("FLOAT8E4M3FN", 8), ("FLOAT8E4M3FNUZ", 8), ("FLOAT8E5M2", 8), ("FLOAT8E5M2FNUZ", 8),
                     ("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4), ("FLOAT8E8M0", 8), ("UINT2", 2),
                     ("INT2", 2), ("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6)):
    if hasattr(T, _name):
        _BITS[getattr(T, _name)] = _bits

# Which typed field holds a dtype's values, and how many entries one element takes (sub-byte types
# are packed into int32_data the way they are packed into raw_data).
_TYPED_FIELD = {T.FLOAT: ("float_data", 1), T.COMPLEX64: ("float_data", 2), T.DOUBLE: ("double_data", 1),
                T.COMPLEX128: ("double_data", 2), T.INT64: ("int64_data", 1), T.UINT32: ("uint64_data", 1),
                T.UINT64: ("uint64_data", 1), T.STRING: ("string_data", 1)}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return one_line(text.splitlines()[0])[:300]


def one_line(text: str) -> str:
    """`text` with control characters (newlines, escapes) shown escaped: names from a model can
    hold anything, and an error is one line of plain text."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def check_model(proto: onnx.ModelProto, folder: Path, own_file=None, label: str = "model") -> dict:
    """Run every check; return {location: OpenFile} for the external tensors' files.

    `folder` is the model's real folder; `own_file` = (name, OpenFile) of the model file itself
    (the lazily parsed model's big tensors refer to it)."""
    check_utf8(proto)
    opened: dict[str, object] = {}
    if own_file is not None:
        opened[os.path.join(os.fspath(folder), own_file[0])] = own_file[1]
    files: dict[str, object] = {}
    for tensor, where in tensors_with_places(proto):
        check_tensor(tensor, where, folder, opened, files)
    for sparse, where in sparse_tensors(proto):
        check_sparse(sparse, where)
    check_graph_inputs(proto)
    return files


# --- UTF-8 ------------------------------------------------------------------------------------

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def _repeated(field) -> bool:
    flag = getattr(field, "is_repeated", None)
    return flag if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def check_utf8(proto: onnx.ModelProto) -> None:
    """Every string field is valid UTF-8 (proto2 parsing does not check; depending on the field,
    protobuf then raises on reading it or hands back the undecodable bytes)."""
    stack = [(proto, None)]  # (message, (parent entry, field name, index)) to name it on error
    while stack:
        entry = stack.pop()
        message = entry[0]
        try:
            fields = message.ListFields()  # set fields only, read in C
            bad = None
            for field, value in fields:
                if field.type == _STRING:
                    if isinstance(value, bytes) or (_repeated(field) and any(isinstance(v, bytes) for v in value)):
                        bad = field.name
                        break
                elif field.type == _MESSAGE:
                    if _repeated(field):
                        stack.extend((item, (entry, field.name, index)) for index, item in enumerate(value))
                    else:
                        stack.append((value, (entry, field.name, None)))
        except UnicodeDecodeError:
            bad = "a string field"
        if bad:
            raise BadInputError(f"{_path(entry)}: {message.DESCRIPTOR.name}.{bad} is not valid UTF-8")


def _path(entry) -> str:
    parts = []
    while entry[1] is not None:
        parent, name, index = entry[1]
        parts.append(name if index is None else f"{name}[{index}]")
        entry = parent
    return " > ".join(["model", *reversed(parts)])


# --- tensors ----------------------------------------------------------------------------------

def tensors_with_places(proto: onnx.ModelProto):
    """(TensorProto, a description of where it sits) for every tensor of the model."""
    for graph, where in _graphs_with_places(proto):
        for tensor in graph.initializer:
            yield tensor, f"{where}: initializer '{one_line(tensor.name)}'"
        for sparse in graph.sparse_initializer:
            yield sparse.values, f"{where}: sparse initializer '{one_line(sparse.values.name)}' (values)"
            yield sparse.indices, f"{where}: sparse initializer '{one_line(sparse.values.name)}' (indices)"
        yield from _node_tensors(graph.node, where)
    for function in proto.functions:
        yield from _node_tensors(function.node, f"function '{one_line(function.name)}'")


def _node_tensors(nodes, where):
    for node in nodes:
        label = f"{where}: node '{one_line(node.name or node.op_type)}'"
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t, f"{label} attribute '{attr.name}'"
            elif attr.type == onnx.AttributeProto.TENSORS:
                for tensor in attr.tensors:
                    yield tensor, f"{label} attribute '{attr.name}'"
            elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                yield attr.sparse_tensor.values, f"{label} attribute '{attr.name}' (values)"
                yield attr.sparse_tensor.indices, f"{label} attribute '{attr.name}' (indices)"


def _graphs_with_places(proto: onnx.ModelProto):
    stack = [(proto.graph, f"graph '{one_line(proto.graph.name)}'")]
    for function in proto.functions:
        for node in function.node:
            stack.extend((g, f"function '{one_line(function.name)}' subgraph") for g in validate.subgraphs_of(node))
    while stack:
        graph, where = stack.pop()
        yield graph, where
        for node in graph.node:
            stack.extend((g, f"subgraph '{one_line(g.name)}' of node '{one_line(node.name or node.op_type)}'")
                         for g in validate.subgraphs_of(node))


def sparse_tensors(proto: onnx.ModelProto):
    for graph, where in _graphs_with_places(proto):
        for sparse in graph.sparse_initializer:
            yield sparse, f"{where}: sparse initializer '{one_line(sparse.values.name)}'"


def expected_bytes(tensor: onnx.TensorProto, where: str) -> tuple[int, int]:
    """(element count, data bytes) from dtype x dims; BadInputError for an unknown dtype or a
    negative dim."""
    if tensor.data_type not in _BITS and tensor.data_type != T.STRING:
        known = T.DataType.values() if hasattr(T.DataType, "values") else ()
        what = "undefined" if tensor.data_type == 0 else ("unsupported" if tensor.data_type in known else "unknown")
        raise BadInputError(f"{where}: {what} data type {tensor.data_type}")
    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        raise BadInputError(f"{where}: negative dim in {dims}")
    count = math.prod(dims)
    if tensor.data_type == T.STRING:
        return count, 0
    return count, (count * _BITS[tensor.data_type] + 7) // 8


def check_tensor(tensor: onnx.TensorProto, where: str, folder: Path, opened: dict, files: dict) -> None:
    count, nbytes = expected_bytes(tensor, where)
    if tensor.data_location == T.EXTERNAL:
        _check_external(tensor, where, nbytes, folder, opened, files)
        return
    if tensor.HasField("raw_data"):
        if tensor.data_type == T.STRING:
            raise BadInputError(f"{where}: a string tensor with raw_data (strings go in string_data)")
        got = len(tensor.raw_data)
        if got != nbytes:
            raise BadInputError(f"{where}: raw_data holds {got} bytes, but {T.DataType.Name(tensor.data_type)} "
                                f"x dims {list(tensor.dims)} need {nbytes}")
        return
    field, per = _TYPED_FIELD.get(tensor.data_type, ("int32_data", 1))
    bits = _BITS.get(tensor.data_type, 8)
    want = (count * bits + 7) // 8 if bits < 8 else count * per
    got = len(getattr(tensor, field))
    if got != want:
        raise BadInputError(f"{where}: {field} holds {got} values, but dims {list(tensor.dims)} need {want}"
                            + ("" if got or not count else " (the tensor has no data)"))


def _check_external(tensor, where, nbytes, folder: Path, opened: dict, files: dict) -> None:
    from onnxrefine.ir.openfile import OpenFile

    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    if tensor.data_type == T.STRING:
        raise BadInputError(f"{where}: a string tensor cannot hold external data")
    if not location:
        raise BadInputError(f"{where}: external data without a location")
    if "\0" in location:
        raise BadInputError(f"{where}: external data location contains a NUL byte")
    shown = one_line(location)
    base = os.fspath(folder)
    target = os.path.realpath(os.path.join(base, location))
    if os.path.isabs(location) or os.path.commonpath([base, target]) != base or target == base:
        if target == base and not os.path.isabs(location):
            raise BadInputError(f"{where}: external data location '{shown}' is not a regular file")
        raise BadInputError(f"{where}: external data location '{shown}' points outside the model's folder")
    try:
        offset = int(entries.get("offset") or 0)
    except ValueError:
        raise BadInputError(f"{where}: external data offset {entries.get('offset')!r} is not a number") from None
    try:
        length = int(entries["length"]) if entries.get("length") else None
    except ValueError:
        raise BadInputError(f"{where}: external data length {entries.get('length')!r} is not a number") from None
    if offset < 0:
        raise BadInputError(f"{where}: negative external data offset {offset}")
    if length is not None and length < 0:
        raise BadInputError(f"{where}: negative external data length {length}")
    if length is not None and length != nbytes:
        raise BadInputError(f"{where}: external data length {length} bytes, but "
                            f"{T.DataType.Name(tensor.data_type)} x dims {list(tensor.dims)} need {nbytes}")
    source = opened.get(target)
    if source is None:
        if not os.path.lexists(target):
            raise BadInputError(f"{where}: external data file '{shown}' is missing")
        source = opened[target] = OpenFile(target, f"{where}: external data file '{shown}'")
    files[os.path.normpath(location)] = source  # "./w.bin" and "w.bin" are one file
    if offset + nbytes > source.size:
        raise BadInputError(f"{where}: external data range [{offset}, {offset + nbytes}) exceeds '{shown}' "
                            f"({source.size} bytes)")


def check_sparse(sparse: onnx.SparseTensorProto, where: str) -> None:
    """Values 1-D, indices [NNZ] (linear) or [NNZ, rank], every index inside the dense shape."""
    for part in (sparse.values, sparse.indices):
        if part.data_location == T.EXTERNAL:
            raise BadInputError(f"{where}: external data in a sparse tensor is not supported")
    dims = list(sparse.dims)
    if any(d < 0 for d in dims):
        raise BadInputError(f"{where}: negative dim in {dims}")
    values, indices = list(sparse.values.dims), list(sparse.indices.dims)
    if len(values) != 1:
        raise BadInputError(f"{where}: values must be 1-D, got dims {values}")
    nnz = values[0]
    if not (indices == [nnz] or indices == [nnz, len(dims)]):
        raise BadInputError(f"{where}: indices dims {indices} do not match {nnz} values of a rank-{len(dims)} tensor")
    from onnx import numpy_helper

    index = numpy_helper.to_array(sparse.indices).astype(np.int64, copy=False)
    bounds = np.array([math.prod(dims)]) if index.ndim == 1 else np.array(dims, dtype=np.int64)
    if index.size and (np.any(index < 0) or np.any(index >= bounds)):
        raise BadInputError(f"{where}: an index is outside the dense shape {dims}")


def check_graph_inputs(proto: onnx.ModelProto) -> None:
    for value in proto.graph.input:
        kind = value.type.WhichOneof("value")
        if kind == "tensor_type" and value.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            # A feed of no type cannot be made, checked or compared (a flipped byte does this).
            raise BadInputError(f"graph input '{one_line(value.name)}': element type is UNDEFINED (0)")
        if kind != "tensor_type" or not value.type.tensor_type.HasField("shape"):
            continue
        dims = value.type.tensor_type.shape.dim
        _check_input_dims(value.name, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims])


def check_ir_model(model) -> None:
    """The checks a file gets, on an onnx_ir.Model given to the API: `check_model` and validate.py's
    structure checks (undefined names, cycles, a name written twice) run on its serialized form.
    The main graph's initializers are serialized as headers only (dtype and dims: their data are
    arrays already, and copying them is what would cost); every other tensor is checked whole."""
    import onnx_ir as ir

    from onnxrefine.ir import wire

    for name, value in model.graph.initializers.items():
        # (the skeleton takes the initializers out and puts them back, which needs these)
        problem = "has no tensor" if value.const_value is None else (
            "is registered under another name" if value.name != name else None)
        if problem:
            raise BadInputError(f"graph '{one_line(model.graph.name or '')}': initializer '{one_line(name)}' {problem}")
    try:
        proto, graph_bytes, initializers = wire.serialize_skeleton(model)
        proto.graph.ParseFromString(graph_bytes)
        headers = [onnx.TensorProto.FromString(wire.tensor_header(value)[0]) for value in initializers]
    except Exception as exc:  # noqa: BLE001 - onnx-ir and protobuf on what cannot be serialized
        raise BadInputError(f"model cannot be serialized: {first_line(exc)}") from None
    where = f"graph '{one_line(proto.graph.name)}'"
    for header in headers:
        expected_bytes(header, f"{where}: initializer '{one_line(header.name)}'")
    # Tensors that stay external are read relative to the folder onnx-ir was given for them.
    folder = next((Path(value.const_value.base_dir) for value in initializers
                   if isinstance(value.const_value, ir.ExternalTensor) and value.const_value.base_dir), Path.cwd())
    check_model(proto, folder)
    proto.graph.initializer.extend(headers)
    validate.check_graph_structure(proto)


def _check_input_dims(name: str, dims: list) -> None:
    # onnxruntime takes a negative dim for a dynamic one, while the shape facts would take it as a
    # size (Shape folding to [3, -1], Size to -3): refused, for every way a model comes in.
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise BadInputError(f"graph input '{one_line(name)}': negative dim in {dims}")
