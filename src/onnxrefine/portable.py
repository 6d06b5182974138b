"""Operating-system services the package uses, feature-detected, each with a fallback.

Linux offers all of them; macOS lacks /proc, Windows lacks `os.pread`/`os.pwrite`, `resource` and
`fcntl`. Every function here says which way it took by what it returns, never by raising where
the service is missing:

- `pread`/`pwrite`: positioned reads and writes (`os.pread`; else seek-and-read under a lock per
  process, since the seek moves a position every user of the descriptor shares);
- `process_rss`/`tree_rss`: resident memory of a process (and of its descendants), from /proc,
  else psutil where it is installed (not a dependency: nothing else needs it), else `ps` (POSIX:
  macOS, the BSDs); None where none answers, so a caller can say a limit cannot be watched
  instead of watching a constant zero;
- `rlimit_headroom`: the address-space limit's headroom where `resource` exists;
- `kill_group`: a child started with start_new_session and everything it started (a process
  group; without os.killpg, Windows, the child alone).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading

_SEEK_LOCK = threading.Lock()


def pread(fd: int, length: int, offset: int) -> bytes:
    call = getattr(os, "pread", None)
    if call is not None:
        return call(fd, length, offset)
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, length)


def pwrite(fd: int, data: bytes, offset: int) -> int:
    call = getattr(os, "pwrite", None)
    if call is not None:
        return call(fd, data, offset)
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 4096


def _proc_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * _page_size()
    except (OSError, ValueError, IndexError):
        return None


def psutil_module():
    """psutil where it is installed (an optional extra, never a dependency), else None."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil


def _ps_table() -> dict[int, tuple[int, int]] | None:
    """{pid: (parent pid, resident bytes)} of every process, from `ps` (POSIX), or None."""
    ps = shutil.which("ps")
    if ps is None:
        return None
    try:
        text = subprocess.run([ps, "-A", "-o", "pid=,ppid=,rss="], capture_output=True, text=True,
                              timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    table = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and all(field.isdigit() for field in fields):
            table[int(fields[0])] = (int(fields[1]), int(fields[2]) * 1024)  # ps: KiB
    return table


def has_proc() -> bool:
    return os.path.isfile(f"/proc/{os.getpid()}/statm")


def process_rss(pid: int) -> int | None:
    """Resident bytes of `pid`; None when it cannot be measured here (or the process is gone)."""
    if has_proc():
        return _proc_rss(pid)
    psutil = psutil_module()
    if psutil is not None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except (psutil.Error, OSError):
            return None
    table = _ps_table()
    return table[pid][1] if table and pid in table else None


def _proc_children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except (OSError, ValueError):
        return []


def tree_rss(pid: int) -> int | None:
    """Resident bytes of `pid` and its descendants (a verification may start helpers); None when
    memory cannot be measured here."""
    if has_proc():
        total, todo = 0, [pid]
        while todo:
            current = todo.pop()
            total += _proc_rss(current) or 0
            todo.extend(_proc_children(current))
        return total
    psutil = psutil_module()
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            return sum(int(p.memory_info().rss) for p in [root, *root.children(recursive=True)])
        except (psutil.Error, OSError):
            return None
    table = _ps_table()
    if not table or pid not in table:
        return None
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += table[current][1]
        todo.extend(child for child, (parent, _) in table.items() if parent == current)
    return total


def can_measure_memory() -> bool:
    return process_rss(os.getpid()) is not None


def virtual_size() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * _page_size()
    except (OSError, ValueError, IndexError):
        return 0


def rlimit_headroom() -> list[int]:
    """Bytes left under each address-space rlimit that is set (no `resource` module: none)."""
    try:
        import resource
    except ImportError:
        return []
    found = []
    for which in (getattr(resource, "RLIMIT_AS", None), getattr(resource, "RLIMIT_DATA", None)):
        if which is None:
            continue
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            found.append(max(0, soft - virtual_size()))
    return found


def kill_group(process: subprocess.Popen) -> None:
    killpg = getattr(os, "killpg", None)
    try:
        if killpg is not None:
            killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except ProcessLookupError:
        pass
    except OSError:
        process.kill()


# The thread-count setters of the OpenBLAS builds numpy ships with (numpy 2's scipy-openblas with
# 64-bit integers, the plain one), tried in this order; each getter is its setter's name with "get".
_OPENBLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                     "openblas_set_num_threads64_", "openblas_set_num_threads")


def _openblas_threads():
    """(get, set) of the thread count of the OpenBLAS that numpy loaded, or None where there is
    none to find (another BLAS, no /proc) or the user's OPENBLAS_NUM_THREADS says how many.
    Found from the library file already mapped into this process (numpy loads it privately)."""
    if "OPENBLAS_NUM_THREADS" in os.environ or not has_proc():
        return None
    try:
        import ctypes

        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
        for path in sorted(paths):
            library = ctypes.CDLL(path)
            for name in _OPENBLAS_SETTERS:
                setter = getattr(library, name, None)
                getter = getattr(library, name.replace("_set_", "_get_"), None)
                if setter is not None and getter is not None:
                    return getter, setter
    except (OSError, AttributeError, ValueError):
        pass
    return None


def single_threaded_blas() -> bool:
    """Make the OpenBLAS that numpy loaded use one thread, unless the user's OPENBLAS_NUM_THREADS
    says otherwise; False where there is none to find (another BLAS, no /proc). The command line's
    float64 work is many small products (a reference's per-layer matmuls and im2col convolutions),
    where OpenBLAS's threads hand off and spin for more CPU than they save: the float64 convolutions
    of mobilenet_v3_small took 3.0 s of CPU with its default threads, 0.44 s with one (loaded machine)."""
    threads = _openblas_threads()
    if threads is None:
        return False
    threads[1](1)
    return True


@contextlib.contextmanager
def one_blas_thread():
    """single_threaded_blas for the duration of a block, the thread count found before restored
    after: what the command line sets for the whole process, for a library caller's verification
    (its float64 reference on the default threads: densenet121's 11.4 s against 1.2 s on one, a
    loaded 2-core machine)."""
    threads = _openblas_threads()
    if threads is None:
        yield
        return
    get, set_threads = threads
    before = get()
    set_threads(1)
    try:
        yield
    finally:
        set_threads(before)
