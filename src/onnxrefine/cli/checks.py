"""Argument checks that run before any work: a missing output folder, an output that is the input,
or an unreadable inputs file is a one-line error (exit 2) in milliseconds, not after minutes of
optimization and gigabytes of memory.

`check_args(args)` dispatches on the subcommand; each check only looks at the file system (no model
is parsed), so it is cheap whatever the model's size.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from onnxrefine.cli.arguments import readable_file, same_file, writable_file, writable_folder
from onnxrefine.errors import BadInputError


def _external_data_of(output: str) -> str:
    # io.save_model writes large models' weights to "<output>.data" beside the output.
    return output + ".data"


def _distinct_outputs(pairs: Sequence[tuple[str, str | None]]) -> None:
    given = [(label, path) for label, path in pairs if path]
    for index, (label, path) in enumerate(given):
        for other_label, other in given[index + 1:]:
            if same_file(path, other):
                raise BadInputError(f"{label} and {other_label} name the same file: {path}")


def check_optimize(args: argparse.Namespace) -> None:
    if getattr(args, "list_passes", False) or not getattr(args, "model", None):
        return  # the command itself answers these
    model = args.model
    readable_file(model)
    _dims(args)
    if getattr(args, "inputs", None):
        readable_file(args.inputs, "--inputs")
    from onnxrefine.cli.arguments import default_output_path  # the command's own default

    output = args.output or str(default_output_path(Path(model)))
    sources = [model] + ([args.inputs] if getattr(args, "inputs", None) else [])
    writable_file(output, "-o/--output" if args.output else "output", sources)
    data = _external_data_of(os.fspath(output))
    location = getattr(args, "external_data", None)
    if location:  # --external-data LOCATION: a file name beside the output
        from onnxrefine.ir.external_save import check_location

        data = os.path.join(os.path.dirname(os.path.abspath(output)), check_location(location))
        writable_file(data, "--external-data", [model, output])
    if os.path.exists(data) and _references(model, data):
        raise BadInputError(f"{data}: would overwrite the input's external data; choose another output path")
    if os.path.isfile(output) and _is_external_data_of(model, output):
        raise BadInputError(f"{output}: is the input's external data; choose another output path")
    if getattr(args, "report", None):
        writable_file(args.report, "--report", sources)
    _distinct_outputs([("-o/--output", output), ("--report", getattr(args, "report", None))])


def _dims(args: argparse.Namespace) -> None:
    from onnxrefine.cli.arguments import parse_dims  # the commands parse --dims the same way

    parse_dims(getattr(args, "dims", "") or "")


def _references(model: str, data_file: str) -> bool:
    """Whether the model's external data lives in `data_file` (only asked when that file exists)."""
    from onnxrefine.ir.external_save import references_file

    return references_file(model, Path(data_file))


def _is_external_data_of(model: str, output: str) -> bool:
    """Whether the existing file `output` holds some of the model's weights. Only a file in the
    model's real folder can (locations are checked to stay inside it), so other outputs cost a
    stat; the graph is read lazily (ir/load.py: big weights are not read)."""
    from onnxrefine.ir import load, validate

    real_output = os.path.realpath(output)
    try:
        folder = os.path.dirname(load.resolve(model))
        if os.path.commonpath([folder, real_output]) != folder:
            return False
        proto, _, _ = load.read_proto(model)
    except (BadInputError, ValueError):
        return False  # a bad model is reported by loading, with its own message
    return any(os.path.realpath(os.path.join(folder, location)) == real_output
               for location in validate.external_locations(proto) if location and "\0" not in location)


def check_verify(args: argparse.Namespace) -> None:
    readable_file(args.original, "original")
    readable_file(args.candidate, "candidate")
    sources = [args.original, args.candidate]
    if getattr(args, "inputs", None):
        readable_file(args.inputs, "--inputs")
        sources.append(args.inputs)
    for option in ("json", "html"):
        if getattr(args, option, None):
            writable_file(getattr(args, option), f"--{option}", sources)
    _distinct_outputs([("--json", getattr(args, "json", None)), ("--html", getattr(args, "html", None))])


def bisect_out(args: argparse.Namespace) -> str:
    return args.out or f"{args.model.removesuffix('.onnx')}.bisect"


def check_bisect(args: argparse.Namespace) -> None:
    readable_file(args.model)
    _dims(args)
    if getattr(args, "inputs", None):
        readable_file(args.inputs, "--inputs")
    # The bundle is written only on a mismatch, and an existing folder is refused then: say so now.
    writable_folder(bisect_out(args), "--out", must_not_exist=True)


def check_fuzz(args: argparse.Namespace) -> None:
    writable_folder(args.out, "--out")


def check_reduce(args: argparse.Namespace) -> None:
    bundle = args.bundle
    if not os.path.isdir(bundle):
        raise BadInputError(f"{bundle}: no such folder" if not os.path.exists(bundle)
                            else f"{bundle}: not a folder (give a case_<n>_seed<s>/ bundle folder)")
    for name in ("model.onnx", "report.json"):
        if not os.path.isfile(os.path.join(bundle, name)):
            raise BadInputError(f"{bundle} is not a fuzz bundle (needs model.onnx and report.json)")
        readable_file(os.path.join(bundle, name))
    writable_folder(args.out or os.path.join(bundle, "reduced"), "--out")


CHECKS: dict[str, Callable[[argparse.Namespace], None]] = {
    "optimize": check_optimize,
    "verify": check_verify,
    "bisect": check_bisect,
    "fuzz": check_fuzz,
    "reduce": check_reduce,
}


def check_args(args: argparse.Namespace) -> None:
    """Raise BadInputError for arguments that would make the command fail after its work."""
    check = CHECKS.get(getattr(args, "command", None) or "")
    # -- batch mode: its own checks (onnxrefine.cli.batch) -----------------------------------
    if getattr(args, "command", None) in ("optimize", "verify"):
        from onnxrefine.cli import batch

        if batch.is_batch(args.command, args):
            batch.check(args.command, args)
            return
        if args.command == "verify" and not args.candidate:
            raise BadInputError("verify needs ORIGINAL and CANDIDATE (or a folder, a list file or "
                                "--batch for batch mode)")
    if check is not None:
        check(args)
