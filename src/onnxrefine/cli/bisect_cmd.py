"""`onnxrefine bisect`: find the first optimizer step that changes what a model computes."""

from __future__ import annotations

import argparse
from pathlib import Path


from onnxrefine import progress
from onnxrefine.cli.checks import bisect_out
from onnxrefine.plain import plain
from onnxrefine.cli.arguments import parse_dims
from onnxrefine.errors import BadInputError
from onnxrefine.ir import io
from onnxrefine.triage.adapters import ADAPTERS
from onnxrefine.triage.bisect import TRIALS, bisect
from onnxrefine.verified import VerifySettings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bisect",
        help="apply an optimizer step by step and name the first step that causes a mismatch",
        description="Apply the optimizer's passes one at a time (onnxrefine: rewrite by rewrite), verify "
        "after each, and write a repro bundle for the first real mismatch.",
    )
    parser.add_argument("model", help="input .onnx file")
    parser.add_argument("--optimizer", default="onnxrefine", choices=sorted(ADAPTERS), metavar="NAME",
                        help=f"which optimizer to bisect: {', '.join(sorted(ADAPTERS))} (default onnxrefine; "
                             "peers are used only when installed)")
    parser.add_argument("--passes", help="comma-separated pass names (default: the optimizer's default list)")
    parser.add_argument("--out", default=None, help="bundle folder (default: <model>.bisect beside the model)")
    parser.add_argument("--inputs", help="input sets (.npz) instead of generated ones")
    parser.add_argument("--dims", default="", help="symbolic dim values for generated inputs, e.g. N=2")
    parser.add_argument("--seed", type=int, default=0, help="seed for generated inputs (default 0)")
    parser.add_argument("--trials", type=int, default=TRIALS, metavar="N",
                        help=f"random input sets per verification (default {TRIALS})")
    from onnxrefine.cli.arguments import add_memory_budget_argument
    add_memory_budget_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onnxrefine.verify.inputs import check_inputs, load_inputs

    from onnxrefine.cli.output import Col, fitted_table, stdout_console

    console = stdout_console()
    if not ADAPTERS[args.optimizer].available():
        raise BadInputError(f"optimizer '{args.optimizer}' is not installed (pip install {ADAPTERS[args.optimizer].package})")
    with progress.phase(f"load {Path(args.model).name}"):
        model = io.from_ir(io.load_model(args.model), "proto")
    out = bisect_out(args)
    settings = VerifySettings(
        seed=args.seed, trials=args.trials, dims=parse_dims(args.dims),
        inputs=check_inputs(model, load_inputs(args.inputs)) if args.inputs else None,  # exit 2 on a mismatch
    )
    passes = [p.strip() for p in args.passes.split(",") if p.strip()] if args.passes else None
    result = bisect(model, optimizer=args.optimizer, passes=passes, out_dir=out, settings=settings)  # shows its steps
    rows = [(plain(step["step"]), plain(step["status"])) for step in result.steps]  # names from the model: no markup
    console.print(fitted_table(console, f"onnxrefine bisect --optimizer {args.optimizer}",
                               [Col("step", name=True), Col("result")], rows))
    if result.verdict == "mismatch":
        where = f" (rewrite {result.rewrite['rule']} at {result.rewrite['root']})" if result.rewrite else ""
        console.print(plain(f"first mismatch: step {result.step}{where}"))
        if result.first_bad_value:
            console.print(f"first bad value: {result.first_bad_value['description']}", markup=False,
                          highlight=False, soft_wrap=True)
        console.print(plain(f"repro bundle: {result.bundle}"))
        print("verdict: mismatch")
        return 1
    # No step turns the verdict to mismatch: the verdict is the worst any step had (one of the four
    # verdict words, as verify prints them).
    from onnxrefine.verify.judge import VERDICTS, worst

    final = worst(step["status"] for step in result.steps if step["status"] in VERDICTS)
    print("no step turns the verdict to mismatch")
    print(f"verdict: {final}")
    return 0
