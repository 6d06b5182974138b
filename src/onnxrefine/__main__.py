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
    return main()


if __name__ == "__main__":
    sys.exit(run())
