"""Large external-data models: onnxrefine against onnxscript's optimizer, side by side.

    python bench/large_model.py                        # 3 GiB model (48 layers of 4096x4096 float32)
    python bench/large_model.py --layers 48 160        # and a 10 GiB one: time should grow linearly
    python bench/large_model.py --verified             # also the default (verified) optimize

Models come from bench/big_model.py, built into --dir (default /tmp/bigmodel) when missing. Each tool
runs as a fresh process under /usr/bin/time: wall seconds (imports included) and peak RSS (the
kernel's high-water mark of the process, memory-mapped file pages it touched included). The data
file is read once before each run so every tool starts with the same warm page cache; outputs are
deleted after each run. Rows:

- onnxrefine --no-verify: the CLI as shipped without end-to-end verification (each fused rewrite
  still certified on its matched subgraph, which reads the weights it fuses);
- onnxrefine --no-verify --no-certify: no weight read at all beyond the fingerprints;
- onnxscript: `ir.load`, `onnxscript.optimizer.optimize`, `ir.save(external_data=...)`;
- onnxrefine (verified): the default, with --verified.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH_PYTHON = os.environ.get("BENCH_PYTHON", str(HERE / ".venv-bench" / "bin" / "python"))
ONNXSCRIPT = (
    "import sys, onnx_ir as ir, onnxscript.optimizer as o; m = ir.load(sys.argv[1]); o.optimize(m); "
    "ir.save(m, sys.argv[2], external_data=sys.argv[2].rsplit('/', 1)[-1] + '.data')"
)


def _warm(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(64 << 20):
            pass


def _timed(command: list[str], env: dict) -> tuple[float, int, int, str]:
    """(wall seconds, peak RSS bytes, exit status, what onnxrefine said of verification) of
    `command` under /usr/bin/time."""
    result = subprocess.run(["/usr/bin/time", "-f", "%e %M", *command], env=env, capture_output=True, text=True)
    last = result.stderr.strip().splitlines()[-1].split()
    if result.returncode:
        sys.stderr.write(result.stderr[-2000:])
    said = [line.strip("│ ") for line in result.stdout.splitlines() if line.startswith("│ verification")]
    note = " ".join(" ".join(part.split()) for part in said[0].split("│")[1:]).strip() if said else ""
    return float(last[0]), int(last[1]) * 1024, result.returncode, note


def _remove_outputs(path: Path) -> None:
    for name in (path, Path(str(path) + ".data")):
        name.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[48], help="model sizes, 64 MiB per layer")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--dir", default="/tmp/bigmodel")
    parser.add_argument("--verified", action="store_true", help="also run the default (verified) optimize")
    parser.add_argument("--keep", action="store_true", help="keep the built models")
    args = parser.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), ONNXREFINE_PROGRESS="off", COLUMNS="250")
    refine = [sys.executable, "-m", "onnxrefine", "optimize"]
    rows = []
    for layers in args.layers:
        model = folder / f"big{layers}x{args.hidden}.onnx"
        if not model.exists():
            subprocess.run([sys.executable, str(HERE / "big_model.py"), str(model), "--layers", str(layers),
                            "--hidden", str(args.hidden)], check=True, env=env)
        data = Path(str(model) + ".data")
        gib = data.stat().st_size / 2**30
        out = folder / "bench_out.onnx"
        tools = [("onnxrefine --no-verify", refine + [str(model), "-o", str(out), "--no-verify"]),
                 ("onnxrefine --no-verify --no-certify",
                  refine + [str(model), "-o", str(out), "--no-verify", "--no-certify"]),
                 ("onnxscript", [BENCH_PYTHON, "-c", ONNXSCRIPT, str(model), str(out)])]
        if args.verified:
            tools.append(("onnxrefine (verified)", refine + [str(model), "-o", str(out)]))
        for name, command in tools:
            _warm(data)
            seconds, rss, status, note = _timed(command, env)
            _remove_outputs(out)
            rows.append((f"{gib:.1f} GiB", name, seconds, rss, status, note))
            print(f"{rows[-1][0]:>9}  {name:<36} {seconds:8.1f} s  {rss / 2**30:6.2f} GiB  {note}"
                  + ("" if status == 0 else f"  (exit {status})"), flush=True)
        if not args.keep:
            _remove_outputs(model)
    print()
    print("| model | tool | seconds | s/GiB | peak RSS | verification |")
    print("|---|---|---:|---:|---:|---|")
    for size, name, seconds, rss, status, note in rows:
        failed = "" if status == 0 else f" (exit {status})"
        print(f"| {size} | {name}{failed} | {seconds:.1f} | {seconds / float(size.split()[0]):.2f} | "
              f"{rss / 2**30:.2f} GiB | {note} |")
    if shutil.which("nproc"):
        print(f"\n{os.cpu_count()} cores; wall time includes each tool's imports.")


if __name__ == "__main__":
    main()
