"""What one `optimize --no-verify` asks of onnxruntime and of onnx's shape inference, per model:
sessions made, shape inferences sent to the contained child (ir/contained.py), memory-budget
estimates (ir/peak.estimate_peak), and the CPU seconds of this process spent in constant folding,
in certificates and in the whole optimization (fastest of --runs; children not counted).

    python bench/optimize_work.py --corpus bench/corpus --models llama-kv,tiny_yolo@dyn
    PYTHONPATH=../other/src python bench/optimize_work.py --corpus bench/corpus   # another tree

The counts do not depend on the machine's load; the seconds do (compare trees on one run only).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(path: Path, runs: int) -> dict[str, float]:
    import onnxruntime as ort

    import onnxrefine
    from onnxrefine.ir import contained, peak
    from onnxrefine.passes import folding
    from onnxrefine.verify.certificate import Certifier

    totals: dict[str, float] = {}
    patched = []

    def timed(owner, name: str, key: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                totals[key] = totals.get(key, 0.0) + time.process_time() - started

        patched.append((owner, name, original))
        setattr(owner, name, wrapper)

    def counted(owner, name: str, key: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            totals[key] = totals.get(key, 0) + 1
            return original(*args, **kwargs)

        patched.append((owner, name, original))
        setattr(owner, name, wrapper)

    timed(folding, "fold_graph", "fold s")
    timed(Certifier, "__call__", "certificates s")
    counted(ort, "InferenceSession", "sessions")
    counted(contained, "infer_shapes", "inferences")
    counted(peak, "estimate_peak", "estimates")
    best: dict[str, float] = {}
    try:
        onnxrefine.optimize(str(path), verify=False)  # imports and first-use caches
        for _ in range(runs):
            gc.collect()
            totals.clear()
            started = time.process_time()
            onnxrefine.optimize(str(path), verify=False)
            totals["optimize s"] = time.process_time() - started
            for key, value in totals.items():
                best[key] = min(best.get(key, value), value)
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "bench" / "corpus", help="folder of .onnx models")
    parser.add_argument("--models", default="", help="comma-separated model names (default: every .onnx file)")
    parser.add_argument("--runs", type=int, default=3, help="optimizations per model; the fastest is kept")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or sorted(p.stem for p in args.corpus.glob("*.onnx"))
    columns = ["sessions", "inferences", "estimates", "fold s", "certificates s", "optimize s"]
    print("| model | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name in names:
        row = measure(args.corpus / f"{name}.onnx", args.runs)
        cells = [f"{row.get(c, 0):.3f}" if c.endswith(" s") else str(int(row.get(c, 0))) for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
