"""Giving freed heap memory back to the operating system (glibc's malloc_trim), where it exists.

glibc serves an allocation of at least its mmap threshold with its own mapping, returned to the
system on free, but raises that threshold to the size of every such block freed (up to 32 MiB).
After the first folded weight, the optimizer's float64 temporaries and the weights it keeps are
therefore carved from the same heap; freeing the temporaries leaves holes below live weights that
stay resident. Measured on resnet50 through `onnxrefine.optimize(proto)` (bench/corpus_speed.py):
56 MiB of such holes at the end, the peak 334 MiB against 278 MiB live. `malloc_trim(0)` hands
the free pages of those holes back (madvise). Cost, measured through the API under load: resnet50
57 calls, 14 ms in all; bert-base 97 calls, 104 ms (under 2% of the run; most of it the kernel
freeing the pages). The threshold itself is left alone (mallopt would fix it for the whole
process, and the process may be someone else's: the API's caller).
"""

from __future__ import annotations

import ctypes
import sys

_trim = None
_looked_up = False


def _malloc_trim():
    global _trim, _looked_up
    if not _looked_up:
        _looked_up = True
        if sys.platform.startswith("linux"):
            try:
                # The C library the process already has, by its symbols: find_library("c") would
                # run `ldconfig -p` in a child process (a fork of the whole process) to name it.
                _trim = ctypes.CDLL(None).malloc_trim  # glibc only: musl has none, and then nothing is done
                _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
            except (OSError, AttributeError):
                _trim = None
    return _trim


def release_freed() -> bool:
    """Return the heap's free pages to the system; whether the C library could do it."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


# Callers release after freeing at least this much at once (smaller frees are reused soon enough).
RELEASE_AFTER_BYTES = 1 << 20
