"""onnxrefine: an ONNX optimizer whose rewrites never change what a model computes."""

import gc as _gc
import importlib.util as _importlib_util
import logging as _logging

# The library's notes and warnings go to the "onnxrefine" logger; an application decides where
# (the CLI prints them on stderr as "onnxrefine: warning: ...").
_logging.getLogger("onnxrefine").addHandler(_logging.NullHandler())

from onnxrefine.version import __version__

# onnxruntime is an extra (any build provides the module: CPU, GPU, OpenVINO...); say which to
# install rather than fail deep inside an import chain. Looked up, not imported: importing it is
# most of the CLI's start-up, paid only where a model runs.
if _importlib_util.find_spec("onnxruntime") is None:  # pragma: no cover - depends on the environment
    raise ImportError("onnxrefine needs onnxruntime: pip install onnxruntime (or onnxruntime-gpu, or any "
                      "onnxruntime build you already use; from a clone: pip install '.[cpu]')")

from onnxrefine._deferred import import_onnx_ir  # noqa: E402


def _memory_limited() -> bool:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    except ImportError:  # pragma: no cover - not on Windows
        return False
    except BaseException:  # noqa: BLE001 - too little memory even to ask: that is the answer
        return True


# Why the package cannot work in this process, when its native dependencies (numpy, onnx,
# ml_dtypes) could not be loaded for want of memory (`ulimit -v`, `prlimit --as`): the CLI says
# it in one line and exits 2; the API raises it on first use. Any other import failure raises.
STARTUP_FAILURE: str | None = None


def _is_the_command() -> bool:
    """Whether this process is the `onnxrefine` command (its console script, or `python -m
    onnxrefine`), not a library caller's."""
    import os
    import sys

    line = list(getattr(sys, "orig_argv", []))
    for index, word in enumerate(line[:-1]):
        if word == "-m":
            return line[index + 1] == "onnxrefine"
    first = sys.argv[0] if sys.argv else ""
    return os.path.splitext(os.path.basename(first))[0] == "onnxrefine"


def _import_numpy_for_the_command() -> None:
    """The command runs OpenBLAS on one thread (portable.single_threaded_blas); loaded with its
    default pool, the pool's threads spin on the other cores first (numpy's import: 0.22 s of CPU
    against 0.12 on a 2-core machine). So the command loads numpy with OPENBLAS_NUM_THREADS=1
    unless the user set it, and removes the variable again: the processes it starts see the
    user's environment. A library caller's import leaves numpy's threads alone."""
    import os
    import sys

    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ or not _is_the_command():
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


_loaded = False


def load_native() -> None:
    """Import numpy, onnx and onnx-ir (sympy deferred) before any module of the package imports
    onnx_ir, noting STARTUP_FAILURE where memory ran out. At the package's import for a library
    caller; the command calls it in its worker process (__main__.run), after the supervisor's fork:
    a fork of a process with them loaded costs the worker a page fault per page its objects
    live on (0.02-0.03 s of CPU on every run)."""
    global STARTUP_FAILURE, _loaded
    if _loaded:
        return
    _loaded = True
    # Importing makes objects that live as long as the process, not garbage: the hundred or so
    # collections it would trigger free nothing (0.02-0.03 s of a small model's run). Collection is
    # put back as it was once onnx-ir and its dependencies are in.
    collecting = _gc.isenabled()
    _gc.disable()
    try:
        _import_numpy_for_the_command()
        import_onnx_ir()  # before any module of the package imports onnx_ir: sympy stays unloaded
    except (ImportError, MemoryError, SystemError, KeyboardInterrupt) as exc:
        # A loader that ran out of address space fails in any of these ways (OpenBLAS's failed thread
        # buffers even surface as KeyboardInterrupt inside numpy's import).
        if not (isinstance(exc, MemoryError) or _memory_limited()):
            raise
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        STARTUP_FAILURE = f"not enough memory to load onnxrefine's native libraries (numpy, onnx): {text}"
    finally:
        if collecting:
            _gc.enable()


if not _is_the_command():
    load_native()

__all__ = ["__version__", "optimize", "optimize_with_report", "VerifySettings"]


def __getattr__(name: str):
    # The API is imported on first use, so that `onnxrefine --version` and the CLI's argument
    # checks do not pay for the optimizer's imports.
    if name in ("optimize", "optimize_with_report", "VerifySettings"):
        load_native()  # already done unless this process is the command's
        if STARTUP_FAILURE is not None:
            raise ImportError(STARTUP_FAILURE)
    if name in ("optimize", "optimize_with_report"):
        from onnxrefine import api

        return getattr(api, name)
    if name == "VerifySettings":
        from onnxrefine.verified import VerifySettings

        return VerifySettings
    raise AttributeError(f"module 'onnxrefine' has no attribute {name!r}")
