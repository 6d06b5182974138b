"""`onnxrefine fuzz`: differential fuzzing of an optimizer with generated models."""

from __future__ import annotations

import argparse


from onnxrefine import progress
from onnxrefine.errors import BadInputError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "fuzz",
        help="fuzz an optimizer with generated models and file only real mismatches",
        description="Generate seeded random models (mostly grown around each pass's pattern), apply "
        "the optimizer one step at a time, verify against a float64 reference with controls, and "
        "write a bundle for each distinct mismatch. Rounding and unstable cases are counted, not filed.",
    )
    parser.add_argument("--target", default="onnxrefine", metavar="OPTIMIZER[:PASS,...]",
                        help="onnxrefine | onnxoptimizer[:pass] | onnxsim | onnxslim | onnxscript | ort")
    parser.add_argument("--passes", default=None, help="comma-separated pass names to fuzz")
    parser.add_argument("--cases", type=int, default=100, metavar="N")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="first case seed")
    parser.add_argument("--jobs", type=int, default=1, metavar="J", help="local worker processes")
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="run cases on a Ray cluster")
    parser.add_argument("--out", default="fuzz-out", metavar="DIR", help="bundle folder")
    parser.add_argument("--max-nodes", type=int, default=None, metavar="K")
    parser.add_argument("--opset", type=int, default=None)
    parser.add_argument("--trials", type=int, default=2, metavar="N",
                        help="random input sets per verification (default 2)")
    parser.add_argument("--targeted", type=float, default=0.8, metavar="F",
                        help="fraction of cases grown around the step's pattern (default 0.8)")
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace):
    from onnxrefine.fuzz.campaign import CampaignSettings, parse_target
    from onnxrefine.fuzz.generator import DEFAULT_MAX_NODES, DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

    optimizer, passes = parse_target(args.target)
    if args.passes:
        if passes:
            raise BadInputError("give passes either in --target OPT:PASS or in --passes, not both")
        passes = tuple(p.strip() for p in args.passes.split(",") if p.strip())
    if args.cases < 1 or args.jobs < 1 or args.trials < 1:
        raise BadInputError("--cases, --jobs and --trials must be at least 1")
    opset = DEFAULT_OPSET if args.opset is None else args.opset
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise BadInputError(f"--opset must be in {MIN_OPSET}..{MAX_OPSET}")
    if not 0.0 <= args.targeted <= 1.0:
        raise BadInputError("--targeted must be between 0 and 1")
    max_nodes = DEFAULT_MAX_NODES if args.max_nodes is None else args.max_nodes
    if max_nodes < 2:
        raise BadInputError("--max-nodes must be at least 2")
    return CampaignSettings(optimizer=optimizer, passes=passes, cases=args.cases, seed=args.seed,
                            opset=opset, max_nodes=max_nodes, trials=args.trials,
                            targeted=args.targeted)


def run(args: argparse.Namespace) -> int:
    from onnxrefine.fuzz.campaign import run_campaign, step_names

    settings = settings_from_args(args)
    step_names(settings)   # unknown optimizer or pass: one-line error before any output

    def update(result, summary):
        progress.report(done=summary.cases, detail=summary.line())

    with progress.phase(f"fuzz {settings.optimizer}", total=settings.cases, detail="starting"):
        summary = run_campaign(settings, args.out, jobs=args.jobs, ray_address=args.ray,
                               on_result=update)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"onnxrefine fuzz --target {settings.optimizer}")
    table.add_column("step", no_wrap=True)
    for column in ("cases", "fired", "fire rate", "mismatch", "rounding", "unstable", "errors"):
        table.add_column(column)
    for step, counts in sorted(summary.per_step.items()):
        table.add_row(step, str(counts["cases"]), str(counts["fired"]), f"{summary.fire_rate(step):.0%}",
                      str(counts["mismatch"]), str(counts["rounding"]), str(counts["unstable"]),
                      str(counts["optimizer_error"] + counts["generator_error"]))
    Console().print(table)
    print(summary.line())
    if summary.mutating_steps:
        print("steps that edited their input model in place: " + ", ".join(sorted(summary.mutating_steps)))
    for bundle in summary.bundles:
        print(f"filed: {bundle}")
    return 1 if summary.bundles else 0
