"""The `onnxrefine` command: one subcommand per module in this folder.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func(args) -> int` as the default. Arguments are checked (cli/checks.py) before the subcommand
runs; the subcommand runs under the progress display (onnxrefine.progress).

Exit codes (the README's table; scripts rely on them being distinct):
  0    success
  1    a negative verdict: the models differ (verify), or the result was not verified as asked
  2    bad input or environment: an unusable model, file or option, a full disk, a permission,
       a name the file system cannot hold, not enough memory
  3    internal error: a bug of onnxrefine's (one line; --debug shows the traceback), or native
       code (onnxruntime, onnx) crashing on the model (one line, from the supervisor in __main__.py)
  130  interrupted (SIGINT); 129 / 143 hung up or terminated (SIGHUP / SIGTERM)
  141  standard output closed early (`| head`): outputs already committed are kept
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import signal
import sys

from onnxrefine import portable, progress, runtime
from onnxrefine.version import __version__
from onnxrefine.cli.checks import check_args
from onnxrefine.errors import OnnxRefineError

# Each subcommand's name and the module that registers it: a run imports only its own (the
# optimizer's run does not load the verifier's, the fuzzer's or the reducer's command modules).
SUBCOMMANDS = {
    "optimize": "onnxrefine.cli.optimize_cmd",
    "verify": "onnxrefine.cli.verify_cmd",
    "bisect": "onnxrefine.cli.bisect_cmd",
    "fuzz": "onnxrefine.cli.fuzz_cmd",
    "reduce": "onnxrefine.cli.reduce_cmd",
}

EXIT_OK, EXIT_DIFFER, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, so that every clean-up a Ctrl-C runs (temp
    files, staged outputs, child processes) runs for them too."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _install_signal_handlers() -> None:
    main_pid = os.getpid()

    def terminate(signum, frame):
        if os.getpid() != main_pid:  # a forked worker: die as the signal says, as it always did
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), terminate)


def _release_held_signals() -> None:
    """The supervisor's worker (__main__.supervised) holds SIGINT, SIGTERM and SIGHUP blocked from
    its fork until the command's handlers are in place; they are ours from here on, and one that
    arrived meanwhile is raised now, inside main's handlers (elsewhere nothing is held: no-op)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                                                    if hasattr(signal, name)])


