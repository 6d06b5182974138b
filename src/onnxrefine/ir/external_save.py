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
Data offsets are aligned to 4 KiB so onnxruntime can memory-map them (and so copy_file_range can
share extents on file systems that clone). With `link` (`--link-data`) each input data file is
cloned whole (reflink, copy-on-write) as `<location>.link<k>` and its weights are referenced there at
their input offsets; only new weights go to `<location>`. Where cloning is not possible the weights
are copied as usual and `Layout.notes` says so.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import onnx
import onnx_ir as ir

from onnxrefine.atomic import after_publish, publish, publish_mode, temp_beside
from onnxrefine.errors import BadInputError
from onnxrefine.ir import sizes, tensordata, traversal, validate, wire
from onnxrefine.ir.wire import GRAPH_INITIALIZER, LEN, MODEL_GRAPH, TENSOR_RAW_DATA, encode_varint

# onnx's own default for save_as_external_data: smaller tensors stay in the model file.
EXTERNAL_MIN_BYTES = 1024
ALIGNMENT = 4096


@dataclass
class Layout:
    """mode: "same" (as the input), "external" (at `location`) or "embedded"."""

    mode: str = "same"
    location: str | None = None
    link: bool = False  # reflink the input's data files instead of copying their weights (see _link)
    notes: list = field(default_factory=list)  # what saving did instead of what was asked


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
    return sizes.EXTERNAL_DATA_THRESHOLD_BYTES


def _embed_attribute_tensors(model: ir.Model) -> None:
    """Constant nodes whose tensor lives in the input's data file get it embedded: the output's data
    file holds initializers only (such tensors are rare and small)."""
    for graph in (site.graph for site in traversal.graphs(model)):
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
    return bytes([number << 3 | LEN]) + encode_varint(size)


def write(model: ir.Model, model_handle: BinaryIO, data_handle: BinaryIO | None, location: str | None,
          external: dict[str, bool], linked: dict[str, str] | None = None) -> int:
    """Write the model file to `model_handle` and the weights chosen by `external` to `data_handle`
    (referenced as `location`), except those whose input file is in `linked` (real path -> name of
    its link beside the model: referenced there at their input offsets, nothing copied); returns the
    bytes written to the data file."""
    linked = linked or {}
    wire.embed_external_tensors(model, main_graph=False)  # subgraph weights are small: embedded
    _embed_attribute_tensors(model)
    proto, graph_bytes, initializers = wire.serialize_skeleton(model)
    # Plan: each initializer's field (header bytes, then raw data bytes or none) and data offsets.
    plan, offset = [], 0
    for value in initializers:
        tensor = value.const_value
        source = tensordata.external_source(tensor) if linked and external.get(value.name) else None
        if source is not None and os.path.realpath(source[0]) in linked:
            plan.append((value, _external_header(value, linked[os.path.realpath(source[0])], source[1]), 0, None))
        elif external.get(value.name) and data_handle is not None:
            offset += -offset % ALIGNMENT
            plan.append((value, _external_header(value, location, offset), 0, offset))
            offset += tensor.nbytes
        elif tensor.dtype == ir.DataType.STRING or not tensor.nbytes:
            whole = ir.serde.serialize_tensor(tensor)
            whole.name = value.name
            plan.append((value, whole.SerializeToString(), 0, None))
        else:
            header, nbytes = wire.tensor_header(value)
            plan.append((value, header + _field(TENSOR_RAW_DATA, nbytes), nbytes, None))
    sizes = [len(header) + nbytes for _, header, nbytes, _ in plan]
    graph_length = len(graph_bytes) + sum(len(_field(GRAPH_INITIALIZER, s)) + s for s in sizes)
    model_handle.write(proto.SerializeToString())
    model_handle.write(_field(MODEL_GRAPH, graph_length))
    model_handle.write(graph_bytes)
    for (value, header, nbytes, data_offset), size in zip(plan, sizes):
        model_handle.write(_field(GRAPH_INITIALIZER, size))
        model_handle.write(header)
        if nbytes:
            tensordata.write_tensor(value.const_value, model_handle)
        if data_offset is not None:
            data_handle.write(b"\0" * (data_offset - data_handle.tell()))
            tensordata.write_tensor(value.const_value, data_handle)
    return offset


_FICLONE = 0x40049409  # linux/fs.h: clone all of a file's extents into another (btrfs, XFS, ...)


def _link(source: str, folder: Path, name: str) -> str:
    """A temp file in `folder` that is a reflink clone of `source`: a file of its own whose extents
    are shared copy-on-write, so nothing is copied. Raises OSError where the file system cannot
    (ext4, another file system). Hard links are not offered: onnx and onnx-ir refuse to read a data
    file with several links (the input's too, once linked), and a tool that rewrites one in place
    would change both."""
    try:
        import fcntl
    except ImportError:  # Windows
        raise OSError(errno.EOPNOTSUPP, "no ioctl on this platform") from None
    fd, temp = temp_beside(name, folder)
    try:
        with open(source, "rb") as src:
            fcntl.ioctl(fd, _FICLONE, src.fileno())
        return temp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    finally:
        os.close(fd)


def _linkable(model: ir.Model, external: dict[str, bool], input_path) -> list[str]:
    """The input's data files holding external weights of the output (real paths, in order)."""
    files: dict[str, None] = {}
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if external.get(value.name) and is_input_external(tensor, input_path):
            files.setdefault(os.path.realpath(tensordata.external_source(tensor)[0]))
    return list(files)


