"""Native code that may abort, run where an abort is an error instead of the end of the process.

`call(function, *args)` runs any function so; `infer_shapes` is onnx's shape inference so run.

onnx's C++ shape inference asserts on shapes a model cannot have (a MaxPool whose window is larger
than its input, then a strided Slice: `std::clamp` with hi < lo, SIGABRT) and on some malformed
models; no Python handler can catch that. `infer_shapes` runs it in a forked child: the parent
gets the inferred model back through a pipe, or a `NativeCrash` naming the signal, which callers
treat like any failed inference (a help, never a requirement) or report in one line. Where the
platform cannot fork (Windows), it runs in the process as before.

The child that infers shapes serves one request after another (`_Worker`): a fork costs with the
size of the parent (7 ms at 70 MB, 18 ms at 900 MB, and the parent's next writes fault on every
page it shares), and an optimization asks for an estimate per certificate. It leaves when it has
been idle for `WORKER_IDLE_SECONDS` (what it still shares with the parent is then let go), when the
parent goes (its request pipe ends), or when it dies on a model: the next request forks a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import gc
import os
import pickle
import select
import signal
import sys
import threading

import onnx

from onnxrefine.errors import OnnxRefineError


class NativeCrash(OnnxRefineError):
    """Native code died (an assertion, a segfault) on this input; the process did not."""


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "waitpid")


_HELD = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)}


def fork_holding_signals() -> tuple[int, set]:
    """os.fork() with SIGINT, SIGTERM and SIGHUP held while it runs: a handler that raises (Ctrl-C's
    KeyboardInterrupt) would otherwise run inside the fork's own hooks (logging's lock release),
    where Python prints a traceback and drops the exception, and the run goes on as if never
    interrupted. The parent gets a held signal as soon as the fork has returned; the child keeps
    them held until it has let go of the parent's streams (`detach_child`). Returns the pid and the
    signal mask to restore."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return pid, previous


def infer_shapes(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    """onnx.shape_inference.infer_shapes(model, **options), contained: its exceptions are raised
    as they are (as the onnx call would), an abort or a segfault as NativeCrash."""
    data = model.SerializeToString()
    if not can_fork():  # pragma: no cover - Windows
        return onnx.ModelProto.FromString(_infer_serialized(data, options))
    with _WORKER_LOCK:
        message = _ask_worker(pickle.dumps((data, options)))
    return onnx.ModelProto.FromString(_result(message, "onnx shape inference"))


def _infer_serialized(data: bytes, options: dict) -> bytes:
    return onnx.shape_inference.infer_shapes(onnx.ModelProto.FromString(data), **options).SerializeToString()


def call(function, *args, what: str):
    """function(*args) in a forked child; its result (pickled) or its exception comes back, a
    crash of the child is a NativeCrash naming `what` and the signal. Where the platform cannot
    fork (Windows), it runs in the process."""
    if not can_fork():  # pragma: no cover - Windows
        return function(*args)
    read_end, write_end = os.pipe()
    pid, mask = fork_holding_signals()
    if pid == 0:  # the child: run, send the result (or the exception), leave without clean-up
        def send() -> None:
            os.close(read_end)
            detach_child(mask)
            message = _outcome(function, *args)
            with os.fdopen(write_end, "wb") as out:
                out.write(message)

        end_child_after(send)
    os.close(write_end)
    reaped = False
    try:
        with os.fdopen(read_end, "rb") as pipe:
            message = pipe.read()
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        if not reaped:  # interrupted while the child works: it must not outlive the call
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
    if not message:
        raise _crash(status, what)
    return _result(message, what)


def end_child_after(body) -> None:
    """In a forked child: run `body`, then leave at once (exit status 1 if it raised), never
    returning into the parent's code nor running its clean-up."""
    status = 0
    try:
        body()
    except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
        status = 1
    finally:
        os._exit(status)


def detach_child(mask: set) -> None:
    """In a forked child: nothing it does reaches the parent but through its pipes. What the native
    code prints as it dies (an assertion's text) is not the user's business (the parent says it in
    one line), and the standard streams may be the parent's channel to its own parent (a test
    runner's worker): stdin, stdout and stderr become the null device. No garbage collection runs:
    the parent's garbage, collected here, would run the parent's finalizers (a channel's close
    message, a buffered file's flush) from this process."""
    gc.disable()
    faulthandler.disable()  # its dump of the child's stack goes to a descriptor of its own
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    # The parent's stream objects (which may hold its unflushed output) are left untouched.
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the child's until it ends
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C now ends the child quietly


def _outcome(function, *args) -> bytes:
    """function(*args)'s result or exception as a message for the parent: O (pickled result),
    P (pickled exception) or E (an exception that cannot be pickled, as text)."""
    try:
        return b"O" + pickle.dumps(function(*args))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        try:
            return b"P" + pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled: its text
            return b"E" + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")


def _result(message: bytes, what: str):
    if message[:1] == b"P":
        raise pickle.loads(message[1:])
    if message[:1] == b"E":
        raise InferenceError(message[1:].decode("utf-8", "replace"))
    return pickle.loads(message[1:])


def _crash(status: int, what: str) -> NativeCrash:
    if os.WIFSIGNALED(status):
        return NativeCrash(f"{what} crashed ({signal.Signals(os.WTERMSIG(status)).name}) on this model")
    return NativeCrash(f"{what} ended without a result")


WORKER_IDLE_SECONDS = 2.0
_WORKER_LOCK = threading.Lock()
_LENGTH = 8  # bytes of the length that comes before each message


class _Worker:
    """A forked child that infers shapes for each request its parent sends (length, then the
    pickled (model bytes, options)) and answers with `_outcome`'s message."""

    def __init__(self):
        requests_read, self.requests = os.pipe()
        self.replies, replies_write = os.pipe()
        self.owner = os.getpid()
        self.pid, mask = fork_holding_signals()
        if self.pid == 0:
            def serve() -> None:
                os.close(self.requests)
                os.close(self.replies)
                detach_child(mask)
                _serve(requests_read, replies_write)

            end_child_after(serve)
        os.close(requests_read)
        os.close(replies_write)

    def ask(self, request: bytes) -> tuple[bytes | None, int]:
        """(the reply, 0), or (None, the child's wait status) when it left or died without one."""
        try:
            _write(self.requests, request)
            reply = _read(self.replies)
        except OSError:  # the child had left: its end of the pipe is closed
            reply = None
        if reply is not None:
            return reply, 0
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped by someone else: how it ended is not known
            status = 1 << 8
        self.close(reap=False)
        return None, status

    def alive(self) -> bool:
        try:
            return self.owner == os.getpid() and os.waitpid(self.pid, os.WNOHANG)[0] == 0
        except ChildProcessError:  # reaped by someone else: it is gone
            return False

    def close(self, reap: bool = True, kill: bool = False) -> None:
        for fd in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                os.close(fd)
        if reap and self.owner == os.getpid():
            if kill:  # it may be in the middle of a long inference nobody waits for now
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):  # its request pipe has ended: it leaves on its own
                os.waitpid(self.pid, 0)


