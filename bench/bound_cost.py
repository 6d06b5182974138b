"""What the per-element error bound costs: verify_models on corpus models, bound on and off.

For each model, the candidate is onnxrefine's default optimization of it (no verification); then
verify_models(original, candidate) runs on the corpus' own input set (`<name>.inputs.npz`), once with
the float64 evaluator computing the bound (the default) and once with it turned off everywhere the
verifier evaluates in float64 (the output check, localisation, branch and spec-identity checks: the
package's `evaluate_float64` with error_bounds=False), localisation on. Each mode runs `--repeats`
times, alternating, and the best of each is kept (a shared machine's load moves both alike). Prints a
markdown table of the wall and process CPU seconds of each, their ratios, and the verdicts.

    python bench/bound_cost.py --corpus bench/corpus resnet50 bert-base
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from pathlib import Path

import numpy as np
import onnx

import onnxrefine
from onnxrefine.verify import reference, verify_models
from onnxrefine.verify.reference.evaluator import evaluate_float64


@contextlib.contextmanager
def bounds_off():
    """Every float64 evaluation the verifier makes skips the bound (they import evaluate_float64
    from the package when they run)."""
    saved = reference.evaluate_float64
    reference.evaluate_float64 = functools.partial(evaluate_float64, error_bounds=False)
    try:
        yield
    finally:
        reference.evaluate_float64 = saved


def timed(original, candidate, feeds):
    started, cpu = time.perf_counter(), time.process_time()
    report = verify_models(original, candidate, inputs=[feeds], trials=2)
    return time.perf_counter() - started, time.process_time() - cpu, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print("| model | verify, bound off: wall / CPU s | bound on: wall / CPU s | ratio wall / CPU | verdict off | "
          "verdict on |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        original = onnx.load(str(args.corpus / f"{name}.onnx"))
        feeds = dict(np.load(args.corpus / f"{name}.inputs.npz"))
        candidate = onnxrefine.optimize(original)
        candidate = candidate if isinstance(candidate, onnx.ModelProto) else onnx.load_from_string(
            candidate.SerializeToString())
        off = on = (float("inf"), float("inf"), None)
        for _ in range(args.repeats):
            with bounds_off():
                run = timed(original, candidate, feeds)
            off = min(off, run, key=lambda item: item[1])
            run = timed(original, candidate, feeds)
            on = min(on, run, key=lambda item: item[1])
        print(f"| {name} | {off[0]:.1f} / {off[1]:.1f} | {on[0]:.1f} / {on[1]:.1f} | {on[0] / off[0]:.2f}x / "
              f"{on[1] / off[1]:.2f}x | {off[2].verdict} | {on[2].verdict} |", flush=True)


if __name__ == "__main__":
    main()
