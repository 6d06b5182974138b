"""An onnxruntime session in a child process that the parent watches (resources.py).

The parent (`WatchedSession`) starts `python -m onnxrefine.verify.ort.child`, sends it the
session's source (a model path, or a small model's bytes) and the run settings, then run requests
(output names, feeds); messages are length-prefixed pickles over the child's stdin/stdout. While it
waits, the parent polls the child's resident set size and the wall clock: past the memory cap (the
child's RSS when the request was sent, plus the memory budget) or the time limit, the child is
killed and `ResourceLimitError` says which limit stopped it. A child that dies by itself (the
kernel's OOM killer, a crash in a kernel) is a `RunFailedError`. Either way this process goes on.

One child serves every watched session of this process (started on first need, stopped at exit
or when a limit stops it): start-up (a Python importing onnxruntime) is paid once per run. A
session that lives only for a few runs (`scoped`: a shape observation's cut) has a child of its
own instead, a fork of this process that needs no imports and ends with the session (`_Forked`). Feeds
and results cross the pipe as pickles. bench/budget_cost.py measures both; the runner uses the
child only where the estimate is uncertain or close to the budget.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time

_HEADER = struct.Struct("<Q")
POLL_S = 0.02


def _write(stream, message) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read_exact(stream, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- the child ---------------------------------------------------------------------------------

def _serve(stdin=None, stdout=None) -> None:
    """Serve requests from `stdin` (this process's standard input by default) on `stdout`."""
    import numpy as np

    from onnxrefine.verify.ort.errors import describe
    from onnxrefine.verify.ort.settings import RunSettings, session_options

    import onnxruntime  # noqa: F401  (imported before "ready": start-up is not a run's time)

    if stdin is None:
        stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
        sys.stdout = sys.stderr  # nothing but messages on the pipe
    sessions: dict[int, object] = {}
    _write(stdout, ("ok", "ready"))
    while True:
        try:
            header = _read_exact(stdin, _HEADER.size)
        except EOFError:
            return
        request = pickle.loads(_read_exact(stdin, _HEADER.unpack(header)[0]))
        kind, key = request[0], request[1]
        if kind == "load":
            import onnxruntime as ort

            _, _, source, settings, library, role, mapped = request
            settings = RunSettings(**{**settings, "providers": tuple(settings["providers"])})
            try:
                sessions[key] = open_session(ort, source, mapped, session_options(settings, library), settings.providers)
                _write(stdout, ("ok", None))
            except Exception as exc:
                _write(stdout, ("error", describe(exc, "load", role)))
        elif kind == "run":
            _, _, names, feeds, role = request
            try:
                results = sessions[key].run(names, feeds)
                _write(stdout, ("ok", [np.asarray(value) for value in results]))
            except Exception as exc:
                _write(stdout, ("error", describe(exc, "run", role)))
        elif kind == "close":
            sessions.pop(key, None)
            _write(stdout, ("ok", None))


# onnxruntime's session option naming the folder external data resolves against when the model
# is given as bytes (ModelFile.mapped_source).
EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def open_session(ort, source, mapped, options, providers):
    """An onnxruntime session over a model file's `source` (path or bytes), or over `mapped`
    (ModelFile.mapped_source: its weights mapped from the file, not copied) where that loads;
    where it does not (an onnxruntime without the option, a model that does not load at all),
    the source's own load says what is wrong, if anything. Here, not in runner.py: the child
    (which imports nothing of the package but this module's neighbours) opens sessions too."""
    if mapped is not None:
        data, folder = mapped
        options.add_session_config_entry(EXTERNAL_FOLDER_KEY, folder)
        try:
            return ort.InferenceSession(data, sess_options=options, providers=list(providers))
        except Exception:  # noqa: BLE001 - the source's own load says what is wrong, if anything
            pass
    return ort.InferenceSession(source, sess_options=options, providers=list(providers))


# -- the parent --------------------------------------------------------------------------------

class ChildFailed(Exception):
    """The child reported an error (its one-line description is the message)."""


class _Worker:
    """The child process; one at a time, shared by every watched session of this process (one
    start-up per run, not per session). A limit that stops it ends every session it holds.
    `forked`: a fork of this process (_Forked) instead of a new interpreter."""

    def __init__(self, forked: bool = False):
        self.process = _Forked() if forked else subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
            env=_child_environment())
        self.next_key = 0
        try:  # start-up (imports) is waited for here, outside any run's time limit
            self._reply("child process", "starting", None, STARTUP_LIMIT_S)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def call(self, request, role: str, doing: str, memory_budget: int, time_limit_s: float):
        if not self.alive():
            raise RuntimeError(self._death(role, doing))
        cap = max(_rss(self.process.pid), _LOAD_BASE) + memory_budget
        try:
            _write(self.process.stdin, request)
        except (BrokenPipeError, OSError):
            raise RuntimeError(self._death(role, doing)) from None
        return self._reply(role, doing, (cap, memory_budget), time_limit_s)

    def _reply(self, role: str, doing: str, memory, time_limit_s: float):
        """The child's answer, polling its RSS (`memory`: (cap, budget), or None) and the clock."""
        from onnxrefine.resources import ResourceLimitError, format_bytes

        started = time.monotonic()
        stream = self.process.stdout
        while True:
            ready, _, _ = select.select([stream.fileno()], [], [], POLL_S)
            if ready:
                break
            rss = _rss(self.process.pid)
            if memory is not None and rss > memory[0]:
                self.stop()
                raise ResourceLimitError(
                    f"{role}: onnxruntime stopped while {doing}: it used {format_bytes(rss)}, over the "
                    f"memory budget of {format_bytes(memory[1])} (--memory-budget)")
            if time.monotonic() - started > time_limit_s:
                self.stop()
                raise ResourceLimitError(f"{role}: onnxruntime stopped while {doing}: over the time limit "
                                         f"of {time_limit_s:.3g} s")
            if self.process.poll() is not None:
                break
        try:
            header = _read_exact(stream, _HEADER.size)
            reply = pickle.loads(_read_exact(stream, _HEADER.unpack(header)[0]))
        except (EOFError, OSError, pickle.UnpicklingError):
            raise RuntimeError(self._death(role, doing)) from None
        if reply[0] == "error":
            raise ChildFailed(reply[1])
        return reply[1]

    def _death(self, role: str, doing: str) -> str:
        code = self.process.wait() if self.process is not None else None
        self.stop()
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        return f"{role}: onnxruntime's process died while {doing} ({how})"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            from onnxrefine import portable

            portable.kill_group(process)
            if isinstance(process, _Forked):
                process.kill()  # also before it made its own group
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _Forked:
    """The child as a fork of this process, with the Popen methods _Worker uses. onnxruntime and
    numpy are already loaded here, so the child starts in milliseconds (a new interpreter's imports
    cost about 0.1 s of CPU). For a session that lives only briefly (`WatchedSession(scoped=True)`:
    a shape observation's few runs): while the child lives, this process's first write to each page
    they share copies it, and the parent here mostly waits for the child. The child keeps no
    descriptor of the parent's but its two pipes (no pipe of the parent's stays open through it)
    and runs no garbage collection (contained.detach_child)."""

    def __init__(self):
        from onnxrefine.ir import contained

        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        self.returncode = None
        self.pid, mask = contained.fork_holding_signals()
        if self.pid == 0:
            def serve() -> None:
                _keep_only(requests_read, replies_write)  # as descriptors 3 and 4
                contained.detach_child(mask)
                os.setsid()  # its own group, as a started child has: stop() kills the group
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _die_with_parent()
                _serve(os.fdopen(3, "rb"), os.fdopen(4, "wb"))

            contained.end_child_after(serve)
        os.close(requests_read)
        os.close(replies_write)
        self.stdin, self.stdout = os.fdopen(requests_write, "wb"), os.fdopen(replies_read, "rb")

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            try:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _keep_only(reads: int, writes: int) -> None:
    """In a forked child: `reads` and `writes` become descriptors 3 and 4, and every other one above
    the standard three is closed (none of the parent's pipes stays open through the child)."""
    import fcntl

    reads, writes = fcntl.fcntl(reads, fcntl.F_DUPFD, 10), fcntl.fcntl(writes, fcntl.F_DUPFD, 10)
    os.dup2(reads, 3)
    os.dup2(writes, 4)
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every possible descriptor
        os.closerange(5, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
        return
    for fd in open_fds:
        if fd > 4:
            with contextlib.suppress(OSError):
                os.close(fd)


def _child_environment() -> dict:
    """The child's environment: this process's, with OpenBLAS on one thread. The child's numpy only
    holds arrays, and a BLAS pool's threads spin at load (0.1 s of CPU on every start)."""
    return dict(os.environ, OPENBLAS_NUM_THREADS="1")


_WORKER: _Worker | None = None


def _worker() -> _Worker:
    global _WORKER
    if _WORKER is None or not _WORKER.alive():
        _WORKER = _Worker()
    return _WORKER


@atexit.register
def _stop_worker() -> None:
    if _WORKER is not None:
        _WORKER.stop()


class WatchedSession:
    """A session in the child process; `run(names, feeds)` returns the output arrays. Raises
    ChildFailed (the session's own error), resources.ResourceLimitError (a limit stopped the child)
    or RuntimeError (the child died)."""

    def __init__(self, source, settings, custom_op_library, role: str, memory_budget: int,
                 time_limit_s: float, scoped: bool = False, mapped=None):
        from onnxrefine.ir import contained

        self.role = role
        self.memory_budget = memory_budget
        self.time_limit_s = time_limit_s
        # scoped: a child of its own, forked, ended by close() (see _Forked)
        self.own = scoped and contained.can_fork()
        self.worker = _Worker(forked=True) if self.own else _worker()
        self.key = self.worker.next_key
        self.worker.next_key += 1
        self._call(("load", self.key, source, settings.to_dict(), custom_op_library, role, mapped), "loading")

    def run(self, names, feeds):
        return self._call(("run", self.key, list(names), dict(feeds), self.role), "running")

    def _call(self, request, doing: str):
        if self.worker is None:
            raise RuntimeError(f"{self.role}: the onnxruntime child process is gone")
        return self.worker.call(request, self.role, doing, self.memory_budget, self.time_limit_s)

    def close(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None and self.own:
            worker.stop()
            return
        if worker is not None and worker.alive():
            try:
                worker.call(("close", self.key), self.role, "closing", self.memory_budget, self.time_limit_s)
            except Exception:  # a worker that fails to close a session is stopped instead
                worker.stop()


# A child's resident size before any session exists (Python, numpy, onnxruntime: ~90 MiB here);
# the cap never starts below it plus the budget.
_LOAD_BASE = 128 << 20
# The child's imports (numpy, onnxruntime): 0.3-2.3 s here depending on load.
STARTUP_LIMIT_S = 120.0


def _rss(pid: int) -> int:
    """0 where memory cannot be measured (no /proc, psutil or ps): the wall-clock limit still holds,
    and the memory budget is then only what the estimate before the run enforces."""
    from onnxrefine import portable

    return portable.process_rss(pid) or 0


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when its parent dies (a killed onnxrefine leaves no orphan
    running a model)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError, TypeError):  # not Linux: no prctl (Windows: no CDLL(None))
        pass


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it, not us
    _die_with_parent()
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(1)
    _serve()


# The child's start: this very package's child, settings and errors modules (a worktree, an
# editable install: found from the verify folder given as argv[1]) without running the package
# __init__ files, which import what a session server never uses (onnx, onnx_ir, the verifier):
# 0.46 -> 0.21 s of CPU a start, numpy and onnxruntime left.
_BOOTSTRAP = """
import os, sys, types
verify = sys.argv[1]
for name, folder in (("onnxrefine", os.path.dirname(verify)), ("onnxrefine.verify", verify),
                     ("onnxrefine.verify.ort", os.path.join(verify, "ort"))):
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package
from onnxrefine.verify.ort.child import main
main()
"""


if __name__ == "__main__":
    main()
