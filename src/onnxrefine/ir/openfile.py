"""A model or data file opened once for reading and checked through that descriptor (the loader
parses the model from it, the load checks read external tensors' ranges from it)."""

from __future__ import annotations

import mmap
import os
import stat

from onnxrefine.errors import BadInputError


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


class OpenFile:
    """A file opened once for reading (never a FIFO or device: checked before and after open)."""

    def __init__(self, path: str, label: str):
        self.path = path
        try:
            info = os.stat(path)  # before opening: opening a FIFO could block or wake a writer
        except FileNotFoundError:
            raise BadInputError(f"{label}: no such file") from None
        except OSError as exc:
            raise BadInputError(f"{label}: cannot read ({exc.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise BadInputError(f"{label}: not a regular file")
        try:
            self.fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            raise BadInputError(f"{label}: cannot read ({exc.strerror})") from None
        info = os.fstat(self.fd)
        if not stat.S_ISREG(info.st_mode):  # replaced between the stat and the open
            os.close(self.fd)
            raise BadInputError(f"{label}: not a regular file")
        self.size = info.st_size
        self._shared: mmap.mmap | None = None

    def map(self) -> mmap.mmap:
        return mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)

    def shared_map(self) -> mmap.mmap:
        """One read-only map of the whole file for every tensor in it (made on first use).

        A map per tensor (onnx-ir's way) made every read of a small weight fault in its own
        neighbourhood (fault-around, a large folio: up to 2 MiB) in its own map, counted again
        for each: a 200-layer decoder's 4 KiB weights cost ~2 MiB each, 3.3 GB at 800 layers. In
        one map a page is resident once, so what is mapped stays below the file's size."""
        if self._shared is None or self._shared.closed:
            self._shared = self.map()
        return self._shared

    def read_all(self) -> bytes:
        chunks, remaining = [], self.size
        while remaining > 0:
            chunk = os.pread(self.fd, min(remaining, 1 << 26), self.size - remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def __del__(self):
        fd = getattr(self, "fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
            self.fd = None
