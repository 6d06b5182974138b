"""What layer-wise localisation costs: `verify_models` with and without it on corpus models.

    PYTHONPATH=src python bench/localize_cost.py [--corpus bench/corpus] resnet50 bert-base ...

Each model is optimized by onnxrefine (default pipeline, no verification) and the result verified
against the original on the corpus inputs plus generated stress sets, once with localize=False and
once with localize=True. Prints one row per model: intermediate values judged, those skipped as
computed identically, onnxruntime batches/runs/sessions, the two verification times and the ratio,
and the verdicts (with the first bad value, if any). Peak RSS is the child process's, per run. The
process's CPU time is printed too (less sensitive to other load than wall clock), and how many
input sets localisation judged on the output check's own float64 evaluation ("shared f64").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _one(corpus: str, name: str, localize: bool) -> dict:
    import numpy as np
    import onnx

    import onnxrefine
    from onnxrefine.verify import verify_models
    from onnxrefine.verify.inputs import generate_labelled_inputs

    model = onnx.load(os.path.join(corpus, f"{name}.onnx"))
    given = dict(np.load(os.path.join(corpus, f"{name}.inputs.npz")))
    optimized = onnxrefine.optimize(model)
    dims = {}
    sets = [given] + [feeds for label, feeds in generate_labelled_inputs(model, seed=0, trials=0)
                      if label.startswith("stress")
                      and all(np.shape(feeds[k]) == np.shape(v) for k, v in given.items())]
    started, cpu = time.perf_counter(), time.process_time()
    report = verify_models(model, optimized, inputs=sets, trials=2, dims=dims, localize=localize)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    section = report.localisation or {}
    return {"seconds": seconds, "cpu": cpu, "shared": section.get("shared_reference"), "verdict": report.verdict, "nodes": len(model.graph.node),
            "checked": section.get("checked"), "identical": section.get("identical_computation"),
            "batches": section.get("batches"), "runs": section.get("runs"), "sessions": section.get("sessions"),
            "first_bad": (section.get("first_bad") or {}).get("name"), "sets": len(report.input_sets),
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--corpus", default=os.environ.get("ONNXREFINE_CORPUS", "bench/corpus"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_one(args.corpus, args.models[0], args.child[1] == "1")))
        return
    header = ("model", "nodes", "sets", "judged", "identical", "batches", "ort runs", "verify s",
              "+localise s", "ratio", "cpu s off/on", "shared f64", "peak MiB off/on", "verdict", "first bad")
    print(" | ".join(header))
    for name in args.models:
        runs = {}
        for flag in ("0", "1"):
            out = subprocess.run([sys.executable, __file__, name, "--corpus", args.corpus, "--child", "x", flag],
                                 capture_output=True, text=True, check=True)
            runs[flag] = json.loads(out.stdout.strip().splitlines()[-1])
        off, on = runs["0"], runs["1"]
        print(" | ".join(str(v) for v in (
            name, on["nodes"], on["sets"], on["checked"], on["identical"], on["batches"], on["runs"],
            f"{off['seconds']:.1f}", f"{on['seconds']:.1f}", f"{on['seconds'] / off['seconds']:.2f}",
            f"{off['cpu']:.1f}/{on['cpu']:.1f}", on["shared"],
            f"{off['rss_mib']:.0f}/{on['rss_mib']:.0f}", on["verdict"], on["first_bad"])), flush=True)


if __name__ == "__main__":
    main()
