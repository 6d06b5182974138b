"""`onnxrefine reduce BUNDLE`: shrink a fuzz bundle to a minimal model that still mismatches."""

from __future__ import annotations

import argparse

from onnxrefine import progress


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reduce",
        help="shrink a fuzz bundle to a minimal model on which the same step still mismatches",
        description="Delta-debug the bundle's model (keep one output, cut nodes into inputs, bypass "
        "nodes, prune), keeping each edit only if the model stays valid and the optimizer step "
        "still gives a mismatch. Writes BUNDLE/reduced/.",
    )
    parser.add_argument("bundle", help="a case_<n>_seed<s>/ folder written by onnxrefine fuzz")
    parser.add_argument("--out", default=None, metavar="DIR", help="output folder (default BUNDLE/reduced)")
    parser.add_argument("--max-checks", type=int, default=300, metavar="N",
                        help="most verifications to spend (default 300)")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS")
    from onnxrefine.cli.arguments import add_memory_budget_argument
    add_memory_budget_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from onnxrefine.errors import BadInputError
    from onnxrefine.fuzz.reduce import reduce_bundle

    if args.max_checks < 1:
        raise BadInputError("--max-checks must be at least 1")
    with progress.phase(f"reduce {args.bundle}"):
        result, folder = reduce_bundle(args.bundle, out_dir=args.out, max_checks=args.max_checks,
                                       time_budget_s=args.time_budget,
                                       progress=lambda line: progress.report(detail=f"kept: {line}"))
    print(f"{result.nodes_before} nodes -> {result.nodes_after} nodes in {result.checks} checks")
    print(f"reduced repro: {folder}")
    return 0

