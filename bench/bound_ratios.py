"""Where the per-element bounds grow: per node of a corpus model, the observed float32 error against
float64 and the worst-case bound B and probable bound lambda*sigma beside it (docs/verification.md).

Runs the model in onnxruntime (optimizations off) with every node output exposed, on the corpus' own
input set, and evaluates it in float64 with the bounds. Prints a markdown table: per node, max|O - R| /
max|R|, max B / max|R|, the share of elements where B is +inf, the median of B / (e + u|R|) and of
lambda*sigma / (e + u|R|) (how loose each bound is), and max e / (lambda*sigma) (must stay below 1).

    python bench/bound_ratios.py --corpus bench/corpus bert-base --every 4
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxrefine.verify.reference import bound_of, evaluate_float64, probable_lambda, probable_scale_of

_SKIPPED = {"Identity", "Constant", "Transpose", "Shape", "Gather", "Unsqueeze", "Concat", "Cast", "Reshape"}


def _median(values) -> float:
    return float(np.median(values)) if values.size else float("nan")


def rows_of(model: onnx.ModelProto, feeds: dict) -> list:
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    op_of = {out: node.op_type for node in exposed.graph.node for out in node.output}
    declared = {o.name for o in exposed.graph.output}
    for name in op_of:
        if name and name not in declared:
            exposed.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    run = dict(zip(names, session.run(names, feeds)))
    rows = []

    def observe(name, value):
        worst, scale = bound_of(value), probable_scale_of(value)
        observed = run.get(name)
        if worst is None or scale is None or observed is None or op_of.get(name) in _SKIPPED:
            return
        observed = np.asarray(observed)
        if observed.dtype.kind != "f" or observed.shape != value.shape:
            return
        r = np.asarray(value, np.float64)
        error = np.abs(observed.astype(np.float64) - r)
        floor = error + np.abs(r) * float(np.finfo(observed.dtype).eps) / 2
        probable = probable_lambda(error.size) * scale
        top = float(np.abs(r).max()) or 1.0
        usable, usable_p = np.isfinite(worst) & (floor > 0), np.isfinite(probable) & (floor > 0)
        rows.append((name, op_of[name], float(error.max()) / top,
                     (float(np.max(worst[np.isfinite(worst)])) if np.isfinite(worst).any() else np.inf) / top, float(np.isposinf(worst).mean()),
                     _median(worst[usable] / floor[usable]), _median(probable[usable_p] / floor[usable_p]),
                     float(np.max(np.where(usable_p, error / np.where(probable > 0, probable, 1.0), 0.0), initial=0.0))))

    evaluate_float64(model, feeds, observe=observe)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--every", type=int, default=1, help="print every k-th node (and the last)")
    args = parser.parse_args()
    model = onnx.load(str(args.corpus / f"{args.model}.onnx"))
    feeds = dict(np.load(args.corpus / f"{args.model}.inputs.npz"))
    rows = rows_of(model, feeds)
    print("| node | op | max e / max R | max B / max R | B inf | med B/(e+u R) | med lambda sigma/(e+u R) | "
          "max e / lambda sigma |")
    print("|---|---|---|---|---|---|---|---|")
    for index, row in enumerate(rows):
        if index % args.every == 0 or index == len(rows) - 1:
            print(f"| {row[0][-48:]} | {row[1]} | {row[2]:.1e} | {row[3]:.1e} | {row[4]:.2f} | {row[5]:.1e} | "
                  f"{row[6]:.1e} | {row[7]:.2e} |")


if __name__ == "__main__":
    main()
