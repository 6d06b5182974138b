"""CLI start-up: import time and wall time of `onnxrefine --version`, `optimize` of the bundled
example, and `import onnxrefine`, each in a fresh interpreter.

    python bench/startup.py                      # this checkout (src/ beside this script)
    python bench/startup.py --src ../other-checkout/src # another checkout, for a before/after
    python bench/startup.py --repeat 7

Import time is the sum of the top-level entries of `python -X importtime` (the interpreter's own
`site`/`encodings` included), the median of --repeat runs. The heavy column names which of
sympy, onnxruntime, rich, torch and the verifier's rooms (session, float64 reference, judge,
report, localize) each command loaded. The cpu column (user + system time of the
whole command) is the least disturbed by other processes on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"sympy.core": "sympy", "onnxruntime.capi._pybind_state": "onnxruntime", "rich.console": "rich", "torch": "torch",
         # the verifier's rooms, which a run without verification (and only exact rewrites) never uses
         "onnxrefine.verify.session": "verifier", "onnxrefine.verify.reference": "reference",
         "onnxrefine.verify.judge.verdict": "judge", "onnxrefine.verify.report": "report",
         "onnxrefine.verify.localize": "localize"}


def commands(out_dir: str) -> list[tuple[str, list[str]]]:
    example = str(ROOT / "examples" / "tiny_cnn.onnx")
    out = os.path.join(out_dir, "tiny_cnn.opt.onnx")
    cli = ["-m", "onnxrefine"]
    return [
        ("onnxrefine --version", [*cli, "--version"]),
        ("import onnxrefine", ["-c", "import onnxrefine"]),
        ("optimize example --no-verify --no-certify", [*cli, "optimize", example, "-o", out, "--no-verify", "--no-certify"]),
        ("optimize example --no-verify", [*cli, "optimize", example, "-o", out, "--no-verify"]),
        ("optimize example (default: verify)", [*cli, "optimize", example, "-o", out]),
    ]


def parse_importtime(stderr: str) -> tuple[float, set[str]]:
    """(seconds of import at top level, heavy modules imported)."""
    total_us, names = 0, set()
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "| imported package" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|", 2)
        module = name.strip()
        names.add(module)
        if not name.startswith("  "):  # one space of indent: imported by the program itself
            total_us += int(cumulative)
    return total_us / 1e6, {label for module, label in HEAVY.items() if module in names}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(argv: list[str], src: str) -> tuple[float, float, float, set[str]]:
    env = dict(os.environ, PYTHONPATH=src, ONNXREFINE_PROGRESS="off")
    started, cpu_before = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, _children_cpu() - cpu_before
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    seconds, heavy = parse_importtime(done.stderr)
    return seconds, wall, cpu, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(ROOT / "src"), help="the src/ folder to measure (default: this checkout)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        for label, argv in commands(out_dir):
            runs = [measure(argv, args.src) for _ in range(args.repeat)]
            imports = statistics.median(r[0] for r in runs)
            walls = statistics.median(r[1] for r in runs)
            cpus = statistics.median(r[2] for r in runs)
            rows.append((label, imports, walls, cpus, ", ".join(sorted(runs[-1][3])) or "-"))
    print(f"start-up of {args.src} (median of {args.repeat}; load average {os.getloadavg()[0]:.1f})")
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}}  {'import s':>8}  {'wall s':>7}  {'cpu s':>6}  heavy modules loaded")
    for label, imports, wall, cpu, heavy in rows:
        print(f"{label:<{width}}  {imports:>8.3f}  {wall:>7.3f}  {cpu:>6.3f}  {heavy}")


if __name__ == "__main__":
    main()
