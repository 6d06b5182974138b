"""`onnxrefine fuzz`: differential fuzzing of an optimizer with generated models."""

from __future__ import annotations

import argparse


from onnxrefine import progress
from onnxrefine.errors import BadInputError


# Written out rather than read from triage/adapters.py (whose import pulls in the verifier for every
# command's start-up); tests/test_reduce_faults.py checks it names every adapter.
TARGET_HELP = ("onnxrefine[:pass,...] (each pass a step) | onnxrefine-pipeline (the whole default pipeline "
               "as one step) | onnxoptimizer[:pass,...] | onnxsim | onnxslim | onnxscript | ort (default: onnxrefine)")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "fuzz",
        help="fuzz an optimizer with generated models and file only real mismatches",
        description="Generate seeded random models (mostly grown around each pass's pattern), apply "
        "the optimizer one step at a time, verify against a float64 reference with controls, and "
        "write a bundle for each distinct mismatch. Rounding and unstable cases are counted, not filed.",
    )
    parser.add_argument("--target", default=None, metavar="OPTIMIZER[:PASS,...]",
                        help=TARGET_HELP)
    parser.add_argument("--passes", default=None, help="comma-separated pass names to fuzz")
    # Settings options default to None so that --resume can tell a given option from a default.
    parser.add_argument("--cases", type=int, default=None, metavar="N", help="cases (default 100)")
    parser.add_argument("--seed", type=int, default=None, metavar="S", help="first case seed (default 0)")
    parser.add_argument("--jobs", type=int, default=None, metavar="J",
                        help="local worker processes (default 1); a worker that crashes is replaced "
                        "and its cases re-run, a case that crashes it 3 times is counted `crashed`")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="run cases on a Ray cluster: 'auto' (the running cluster), an address such as "
                        "ray://host:10001, or 'local' (start one on this machine); needs onnxrefine[ray]")
    parser.add_argument("--out", default="fuzz-out", metavar="DIR", help="campaign folder (bundles, journal)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted campaign in --out with its stored settings")
    parser.add_argument("--max-nodes", type=int, default=None, metavar="K",
                        help="most nodes in a generated graph (default: the generator's, at least 2)")
    parser.add_argument("--opset", type=int, default=None, metavar="N",
                        help="opset of the generated models (default: the generator's)")
    parser.add_argument("--trials", type=int, default=None, metavar="N",
                        help="random input sets per verification (default 2)")
    parser.add_argument("--targeted", type=float, default=None, metavar="F",
                        help="fraction of cases grown around the step's pattern (default 0.8)")
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace):
    from onnxrefine.fuzz.settings import CampaignSettings, parse_target
    from onnxrefine.fuzz.generator import DEFAULT_MAX_NODES, DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

    optimizer, passes = parse_target(args.target or "onnxrefine")
    if args.passes:
        if passes:
            raise BadInputError("give passes either in --target OPT:PASS or in --passes, not both")
        passes = tuple(p.strip() for p in args.passes.split(",") if p.strip())
    cases = 100 if args.cases is None else args.cases
    seed = 0 if args.seed is None else args.seed
    trials = 2 if args.trials is None else args.trials
    targeted = 0.8 if args.targeted is None else args.targeted
    if cases < 1 or (args.jobs is not None and args.jobs < 1) or trials < 1:
        raise BadInputError("--cases, --jobs and --trials must be at least 1")
    opset = DEFAULT_OPSET if args.opset is None else args.opset
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise BadInputError(f"--opset must be in {MIN_OPSET}..{MAX_OPSET}")
    if not 0.0 <= targeted <= 1.0:
        raise BadInputError("--targeted must be between 0 and 1")
    max_nodes = DEFAULT_MAX_NODES if args.max_nodes is None else args.max_nodes
    if max_nodes < 2:
        raise BadInputError("--max-nodes must be at least 2")
    return CampaignSettings(optimizer=optimizer, passes=passes, cases=cases, seed=seed,
                            opset=opset, max_nodes=max_nodes, trials=trials, targeted=targeted)


SETTINGS_OPTIONS = ("target", "passes", "cases", "seed", "max_nodes", "opset", "trials", "targeted")


def _resumed_settings(args: argparse.Namespace):
    """With --resume the campaign's stored settings apply; options given on the command line must
    agree with them (journal.open_campaign names the ones that do not)."""
    if all(getattr(args, name) is None for name in SETTINGS_OPTIONS):
        return None
    from onnxrefine.fuzz.journal import stored_settings

    stored = stored_settings(args.out)
    if stored is None:
        raise BadInputError(f"--resume: {args.out} holds no campaign (campaign.json missing)")
    merged = argparse.Namespace(**vars(args))
    if args.target is None and args.passes is None:
        merged.target = stored.optimizer + (":" + ",".join(stored.passes) if stored.passes else "")
    for name in ("cases", "seed", "trials", "targeted", "max_nodes", "opset"):
        if getattr(args, name) is None:
            setattr(merged, name, getattr(stored, name))
    return settings_from_args(merged)


def run(args: argparse.Namespace) -> int:
    from onnxrefine.fuzz.campaign import run_campaign, step_names

    if args.ray and args.jobs is not None:
        raise BadInputError("--jobs sets local worker processes and --ray runs on the cluster's CPUs: "
                            "give one of them")
    if args.resume:
        settings = _resumed_settings(args)
        from onnxrefine.fuzz.journal import open_campaign

        settings = open_campaign(args.out, settings, resume=True) if settings is None else settings
    else:
        settings = settings_from_args(args)
    step_names(settings)   # unknown optimizer or pass: one-line error before any output

    def update(result, summary):
        progress.report(done=summary.cases, detail=summary.line())

    ray = owned = None
    if args.ray:   # connect before any progress output: an unreachable cluster is one line
        from onnxrefine.fuzz.ray_backend import connect

        ray, owned = connect(args.ray)
    try:
        with progress.phase(f"fuzz {settings.optimizer}", total=settings.cases, detail="starting"):
            summary = run_campaign(settings, args.out, jobs=args.jobs or 1, ray_address=args.ray,
                                   on_result=update, resume=args.resume)
    except KeyboardInterrupt:
        import sys

        print(f"onnxrefine: interrupted; finished cases are kept: resume with "
              f"onnxrefine fuzz --resume --out {args.out}", file=sys.stderr)
        return 130
    finally:
        if owned:
            ray.shutdown()
    from onnxrefine.cli.output import Col, fitted_table, stdout_console

    console = stdout_console()
    columns = [Col("step", name=True), Col("cases", "right"), Col("fired", "right"), Col("fire rate", "right", drop=1),
               Col("mismatch", "right"), Col("rounding", "right", drop=2), Col("unstable", "right"),
               Col("errors", "right")]
    rows = [(step, str(counts["cases"]), str(counts["fired"]), f"{summary.fire_rate(step):.0%}",
             str(counts["mismatch"]), str(counts["rounding"]), str(counts["unstable"]),
             str(counts["optimizer_error"] + counts["generator_error"] + counts["crashed"] + counts["runtime_crash"] + counts["internal_error"]))
            for step, counts in sorted(summary.per_step.items())]
    console.print(fitted_table(console, f"onnxrefine fuzz --target {settings.optimizer}", columns, rows))
    print(summary.line())
    if summary.workers_replaced:
        print(f"workers lost and replaced: {summary.workers_replaced} (their cases re-ran)")
    if summary.mutating_steps:
        print("steps that edited their input model in place: " + ", ".join(sorted(summary.mutating_steps)))
    for bundle in summary.bundles:
        print(f"filed: {bundle}")
    return 1 if summary.bundles else 0
