"""Whole-process speed as a user meets it: each tool run as a fresh process on each model of a folder,
imports, start-up and teardown included; CPU (user+sys of the process and its children) and wall time,
fastest of --runs, and the geometric means against onnxruntime's basic offline optimization.

    python bench/process_speed.py --corpus bench/corpus                     # every model of the folder
    python bench/process_speed.py --corpus bench/corpus --models resnet18,squeezenet1_0 --runs 3
    python bench/process_speed.py --corpus DIR --tools onnxrefine,onnxrefine-verified,ort-basic
    python bench/process_speed.py --before ../other-checkout/src --tools onnxrefine --runs 3  # a before/after

With --before, only the onnxrefine tools run, each run of a model with the other source and then
with this one, back to back (so that what else loads the machine weighs on both alike), and the
table gives user and system CPU apart: on a machine where the first touch of fresh memory is dear
and varies run to run (bench/fresh_memory.py), user CPU is the steadier measure of a change.

Tools (a tool whose package is missing from --peers-python is skipped, with a note):
- onnxrefine: `onnxrefine optimize IN -o OUT --no-verify` (python -m onnxrefine, the current source);
- onnxrefine-verified: the same without --no-verify (the default: certificates and end-to-end verification);
- ort-basic: onnxruntime's InferenceSession at ORT_ENABLE_BASIC with optimized_model_filepath;
- onnxoptimizer, onnxsim, onnxslim: their own command lines (`python -m TOOL IN OUT`);
- onnxscript: `onnxscript.optimizer.optimize` on the loaded model, then onnx.save (it has no command).
onnxrefine's source is byte-compiled first (as an installed package is). Peers run with --peers-python
(default: bench/.venv-bench/bin/python when it exists), onnxrefine with this interpreter.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("onnxrefine", "onnxrefine-verified", "ort-basic", "onnxoptimizer", "onnxsim", "onnxslim", "onnxscript")
BASELINE = "ort-basic"

ORT_BASIC = """
import sys, onnxruntime as ort
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
options.optimized_model_filepath = sys.argv[2]
ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
"""
ONNXSCRIPT = """
import sys, onnx, onnxscript.optimizer
model = onnx.load(sys.argv[1])
onnx.save(onnxscript.optimizer.optimize(model), sys.argv[2])
"""


def command(tool: str, source: Path, target: Path, peers: str) -> list[str]:
    if tool == "onnxrefine":
        return [sys.executable, "-m", "onnxrefine", "optimize", str(source), "-o", str(target), "--no-verify"]
    if tool == "onnxrefine-verified":
        return [sys.executable, "-m", "onnxrefine", "optimize", str(source), "-o", str(target)]
    if tool == "ort-basic":
        return [peers, "-c", ORT_BASIC, str(source), str(target)]
    if tool == "onnxscript":
        return [peers, "-c", ONNXSCRIPT, str(source), str(target)]
    return [peers, "-m", tool, str(source), str(target)]


def available(tool: str, peers: str) -> bool:
    module = {"ort-basic": "onnxruntime", "onnxscript": "onnxscript.optimizer"}.get(tool, tool)
    if tool.startswith("onnxrefine"):
        return True
    probe = subprocess.run([peers, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec('{module.split('.')[0]}') is None)"],
                           capture_output=True)
    return probe.returncode == 0


def run_once(argv: list[str], env: dict, timeout: float) -> tuple[float, float, int]:
    """(CPU seconds of the process and its children, wall seconds, exit code)."""
    (user, system), wall, code = run_split(argv, env, timeout)
    return user + system, wall, code


def run_split(argv: list[str], env: dict, timeout: float) -> tuple[tuple[float, float], float, int]:
    """((user, system) CPU seconds of the process and its children, wall seconds, exit code)."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, status, usage = os.wait4(process.pid, 0)
    except BaseException:
        process.kill()
        raise
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    cpu = (usage.ru_utime, usage.ru_stime)
    return cpu, wall, -1 if wall > timeout else process.returncode


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "bench" / "corpus", help="folder of .onnx models")
    parser.add_argument("--models", default="", help="comma-separated model names (default: every .onnx file)")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of: {', '.join(TOOLS)}")
    parser.add_argument("--runs", type=int, default=3, help="runs per tool and model; the fastest is kept")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take before it counts as failed")
    parser.add_argument("--before", type=Path, help="another onnxrefine source folder (its src/): a before/after table")
    default_peers = ROOT / "bench" / ".venv-bench" / "bin" / "python"
    parser.add_argument("--peers-python", default=str(default_peers) if default_peers.exists() else sys.executable)
    args = parser.parse_args()

    names = [n for n in args.models.split(",") if n] or sorted(p.stem for p in args.corpus.glob("*.onnx"))
    tools = [t for t in args.tools.split(",") if t]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        parser.error(f"unknown tool(s): {', '.join(unknown)}")
    missing = [t for t in tools if not available(t, args.peers_python)]
    tools = [t for t in tools if t not in missing]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=False)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), ONNXREFINE_PROGRESS="off")
    if args.before is not None:
        return before_after(args, names, [t for t in tools if t.startswith("onnxrefine")], env)
    header = ["model"] + [f"{tool} cpu / wall" for tool in tools]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    ratios: dict[str, list[float]] = {tool: [] for tool in tools}
    wall_ratios: dict[str, list[float]] = {tool: [] for tool in tools}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:  # a row as soon as it is measured: a long run killed part way keeps its rows
            source = args.corpus / f"{name}.onnx"
            measured: dict[str, tuple[float, float] | None] = {}
            for tool in tools:
                best = None
                for run in range(args.runs):
                    target = Path(scratch) / f"{tool}.{run}.onnx"
                    cpu, wall, code = run_once(command(tool, source, target, args.peers_python), env, args.timeout)
                    for leftover in Path(scratch).iterdir():
                        leftover.unlink() if leftover.is_file() else None
                    if code != 0:
                        best = None
                        break
                    best = (cpu, wall) if best is None or cpu < best[0] else best
                measured[tool] = best
            base = measured.get(BASELINE)
            cells = [name]
            for tool in tools:
                value = measured.get(tool)
                if value is None:
                    cells.append("failed")
                    continue
                ratio = f" ({value[0] / base[0]:.2f}x)" if base and tool != BASELINE else ""
                if base:
                    ratios[tool].append(value[0] / base[0])
                    wall_ratios[tool].append(value[1] / base[1])
                cells.append(f"{value[0]:.2f} / {value[1]:.2f}{ratio}")
            print("| " + " | ".join(cells) + " |", flush=True)
    for label, table in (("CPU", ratios), ("wall", wall_ratios)):
        print(f"| geometric mean of {label} vs {BASELINE} | " + " | ".join(
            "1.00x" if tool == BASELINE else f"{geomean(table[tool]):.2f}x (max {max(table[tool], default=float('nan')):.2f}x)"
            for tool in tools) + " |")
    print(f"\nfastest of {args.runs} per cell; load average at the end {os.getloadavg()[0]:.1f}")
    if missing:
        print(f"\nnot installed for {args.peers_python}: {', '.join(missing)}")
    return 0


