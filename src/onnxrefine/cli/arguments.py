"""The arguments the subcommands share, in one place: the options they add alike (input shapes,
deployment run settings), how `--dims` and the default output path are read, and the checks of
path arguments (a readable input, a writable output file or folder) that run before any work."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from onnxrefine.errors import BadInputError
from onnxrefine.resources import DEFAULT_BUDGET_CAP, format_bytes, limits, parse_bytes


def add_input_shape_argument(parser) -> None:
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:DIMS",
                        help="fix an input's shape, e.g. input:1,3,224,224 (repeatable; like onnxsim's "
                             "--overwrite-input-shape); verification runs at exactly these shapes")


# -- deployment run settings (shared with `optimize`) -------------------------------------------
def add_run_settings_arguments(parser) -> None:
    group = parser.add_argument_group(
        "deployment settings",
        "besides the strict check (optimizations off, one thread), both models also run the way "
        "they will be deployed; differences there are reported apart and count in the verdict")
    group.add_argument("--ort-level", default="all", metavar="LEVEL",
                       help="onnxruntime graph optimization level: disable, basic, extended or all (default all)")
    group.add_argument("--providers", default="CPUExecutionProvider", metavar="EP,...",
                       help="execution providers, in order of preference (default CPUExecutionProvider)")
    group.add_argument("--custom-op-library", metavar="PATH",
                       help="shared library of custom operator kernels, registered in every session")
    group.add_argument("--no-deployment-check", action="store_true",
                       help="run the strict check only")
    group.add_argument("--atol", type=float, default=None, metavar="A",
                       help="hard bound: a differing element beyond A + RTOL*|reference| is a mismatch")
    group.add_argument("--rtol", type=float, default=None, metavar="R", help="see --atol")


def run_settings_from_args(args) -> dict:
    """verify_models' keyword arguments from the flags above; BadInputError (one line) for an
    unknown level or provider, an unavailable provider or a missing custom-op library."""
    from onnxrefine.verify.ort import RunSettings, check_run_settings

    providers = tuple(part.strip() for part in args.providers.split(",") if part.strip())
    deployment = None if args.no_deployment_check else RunSettings(level=args.ort_level, providers=providers)
    if args.no_deployment_check:  # the flags are still checked: a typo should not pass silently
        check_run_settings(RunSettings(level=args.ort_level, providers=providers), None)
    check_run_settings(deployment, args.custom_op_library)
    for name in ("atol", "rtol"):
        value = getattr(args, name)
        if value is not None and not value >= 0:
            raise BadInputError(f"--{name} must be a non-negative number")
    return {"deployment": deployment, "custom_op_library": args.custom_op_library,
            "atol": args.atol, "rtol": args.rtol}


def parse_dims(text: str) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadInputError(f"--dims: expected NAME=INT, got {item!r}")
        try:
            size = int(value)
        except ValueError:
            raise BadInputError(f"--dims: {name.strip()!r} needs an integer, got {value!r}") from None
        if size < 0:
            raise BadInputError(f"--dims: {name.strip()!r} must not be negative")
        dims[name.strip()] = size
    return dims


def default_output_path(model_path: Path) -> Path:
    name = model_path.name
    stem = name[: -len(".onnx")] if name.endswith(".onnx") else name
    return model_path.with_name(f"{stem}.opt.onnx")


def readable_file(path: str | os.PathLike, label: str = "") -> None:
    """`path` exists, is a regular file and can be read."""
    prefix = f"{label}: " if label else ""
    if not os.path.exists(path):
        raise BadInputError(f"{prefix}{path}: no such file")
    if not os.path.isfile(path):
        raise BadInputError(f"{prefix}{path}: not a regular file")
    if not os.access(path, os.R_OK):
        raise BadInputError(f"{prefix}{path}: not readable (permission denied)")


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Same file, also through symlinks and hard links; by path where one does not exist yet."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def writable_file(path: str | os.PathLike, label: str, inputs: Sequence[str | os.PathLike] = ()) -> None:
    """`path` can be written (atomically, by a rename in its folder) and is none of `inputs`."""
    from onnxrefine.atomic import check_name

    try:
        check_name(path)
    except BadInputError as exc:
        raise BadInputError(f"{label}: {exc}") from None
    if os.path.isdir(path):
        raise BadInputError(f"{label}: {path} is a folder; give a file name")
    if os.path.exists(path) and not os.path.isfile(path):
        # A FIFO or a device: the rename would replace it (as root, /dev/null itself).
        raise BadInputError(f"{label}: {path} exists and is not a regular file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise BadInputError(f"{label}: folder does not exist: {folder}")
    if not os.path.isdir(folder):
        raise BadInputError(f"{label}: not a folder: {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInputError(f"{label}: folder is not writable: {folder}")
    for source in inputs:
        if source is not None and same_file(path, source):
            raise BadInputError(f"{path}: refusing to overwrite the input {os.fspath(source)}; "
                                "choose another output path")


def _nearest_existing(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def writable_folder(path: str | os.PathLike, label: str, *, must_not_exist: bool = False) -> None:
    """`path` is (or can be created as) a folder we can write in."""
    path = os.fspath(path)
    if os.path.exists(path):
        if must_not_exist:
            raise BadInputError(f"{label}: {path} already exists; choose another folder")
        if not os.path.isdir(path):
            raise BadInputError(f"{label}: {path} exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise BadInputError(f"{label}: folder is not writable: {path}")
        return
    ancestor = _nearest_existing(path)
    if not os.path.isdir(ancestor):
        raise BadInputError(f"{label}: cannot create {path}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise BadInputError(f"{label}: cannot create {path}: {ancestor} is not writable")


def add_memory_budget_argument(parser) -> None:
    """--memory-budget for a subcommand that runs models (optimize, verify, bisect, reduce)."""
    parser.add_argument("--memory-budget", metavar="SIZE", default=None,
                        help="most memory one model evaluation may take, e.g. 500MB or 4GiB (default: half "
                        f"the available memory, at most {format_bytes(DEFAULT_BUDGET_CAP)}); a model whose "
                        "estimate is over it is not run, one that exceeds it while running is stopped")


@contextlib.contextmanager
def from_args(args):
    """The run's limits from parsed arguments (a subcommand without --memory-budget: the defaults).
    A subcommand's --time-budget (verify, reduce) also bounds each watched run: no single run may
    take longer than the whole command is allowed to."""
    text = getattr(args, "memory_budget", None)
    seconds = getattr(args, "time_budget", None)
    with limits(memory_budget=parse_bytes(text) if text is not None else None,
                time_limit_s=seconds if isinstance(seconds, (int, float)) and seconds > 0 else None):
        yield
