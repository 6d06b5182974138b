"""What the per-element error bound costs: verify_models on corpus models, bound on and off.

For each model, the candidate is onnxrefine's default optimization of it (no verification); then
verify_models(original, candidate) runs on the corpus' own input set (`<name>.inputs.npz`), once with
the float64 evaluator computing the bound (the default) and once with it turned off (the reference
as it was: evaluate_float64(error_bounds=False)), localisation on. Prints a markdown table of the
wall seconds of each, their ratio, and the verdicts.

    python bench/bound_cost.py --corpus bench/corpus resnet50 bert-base
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx

import onnxrefine
from onnxrefine.verify import verify_models
from onnxrefine.verify.reference.evaluator import evaluate_float64


def without_bounds(model, feeds, **kwargs):
    return evaluate_float64(model, feeds, error_bounds=False, **kwargs)


def timed(original, candidate, feeds, reference, repeats: int):
    best, report = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        report = verify_models(original, candidate, inputs=[feeds], trials=2, reference=reference)
        best = min(best, time.perf_counter() - started)
    return best, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print("| model | verify, bound off (s) | verify, bound on (s) | ratio | verdict off | verdict on |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        original = onnx.load(str(args.corpus / f"{name}.onnx"))
        feeds = dict(np.load(args.corpus / f"{name}.inputs.npz"))
        candidate = onnxrefine.optimize(original)
        candidate = candidate if isinstance(candidate, onnx.ModelProto) else onnx.load_from_string(
            candidate.SerializeToString())
        off, report_off = timed(original, candidate, feeds, without_bounds, args.repeats)
        on, report_on = timed(original, candidate, feeds, None, args.repeats)
        print(f"| {name} | {off:.2f} | {on:.2f} | {on / off:.2f}x | {report_off.verdict} | {report_on.verdict} |",
              flush=True)


if __name__ == "__main__":
    main()