def before_after(args, names: list[str], tools: list[str], env: dict) -> int:
    """Per model and tool, (user, system) CPU of the --before source and of this one, the lowest of
    --runs each, the two run in turn."""
    before = args.before.resolve()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(before)], check=False)
    trees = (("before", dict(env, PYTHONPATH=str(before))), ("after", env))
    print("| model | tool | before user + sys | after user + sys | user after/before | cpu after/before |")
    print("|---|---|---|---|---|---|", flush=True)
    user_ratios: dict[str, list[float]] = {tool: [] for tool in tools}
    cpu_ratios: dict[str, list[float]] = {tool: [] for tool in tools}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            source = args.corpus / f"{name}.onnx"
            for tool in tools:
                best: dict[str, tuple[float, float] | None] = {"before": None, "after": None}
                for run in range(args.runs):
                    for label, tree_env in trees:
                        target = Path(scratch) / f"{label}.{run}.onnx"
                        (user, system), _, code = run_split(command(tool, source, target, args.peers_python),
                                                            tree_env, args.timeout)
                        for leftover in Path(scratch).iterdir():
                            leftover.unlink() if leftover.is_file() else None
                        if code == 0:
                            low = best[label]
                            best[label] = (min(user, low[0]), min(system, low[1])) if low else (user, system)
                if best["before"] is None or best["after"] is None:
                    print(f"| {name} | {tool} | failed | | | |", flush=True)
                    continue
                (bu, bs), (au, as_) = best["before"], best["after"]
                user_ratios[tool].append(au / bu)
                cpu_ratios[tool].append((au + as_) / (bu + bs))
                print(f"| {name} | {tool} | {bu:.2f} + {bs:.2f} | {au:.2f} + {as_:.2f} | {au / bu:.2f} | "
                      f"{(au + as_) / (bu + bs):.2f} |", flush=True)
    for tool in tools:
        print(f"| geometric mean | {tool} | | | {geomean(user_ratios[tool]):.2f} | {geomean(cpu_ratios[tool]):.2f} |")
    print(f"\nlowest user and lowest system CPU of {args.runs} runs each (taken apart), the trees run in turn; "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
