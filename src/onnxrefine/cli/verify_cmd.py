"""`onnxrefine verify ORIGINAL CANDIDATE`: did the candidate change what the original computes?

Prints a per-output table, the worst intermediate values and the first bad one ("first bad
value: NAME (OP node NODE) mismatch: ..."; see verify/localize/layerwise.py) and, as the last line of
stdout, `verdict: <exact|rounding|unstable|mismatch>`. Exit 0 for exact/rounding, 1 for
unstable/mismatch, 2 for bad input.
"""

from __future__ import annotations

import argparse
import os
import sys

from onnxrefine.cli.arguments import (add_input_shape_argument, add_run_settings_arguments, parse_dims,
                                      run_settings_from_args)
from onnxrefine.errors import BadInputError
from onnxrefine.input_shapes import parse_input_shapes


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="compare an optimized model with its original: exact, rounding, unstable or mismatch",
        description="Run ORIGINAL and CANDIDATE in onnxruntime (CPU, optimizations off, one thread) "
                    "on the same inputs and judge the difference against a float64 evaluation of "
                    "the original; then run both again under deployment settings (default: "
                    "onnxruntime's default optimization level) and judge that apart. "
                    "Exit 0 exact/rounding, 1 unstable/mismatch, 2 bad input.",
    )
    parser.add_argument("original", help="the original .onnx model")
    parser.add_argument("candidate", nargs="?", help="the rewritten .onnx model")
    parser.add_argument("--inputs", metavar="FILE",
                        help="input values: .npz (keys = input names, or '<n>/<name>', n = 0, 1, ..., for several "
                             "sets); a fuzzer oracle.pkl only with --trust-pickle")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="allow --inputs to be a pickle (unpickling runs code from the file)")
    parser.add_argument("--trials", type=int, default=3, metavar="N",
                        help="random input sets and perturbation runs per set (default 3)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    parser.add_argument("--dims", default="", metavar="NAME=N,...",
                        help="values for symbolic input dims, e.g. N=2,batch=1; a dim with no name is input[axis], "
                             "e.g. 'mask[1]=7' (others default to 2, or to sizes the original runs at where it fails at 2)")
    add_input_shape_argument(parser)
    parser.add_argument("--no-stress", action="store_true",
                        help="only random-normal inputs (no negatives/zeros/large/inf/NaN sets)")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="stop starting new input sets after this long")
    parser.add_argument("--no-localize", action="store_true",
                        help="skip layer-wise localisation (judging the intermediate values both models "
                             "hold and naming the first bad one)")
    parser.add_argument("--match-outputs", choices=("name", "position"), default="name",
                        help="pair the two models' outputs by name (default: a candidate with other output "
                        "names or count is a mismatch of interfaces) or by position (for a renamed candidate)")
    parser.add_argument("--json", metavar="OUT", help="write the full report as JSON")
    parser.add_argument("--html", metavar="OUT", help="write a self-contained HTML report")
    add_run_settings_arguments(parser)
    from onnxrefine.cli.arguments import add_memory_budget_argument
    add_memory_budget_argument(parser)
    # -- batch mode (onnxrefine.batch): each model against its optimized X.opt.onnx ------------
    from onnxrefine.cli.batch import add_batch_arguments

    add_batch_arguments(parser)
    parser.set_defaults(func=run)


def _shape_fixed_original(path: str, input_shapes: dict, dims: dict):
    """The original with its input shapes fixed (in memory; weights stay memory-mapped), so the
    generated inputs have exactly those shapes; dims named by a fixed input apply to the others."""
    from onnxrefine.input_shapes import apply
    from onnxrefine.ir import io

    if not os.path.isfile(path):
        raise BadInputError(f"original model not found: {path}")
    model = io.load_model(path)
    _, symbols = apply(model, input_shapes)
    return model, {**symbols, **dims}


def _check_output_path(option: str, path: str | None) -> None:
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BadInputError(f"{option}: folder does not exist: {folder}")


def run(args: argparse.Namespace) -> int:
    from onnxrefine.cli.output import stdout_console
    from onnxrefine.cli.verify_output import render_table
    from onnxrefine.verify import verify_models
    from onnxrefine.verify.inputs import load_inputs

    from onnxrefine.cli import batch

    if batch.is_batch("verify", args):
        return batch.run("verify", args)
    if args.trials < 1:
        raise BadInputError("--trials must be at least 1")
    run_settings = run_settings_from_args(args)
    dims = parse_dims(args.dims)
    input_shapes = parse_input_shapes(args.input_shape)
    _check_output_path("--json", args.json)
    _check_output_path("--html", args.html)
    inputs = load_inputs(args.inputs, trust_pickle=args.trust_pickle) if args.inputs else None
    original = args.original
    if input_shapes:
        original, dims = _shape_fixed_original(args.original, input_shapes, dims)
    report = verify_models(original, args.candidate, inputs=inputs, trials=args.trials,
                           seed=args.seed, dims=dims, stress=not args.no_stress,
                           time_budget_s=args.time_budget, localize=not args.no_localize,
                           match_outputs=args.match_outputs, **run_settings)
    from onnxrefine import atomic

    with atomic.staging():  # both reports become visible together, or neither replaces anything
        if args.json:
            report.write_json(args.json)
        if args.html:
            report.write_html(args.html)
    console = stdout_console()
    render_table(report, console)
    sys.stdout.flush()
    print(f"verdict: {report.verdict}", flush=True)
    return report.exit_code
