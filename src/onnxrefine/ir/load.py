"""Loading a model file so that every byte of it is read from the file that was checked.

- The path is resolved once (`os.path.realpath`): a symlinked model is the file it points to, and
  its external data is looked up in THAT file's folder (the "real folder"), which is also the
  folder nothing may be read outside of. Re-opening a path built from the link's name and the
  target's folder (the old lazy loader) read a decoy's weights.
- The model file is opened once; it is parsed from that descriptor and its large weights are
  memory-mapped from it. Each external-data file is opened once, checked (a regular file, inside
  the real folder, long enough) through its descriptor, and its tensors are memory-mapped from
  it (`PinnedExternalTensor`): a file renamed or replaced after the checks is not read.
- Every defect found on the way (protobuf, UTF-8, data lengths, dims, names written twice,
  onnx-ir's own errors) is a one-line BadInputError (load_checks.py says which).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.errors import BadInputError
from onnxrefine.ir import load_checks, sizes, traversal, wire
from onnxrefine.ir.openfile import OpenFile


class PinnedExternalTensor(ir.ExternalTensor):
    """An external tensor read from a file opened (and checked) at load time, not from its path.

    `path`, `location` and `base_dir` stay what they were (the real folder and the location), so
    code that hard-links or names the data file still works; only reading goes through `source`.
    onnx-ir's own path checks are not repeated: they would resolve the path again (and refuse a
    model file with a second hard link, as made while verifying)."""

    def __init__(self, tensor: ir.ExternalTensor, source: OpenFile):
        super().__init__(tensor.location, tensor.offset, tensor.length, tensor.dtype,
                         shape=tensor.shape, name=tensor.name, doc_string=tensor.doc_string,
                         metadata_props=tensor.metadata_props, base_dir=tensor.base_dir)
        self.source = source

    def _load(self):
        self._check_validity()
        if self.size == 0:
            self._array = np.empty(self.shape.numpy(), dtype=self.dtype.numpy())
            return
        self.raw = self.source.shared_map()
        bits = self.dtype.bitwidth
        if bits < 8:
            dt, count = np.dtype(np.uint8), self.nbytes
        else:
            dt, count = np.dtype(self.dtype.numpy()).newbyteorder("<"), self.size
        array = np.frombuffer(self.raw, dtype=dt, offset=self.offset or 0, count=count)
        shape = self.shape.numpy()
        if bits < 8:  # packed sub-byte types, unpacked as onnx-ir's own ExternalTensor does
            from onnx_ir import _type_casting

            unpack = {4: _type_casting.unpack_4bitx2, 2: _type_casting.unpack_2bitx4,
                      6: _type_casting.unpack_6bit}[bits]
            array = unpack(array, shape).view(self.dtype.numpy())
        else:
            array = array.reshape(shape)
        self._array = array

    def release(self) -> None:
        """Forget the array and let go of this tensor's pages. The map is shared with the file's
        other tensors, so it is not closed (onnx-ir's release closes it): its pages for this
        tensor are dropped instead (tensordata.drop_pages), and read again if needed."""
        from onnxrefine.ir import tensordata

        if self.raw is not None:
            tensordata.drop_pages([self])
        self._array = None
        self.raw = None

    def __del__(self):
        # A tensor a rewrite replaced: its own map used to close with it, taking its pages out of
        # this process's memory; the shared map stays, so its pages are dropped here (bert-base
        # through the CLI: +33 MB without this, the weights fuse_qkv read and replaced).
        if getattr(self, "raw", None) is not None:
            try:
                self.release()
            except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter shutdown)
                pass


def resolve(path: str | os.PathLike) -> str:
    """The model's real path (links followed), or BadInputError for a missing/special file."""
    given = os.fspath(path)
    if "\0" in given:
        raise BadInputError("model path contains a NUL byte")
    if not os.path.lexists(given):
        raise BadInputError(f"{given}: no such file")
    real = os.path.realpath(given)
    if not os.path.exists(real):
        raise BadInputError(f"{given}: no such file (a link to {real}, which does not exist)")
    return real


def read_proto(path: str | os.PathLike) -> tuple[onnx.ModelProto, OpenFile, str]:
    """Parse the model at `path` from one open descriptor: (proto, the open file, real path).
    Large files are parsed lazily: big initializers become references into the file itself."""
    given = os.fspath(path)
    real = resolve(given)
    opened = OpenFile(real, given)
    if opened.size == 0:
        raise BadInputError(f"{given}: empty file, not an ONNX model")
    try:
        if opened.size >= sizes.LAZY_LOAD_THRESHOLD_BYTES:
            proto = _lazy_proto(opened, os.path.basename(real))
        else:
            proto = onnx.ModelProto.FromString(opened.read_all())
    except Exception as exc:  # DecodeError, wire errors, RuntimeError from protobuf's C layer
        raise BadInputError(f"{given}: not a readable ONNX model ({load_checks.first_line(exc)})") from None
    if not proto.HasField("graph"):
        raise BadInputError(f"{given}: not an ONNX model (no graph)")
    return proto, opened, real


def _lazy_proto(opened: OpenFile, location: str) -> onnx.ModelProto:
    """wire.lazy_model_proto over the already open file (not a path opened again)."""
    with opened.map() as buffer:
        return wire.lazy_proto_from_buffer(buffer, opened.size, location, wire.LAZY_THRESHOLD_BYTES)


def load_checked_proto(path: str | os.PathLike) -> tuple[onnx.ModelProto, str, dict[str, OpenFile]]:
    """(proto, real folder, open data files by location): the model parsed and every check of
    load_checks.py passed; external tensors (also the lazily parsed ones) still external."""
    proto, opened, real = read_proto(path)
    folder = os.path.dirname(real)
    files = load_checks.check_model(proto, Path(folder), own_file=(os.path.basename(real), opened),
                                    label=os.fspath(path))
    return proto, folder, files


def pin_external_tensors(model: ir.Model, files: dict[str, OpenFile]) -> None:
    """Make every external tensor read from the file opened at load time."""

    def pinned(tensor):
        if isinstance(tensor, ir.ExternalTensor) and not isinstance(tensor, PinnedExternalTensor):
            source = files.get(os.path.normpath(os.fspath(tensor.location)))
            if source is None:  # every location was checked and opened: this is a bug
                raise BadInputError(f"tensor '{tensor.name}': external data '{tensor.location}' was not checked")
            return PinnedExternalTensor(tensor, source)
        return tensor

    for graph in (site.graph for site in traversal.graphs(model)):
        for value in graph.initializers.values():
            value.const_value = pinned(value.const_value)
        for node in graph:
            _pin_attributes(node, pinned)
    for function in model.functions.values():
        for node in function:
            _pin_attributes(node, pinned)


def _pin_attributes(node: ir.Node, pinned) -> None:
    for name, attr in list(node.attributes.items()):
        if attr.type == ir.AttributeType.TENSOR and isinstance(attr.value, ir.ExternalTensor):
            node.attributes[name] = ir.AttrTensor(name, pinned(attr.value))
        elif attr.type == ir.AttributeType.TENSORS and any(isinstance(t, ir.ExternalTensor) for t in attr.value):
            node.attributes[name] = ir.AttrTensors(name, [pinned(t) for t in attr.value])


def load_full_proto(path: str | os.PathLike) -> onnx.ModelProto:
    """The whole model as a ModelProto, every tensor embedded, read from the files the checks
    opened (for small models held in memory whole: fuzz bundles, reduction)."""
    proto, _, files = load_checked_proto(path)
    validate_structure(proto)
    for tensor, _where in load_checks.tensors_with_places(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {e.key: e.value for e in tensor.external_data}
        source = files[os.path.normpath(entries["location"])]
        offset = int(entries.get("offset") or 0)
        _, nbytes = load_checks.expected_bytes(tensor, tensor.name)
        tensor.raw_data = os.pread(source.fd, nbytes, offset)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return proto


def validate_structure(proto: onnx.ModelProto) -> None:
    from onnxrefine.ir import validate

    validate.check_graph_structure(proto)
