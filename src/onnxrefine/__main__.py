"""`python -m onnxrefine` and the `onnxrefine` command.

The command's own modules are imported inside `run`, so that a process too small to load them
(an address-space limit: `ulimit -v`, `prlimit --as`) ends in one line and exit 2, not in a
traceback from the middle of an import.
"""

import sys


def _memory_limited() -> bool:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return False
    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def run() -> int:
    try:
        from onnxrefine.cli.main import main
    except (MemoryError, ImportError, SystemError, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt) and not _memory_limited():
            print("onnxrefine: interrupted", file=sys.stderr)
            return 130
        if not (isinstance(exc, MemoryError) or _memory_limited()):
            raise
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"onnxrefine: error: not enough memory to start ({text})", file=sys.stderr)
        return 2
    return exit_now(main())


def exit_now(code: int) -> int:
    """End the process once the command's work is done: its outputs are committed, its streams
    flushed and its exit handlers run (temp folders, worker pools), but the interpreter does not
    tear down every module and object of a run that may hold a whole model (0.05-0.1 s on small
    models, more on large ones). Returns only where the exit handlers cannot be run apart."""
    import os

    run_exit_handlers = getattr(__import__("atexit"), "_run_exitfuncs", None)  # CPython's own hook
    if run_exit_handlers is None or os.environ.get("ONNXREFINE_FULL_TEARDOWN"):
        return code
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away after the last line: outputs are committed
        code = code or 141
    except (OSError, ValueError):
        pass
    run_exit_handlers()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(run())
