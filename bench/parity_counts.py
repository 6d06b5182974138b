"""Node counts, time and verdict of onnxrefine and the peers side by side, one model at a time (a
light companion of run_peers.py for the node-parity question: no latency, no float64 evaluation).

    python bench/parity_counts.py --corpus DIR MODEL[,MODEL...] [--tools onnxrefine,onnxsim,...]
    python bench/parity_counts.py --corpus DIR            # every *.onnx in DIR: any folder of models
    python bench/parity_counts.py --corpus DIR --verdict  # and each result verified against the export

Every tool runs in its own process (a crash or a timeout is a row, not the end of the run) on
DIR/MODEL.onnx; the count includes the nodes of model-local functions (once per function). onnxrefine
runs as `onnxrefine optimize --no-verify` does (certificates on). With `--verdict`, each result is
compared with the export by `onnxrefine verify` (random inputs, one trial, no stress sets) in a process
of its own. Prints a markdown table: the export's node count, each tool's nodes (seconds, verdict),
and the best peer.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = ["onnxrefine", "onnxsim", "onnxslim", "onnxscript", "onnxoptimizer", "ort-basic"]

# One tool's optimization of one model, as a fresh process: writes TARGET and prints its node count and
# seconds as JSON (peer_verdicts.py runs it too, for the files it judges).
TOOL_WORKER = r'''
import json, sys, time
import onnx
tool, source, target = sys.argv[1:4]
started = time.perf_counter()
if tool == "onnxrefine":
    from onnxrefine.api import optimize_ir
    from onnxrefine.ir import io
    model, _ = optimize_ir(io.load_model(source), source_path=source)
    io.save_model(model, target, input_path=source)
elif tool == "onnxsim":
    import onnxsim
    model, _ = onnxsim.simplify(onnx.load(source))
    onnx.save(model, target)
elif tool == "onnxslim":
    import onnxslim
    onnx.save(onnxslim.slim(onnx.load(source)), target)
elif tool == "onnxscript":
    import onnxscript.optimizer
    onnx.save(onnxscript.optimizer.optimize(onnx.load(source)), target)
elif tool == "onnxoptimizer":
    import onnxoptimizer
    onnx.save(onnxoptimizer.optimize(onnx.load(source)), target)
elif tool == "ort-basic":
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = target
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
seconds = time.perf_counter() - started
proto = onnx.load(target, load_external_data=False)
print(json.dumps({"nodes": len(proto.graph.node) + sum(len(f.node) for f in proto.functions),
                  "seconds": seconds}))
'''


def count(path: Path) -> int:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return len(proto.graph.node) + sum(len(f.node) for f in proto.functions)


def run_tool(tool: str, source: Path, workdir: Path, timeout: float) -> dict:
    target = workdir / f"{source.stem}.{tool}.onnx"
    try:
        done = subprocess.run([sys.executable, "-c", TOOL_WORKER, tool, str(source), str(target)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {done.returncode}: {tail[:120]}"}
    return json.loads(lines[-1])


def verdict(source: Path, target: Path, timeout: float) -> str:
    """`onnxrefine verify`'s verdict on `target` against `source` (a word; "error" when it did not run)."""
    try:
        done = subprocess.run([sys.executable, "-m", "onnxrefine", "verify", str(source), str(target), "--no-stress",
                               "--trials", "1"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    lines = [line for line in done.stdout.splitlines() if line.startswith("verdict: ")]
    return lines[-1].split(": ", 1)[1].split()[0] if lines else "error"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="?", help="comma-separated corpus names (file DIR/NAME.onnx; default: every "
                        "*.onnx in DIR)")
    parser.add_argument("--corpus", type=Path, required=True, help="the folder of models")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--verdict", action="store_true", help="verify each result against the export")
    args = parser.parse_args(argv)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if unknown := [t for t in tools if t not in TOOLS]:
        parser.error(f"unknown tools: {', '.join(unknown)}")
    names = ([m.strip() for m in args.models.split(",") if m.strip()] if args.models
             else sorted(p.stem for p in args.corpus.glob("*.onnx")))
    print("| model | export | " + " | ".join(tools) + " | best peer |")
    print("|---|---:|" + "---:|" * len(tools) + "---|")
    with tempfile.TemporaryDirectory(prefix="parity_counts_") as tmp:
        for name in names:
            source = args.corpus / f"{name}.onnx"
            if not source.is_file():
                print(f"| {name} | missing | " + " | ".join("-" for _ in tools) + " | - |")
                continue
            cells, peers = [], {}
            for tool in tools:
                started = time.perf_counter()
                result = run_tool(tool, source, Path(tmp), args.timeout)
                if "error" in result:
                    cells.append("error")
                    print(f"  {name} {tool}: {result['error']}", file=sys.stderr)
                    continue
                target = Path(tmp, f"{source.stem}.{tool}.onnx")
                judged = f", {verdict(source, target, args.timeout)}" if args.verdict else ""
                cells.append(f"{result['nodes']} ({result['seconds']:.1f} s{judged})")
                if tool != "onnxrefine":
                    peers[tool] = result["nodes"]
                print(f"  {name} {tool}: {result['nodes']} nodes, {time.perf_counter() - started:.1f} s{judged}",
                      file=sys.stderr, flush=True)
                target.unlink(missing_ok=True)
            best = min(peers.items(), key=lambda kv: kv[1]) if peers else None
            best_text = f"{best[1]} ({best[0]})" if best else "-"
            print(f"| {name} | {count(source)} | " + " | ".join(cells) + f" | {best_text} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
