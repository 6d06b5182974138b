"""Resident memory of a lazily loaded model whose every weight is read.

    python bench/mapped_weights.py                         # decoders of 200 to 1600 layers
    python bench/mapped_weights.py --layers 800 --src /path/to/other/src   # a before

Files of 8 MiB and more are parsed lazily: each weight over 4 KiB stays in the file, memory-mapped
(ir/wire.py, ir/load.py). Each size runs in a fresh process: `io.load_model`, then `numpy()` of every
memory-mapped weight (what rules, certificates and verification do to the weights they read), then
the process's VmRSS, its file-backed part (RssFile: mapped pages) and VmHWM. With one map per
tensor, every small weight's read faulted in its own neighbourhood (up to a 2 MiB folio) in its own
map; with one shared map per file the mapped pages stay below the file's size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _status() -> dict:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssFile", "VmHWM"):
                fields[key] = int(line.split()[1]) * 1024
    return fields


def step(path: str) -> dict:
    import onnx_ir as ir

    from onnxrefine.ir import io

    started = time.perf_counter()
    model = io.load_model(path)
    mapped = total = 0
    for graph in (model.graph, *model.graph.subgraphs()):
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, ir.ExternalTensor):
                mapped += 1
                total += int(tensor.numpy().view("uint8").sum() & 1)  # touch every byte
    return {"tensors": mapped, "seconds": time.perf_counter() - started, **_status()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="200,400,800,1600")
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the onnxrefine src/ folder to measure")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(step(args.step)))
        return 0
    sys.path.insert(0, str(HERE))
    import onnx
    from _big_graphs import decoder_model

    print(f"{'layers':>6} {'file MB':>8} {'mapped tensors':>14} {'load+read s':>11} {'RSS MB':>8} "
          f"{'mapped MB':>9} {'peak MB':>8}")
    with tempfile.TemporaryDirectory(prefix="mapped_weights_") as tmp:
        for layers in (int(n) for n in args.layers.split(",")):
            path = Path(tmp) / f"decoder{layers}.onnx"
            onnx.save(decoder_model(layers), path)
            env = dict(os.environ, PYTHONPATH=args.src)
            done = subprocess.run([sys.executable, __file__, "--step", str(path)], env=env, capture_output=True,
                                  text=True, check=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{layers:>6} {path.stat().st_size / 1e6:>8.1f} {r['tensors']:>14} {r['seconds']:>11.2f} "
                  f"{r['VmRSS'] / 1e6:>8.0f} {r['RssFile'] / 1e6:>9.0f} {r['VmHWM'] / 1e6:>8.0f}", flush=True)
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
