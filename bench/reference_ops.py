"""Where the float64 reference spends its time, per operator type: the evaluation of each node and
the per-element bound tracked beside it (reference/bound.py), in CPU seconds, on a model's first
generated input set (random0), without the magnitude of terms (as verification's output check runs
it by default). The fastest of `--repeats` evaluations is kept; one BLAS thread, as verification.

    python bench/reference_ops.py --corpus bench/corpus efficientnet_b0 bert-base [--repeats 4] [--top 8]

Run it with PYTHONPATH=TREE/src to measure another tree (before/after a change).
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import numpy as np
import onnx

from onnxrefine import portable
from onnxrefine.verify.inputs import generate_labelled_inputs
from onnxrefine.verify.reference import bound, evaluator


def _timed(totals, counts, function):
    def wrapper(self, node, *args, **kwargs):
        started = time.process_time()
        try:
            return function(self, node, *args, **kwargs)
        finally:
            totals[node.op_type] += time.process_time() - started
            counts[node.op_type] += 1
    return wrapper


def measure(path: Path, repeats: int):
    model = onnx.load(str(path))
    feeds = dict(generate_labelled_inputs(model, seed=0, stress=True, trials=1)[0][1])
    evaluation, bounds, counts = collections.Counter(), collections.Counter(), collections.Counter()
    run_node, after_node = evaluator._Evaluator.run_node, bound.BoundTracker.after_node
    evaluator._Evaluator.run_node = _timed(evaluation, counts, run_node)
    bound.BoundTracker.after_node = _timed(bounds, collections.Counter(), after_node)
    best = None
    try:
        with np.errstate(all="ignore"), portable.one_blas_thread():
            for _ in range(repeats):
                evaluation.clear(), bounds.clear(), counts.clear()
                started = time.process_time()
                evaluator.evaluate_float64(model, feeds, magnitudes=False)
                total = time.process_time() - started
                if best is None or total < best[0]:
                    best = (total, dict(evaluation), dict(bounds), dict(counts))
    finally:
        evaluator._Evaluator.run_node, bound.BoundTracker.after_node = run_node, after_node
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="model names in --corpus (without .onnx)")
    parser.add_argument("--corpus", default="bench/corpus")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--top", type=int, default=8, help="operator types shown per model")
    args = parser.parse_args()
    print("| model | op type | nodes | evaluation s | bound s |")
    print("|---|---|---|---|---|")
    for name in args.models:
        total, evaluation, bounds, counts = measure(Path(args.corpus) / f"{name}.onnx", args.repeats)
        print(f"| {name} | all | {sum(counts.values())} | {sum(evaluation.values()):.3f} | "
              f"{sum(bounds.values()):.3f} (whole evaluation {total:.3f}) |")
        ranked = sorted(counts, key=lambda op: -(evaluation.get(op, 0.0) + bounds.get(op, 0.0)))
        for op in ranked[: args.top]:
            print(f"| | {op} | {counts[op]} | {evaluation.get(op, 0.0):.3f} | {bounds.get(op, 0.0):.3f} |")


if __name__ == "__main__":
    main()