def save(model: ir.Model, path: Path, *, input_path=None, layout: Layout | None = None) -> int:
    """Write `model` to `path` (+ its data files) through temp files and renames; returns the bytes
    of the files written (model file and data files together)."""
    layout = layout or Layout()
    folder = path.resolve().parent
    external = _external_choice(model, layout, input_path)
    location = layout.location or default_location(path)
    temps: list[str] = []
    try:
        # Linked files first: `<location>.link<k>`; what they hold is not copied.
        linked, renames = {}, []
        for source in (_linkable(model, external, input_path) if layout.link else []):
            name = f"{location}.link{len(linked)}"
            _refuse_overwriting_input(folder / name, path, input_path, references_file)
            try:
                temp = _link(source, folder, name)
            except OSError as exc:
                layout.notes.append(f"no reflink of {os.path.basename(source)} here ({exc.strerror or exc}): "
                                    "its weights were copied")
                continue
            temps.append(temp)
            linked[source] = name
            renames.append((temp, folder / name))
        needs_data = any(ext and not (linked and _in_linked(model, n, linked)) for n, ext in external.items())
        data_path = folder / location if needs_data else None
        stale: list[str] = []
        if data_path is not None:
            _refuse_overwriting_input(data_path, path, input_path, references_file)
            stale = _own_data_read_by(path, folder, location)
            if location in stale:
                # The model being replaced reads `location`: renaming new data over it would
                # leave that model beside foreign data if the run died before the model's own
                # rename. The new data goes under another name; the old file goes after the swap.
                free = next(f"{location}.{i}" for i in range(1, len(stale) + 2) if f"{location}.{i}" not in stale)
                layout.notes.append(f"{location} is read by the model being replaced: weights written to {free}")
                location, data_path = free, folder / free
                _refuse_overwriting_input(data_path, path, input_path, references_file)
        fd, model_tmp = temp_beside(path, folder)
        temps.append(model_tmp)
        with os.fdopen(fd, "wb") as model_handle:
            if data_path is None:
                data_bytes = write(model, model_handle, None, None, external, linked)
            else:
                fd_data, data_tmp = temp_beside(location, folder)
                temps.append(data_tmp)
                renames.append((data_tmp, data_path))
                with os.fdopen(fd_data, "wb") as data_handle:
                    data_bytes = write(model, model_handle, data_handle, location, external, linked)
                    _durable(data_handle)
            _durable(model_handle)
        written = os.stat(model_tmp).st_size + data_bytes
        written += sum(os.stat(temp).st_size for temp, final in renames if final.name in linked.values())
        for name in temps:
            publish_mode(name)
        # Data files first: a model file is only ever visible beside complete data (a staging
        # block keeps this order when it renames them all together).
        for temp, final in renames:
            publish(temp, final)
        publish(model_tmp, path)
        for name in stale:  # the replaced model's own data files, read by nobody now
            after_publish(lambda stale_file=folder / name: os.unlink(stale_file))
        return written
    except BaseException as exc:
        for name in temps:
            with contextlib.suppress(OSError):
                os.unlink(name)
        if isinstance(exc, OSError) and exc.filename is None:  # a write with no name (ENOSPC): say which output
            exc.filename = str(path)
        raise


def _durable(handle) -> None:
    """The bytes are on disk before a rename makes the file visible (after a crash the output is
    the old file or the whole new one, never a new name over missing data); a full disk that
    buffered writes hid shows here."""
    handle.flush()
    os.fsync(handle.fileno())


_READ_LIMIT = 256 << 20  # a model file this large is not parsed: it is assumed to read them all


def _own_data_read_by(path: Path, folder: Path, location: str) -> list[str]:
    """The data files named after this output (`location`, `location.1`, ...) that the model now at
    `path` reads: they must not change under it until it is replaced, and are stale after."""
    names = [location] + [f"{location}.{i}" for i in range(1, 9)]
    present = [name for name in names if (folder / name).exists()]
    if not present or not path.exists():
        return []
    try:
        if os.stat(path).st_size > _READ_LIMIT:
            return present
        proto = onnx.load_model(str(path), load_external_data=False)
        read = {(folder / loc).resolve() for loc in validate.external_locations(proto)}
    except Exception:  # unreadable: it may read any of them
        return present
    return [name for name in present if (folder / name).resolve() in read]


def _in_linked(model: ir.Model, name: str, linked: dict[str, str]) -> bool:
    source = tensordata.external_source(model.graph.initializers[name].const_value)
    return source is not None and os.path.realpath(source[0]) in linked


def _refuse_overwriting_input(target: Path, path: Path, input_path, references) -> None:
    if target.resolve() == path.resolve() or (input_path is not None and target.exists() and (
            os.path.samefile(target, input_path) or references(input_path, target))):
        raise BadInputError(f"{target}: would overwrite the input model or its external data; "
                            "choose another output path or --external-data name")


def references_file(input_path, data_file: Path) -> bool:
    """Whether the model at `input_path` keeps external data in `data_file` (so writing there would
    overwrite the input)."""
    try:
        proto = onnx.load_model(str(input_path), load_external_data=False)
    except Exception:
        return False
    base = Path(input_path).resolve().parent
    return any((base / loc).resolve() == data_file.resolve() for loc in validate.external_locations(proto))
