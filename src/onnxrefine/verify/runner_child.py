"""An onnxruntime session in a child process that the parent watches (resources.py).

The parent (`WatchedSession`) starts `python -m onnxrefine.verify.runner_child`, sends it the
session's source (a model path, or a small model's bytes) and the run settings, then run requests
(output names, feeds); messages are length-prefixed pickles over the child's stdin/stdout. While it
waits, the parent polls the child's resident set size and the wall clock: past the memory cap (the
child's RSS once the session is loaded, plus the memory budget) or the time limit, the child is
killed and `ResourceLimitError` says which limit stopped it. A child that dies by itself (the
kernel's OOM killer, a crash in a kernel) is a `RunFailedError`. Either way this process goes on.

Start-up costs a Python with onnxruntime imported (~0.3 s here; bench/verify_cost.py's
"watched" column): the runner uses a child only where the estimate is uncertain or close to the
budget.
"""

from __future__ import annotations

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

def _serve() -> None:
    import numpy as np

    from onnxrefine.verify.ort_errors import describe
    from onnxrefine.verify.runner import RunSettings, session_options

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but messages on the pipe
    session = None
    while True:
        try:
            header = _read_exact(stdin, _HEADER.size)
        except EOFError:
            return
        request = pickle.loads(_read_exact(stdin, _HEADER.unpack(header)[0]))
        kind = request[0]
        if kind == "load":
            import onnxruntime as ort

            _, source, settings, library, role = request
            settings = RunSettings(**{**settings, "providers": tuple(settings["providers"])})
            try:
                session = ort.InferenceSession(source, sess_options=session_options(settings, library),
                                               providers=list(settings.providers))
                _write(stdout, ("ok", None))
            except Exception as exc:
                _write(stdout, ("error", describe(exc, "load", role)))
        elif kind == "run":
            _, names, feeds, role = request
            try:
                results = session.run(names, feeds)
                _write(stdout, ("ok", [np.asarray(value) for value in results]))
            except Exception as exc:
                _write(stdout, ("error", describe(exc, "run", role)))


# -- the parent --------------------------------------------------------------------------------

class ChildFailed(Exception):
    """The child reported an error (its one-line description is the message)."""


class WatchedSession:
    """A session in a child process; `run(names, feeds)` returns the output arrays. Raises
    ChildFailed (the session's own error), resources.ResourceLimitError (a limit stopped it) or
    RuntimeError (the child died)."""

    def __init__(self, source, settings, custom_op_library, role: str, memory_budget: int,
                 time_limit_s: float):
        self.role = role
        self.memory_budget = memory_budget
        self.time_limit_s = time_limit_s
        env = dict(os.environ)
        # The child must import this very package (a worktree on PYTHONPATH, an editable install).
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "onnxrefine.verify.runner_child"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        self.cap = None  # set once the session is loaded: its RSS then, plus the budget
        try:
            self._call(("load", source, settings.to_dict(), custom_op_library, role), "loading")
        except BaseException:
            self.close()
            raise
        self.cap = _rss(self.process.pid) + memory_budget

    def run(self, names, feeds):
        return self._call(("run", list(names), dict(feeds), self.role), "running")

    def _call(self, request, doing: str):
        from onnxrefine.resources import ResourceLimitError, format_bytes

        if self.process is None:
            raise RuntimeError(f"{self.role}: the onnxruntime child process is gone")
        started = time.monotonic()
        try:
            _write(self.process.stdin, request)
        except (BrokenPipeError, OSError):
            raise RuntimeError(self._death(doing)) from None
        stream = self.process.stdout
        fd = stream.fileno()
        peak = 0
        while True:
            ready, _, _ = select.select([fd], [], [], POLL_S)
            if ready:
                break
            elapsed = time.monotonic() - started
            rss = _rss(self.process.pid)
            peak = max(peak, rss)
            cap = self.cap if self.cap is not None else _LOAD_BASE + self.memory_budget
            if rss > cap:
                self.close()
                raise ResourceLimitError(
                    f"{self.role}: onnxruntime stopped while {doing}: it used {format_bytes(rss)}, over the "
                    f"memory budget of {format_bytes(self.memory_budget)} (--memory-budget)")
            if elapsed > self.time_limit_s:
                self.close()
                raise ResourceLimitError(f"{self.role}: onnxruntime stopped while {doing}: over the time limit "
                                         f"of {self.time_limit_s:g} s")
            if self.process.poll() is not None:
                break
        try:
            header = _read_exact(stream, _HEADER.size)
            reply = pickle.loads(_read_exact(stream, _HEADER.unpack(header)[0]))
        except (EOFError, OSError, pickle.UnpicklingError):
            raise RuntimeError(self._death(doing)) from None
        if reply[0] == "error":
            raise ChildFailed(reply[1])
        return reply[1]

    def _death(self, doing: str) -> str:
        code = self.process.wait() if self.process is not None else None
        self.close()
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        return f"{self.role}: onnxruntime's process died while {doing} ({how})"

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def __del__(self):
        self.close()


# A child's resident size before its session exists (Python, numpy, onnxruntime), measured here at
# ~90 MiB; while loading, the cap is this plus the budget.
_LOAD_BASE = 128 << 20


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when its parent dies (a killed onnxrefine leaves no orphan
    running a model)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it, not us
    _die_with_parent()
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(1)
    _serve()
