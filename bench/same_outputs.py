"""Does a change to the schedule keep every output model the same, bit for bit?

Runs `onnxrefine optimize IN -o OUT` (by default with --no-verify; the schedule is the one the
verified run replays) with two source trees on every model of a folder, a fresh process each, and
compares the written files byte for byte (the model and any external data beside it).

    python bench/same_outputs.py --corpus bench/corpus --base /path/to/other/checkout/src
    python bench/same_outputs.py --corpus bench/corpus --base ../main/src --models resnet18,tiny_yolo

--base is the source folder of the tree compared against (e.g. a checkout of the main branch);
this script's own tree is the other one. Exit status 1 when any model differs or fails.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def optimize(source_tree: Path, model: Path, folder: Path, extra: list[str], timeout: float) -> tuple[int, float]:
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(source_tree))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "onnxrefine", "optimize", str(model), "-o",
                           str(folder / model.name), *extra], env=env, capture_output=True, timeout=timeout)
    return done.returncode, time.perf_counter() - started


def same_folders(left: Path, right: Path) -> bool:
    names = sorted(os.listdir(left))
    if names != sorted(os.listdir(right)):
        return False
    return all(filecmp.cmp(left / name, right / name, shallow=False) for name in names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "bench" / "corpus", help="folder of .onnx models")
    parser.add_argument("--base", type=Path, required=True, help="source folder of the tree compared against")
    parser.add_argument("--models", default="", help="comma-separated model names (default: every .onnx file)")
    parser.add_argument("--args", default="--no-verify", help="arguments for optimize besides IN -o OUT")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    models = [args.corpus / f"{n}.onnx" for n in names] or sorted(args.corpus.glob("*.onnx"))
    extra = args.args.split()
    differing = 0
    print("| model | same | base s | this s |\n|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for model in models:
            base_dir, this_dir = Path(scratch, "base", model.stem), Path(scratch, "this", model.stem)
            base_rc, base_s = optimize(args.base.resolve(), model, base_dir, extra, args.timeout)
            this_rc, this_s = optimize(ROOT / "src", model, this_dir, extra, args.timeout)
            if base_rc or this_rc:
                verdict = f"failed (exit {base_rc} / {this_rc})"
            else:
                verdict = "yes" if same_folders(base_dir, this_dir) else "NO"
            differing += verdict != "yes"
            print(f"| {model.stem} | {verdict} | {base_s:.2f} | {this_s:.2f} |", flush=True)
    print(f"{len(models) - differing} of {len(models)} models the same")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
