"""Corpus optimize time and peak RSS: onnxrefine (CLI path and API path) against onnxruntime's
basic level (ORT_ENABLE_BASIC with optimized_model_filepath: load, optimize, save).

    python bench/corpus_speed.py                       # every model of bench/corpus
    python bench/corpus_speed.py --models bert-base,resnet50 --src ../other-checkout/src   # a before
    python bench/corpus_speed.py --certify             # with per-rewrite certificates (the default of both paths)

Rows, each measured in its own fresh process, one at a time (peak RSS is that process's VmHWM):
- ort-basic: `InferenceSession(path, options)` writing the optimized model;
- cli: what `onnxrefine optimize IN -o OUT --no-verify [--no-certify]` does: memory-mapped load,
  optimize, streamed save (load to save timed);
- api: `onnxrefine.optimize(proto)` on a ModelProto loaded with onnx.load before the clock starts
  (the caller's proto is in the peak, as it is in the caller's process).
Import time is excluded everywhere. Wall time on a shared machine varies by 2x between runs; the cpu
column (process CPU time of the timed region) is steadier: compare that.
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

ROOT = Path(__file__).resolve().parent.parent
MODES = ("ort-basic", "cli", "api")


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def step(mode: str, source: str, target: str, certify: bool) -> dict:
    if mode == "ort-basic":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = target
        started, cpu = time.perf_counter(), time.process_time()
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    elif mode == "cli":
        import onnxruntime  # noqa: F401 - imported where first used; the import is not timed
        from onnxrefine.api import optimize_ir
        from onnxrefine.ir import io

        started, cpu = time.perf_counter(), time.process_time()
        model = io.load_model(source)
        model, _ = optimize_ir(model, certify=certify)
        io.save_model(model, target, input_path=source)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    else:
        import onnx

        import onnxruntime  # noqa: F401 - imported where first used; the import is not timed

        import onnxrefine

        onnxrefine.optimize  # noqa: B018 - the API module is imported on first use; not timed
        proto = onnx.load(source)
        started, cpu = time.perf_counter(), time.process_time()
        result = onnxrefine.optimize(proto, certify=certify)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert isinstance(result, onnx.ModelProto)
    return {"seconds": seconds, "cpu": cpu, "peak_rss": peak_rss_bytes()}


def measure(mode: str, source: Path, target: Path, src: str, certify: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1")
    args = [sys.executable, __file__, "--step", mode, str(source), str(target)] + (["--certify"] if certify else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=os.environ.get("ONNXREFINE_CORPUS", "bench/corpus"))
    parser.add_argument("--models", default="", help="comma-separated names (default: every model)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--src", default=str(ROOT / "src"), help="the onnxrefine src/ folder to measure")
    parser.add_argument("--certify", action="store_true", help="per-rewrite certificates on (off: --no-certify)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--step", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(step(*args.step, certify=args.certify)))
        return 0
    corpus = Path(args.corpus)
    names = [n for n in args.models.split(",") if n] or sorted(p.name[:-5] for p in corpus.glob("*.onnx"))
    modes = [m for m in args.modes.split(",") if m]
    rows = []
    head = " ".join(f"{m + ' wall':>14} {m + ' cpu':>13} {m + ' MB':>12}" for m in modes)
    print(f"{'model':<30} {'MB':>6} {head}", flush=True)
    with tempfile.TemporaryDirectory(prefix="corpus_speed_") as tmp:
        for name in names:
            source = corpus / f"{name}.onnx"
            row = {"model": name, "mb": source.stat().st_size / 1e6}
            for mode in modes:
                row[mode] = measure(mode, source, Path(tmp) / f"{name}.{mode}.onnx", args.src, args.certify)
                for leftover in Path(tmp).glob("*"):
                    leftover.unlink()
            rows.append(row)
            cells = []
            for mode in modes:
                r = row[mode]
                cells.append(f"{'error':>14} {'':>13} {'':>12}" if "error" in r else
                             f"{r['seconds']:>14.2f} {r['cpu']:>13.2f} {r['peak_rss'] / 1e6:>12.0f}")
            print(f"{name:<30} {row['mb']:>6.0f} " + " ".join(cells), flush=True)
    totals = " ".join(f"{sum(r[m].get('seconds', 0.0) for r in rows):>14.2f} "
                      f"{sum(r[m].get('cpu', 0.0) for r in rows):>13.2f} {'':>12}" for m in modes)
    print(f"{'total seconds':<37} {totals}")
    if args.json:
        Path(args.json).write_text(json.dumps({"certify": args.certify, "src": args.src, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
