"""Where a default (verified) `onnxrefine optimize` spends its CPU, part by part, per model.

Runs the command in this process (no supervisor, every onnxruntime session in this process:
ONNXREFINE_NO_SUPERVISOR=1, ONNXREFINE_WATCH=never, so that all of its CPU is this process's) on
each model of a folder, with the parts timed by wrapping the functions that do them:

- optimize: the rewrite schedule (passes, certificates and their own float64 references; the
  onnxruntime sessions and runs it makes through the verifier's runner count under those);
- sessions / runs: verification's onnxruntime sessions and model runs (the original and the
  candidate, strict and deployment settings, the determinism re-runs and perturbation controls);
- reference: verification's float64 evaluations with their per-element bounds;
- judge: the verdict rules over the outputs (the control-free pre-judgement and the verdict);
- rest: everything else (loading, planning, writing the output, imports).

One forward pass of the original in onnxruntime (1 thread, optimizations off; on the corpus' own
`<name>.inputs.npz` where there is one) is timed apart, so
that each part also reads in forward passes: the floor of a verification that runs both models on
its input sets under two settings and evaluates the original in float64.

    python bench/verify_floor.py --corpus bench/corpus resnet50 efficientnet_b0 bert-base
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ONNXREFINE_NO_SUPERVISOR", "1")
os.environ.setdefault("ONNXREFINE_WATCH", "never")
os.environ.setdefault("ONNXREFINE_PROGRESS", "off")


def _wrap(owner, name, label, totals, counts, stack):
    """Time `owner.name` as `label`, exclusive of the parts called inside it (they pause it)."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        now = time.process_time()
        if stack:
            totals[stack[-1][0]] += now - stack[-1][1]
        stack.append([label, now])
        counts[label] += 1
        try:
            return original(*args, **kwargs)
        finally:
            now = time.process_time()
            finished = stack.pop()
            totals[finished[0]] += now - finished[1]
            if stack:
                stack[-1][1] = now
    setattr(owner, name, timed)
    return original


def forward_pass(path: Path) -> float:
    """CPU seconds of one run of the model in onnxruntime (1 thread, no optimizations; best of 3)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from onnxrefine.verify.inputs import generate_labelled_inputs

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    given = path.with_name(path.stem + ".inputs.npz")  # the corpus' own inputs (build_corpus.py), else generated
    if given.exists():
        with np.load(given) as stored:
            feeds = {name: stored[name] for name in stored.files}
    else:
        feeds = dict(generate_labelled_inputs(onnx.load(str(path), load_external_data=False), seed=0,
                                              stress=False, trials=1)[0][1])
    best = None
    with np.errstate(all="ignore"):
        for _ in range(3):
            started = time.process_time()
            session.run(None, feeds)
            spent = time.process_time() - started
            best = spent if best is None else min(best, spent)
    return best


def measure(path: Path, out: Path) -> dict:
    from onnxrefine import verified
    from onnxrefine.cli.main import main
    from onnxrefine.verify import evidence, session
    from onnxrefine.verify.ort import runner

    totals, counts, stack = collections.Counter(), collections.Counter(), []
    patched = [(verified._Schedule, "run", "optimize"), (runner.ModelRunner, "__init__", "sessions"),
               (runner.ModelRunner, "run", "runs"), (runner.ModelRunner, "run_outputs", "runs"),
               (session, "float64_reference", "reference"), (session.VerificationSession, "compare", "judge"),
               (evidence, "explained_without_controls", "judge")]
    originals = [(owner, name, _wrap(owner, name, label, totals, counts, stack)) for owner, name, label in patched]
    try:
        started = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["optimize", str(path), str(out)])
        whole = time.process_time() - started
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    totals["rest"] = whole - sum(totals.values())
    return {"code": code, "whole": whole, "totals": totals, "counts": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="model names in --corpus (without .onnx)")
    parser.add_argument("--corpus", default="bench/corpus")
    args = parser.parse_args()
    parts = ("optimize", "sessions", "runs", "reference", "judge", "rest")
    print("| model | one forward pass s | whole s | " + " | ".join(parts) + " |")
    print("|---|---|---|" + "---|" * len(parts))
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            path = Path(args.corpus) / f"{name}.onnx"
            result = measure(path, Path(folder) / f"{name}.opt.onnx")
            one = forward_pass(path)
            cells = []
            for part in parts:
                seconds, count = result["totals"][part], result["counts"][part]
                calls = f", {count} calls" if part in ("sessions", "runs", "reference") else ""
                cells.append(f"{seconds:.2f} ({seconds / one:.0f} passes{calls})")
            print(f"| {name} | {one:.3f} | {result['whole']:.2f} | " + " | ".join(cells) + " |", flush=True)
            if result["code"] != 0:
                print(f"  (exit {result['code']})", file=sys.stderr)


if __name__ == "__main__":
    main()