_worker: _Worker | None = None


@atexit.register
def close_worker() -> None:
    """End and reap the worker: its time is then counted in this process's children's usage."""
    global _worker
    worker, _worker = _worker, None
    if worker is None:
        return
    try:
        worker.close()
    except BaseException:  # noqa: BLE001 - a signal's handler raising mid-wait (SIGTERM while exiting)
        # The process is ending either way: end the child at once, and say nothing from an exit handler.
        worker.close(kill=True)


def _ask_worker(request: bytes) -> bytes:
    """The worker's reply to `request`, from a new worker where there is none, it left idle or it
    belongs to the process this one was forked from; NativeCrash when it dies on the request."""
    global _worker
    for _ in range(2):
        if _worker is not None and not _worker.alive():
            if _worker.owner == os.getpid():
                _worker.close()
            _worker = None  # an inherited worker is its parent's: this process leaves it alone
        if _worker is None:
            _worker = _Worker()
        worker = _worker
        try:
            reply, status = worker.ask(request)
        except BaseException:  # interrupted mid-request: the pipes are out of step, start afresh
            worker.close(kill=True)
            _worker = None
            raise
        if reply is not None:
            return reply
        _worker = None
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            continue  # it left idle before reading the request: ask a new one
        raise _crash(status, "onnx shape inference")
    raise NativeCrash("onnx shape inference ended without a result")


def _serve(requests: int, replies: int) -> None:
    while True:
        ready, _, _ = select.select([requests], [], [], WORKER_IDLE_SECONDS)
        if not ready:
            return  # idle: leave (exit 0; a request written meanwhile is unread and asked again)
        request = _read(requests)
        if request is None:
            return  # the parent is gone
        data, options = pickle.loads(request)
        _write(replies, _outcome(_infer_serialized, data, options))


def _write(fd: int, message: bytes) -> None:
    view = memoryview(len(message).to_bytes(_LENGTH, "little") + message)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int) -> bytes | None:
    """One length-prefixed message, or None at the end of the pipe."""
    header = _read_exactly(fd, _LENGTH)
    if header is None:
        return None
    return _read_exactly(fd, int.from_bytes(header, "little"))


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class InferenceError(Exception):
    """The contained call raised an exception that could not be sent back whole (its type and
    message, as text)."""
