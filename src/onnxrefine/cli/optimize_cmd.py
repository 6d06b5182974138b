"""`onnxrefine optimize`: rewrite a model file, print what changed, write it atomically."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from onnxrefine import atomic, progress
from onnxrefine.api import count_set_aside, optimize_ir
from onnxrefine.plain import plain
from onnxrefine.cli.arguments import (add_input_shape_argument, add_run_settings_arguments, default_output_path,
                                      parse_dims, run_settings_from_args)
from onnxrefine.cli.optimize_summary import (describe_rollback, input_shapes_line, refusals_table,  # noqa: F401
                                             summary_table)
from onnxrefine.errors import BadInputError
from onnxrefine.ir.maps import MapTypesError
from onnxrefine.input_shapes import parse_input_shapes
from onnxrefine.ir import io
from onnxrefine.ir.budget import DEFAULT_GROWTH_RATIO, DEFAULT_PER_TENSOR_BYTES
from onnxrefine.passes.registry import all_passes
from onnxrefine.verified import AUTO_BUDGET_FACTOR, DEFAULT_VERIFY_BUDGET_S, VerifySettings

if TYPE_CHECKING:  # rich is imported where a table is printed (the CLI's start-up)
    from rich.console import Console
    from rich.table import Table


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "optimize",
        help="optimize a model without changing what it computes",
        description="Optimize an ONNX model. Every rewrite is guarded; refusals are listed with --explain.",
    )
    parser.add_argument("model", nargs="?", metavar="IN",
                        help="the model (.onnx); in batch mode also a folder, a list file or a quoted glob")
    parser.add_argument("-o", "--output", help="output path, or give it as OUT after IN (default: "
                        "<input>.opt.onnx beside the input)")
    parser.add_argument("--passes", help="comma-separated pass names (default: the whole default pipeline; "
                        "'default' stands for it, e.g. default,inline_functions)")
    parser.add_argument("--disable", default="", help="comma-separated pass names to leave out")
    parser.add_argument("--list-passes", action="store_true", help="list every pass with its class and exit")
    parser.add_argument("--markdown", action="store_true", help="with --list-passes: print a markdown table")
    parser.add_argument("--report", metavar="JSON", help="write a JSON report of every rewrite and refusal "
                        "(schema: onnxrefine/schemas/optimize-report.schema.json)")
    parser.add_argument("--no-shape-info", dest="shape_info", action="store_false",
                        help="write no value_info (by default every intermediate value whose type and shape "
                        "the optimizer's facts know gets one, as onnxsim writes them)")
    parser.add_argument("--explain", action="store_true", help="show every refused rewrite and why")
    parser.add_argument("--no-fixed-point", action="store_true", help="run each round once instead of to a fixed point")
    parser.add_argument(
        "--max-tensor-bytes", type=int, default=DEFAULT_PER_TENSOR_BYTES,
        help=f"largest constant a rewrite may generate beyond its source (default {DEFAULT_PER_TENSOR_BYTES})",
    )
    parser.add_argument(
        "--growth-ratio", type=float, default=DEFAULT_GROWTH_RATIO,
        help=f"largest allowed total constant size relative to the input (default {DEFAULT_GROWTH_RATIO})",
    )
    checks = parser.add_mutually_exclusive_group()
    checks.add_argument(
        "--verify", dest="verify", action="store_true", default=None,
        help="verify the optimized model end to end, bisect and roll back what breaks it, on every "
        "input set whatever the cost (default: on when the estimated cost fits --verify-budget)",
    )
    checks.add_argument("--no-verify", dest="verify", action="store_false", help="skip verification")
    parser.add_argument("--no-certify", dest="certify", action="store_false",
                        help="do not check each rewrite on its own matched subgraph (on by default)")
    parser.add_argument("--verify-budget", type=float, default=None,
                        help="seconds verification may take in auto mode (default: "
                        f"{AUTO_BUDGET_FACTOR:g}x the optimization's own time, at most {DEFAULT_VERIFY_BUDGET_S:g}; a random and an inf/NaN set always run); input sets are left out, or "
                        "verification skipped, by an estimate made before it runs")
    parser.add_argument("--inputs", help="input sets (.npz) for verification instead of generated ones")
    parser.add_argument("--dims", default="",
                        help="symbolic dim values for generated inputs, e.g. N=2,seq=16; a dim with no name is "
                             "input[axis], e.g. 'mask[1]=7' (default: 2, or sizes the original runs at where it fails at 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed for generated verification inputs")
    add_input_shape_argument(parser)
    add_run_settings_arguments(parser)
    # --- where the weights go (ir/external_save.py) ---
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--external-data", nargs="?", const="", default=None, metavar="LOCATION",
                      help="save the weights (initializers of 1 KiB or more) outside the model file, in "
                      "LOCATION beside it (default name: <output>.data); without this option an input's "
                      "layout is kept (external data stays external)")
    data.add_argument("--no-external-data", action="store_true",
                      help="embed every weight in the model file (refused over protobuf's 2 GiB limit)")
    parser.add_argument("--link-data", action="store_true",
                        help="clone the input's external-data files copy-on-write (reflink: btrfs, XFS) instead "
                        "of copying their weights; copied where the file system cannot")
    from onnxrefine.cli.arguments import add_memory_budget_argument
    add_memory_budget_argument(parser)
    # -- batch mode (onnxrefine.batch): several models, folders, list files -------------------
    from onnxrefine.cli.batch import add_batch_arguments

    add_batch_arguments(parser)
    parser.set_defaults(func=run)


def load_inputs(path: str) -> list:
    from onnxrefine.verify.inputs import load_inputs as load

    return load(path)


def _checked_inputs(path: str, model) -> list:
    """The inputs file's sets, checked against the model now (names, dtypes, shapes, symbolic
    dims), not only if verification happens to run."""
    from onnxrefine.verify.inputs import check_input_sets, input_specs

    return check_input_sets(input_specs(model), load_inputs(path))


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


# --list-passes: every column read from the pass declarations (passes/registry.py).
PASS_COLUMNS = ("pass", "phase", "class", "default", "fuzz pattern", "what it does")


def _pass_rows() -> list[tuple[str, ...]]:
    """One row per pass, in the order a round of the schedule runs them."""
    return [(spec.name, f"{spec.phase} {spec.order}", spec.kind, "yes" if spec.default else "no",
             spec.fuzz or "none", spec.summary) for spec in all_passes()]


# What stands behind a rule pass's rewrites; a graph-level pass declares its own reason.
RULE_EVIDENCE = "each rewrite certified on its own matched subgraph, or proved"


def list_passes_table(console: Console) -> Table:
    """The registry as a table that fits the console: at 80 columns the optional columns go
    (default, phase, class, fuzz pattern), never part of a name."""
    from onnxrefine.cli.output import Col, fitted_table

    columns = [Col("pass", name=True), Col("phase", drop=3), Col("class", drop=4), Col("default", drop=2),
               Col("fuzz pattern", name=True, drop=1), Col("what it does", wrap=True)]
    rows = [tuple(plain(cell) for cell in row) for row in _pass_rows()]
    return fitted_table(console, "onnxrefine passes, in schedule order", columns, rows)


def exactness_table(console: Console) -> Table:
    """Why each pass changes nothing the model computes (PassSpec.exactness), the reason every
    applied rewrite of a graph-level pass names in the report unless it was checked itself."""
    from onnxrefine.cli.output import Col, fitted_table

    rows = [(spec.name, plain(spec.exactness)) for spec in all_passes() if spec.run is not None]
    return fitted_table(console, f"why each pass is exact (rule passes: {RULE_EVIDENCE})",
                        [Col("graph-level pass", name=True), Col("why it is exact", wrap=True)], rows)


def passes_markdown() -> str:
    """The README's pass table, generated from the registry (a test keeps them equal)."""
    lines = ["| " + " | ".join(PASS_COLUMNS) + " |", "|" + "---|" * len(PASS_COLUMNS)]
    for name, phase, kind, default, fuzz, summary in _pass_rows():
        fuzz = f"`{fuzz}`" if fuzz != "none" else fuzz
        lines.append(f"| `{name}` | {phase} | {kind} | {default} | {fuzz} | {summary} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from onnxrefine.cli import batch

    if batch.is_batch("optimize", args):
        return batch.run("optimize", args)

    from onnxrefine.cli.output import stdout_console

    console = stdout_console()
    if args.list_passes:
        if args.markdown:
            print(passes_markdown(), end="")
        else:
            console.print(list_passes_table(console))
            console.print(exactness_table(console))
        return 0
    if not args.model:
        raise BadInputError("no input model given (usage: onnxrefine optimize IN [OUT])")
    if args.growth_ratio < 1.0:
        raise BadInputError("--growth-ratio must be at least 1.0")
    if args.report and not Path(args.report).resolve().parent.is_dir():
        raise BadInputError(f"{args.report}: folder does not exist")
    verify_run_settings = run_settings_from_args(args)
    input_shapes = parse_input_shapes(args.input_shape)
    source = Path(args.model)
    output = Path(args.output) if args.output else default_output_path(source)
    started = time.perf_counter()
    around = None  # a model with maps: the tensor part optimized, the rest put back (optimize_maps.py)
    with progress.phase(f"load {source.name}"):
        try:
            model = io.load_model(source)
        except MapTypesError:
            from onnxrefine.cli import optimize_maps

            try:
                model, around = optimize_maps.load_core(source)
            except optimize_maps.PassThrough as why:
                return _pass_through(args, source, output, str(why), console)
    size_before = source.stat().st_size if around else _stored_size(source, model)
    settings = VerifySettings(
        enabled=args.verify, budget_s=args.verify_budget, seed=args.seed, dims=parse_dims(args.dims),
        inputs=_checked_inputs(args.inputs, model) if args.inputs else None,
    )
    from onnxrefine.verify import run_settings

    with progress.phase(f"optimize {source.name}"), run_settings(**verify_run_settings):
        on_event = _event_printer(console)
        model, report = optimize_ir(
            model,
            _split(args.passes),
            disable=_split(args.disable) or (),
            fixed_point=not args.no_fixed_point,
            per_tensor_bytes=args.max_tensor_bytes,
            growth_ratio=args.growth_ratio,
            on_progress=lambda n: progress.report(note=f"{n} nodes visited"),
            verify=settings,
            on_event=on_event,
            certify=args.certify,
            # The original stays on disk: verification reads it from there (not the core of a map model).
            source_path=None if around else source,
            input_shapes=input_shapes,
        )
    from onnxrefine.ir import shape_info

    if args.shape_info:
        shape_info.annotate(model)
    else:
        shape_info.strip(model)
    notes, unchanged = [], None
    # Every output of the run (the model, its data files, the report) is written to temp files and
    # made visible together once all are complete: a report that cannot be written replaces
    # nothing, and a reader that goes away (`| head`) finds the outputs already committed.
    with atomic.staging() as stage:
        with progress.phase(f"save {output.name}"):
            if around is not None:
                from onnxrefine.cli import optimize_maps

                try:  # assembled and checked before anything is written
                    size_after = optimize_maps.save(model, around, output, seed=args.seed, dims=parse_dims(args.dims))
                    notes.append(around.note())
                    count_set_aside(report, around)
                except optimize_maps.PassThrough as why:
                    unchanged = str(why)
            else:
                layout = output_layout(args)
                size_after = io.save_model(model, output, input_path=source, layout=layout)
                notes += layout.notes
        if unchanged is None:
            with progress.phase(f"check {output.name}"):  # it loads, or nothing is written
                io.check_staged(stage, output, input_path=source)
            # Weights outside the model file, in the input or now staged beside the output.
            external = size_before != source.stat().st_size or any(
                target.resolve() != output.resolve() for target in stage.targets())
            report.file_sizes = {"before_bytes": size_before, "after_bytes": size_after,
                                 "external_data_included": external}
            if args.report:
                write_json_atomically(Path(args.report), report.to_dict())
            stage.commit()
    if unchanged is not None:
        return _pass_through(args, source, output, unchanged, console)
    seconds = time.perf_counter() - started
    if report.input_shapes:
        console.print(input_shapes_line(report.input_shapes), highlight=False, markup=False)
    console.print(summary_table(report, size_before, size_after, seconds, external, console))
    if args.explain:
        console.print(refusals_table(report, console))
    for rollback in report.rolled_back:
        console.print(plain(f"rolled back {describe_rollback(rollback)}"))
    for part in report.dropped:
        console.print(plain(f"note: not kept: {part}"), highlight=False)
    for note in notes:
        console.print(plain(f"note: {note}"), highlight=False)
    console.print(plain(f"wrote {output}"))
    return 0


def _pass_through(args: argparse.Namespace, source: Path, output: Path, reason: str, console: Console) -> int:
    """Write the model unchanged (a valid model this optimizer cannot hold), saying why."""
    from onnxrefine.cli import optimize_maps

    with atomic.staging():  # the model and its report made visible together
        size = optimize_maps.pass_through(source, output)
        if args.report:
            write_json_atomically(Path(args.report), optimize_maps.unchanged_report(source, reason, size))
    console.print(plain(f"note: written unchanged: {reason}"), highlight=False)
    console.print(plain(f"wrote {output}"))
    return 0


def output_layout(args: argparse.Namespace):
    from onnxrefine.ir.external_save import Layout, check_location

    link = bool(getattr(args, "link_data", False))
    if getattr(args, "no_external_data", False):
        return Layout("embedded", link=link)
    location = getattr(args, "external_data", None)
    if location is None:
        return Layout("same", link=link)
    return Layout("external", check_location(location) if location else None, link=link)


def _stored_size(source: Path, model) -> int:
    """The input's size on disk, external data included."""
    from onnxrefine.ir.external_save import stored_size

    return sum(stored_size(source, model))


def _event_printer(console: Console):
    """Say what verification will do before it runs, and what each bisection step found (the
    live display shows the phases themselves)."""

    def on_event(kind: str, **info) -> None:
        try:
            _print_event(kind, **info)
        except (BrokenPipeError, SystemExit) as exc:  # the reader went away: the work goes on
            from onnxrefine.cli.main import closed_pipe

            if not closed_pipe(exc):
                raise
            console.quiet = True

    def _print_event(kind: str, **info) -> None:
        if kind == "verify_plan":
            console.print(plain(f"verification: {info['text']}"), highlight=False)
        elif kind == "bisect":
            step = info["step"]
            where = f"rewrite {step.rule} at {step.root}" if step.rule else f"pass {step.pass_name}"
            console.print(plain(f"bisection: {where} (step {step.index}) turns the verdict to {info['verdict']}"),
                          highlight=False)

    return on_event


def write_json_atomically(path: Path, data: dict) -> None:
    folder = path.resolve().parent
    if not folder.is_dir():
        raise BadInputError(f"{path}: folder does not exist")
    from onnxrefine.verify.report import json_safe  # non-finite numbers as documented strings

    atomic.write_atomic(path, json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")
