"""What an onnxruntime session of a model file that embeds its weights costs from the file's path, and
in the form the verifier gives it (verify/ort/files.py `ModelFile.mapped_source`: the light graph as
bytes, its large weights references into the file itself, mapped by onnxruntime): CPU seconds and page
faults of creating the session, and whether one run gives the same outputs bit for bit.

    python bench/mapped_sessions.py                         # vit_b_16, resnet50, bert-base of bench/corpus
    python bench/mapped_sessions.py --models M.onnx,N.onnx --level all

Each session is made in a fresh process (a session's copies would otherwise be served from memory
an earlier one freed), the path's first, fastest of --runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ("vit_b_16", "resnet50", "bert-base")

_ONE = r"""
import hashlib, json, os, resource, sys
import numpy as np, onnxruntime as ort
from onnxrefine.verify.ort import files, runner
from onnxrefine.verify.inputs import generate_inputs
path, form, level = sys.argv[1], sys.argv[2], sys.argv[3]
opened = files.open_model(path)
feeds = generate_inputs(opened.proto, seed=0, stress=False, trials=1)[0]
options = ort.SessionOptions()
options.graph_optimization_level = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
options.intra_op_num_threads = 1
before = resource.getrusage(resource.RUSAGE_SELF)
if form == "path":
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
else:
    assert opened.mapped_source() is not None, "the file embeds no large weights"
    session = runner.session_over(opened, options, ["CPUExecutionProvider"])
after = resource.getrusage(resource.RUSAGE_SELF)
outputs = session.run(None, dict(feeds))
digest = [hashlib.sha256(np.ascontiguousarray(o).tobytes()).hexdigest() for o in outputs]
print(json.dumps({"cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                  "faults": after.ru_minflt - before.ru_minflt, "outputs": digest}))
"""


def measure(path: Path, form: str, level: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _ONE, str(path), form, level], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "", "OPENBLAS_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{path.name} ({form}): {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated .onnx paths (default: three corpus models)")
    parser.add_argument("--level", default="disable", choices=("disable", "all"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    paths = [Path(p) for p in args.models.split(",") if p] or \
        [ROOT / "bench" / "corpus" / f"{name}.onnx" for name in DEFAULT_MODELS]
    print(f"session creation at level {args.level}, one thread; CPU s and page faults, fastest of {args.runs}")
    print(f"{'model':32s} {'path cpu':>9s} {'faults':>8s} {'mapped cpu':>11s} {'faults':>8s}  same outputs")
    for path in paths:
        found = {}
        for form in ("path", "mapped"):
            runs = [measure(path, form, args.level) for _ in range(args.runs)]
            found[form] = min(runs, key=lambda r: r["cpu"])
        same = found["path"]["outputs"] == found["mapped"]["outputs"]
        print(f"{path.stem:32s} {found['path']['cpu']:9.3f} {found['path']['faults']:8d} "
              f"{found['mapped']['cpu']:11.3f} {found['mapped']['faults']:8d}  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
