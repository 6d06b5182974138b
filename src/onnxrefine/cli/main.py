"""The `onnxrefine` command: one subcommand per module in this folder.

Each subcommand module exposes `register(subparsers)`, which adds its parser and sets
`func(args) -> int` as the default. Exit codes: 0 success, 1 a negative verdict, 2 bad input.
Arguments are checked (cli/checks.py) before the subcommand runs; the subcommand runs under the
progress display (onnxrefine.progress).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from onnxrefine import __version__, progress
from onnxrefine.cli.checks import check_args
from onnxrefine.errors import OnnxRefineError

SUBCOMMAND_MODULES = (
    "onnxrefine.cli.optimize_cmd",
    "onnxrefine.cli.verify_cmd",
    "onnxrefine.cli.bisect_cmd",
    "onnxrefine.cli.fuzz_cmd",
    "onnxrefine.cli.reduce_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnxrefine",
        description="Optimize ONNX models without changing what they compute, and prove it.",
    )
    parser.add_argument("--version", action="version", version=f"onnxrefine {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # answered before the subcommands (and the optimizer) are imported
        print(f"onnxrefine {__version__}")
        return 0
    _log_to_stderr()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_args(args)  # output folders, inputs files: fail before any work, not after it
        # Progress on stderr (live on a terminal, log lines otherwise) for every phase the
        # library reports; the display is closed before the error or result lines below.
        from onnxrefine import resources

        with progress.showing(progress.display_for_stderr()), resources.from_args(args):
            return int(args.func(args) or 0)
    except OnnxRefineError as exc:
        # One line whatever the message quotes (a name from the model may hold a newline).
        from onnxrefine.ir.load_checks import one_line

        print(f"onnxrefine: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("onnxrefine: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