def _safe_streams() -> None:
    """Output that cannot be encoded in the locale's charset (an ellipsis under LC_ALL=POSIX, a
    model's non-ASCII names) is escaped, never a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - a closed or exotic stream
                pass


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: with every subcommand, or with `command`'s alone (its run needs no other)."""
    parser = argparse.ArgumentParser(
        prog="onnxrefine",
        description="Optimize ONNX models without changing what they compute, and prove it.",
        epilog="exit codes: 0 ok, 1 the models differ or the result is not verified as asked, 2 bad input "
        "or environment, 3 internal error, 130/129/143 interrupted, 141 output pipe closed",
    )
    parser.add_argument("--version", action="version", version=f"onnxrefine {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an internal error (also ONNXREFINE_DEBUG=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in [SUBCOMMANDS[command]] if command in SUBCOMMANDS else SUBCOMMANDS.values():
        importlib.import_module(module_name).register(subparsers)
    return parser


class _StderrLines(logging.Handler):
    """The library's log records as one line each on the stderr of the moment (looked up per
    record, so a caller that swaps sys.stderr sees them)."""

    def emit(self, record: logging.LogRecord) -> None:
        from onnxrefine.ir.load_checks import one_line

        print(f"onnxrefine: {record.levelname.lower()}: {one_line(record.getMessage())}", file=sys.stderr)


def _log_to_stderr() -> None:
    logger = logging.getLogger("onnxrefine")
    # Found by name, not class: a re-imported cli.main (tests do) defines the class anew.
    if not any(handler.get_name() == _StderrLines.__name__ for handler in logger.handlers):
        handler = _StderrLines(logging.WARNING)
        handler.set_name(_StderrLines.__name__)
        logger.addHandler(handler)


def _error(text: str) -> None:
    from onnxrefine.ir.load_checks import one_line  # one line whatever the message quotes

    print(f"onnxrefine: {one_line(text)}", file=sys.stderr, flush=True)


def _os_error_text(exc: OSError) -> str:
    cause = exc.strerror or str(exc)
    where = exc.filename if exc.filename is not None else None
    return f"error: {where}: {cause}" if where else f"error: {cause}"


def _memory_text(exc: MemoryError) -> str:
    from onnxrefine.runtime import address_space_limit

    where = progress.failed_phase(exc)
    during = f" during {where}" if where else ""
    limit = address_space_limit()
    return (f"error: not enough memory{during}" + (f" (address-space limit {limit})" if limit else "")
            + (f": {exc}" if str(exc) else ""))


def main(argv: list[str] | None = None, freeze_startup: bool = False) -> int:
    """The CLI. `freeze_startup`: the process is the command's own (`python -m onnxrefine`), whose
    start-up objects need no collecting; a caller that runs main in a process of its own (tests)
    leaves its objects collectable."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # answered before the subcommands (and the optimizer) are imported
        try:
            print(f"onnxrefine {__version__}", flush=True)
        except BrokenPipeError:  # `onnxrefine --version | head -0`: nothing more to say, exit quietly
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        return 0
    _install_signal_handlers()
    debug = "--debug" in argv[:1] or os.environ.get("ONNXREFINE_DEBUG", "") not in ("", "0")
    # Everything from here on runs inside the handlers below: a signal landing while the process
    # still sets itself up (loading the BLAS library) ends in one line too.
    try:
        _release_held_signals()
        _log_to_stderr()
        _safe_streams()
        from onnxrefine import STARTUP_FAILURE

        if STARTUP_FAILURE is not None:
            print(f"onnxrefine: error: {STARTUP_FAILURE}", file=sys.stderr)
            return EXIT_BAD_INPUT
        portable.single_threaded_blas()
        # The options before the subcommand take no value: the first other word names it.
        parser = build_parser(next((word for word in argv if not word.startswith("-")), None))
        if freeze_startup:
            # What start-up made (modules, classes, functions: a few hundred thousand objects)
            # lives until the process exits: frozen, the collections of the run do not traverse
            # it again (one full collection less, 0.04 s on small models). Collection, held off
            # while start-up imported (__main__.py), starts with the run.
            gc.freeze()
            gc.enable()
        args = parser.parse_args(argv)
        debug = debug or args.debug
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_BAD_INPUT
        check_args(args)  # output folders, inputs files: fail before any work, not after it
        # Progress on stderr (live on a terminal, log lines otherwise) for every phase the
        # library reports; the display is closed before the error or result lines below.
        from onnxrefine.cli.arguments import from_args

        with progress.showing(progress.display_for_stderr()), from_args(args):
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it cannot be handled
        return EXIT_BROKEN_PIPE if _stdout_closed else code
    except OnnxRefineError as exc:
        _error(f"error: {exc}")
        return EXIT_BAD_INPUT
    except SystemExit as exc:
        if not isinstance(exc.__context__, BrokenPipeError):
            raise
        # rich answers a closed pipe with SystemExit(1) (after pointing stdout at /dev/null):
        # the same event as below, and the same exit.
        return EXIT_BROKEN_PIPE
    except BrokenPipeError:
        # The reader went away (`onnxrefine ... | head -1`): the outputs were committed before the
        # summary was printed, and stay. Nothing more can be said on stdout; exit quietly.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as exc:  # Ctrl-C, and Terminated (SIGTERM, SIGHUP)
        return _interrupted(exc)
    except OSError as exc:  # the environment: a full disk, a permission, a name too long
        if debug:
            raise
        _error(_os_error_text(exc))
        return EXIT_BAD_INPUT
    except MemoryError as exc:
        if debug:
            raise
        _error(_memory_text(exc))
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, a distinct code
        # the interpreter wraps what a signal handler raises in places (a Ctrl-C while a class is
        # created, in a field's __set_name__, arrives as a RuntimeError caused by it): the run was
        # interrupted all the same, and its clean-up ran as the wrapping exception propagated
        interrupt = runtime.interruption(exc)
        if interrupt is not None:
            return _interrupted(interrupt)
        if debug:
            raise
        _error(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return EXIT_INTERNAL


def _interrupted(exc: KeyboardInterrupt) -> int:
    if isinstance(exc, Terminated):
        _error("hung up" if exc.signum == getattr(signal, "SIGHUP", -1) else "terminated")
        return 128 + exc.signum
    _error("interrupted")
    return 130


_stdout_closed = False


def closed_pipe(exc: BaseException) -> bool:
    """Whether `exc` is standard output's reader going away: a BrokenPipeError, or the
    SystemExit(1) rich raises for one. Work in progress goes on (its outputs are still committed);
    what it would have printed is dropped, and the run exits 141."""
    global _stdout_closed
    if isinstance(exc, BrokenPipeError) or (isinstance(exc, SystemExit)
                                             and isinstance(exc.__context__, BrokenPipeError)):
        _stdout_closed = True
        _silence_stdout()
        return True
    return False


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - no real stdout to replace
        pass


if __name__ == "__main__":
    sys.exit(main())
