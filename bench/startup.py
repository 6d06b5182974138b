"""CLI start-up and the floor under it: import time, wall and CPU time of `onnxrefine --version`,
`optimize` of a five-node model that needs no fold and of the bundled example, and of what any
process that reads an ONNX model pays before it does anything (the interpreter, numpy, onnx,
onnx-ir, onnxruntime; onnxruntime's basic offline optimization of the same five-node model), each
in a fresh interpreter.

    python bench/startup.py                      # this checkout (src/ beside this script)
    python bench/startup.py --src ../other-checkout/src # another checkout
    python bench/startup.py --before ../other-checkout/src # both, run by run in turn: a before/after
    python bench/startup.py --repeat 7 --instructions  # also instructions executed (valgrind)

Import time is the sum of the top-level entries of `python -X importtime` (the interpreter's own
`site`/`encodings` included). Each figure is the fastest of --repeat runs (the least disturbed by
other processes on a shared machine). The heavy column names which of sympy, onnxruntime, rich,
torch and the verifier's rooms (session, float64 reference, judge, report, localize) each command
loaded. The cpu column is user + system time of the whole command.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def five_node_model(path: str) -> str:
    """Conv, Relu, Identity, MaxPool, Sigmoid: one exact rewrite (the Identity goes, on a proof),
    nothing to fold, nothing to certify on onnxruntime."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3), np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Identity", ["r"], ["i"]),
             helper.make_node("MaxPool", ["i"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Sigmoid", ["p"], ["y"])]
    graph = helper.make_graph(nodes, "five", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def commands(out_dir: str) -> list[tuple[str, list[str]]]:
    from process_speed import ORT_BASIC

    example = str(ROOT / "examples" / "tiny_cnn.onnx")
    five = five_node_model(os.path.join(out_dir, "five.onnx"))
    out = os.path.join(out_dir, "out.onnx")
    cli = ["-m", "onnxrefine"]
    return [
        ("floor: python -c pass", ["-c", "pass"]),
        ("floor: import numpy", ["-c", "import numpy"]),
        ("floor: import ml_dtypes", ["-c", "import ml_dtypes"]),
        ("floor: import numpy, onnx", ["-c", "import numpy, onnx"]),
        ("floor: import onnx, onnx_ir, numpy (sympy too)", ["-c", "import onnx, onnx_ir, numpy"]),
        ("floor: import onnxruntime", ["-c", "import onnxruntime"]),
        ("floor: import numpy, onnx, onnxruntime", ["-c", "import numpy, onnx, onnxruntime"]),
        ("ORT basic of the five-node model", ["-c", ORT_BASIC, five, out]),
        ("import onnxrefine (onnx_ir, sympy deferred)", ["-c", "import onnxrefine"]),
        ("onnxrefine --version", [*cli, "--version"]),
        ("optimize five-node --no-verify --no-certify", [*cli, "optimize", five, "-o", out, "--no-verify", "--no-certify"]),
        ("optimize five-node --no-verify", [*cli, "optimize", five, "-o", out, "--no-verify"]),
        ("optimize five-node (default: verify)", [*cli, "optimize", five, "-o", out]),
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


def instructions(argv: list[str], src: str) -> float:
    """Millions of instructions the command executes, its child processes included (valgrind's
    callgrind): unlike time, the same on a loaded machine as on a quiet one. The command runs
    unsupervised (the supervisor's own process would be counted apart from its worker)."""
    env = dict(os.environ, PYTHONPATH=src, ONNXREFINE_PROGRESS="off", ONNXREFINE_NO_SUPERVISOR="1")
    done = subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=/dev/null",
                           sys.executable, *argv], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed under valgrind (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return sum(int(line.split()[-1]) for line in done.stderr.splitlines() if "Collected :" in line) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=str(ROOT / "src"), help="the src/ folder to measure (default: this checkout)")
    parser.add_argument("--before", metavar="SRC", help="another src/ folder, measured in turn with --src run by run "
                        "(a before/after that a changing load disturbs alike)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--instructions", action="store_true",
                        help="also count each command's instructions once under valgrind (slow: about 50x)")
    args = parser.parse_args()
    sources = [args.before, args.src] if args.before else [args.src]
    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        for label, argv in commands(out_dir):
            runs = {src: [] for src in sources}
            for _ in range(args.repeat):
                for src in sources:
                    runs[src].append(measure(argv, src))
            cells = []
            for src in sources:
                cells += [min(r[i] for r in runs[src]) for i in range(3)]
                if args.instructions:
                    cells.append(instructions(argv, src))
            heavy = [", ".join(sorted(runs[src][-1][3])) or "-" for src in sources]
            rows.append((label, cells, " -> ".join(heavy) if len(set(heavy)) > 1 else heavy[0]))
    names = " -> ".join(sources)
    print(f"start-up of {names} (fastest of {args.repeat}; load average {os.getloadavg()[0]:.1f})")
    width = max(len(r[0]) for r in rows)
    heads = ["import s", "wall s", "cpu s"] + (["M instr"] if args.instructions else [])
    if args.before:
        heads = [f"{head} {when}" for when in ("before", "after") for head in heads]
    print(f"{'command':<{width}}  " + "  ".join(f"{head:>{max(8, len(head))}}" for head in heads) + "  heavy modules loaded" + (" (before -> after)" if args.before else ""))
    for label, cells, heavy in rows:
        print(f"{label:<{width}}  " + "  ".join(f"{cell:>{max(8, len(head))}.3f}" for cell, head in zip(cells, heads))
              + f"  {heavy}")


if __name__ == "__main__":
    main()
