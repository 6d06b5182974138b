"""Where the schedule's CPU goes, per model: `onnxrefine.optimize(path, verify=False)` in this process,
each unit of the schedule (the rule driver's run, each graph-level pass) timed in CPU seconds of this
process (a certificate's onnxruntime child is not counted), fastest of --runs.

    python bench/schedule_cost.py --corpus bench/corpus --models ssdlite320,vit_b_16 --runs 3

Columns: the whole optimize call; the schedule's units summed; the rule driver's first run; its
later runs (rounds 2 and on, after graph-level passes changed the model); graph-pass runs that
changed something and runs that found nothing; the rounds.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import onnxrefine  # noqa: E402
from onnxrefine.passes import pipeline  # noqa: E402

COLUMNS = ("optimize", "schedule", "rules, round 1", "rules, later rounds", "graph passes, changed",
           "graph passes, found nothing", "rounds")


def measure(path: Path) -> tuple:
    runs = []
    started = time.process_time()
    onnxrefine.optimize(str(path), verify=False,
                        on_event=lambda kind, **info: runs.append(info) if kind == "pass" else None)
    total = time.process_time() - started
    rules = [r for r in runs if r["name"] == "rules"]
    graph = [r for r in runs if r["name"] != "rules"]
    return (total, sum(r["seconds"] for r in runs), sum(r["seconds"] for r in rules if r["round"] == 1),
            sum(r["seconds"] for r in rules if r["round"] > 1), sum(r["seconds"] for r in graph if r["changes"]),
            sum(r["seconds"] for r in graph if not r["changes"]), max((r["round"] for r in runs), default=0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "bench" / "corpus", help="folder of .onnx models")
    parser.add_argument("--models", default="", help="comma-separated model names (default: every .onnx file)")
    parser.add_argument("--runs", type=int, default=3, help="runs per model; the fastest optimize is kept")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or sorted(p.stem for p in args.corpus.glob("*.onnx"))
    # The schedule reports each unit's wall seconds; CPU seconds of this process say what the unit
    # itself cost on a machine shared with other work.
    pipeline.time = types.SimpleNamespace(perf_counter=time.process_time)
    print("| model | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for name in names:
        best = min((measure(args.corpus / f"{name}.onnx") for _ in range(args.runs)), key=lambda row: row[0])
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in best[:-1]) + f" | {best[-1]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
