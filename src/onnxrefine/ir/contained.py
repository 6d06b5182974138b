"""Native code that may abort, run where an abort is an error instead of the end of the process.

`call(function, *args)` runs any function so; `infer_shapes` is onnx's shape inference so run.

onnx's C++ shape inference asserts on shapes a model cannot have (a MaxPool whose window is larger
than its input, then a strided Slice: `std::clamp` with hi < lo, SIGABRT) and on some malformed
models; no Python handler can catch that. `infer_shapes` runs it in a forked child: the parent
gets the inferred model back through a pipe, or a `NativeCrash` naming the signal, which callers
treat like any failed inference (a help, never a requirement) or report in one line. Where the
platform cannot fork (Windows), it runs in the process as before.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import signal

import onnx

from onnxrefine.errors import OnnxRefineError


class NativeCrash(OnnxRefineError):
    """Native code died (an assertion, a segfault) on this input; the process did not."""


def _can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "waitpid")


def infer_shapes(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    """onnx.shape_inference.infer_shapes(model, **options), contained: its exceptions are raised
    as they are (as the onnx call would), an abort or a segfault as NativeCrash."""
    data = call(_infer_serialized, model.SerializeToString(), options, what="onnx shape inference")
    return onnx.ModelProto.FromString(data)


def _infer_serialized(data: bytes, options: dict) -> bytes:
    return onnx.shape_inference.infer_shapes(onnx.ModelProto.FromString(data), **options).SerializeToString()


def call(function, *args, what: str):
    """function(*args) in a forked child; its result (pickled) or its exception comes back, a
    crash of the child is a NativeCrash naming `what` and the signal. Where the platform cannot
    fork (Windows), it runs in the process."""
    if not _can_fork():  # pragma: no cover - Windows
        return function(*args)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send the result (or the exception), leave without clean-up
        status = 0
        try:
            os.close(read_end)
            # What the native code prints as it dies (an assertion's text) is not the user's
            # business: the parent says it in one line.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            faulthandler.disable()  # its dump of the child's stack goes to a descriptor of its own
            try:
                message = b"O" + pickle.dumps(function(*args))
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
                try:
                    message = b"P" + pickle.dumps(exc)
                except Exception:  # noqa: BLE001 - an exception that cannot be pickled: its text
                    message = b"E" + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
            with os.fdopen(write_end, "wb") as out:
                out.write(message)
        except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
            status = 1
        finally:
            os._exit(status)
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
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise NativeCrash(f"{what} crashed ({name}) on this model")
    if not message:
        raise NativeCrash(f"{what} ended without a result")
    if message[:1] == b"P":
        raise pickle.loads(message[1:])
    if message[:1] == b"E":
        raise InferenceError(message[1:].decode("utf-8", "replace"))
    return pickle.loads(message[1:])


class InferenceError(Exception):
    """The contained call raised an exception that could not be sent back whole (its type and
    message, as text)."""
