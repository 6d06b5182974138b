"""`onnxrefine optimize`: rewrite a model file, print what changed, write it atomically."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from onnxrefine import atomic, progress
from onnxrefine.api import optimize_ir
from onnxrefine.plain import plain
from onnxrefine.cli.arguments import (add_input_shape_argument, add_run_settings_arguments, default_output_path,
                                      parse_dims, run_settings_from_args)
from onnxrefine.errors import BadInputError
from onnxrefine.input_shapes import describe as describe_input_shapes
from onnxrefine.input_shapes import parse_input_shapes
from onnxrefine.ir import io
from onnxrefine.ir.budget import DEFAULT_GROWTH_RATIO, DEFAULT_PER_TENSOR_BYTES
from onnxrefine.passes.registry import all_passes
from onnxrefine.verified import DEFAULT_VERIFY_BUDGET_S, VerifySettings

if TYPE_CHECKING:  # rich is imported where a table is printed (the CLI's start-up)
    from rich.console import Console
    from rich.table import Table


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "optimize",
        help="optimize a model without changing what it computes",
        description="Optimize an ONNX model. Every rewrite is guarded; refusals are listed with --explain.",
    )
    parser.add_argument("model", nargs="?", help="input .onnx file")
    parser.add_argument("-o", "--output", help="output path (default: <input>.opt.onnx beside the input)")
    parser.add_argument("--passes", help="comma-separated pass names (default: the whole default pipeline; "
                        "'default' stands for it, e.g. default,inline_functions)")
    parser.add_argument("--disable", default="", help="comma-separated pass names to leave out")
    parser.add_argument("--list-passes", action="store_true", help="list every pass with its class and exit")
    parser.add_argument("--markdown", action="store_true", help="with --list-passes: print a markdown table")
    parser.add_argument("--report", help="write a JSON report of every rewrite and refusal")
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
                        help="seconds verification may take in auto mode (default: 3x the optimization's own "
                        f"time, at most {DEFAULT_VERIFY_BUDGET_S:g}; a random and an inf/NaN set always run); input sets are left out, or "
                        "verification skipped, by an estimate made before it runs")
    parser.add_argument("--inputs", help="input sets (.npz) for verification instead of generated ones")
    parser.add_argument("--dims", default="", help="symbolic dim values for generated inputs, e.g. N=2,seq=16")
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


def list_passes_table() -> Table:
    from rich.table import Table

    table = Table(title="onnxrefine passes, in schedule order")
    # The terminal leaves out the fuzz column (README's table has it) to leave the summary room.
    shown = [i for i, column in enumerate(PASS_COLUMNS) if column != "fuzz pattern"]
    for i in shown:
        table.add_column(PASS_COLUMNS[i], overflow="fold")  # a narrow terminal folds names, never cuts them
    for row in _pass_rows():
        table.add_row(*(row[i] for i in shown))
    return table


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

    from rich.console import Console  # here, not at module level: the CLI's start-up

    console = Console()
    if args.list_passes:
        if args.markdown:
            print(passes_markdown(), end="")
        else:
            console.print(list_passes_table())
        return 0
    if not args.model:
        raise BadInputError("no input model given (usage: onnxrefine optimize MODEL [-o OUT])")
    if args.growth_ratio < 1.0:
        raise BadInputError("--growth-ratio must be at least 1.0")
    if args.report and not Path(args.report).resolve().parent.is_dir():
        raise BadInputError(f"{args.report}: folder does not exist")
    verify_run_settings = run_settings_from_args(args)
    input_shapes = parse_input_shapes(args.input_shape)
    source = Path(args.model)
    output = Path(args.output) if args.output else default_output_path(source)
    started = time.perf_counter()
    with progress.phase(f"load {source.name}"):
        model = io.load_model(source)
    size_before = _stored_size(source, model)
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
            source_path=source,  # the original stays on disk: verification reads it from there
            input_shapes=input_shapes,
        )
    layout = output_layout(args)
    # Every output of the run (the model, its data files, the report) is written to temp files and
    # made visible together once all are complete: a report that cannot be written replaces
    # nothing, and a reader that goes away (`| head`) finds the outputs already committed.
    with atomic.staging() as stage:
        with progress.phase(f"save {output.name}"):
            size_after = io.save_model(model, output, input_path=source, layout=layout)
        if args.report:
            write_json_atomically(Path(args.report), report.to_dict())
        stage.commit()
    seconds = time.perf_counter() - started
    if report.input_shapes:
        console.print(input_shapes_line(report.input_shapes), highlight=False, markup=False)
    external = size_before != source.stat().st_size or size_after != output.stat().st_size
    console.print(summary_table(report, size_before, size_after, seconds, external))
    if args.explain:
        console.print(refusals_table(report))
    for rollback in report.rolled_back:
        console.print(plain(f"rolled back {describe_rollback(rollback)}"))
    for part in report.dropped:
        console.print(plain(f"note: not kept: {part}"), highlight=False)
    for note in layout.notes:
        console.print(plain(f"note: {note}"), highlight=False)
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


def input_shapes_line(summary: dict) -> str:
    folded = ", ".join(f"{rule} {n}" for rule, n in summary["folded"].items()) or "nothing"
    return f"input shapes fixed: {describe_input_shapes(summary['fixed'])}; then folded (rewrites): {folded}"


def describe_rollback(rollback: dict) -> str:
    outputs = ", ".join(rollback.get("outputs") or []) or "?"
    if rollback.get("rule"):
        return (f"rewrite {rollback['rule']} at {rollback['root']} (pass {rollback['pass']}): "
                f"{rollback['verdict']} on {outputs}")
    return f"pass {rollback['pass']}: {rollback['verdict']} on {outputs}"


def summary_table(report, size_before: int, size_after: int, seconds: float, external: bool = False) -> Table:
    from rich.table import Table

    table = Table(title="onnxrefine optimize")
    table.add_column("rule")
    table.add_column("rewrites", justify="right")
    table.add_column("refused", justify="right")
    counts = report.log.counts()
    refusals = report.log.refusal_counts()
    for rule in sorted(set(counts) | set(refusals)):
        table.add_row(rule, str(counts.get(rule, 0)), str(refusals.get(rule, 0)))
    table.add_section()
    table.add_row("nodes", f"{report.nodes_before} -> {report.nodes_after}", "")
    text = f"{_size(size_before)} -> {_size(size_after)}"
    if external:
        text += " (external data included)"
    table.add_row("file size", text, "")
    table.add_row("seconds", f"{seconds:.2f}", "")
    budget = getattr(report, "constant_budget", None) or {}
    if budget.get("refused"):  # the run stopped short of what the rules could do: say so
        table.add_row("constant budget", plain(budget_text(budget)), str(budget["refused"]))
    verification = report.verification or {"status": "off"}
    if verification.get("status") == "verified" and verification.get("verifications") == 0:
        text = "exact (unchanged: no rewrite applied)"
    elif verification.get("status") == "verified":
        sets = len(verification.get("input_sets") or [])
        text = f"{verification['verdict']} (end to end, against onnxruntime and float64, {sets} input set(s))"
        if report.rolled_back:
            text += f"; {len(report.rolled_back)} rolled back"
    elif verification.get("status") == "skipped":
        text = f"skipped: {verification['reason']}"
    else:
        text = "off (--no-verify)"
    table.add_row("verification", plain(text), "")
    return table


def budget_text(budget: dict) -> str:
    return (f"{budget['refused']} rewrite(s) refused: new constants may add "
            f"{_size(budget['allowed_growth_bytes'])} in all (--growth-ratio; used {_size(max(0, budget['growth_bytes']))}) "
            f"and {_size(budget['per_tensor_bytes'])} each (--max-tensor-bytes)")


def refusals_table(report) -> Table:
    from rich.table import Table

    table = Table(title="refused rewrites")
    table.add_column("rule")
    table.add_column("node")
    table.add_column("reason")
    for refusal in report.log.refused.values():
        table.add_row(plain(refusal.rule), plain(refusal.node), plain(refusal.reason))  # model names: no markup
    return table


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def write_json_atomically(path: Path, data: dict) -> None:
    folder = path.resolve().parent
    if not folder.is_dir():
        raise BadInputError(f"{path}: folder does not exist")
    atomic.write_atomic(path, json.dumps(data, indent=2))
