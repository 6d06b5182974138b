"""Where one verified run's verification time goes, step by step: each step of
onnxrefine.verify.session.VerificationSession (the runs of the original and the candidate, the
float64 reference, the controls, the judgement) timed in wall seconds inside `onnxrefine
optimize` (default verification), run in this process.

    python bench/verify_steps.py --corpus bench/corpus --models deeplabv3_mobilenet_v3_large,resnet50
    PYTHONPATH=OTHER/src python bench/verify_steps.py ...   # another checkout's steps, for a before/after

A step absent from a checkout is left out of its table; a step calling another one counts the
other's time too (add_reference holds its float64 evaluations).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

STEPS = ("run_original", "run_candidate", "add_reference", "add_controls", "compare", "verdict")


def _timed(cls, name: str, seen: dict) -> None:
    method = getattr(cls, name, None)
    if method is None:
        return

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            calls, seconds = seen.get(name, (0, 0.0))
            seen[name] = (calls + 1, seconds + time.perf_counter() - started)

    setattr(cls, name, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent / "corpus")
    parser.add_argument("--models", required=True, help="comma-separated model names of the corpus")
    args = parser.parse_args()
    os.environ.setdefault("ONNXREFINE_NO_SUPERVISOR", "1")  # the steps run in this process
    from onnxrefine.cli.main import main as cli
    from onnxrefine.verify.session import VerificationSession

    seen: dict = {}
    for name in STEPS:
        _timed(VerificationSession, name, seen)
    print("| model | step | calls | seconds |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models.split(","):
            seen.clear()
            out = os.path.join(folder, f"{model}.out.onnx")
            started = time.perf_counter()
            with open(os.devnull, "w") as quiet:
                stdout, stderr = sys.stdout, sys.stderr
                sys.stdout = sys.stderr = quiet
                try:
                    code = cli(["optimize", str(args.corpus / f"{model}.onnx"), "-o", out])
                finally:
                    sys.stdout, sys.stderr = stdout, stderr
            for name in STEPS:
                if name in seen:
                    calls, seconds = seen[name]
                    print(f"| {model} | {name} | {calls} | {seconds:.2f} |")
            print(f"| {model} | whole optimize (exit {code}) | 1 | {time.perf_counter() - started:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
