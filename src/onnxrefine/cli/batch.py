"""Batch mode of `onnxrefine optimize` and `onnxrefine verify`: many models in one command.

    onnxrefine optimize models/ more.onnx list.txt --jobs 4 --out-dir out/ --time-limit 600
    onnxrefine verify models/ --out-dir out/ --jobs 4      # each X.onnx against out/X.opt.onnx

A folder stands for every .onnx model under it (optimized *.opt.onnx outputs excluded), a .txt
file for the paths it lists, a quoted glob ('models/*.onnx', ** for any depth) for the models it
matches. Batch mode starts when a folder, list file or glob is given, or any of --batch, --jobs,
--ray, --out-dir is; two model paths without them are `optimize IN OUT` (as onnxsim is called). Each model runs the
single-model command in its own process (batch/run.py); the exit code is 0 when every model
succeeded (optimize: written; verify: exact or rounding), 1 otherwise, 2 for bad input.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from onnxrefine.batch.run import LIST_SUFFIXES, is_glob
from onnxrefine.errors import BadInputError

# (dest, child flag, kind): options of the single-model commands passed on to each child.
FORWARDED = {
    "optimize": [("passes", "--passes", "value"), ("disable", "--disable", "value"),
                 ("verify", "--verify", "true"), ("verify", "--no-verify", "false"),
                 ("certify", "--no-certify", "false"), ("no_fixed_point", "--no-fixed-point", "true"),
                 ("verify_budget", "--verify-budget", "value"), ("seed", "--seed", "value"),
                 ("dims", "--dims", "value"), ("max_tensor_bytes", "--max-tensor-bytes", "value"),
                 ("growth_ratio", "--growth-ratio", "value"), ("shape_info", "--no-shape-info", "false")],
    "verify": [("trials", "--trials", "value"), ("seed", "--seed", "value"), ("dims", "--dims", "value"),
               ("no_stress", "--no-stress", "true"), ("time_budget", "--time-budget", "value"),
               ("no_localize", "--no-localize", "true")],
}
SHARED = [("ort_level", "--ort-level", "value"), ("providers", "--providers", "value"),
          ("no_deployment_check", "--no-deployment-check", "true"), ("atol", "--atol", "value"),
          ("rtol", "--rtol", "value"), ("custom_op_library", "--custom-op-library", "value")]
SINGLE_ONLY = {"optimize": (("output", "-o/--output"), ("report", "--report"), ("inputs", "--inputs")),
               "verify": (("json", "--json"), ("html", "--html"), ("inputs", "--inputs"))}


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "batch mode", "many models at once (folders, list files, several paths), each in its own process")
    group.add_argument("more_models", nargs="*", metavar="OUT",
                       help="optimize: the output file, as onnxsim takes it (IN OUT; or give -o); in "
                       "batch mode: more models, folders, list files or globs")
    group.add_argument("--batch", action="store_true",
                       help="treat every path as a model, folder, list file or glob (several model files "
                       "need it: two paths alone are IN OUT)")
    group.add_argument("--jobs", type=int, default=None, metavar="N", help="models run in parallel (default 1)")
    group.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="run the models on a Ray cluster (auto, HOST:PORT, ray://..., local); "
                       "model paths must be visible to its workers")
    group.add_argument("--out-dir", default=None, metavar="DIR",
                       help="optimized models (and the summary) under DIR, mirroring folders given; "
                       "default: X.opt.onnx beside each X.onnx")
    group.add_argument("--summary-dir", default=None, metavar="DIR",
                       help="where summary.json, summary.html and the per-model reports go "
                       "(default: --out-dir, else ./onnxrefine-COMMAND-batch)")
    group.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                       help="wall-clock limit per model; past it the model's process is killed")
    group.add_argument("--memory-limit", default=None, metavar="SIZE",
                       help="resident-memory limit per model (its process tree), a size as --memory-budget "
                       "takes (500MB, 2GiB; a bare number is MiB); past it the process is killed")


def paths_of(command: str, args: argparse.Namespace) -> list[str]:
    first = [args.model] if command == "optimize" else [args.original, args.candidate]
    return [p for p in first + list(args.more_models or []) if p]


def batch_options_given(args: argparse.Namespace) -> bool:
    return bool(args.batch or args.jobs is not None or args.ray or args.out_dir)


def is_batch(command: str, args: argparse.Namespace) -> bool:
    if command == "optimize" and getattr(args, "list_passes", False):
        return False
    if batch_options_given(args):
        return True
    return any(os.path.isdir(p) or Path(p).suffix in LIST_SUFFIXES or is_glob(p) for p in paths_of(command, args))


def check(command: str, args: argparse.Namespace) -> list:
    """Early one-line errors for batch arguments; the models to run."""
    from onnxrefine.batch.run import collect_models, output_path
    from onnxrefine.cli.arguments import writable_folder

    for dest, flag in SINGLE_ONLY[command]:
        if getattr(args, dest, None):
            folders = [p for p in paths_of(command, args) if os.path.isdir(p)]
            why = f"{folders[0]} is a folder, so this is a batch run" if folders else "this is a batch run"
            raise BadInputError(f"{why}: {flag} names one model's file; use --out-dir / --summary-dir")
    if args.ray and args.jobs is not None:
        raise BadInputError("--jobs runs models in local processes and --ray on the cluster: give one of them")
    if args.jobs is not None and args.jobs < 1:
        raise BadInputError("--jobs must be at least 1")
    if args.time_limit is not None and not args.time_limit > 0:
        raise BadInputError("--time-limit must be a positive number")
    if args.memory_limit is not None:
        from onnxrefine.resources import parse_bytes

        if not isinstance(args.memory_limit, float):  # parsed once (check runs before run)
            args.memory_limit = parse_bytes(args.memory_limit, "--memory-limit", bare_unit="MiB") / 2**20
        from onnxrefine import portable

        if not portable.can_measure_memory():
            raise BadInputError("--memory-limit: resident memory cannot be measured here (no /proc, "
                                "psutil or ps); the limit would never fire")
    models = collect_models(paths_of(command, args))
    if args.out_dir:
        writable_folder(args.out_dir, "--out-dir")
    writable_folder(summary_dir(command, args), "--summary-dir")
    outputs: dict = {}
    for model, root in models:
        out = output_path(model, root, args.out_dir).resolve()
        if out in outputs:
            raise BadInputError(f"{model} and {outputs[out]} would both write {out}; give their folder "
                                "instead of the files, or run them separately")
        outputs[out] = model
    return models


def summary_dir(command: str, args: argparse.Namespace) -> str:
    return args.summary_dir or args.out_dir or f"onnxrefine-{command}-batch"


def child_options(command: str, args: argparse.Namespace) -> list[str]:
    argv: list[str] = []
    for dest, flag, kind in FORWARDED[command] + SHARED:
        value = getattr(args, dest, None)
        if kind == "true" and value is True:
            argv.append(flag)
        elif kind == "false" and value is False:
            argv.append(flag)
        elif kind == "value" and value not in (None, ""):
            default = _DEFAULTS.get((command, dest))
            if value != default:
                argv += [flag, str(value)]
    return argv


_DEFAULTS = {("optimize", "seed"): 0, ("verify", "seed"): 0, ("verify", "trials"): 3,
             ("optimize", "disable"): "", ("optimize", "ort_level"): "all", ("verify", "ort_level"): "all",
             ("optimize", "providers"): "CPUExecutionProvider", ("verify", "providers"): "CPUExecutionProvider"}


def run(command: str, args: argparse.Namespace) -> int:
    from onnxrefine import progress
    from onnxrefine.batch import summary
    from onnxrefine.batch.run import Job, output_path, report_name, run_jobs

    models = check(command, args)
    folder = summary_dir(command, args)
    reports = os.path.join(folder, "reports")
    os.makedirs(reports, exist_ok=True)
    options = child_options(command, args)
    jobs, rows_missing = [], {}
    for index, (model, root) in enumerate(models):
        out = output_path(model, root, args.out_dir)
        if command == "optimize":
            out.parent.mkdir(parents=True, exist_ok=True)
        elif not out.is_file():
            rows_missing[index] = {"model": str(model), "output": str(out), "status": "missing",
                                   "error": f"no candidate {out} (run onnxrefine optimize first)"}
        jobs.append(Job(command, str(model), str(out), os.path.join(reports, report_name(index, model)),
                        options, args.time_limit, args.memory_limit))
    todo = [job for index, job in enumerate(jobs) if index not in rows_missing]

    def update(row, done):
        progress.report(done=done, detail=f"{Path(row['model']).name}: {row['status']}")

    where = f"on Ray ({args.ray})" if args.ray else f"{args.jobs or 1} at a time"
    with progress.phase(f"{command} {len(models)} models, {where}", total=len(todo)):
        done = run_jobs(todo, workers=args.jobs or 1, ray_address=args.ray, on_row=update)
    finished = iter(done)
    rows = [rows_missing[i] if i in rows_missing else next(finished) for i in range(len(jobs))]
    settings = {"paths": paths_of(command, args), "jobs": args.jobs, "ray": args.ray, "out_dir": args.out_dir,
                "time_limit_s": args.time_limit, "memory_limit_mb": args.memory_limit, "options": options}
    json_path, html_path = summary.write(folder, command, rows, settings)
    from onnxrefine.cli.output import Col, fitted_table, stdout_console
    from onnxrefine.plain import plain

    console = stdout_console()
    columns = [Col(name, name=name == "model", wrap=name == "error") for name, _ in summary.COLUMNS]
    cells = [[plain(cell) for cell in row] for row in summary.table_rows(rows)]  # paths and errors: no markup
    console.print(fitted_table(console, f"onnxrefine {command}: {len(rows)} models", columns, cells,
                               section_before=(len(rows),)))
    total = summary.totals(rows)
    print(f"{total['models']} models: {total['ok']} ok, {total['failed']} failed")
    print(f"summary: {json_path} and {html_path}")
    return 0 if all(row["status"] == "ok" for row in rows) else 1
