"""A tensor's bytes without loading it: fingerprints, streamed comparison, file-to-file copies.

Weights memory-mapped from a file (onnx-ir's ExternalTensor, also the lazily parsed initializers of a
large embedded model, see wire.py) count in the process's resident memory as soon as they are read
through the mapping, and stay counted while it lives. Everything here reads such tensors with
`os.pread` into small buffers instead (the page cache holds the pages, not this process), and copies
them to an output file inside the kernel (`copy_file_range`, else `sendfile`), never through Python
objects.

The bytes meant are the tensor's serialized raw_data: little-endian, sub-byte types packed, which is
exactly what an external-data file holds at the tensor's offset.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import weakref
from collections.abc import Iterator
from typing import BinaryIO

import onnx_ir as ir

from onnxrefine import portable

CHUNK_BYTES = 1 << 20
# Tensors up to this size are fingerprinted by all their bytes; larger ones by SAMPLES windows.
SMALL_BYTES = 64 * 1024
SAMPLES = 32
SAMPLE_BYTES = 256
_NEIGHBOURHOOD = 2 << 20  # a PMD: the largest page-cache folio a fault maps at once (x86-64, arm64 4K)


def external_source(tensor) -> tuple[str, int] | None:
    """(file path, offset) of a tensor whose serialized bytes lie in a file, else None."""
    if not isinstance(tensor, ir.ExternalTensor) or tensor.dtype == ir.DataType.STRING:
        return None
    length = tensor.length
    if length is not None and length != tensor.nbytes:
        return None  # a padded or malformed record: let onnx-ir interpret it
    return os.fspath(tensor.path), int(tensor.offset or 0)


def _memory_bytes(tensor):
    """The serialized bytes of an in-memory tensor, as a zero-copy view where the layout allows."""
    if tensor.dtype.bitwidth >= 8 and tensor.nbytes > SMALL_BYTES:
        try:
            array = tensor.numpy()
            if array.dtype.byteorder != ">" and array.flags.c_contiguous:
                view = memoryview(array).cast("B")
                if len(view) == tensor.nbytes:
                    return view
        except (TypeError, ValueError, AttributeError):  # ml_dtypes and the like: no buffer protocol
            pass
    return tensor.tobytes()


def sample_ranges(nbytes: int) -> list[tuple[int, int]]:
    """(offset, length) windows a fingerprint reads: all of a small tensor, else SAMPLES windows
    spread evenly from the first byte to the last."""
    if nbytes <= SMALL_BYTES:
        return [(0, nbytes)]
    step = (nbytes - SAMPLE_BYTES) / (SAMPLES - 1)
    return [(int(round(i * step)), SAMPLE_BYTES) for i in range(SAMPLES)]


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    data = portable.pread(fd, length, offset)
    while len(data) < length:
        more = portable.pread(fd, length - len(data), offset + len(data))
        if not more:
            raise OSError(errno.EIO, f"external data ends {length - len(data)} bytes early")
        data += more
    return data


# id(tensor) -> (weak reference to it, its fingerprint): the duplicate-initializer pass asks again in
# every round of the schedule for weights no rewrite touched. A tensor's bytes do not change (a
# rewrite makes a new tensor), and the entry leaves with the tensor.
_FINGERPRINTS: dict[int, tuple[weakref.ref, tuple]] = {}


def fingerprint(tensor) -> tuple:
    """(dtype, shape, nbytes, digest of sampled bytes): equal tensors have equal fingerprints; tensors
    with equal fingerprints may still differ (compare them with `same_bytes`)."""
    key = id(tensor)
    hit = _FINGERPRINTS.get(key)
    if hit is not None and hit[0]() is tensor and hit[1][:3] == (tensor.dtype, tuple(tensor.shape), tensor.nbytes):
        return hit[1]
    found = _fingerprint(tensor)
    try:
        _FINGERPRINTS[key] = (weakref.ref(tensor, lambda _, key=key: _FINGERPRINTS.pop(key, None)), found)
    except TypeError:  # a tensor type without weak references: not kept
        pass
    return found


def _fingerprint(tensor) -> tuple:
    nbytes = tensor.nbytes
    digest = hashlib.blake2b(digest_size=16)
    source = external_source(tensor)
    if source is not None:
        path, base = source
        fd = os.open(path, os.O_RDONLY)
        try:
            for offset, length in sample_ranges(nbytes):
                digest.update(_pread_exact(fd, length, base + offset))
        finally:
            os.close(fd)
    else:
        data = _memory_bytes(tensor)
        for offset, length in sample_ranges(nbytes):
            digest.update(data[offset:offset + length])
    return tensor.dtype, tuple(tensor.shape), nbytes, digest.digest()


def chunks(tensor, size: int = CHUNK_BYTES) -> Iterator[bytes | memoryview]:
    """The tensor's serialized bytes in pieces of at most `size` bytes (a file-backed tensor is read
    with pread, one piece at a time)."""
    nbytes = tensor.nbytes
    source = external_source(tensor)
    if source is None:
        data = _memory_bytes(tensor)
        for start in range(0, nbytes, size):
            yield data[start:start + size]
        return
    path, base = source
    fd = os.open(path, os.O_RDONLY)
    try:
        for start in range(0, nbytes, size):
            yield _pread_exact(fd, min(size, nbytes - start), base + start)
    finally:
        os.close(fd)


def same_bytes(a, b) -> bool:
    """Whether two tensors serialize to the same bytes (streamed: never both whole in memory)."""
    if a.nbytes != b.nbytes or a.dtype != b.dtype:
        return False
    left, right = chunks(a), chunks(b)
    try:
        return all(bytes(x) == bytes(y) for x, y in zip(left, right))
    finally:
        left.close()
        right.close()


def copy_range(source_fd: int, dest: BinaryIO, offset: int, length: int) -> None:
    """Append `length` bytes of `source_fd` from `offset` to `dest`, inside the kernel where it can:
    copy_file_range (which also clones extents on file systems that share them), then sendfile,
    then bounded pread/write."""
    dest.flush()
    dest_fd = dest.fileno()
    position = dest.tell()
    done = 0
    for method in ("copy_file_range", "sendfile"):
        call = getattr(os, method, None)
        if call is None:
            continue
        try:
            while done < length:
                count = min(1 << 30, length - done)
                if method == "copy_file_range":
                    moved = call(source_fd, dest_fd, count, offset + done, position + done)
                else:
                    os.lseek(dest_fd, position + done, os.SEEK_SET)
                    moved = call(dest_fd, source_fd, offset + done, count)
                if moved == 0:
                    raise OSError(errno.EIO, f"external data ends {length - done} bytes early")
                done += moved
            break
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM, errno.EXDEV):
                raise
    while done < length:  # no kernel copy on this platform or between these files
        piece = _pread_exact(source_fd, min(CHUNK_BYTES, length - done), offset + done)
        portable.pwrite(dest_fd, piece, position + done)
        done += len(piece)
    dest.seek(position + length)


def write_tensor(tensor, dest: BinaryIO) -> None:
    """Append the tensor's serialized bytes to `dest`: file to file for a file-backed tensor."""
    source = external_source(tensor)
    if source is None:
        data = _memory_bytes(tensor)
        if len(data) != tensor.nbytes:
            raise ValueError(f"tensor {tensor.name}: {len(data)} data bytes, expected {tensor.nbytes}")
        dest.write(data)
        return
    path, offset = source
    fd = os.open(path, os.O_RDONLY)
    try:
        copy_range(fd, dest, offset, tensor.nbytes)
    finally:
        os.close(fd)



def drop_pages(tensors) -> None:
    """Let go of the pages of file-backed tensors that were read through their memory map.

    onnx-ir maps the whole data file per tensor and keeps the mapping; every page read stays in
    this process's resident set until the mapping closes, so certifying 48 layers of a 3 GiB model
    would end at 3 GiB of RSS. MADV_DONTNEED on a read-only shared file mapping only unmaps the
    pages (arrays viewing them stay valid: a later read faults them in again from the page cache)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:
        return
    for tensor in tensors:
        raw = getattr(tensor, "raw", None) if isinstance(tensor, ir.ExternalTensor) else None
        if raw is None or raw.closed:
            continue
        # Beyond the tensor's bytes to the enclosing 2 MiB blocks: a fault maps neighbouring pages
        # too (fault-around, a large folio of at most a PMD). The map is shared by the file's
        # tensors (ir/load.py): a neighbour's pages dropped here fault in again when next read.
        # (The whole map would cost a page-table walk of the whole file.)
        start = int(tensor.offset or 0)
        start -= start % _NEIGHBOURHOOD
        end = min(len(raw), start + tensor.nbytes + 2 * _NEIGHBOURHOOD)
        with contextlib.suppress(OSError, ValueError):
            raw.madvise(advice, start, end - start)
