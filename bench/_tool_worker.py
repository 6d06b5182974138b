"""One measurement in a fresh process, driven by run_peers.py (not meant to be run by hand).

Modes (each writes a JSON report to --report; the tools themselves may print anything):
  optimize   load a model, run one optimizer, save the result; wall time and peak RSS
  evaluate   onnxruntime (optimizations off, 1 thread) outputs of a model, and optionally its latency
             interleaved with a baseline model's latency in the same process
  float64    float64 evaluation of a model through onnxrefine.verify.reference.evaluator.evaluate_float64

A separate process per measurement keeps peak RSS honest (ru_maxrss is per process) and lets the
runner survive a tool that crashes, hangs or exhausts memory.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback

import numpy as np

TOOLS = ["onnxrefine", "onnxoptimizer", "onnxsim", "onnxslim", "onnxscript", "ort-basic"]


def peak_rss_bytes() -> int:
    """This process's own high-water RSS (VmHWM). ru_maxrss is not used: Linux carries it over
    from the parent through fork and exec, so a small child reports its parent's peak."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def import_tool(tool: str):
    """Import a tool's module ahead of timing so that import cost is not counted as optimize time."""
    if tool == "onnxrefine":
        from onnxrefine import optimize  # noqa: F401 - fails cleanly if the API has not landed

        import onnxrefine

        return onnxrefine
    if tool == "onnxoptimizer":
        import onnxoptimizer

        return onnxoptimizer
    if tool == "onnxsim":
        import onnxsim

        return onnxsim
    if tool == "onnxslim":
        import onnxslim

        return onnxslim
    if tool == "onnxscript":
        import onnxscript.optimizer

        return onnxscript
    if tool == "ort-basic":
        import onnxruntime

        return onnxruntime
    raise ValueError(f"unknown tool {tool!r}")


def optimize_in_memory(tool: str, module, model):
    if tool == "onnxrefine":
        return module.optimize(model)
    if tool == "onnxoptimizer":
        passes = module.get_fuse_and_elimination_passes()
        return module.optimize(model, passes, fixed_point=True)
    if tool == "onnxsim":
        simplified, check_ok = module.simplify(model)
        if not check_ok:
            raise RuntimeError("onnxsim reported that its own check failed")
        return simplified
    if tool == "onnxslim":
        slimmed = module.slim(model)
        if slimmed is None:
            raise RuntimeError("onnxslim returned None")
        return slimmed
    if tool == "onnxscript":
        # optimize() runs constant folding plus the default rewrite-rule set, CSE and DCE.
        return module.optimizer.optimize(model)
    raise ValueError(tool)


def run_optimize(args) -> dict:
    import onnx

    module = import_tool(args.tool)
    rss_after_import = current_rss_bytes()
    started = time.perf_counter()
    if args.tool == "onnxrefine":
        # What `onnxrefine optimize IN -o OUT --no-verify` does: weights stay memory-mapped from
        # the input file and the output is streamed tensor by tensor.
        from onnxrefine.api import optimize_ir
        from onnxrefine.ir import io

        model = io.load_model(args.input)
        loaded = time.perf_counter()
        model, _ = optimize_ir(model)
        optimized = time.perf_counter()
        io.save_model(model, args.output, input_path=args.input)
        load_s, optimize_s, save_s = loaded - started, optimized - loaded, time.perf_counter() - optimized
    elif args.tool == "ort-basic":
        # ONNX Runtime's offline mode loads, optimizes and saves inside session creation.
        options = module.SessionOptions()
        options.graph_optimization_level = module.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = args.output
        module.InferenceSession(args.input, options, providers=["CPUExecutionProvider"])
        load_s = save_s = None
        optimize_s = time.perf_counter() - started
    else:
        model = onnx.load(args.input)
        loaded = time.perf_counter()
        result = optimize_in_memory(args.tool, module, model)
        optimized = time.perf_counter()
        tmp_path = args.output + ".tmp"
        onnx.save(result, tmp_path)
        os.replace(tmp_path, args.output)
        load_s = loaded - started
        optimize_s = optimized - loaded
        save_s = time.perf_counter() - optimized
    total_s = time.perf_counter() - started
    return {
        "ok": True,
        "total_s": total_s,
        "load_s": load_s,
        "optimize_s": optimize_s,
        "save_s": save_s,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_after_import_bytes": rss_after_import,
    }


def make_session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def feeds_for(session, stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Match stored feeds to the session's inputs by name, else by position."""
    names = [i.name for i in session.get_inputs()]
    if all(n in stored for n in names):
        return {n: stored[n] for n in names}
    ordered = list(stored.values())
    if len(names) > len(ordered):
        raise RuntimeError(f"model wants inputs {names}, corpus feeds are {list(stored)}")
    return dict(zip(names, ordered))


def graph_summary(path: str) -> dict:
    import onnx

    model = onnx.load(path, load_external_data=False)
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {
        "nodes": len(model.graph.node),
        "batchnorm_nodes": ops.get("BatchNormalization", 0),
        "op_histogram": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "file_bytes": os.path.getsize(path),
        "output_names": [o.name for o in model.graph.output],
    }


def run_evaluate(args) -> dict:
    stored = dict(np.load(args.feeds))
    summary = graph_summary(args.model)
    session = make_session(args.model)
    feeds = feeds_for(session, stored)
    outputs = session.run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    np.savez(args.outputs, **{f"out{i}": o for i, o in enumerate(outputs)})
    report = {"ok": True, "output_names": names, **summary}
    if args.latency_runs:
        # Interleave candidate and baseline runs so that machine-load drift hits both equally.
        sessions = {"model": (session, feeds)}
        if args.baseline:
            base = make_session(args.baseline)
            sessions["baseline"] = (base, feeds_for(base, stored))
        for sess, sess_feeds in sessions.values():
            for _ in range(args.warmup):
                sess.run(None, sess_feeds)
        times: dict[str, list[float]] = {key: [] for key in sessions}
        for _ in range(args.latency_runs):
            for key, (sess, sess_feeds) in sessions.items():
                started = time.perf_counter()
                sess.run(None, sess_feeds)
                times[key].append(time.perf_counter() - started)
        report["latency_ms"] = float(np.median(times["model"]) * 1e3)
        if "baseline" in times:
            report["baseline_latency_ms"] = float(np.median(times["baseline"]) * 1e3)
    return report


def run_float64(args) -> dict:
    import onnx

    try:
        from onnxrefine.verify.reference.evaluator import evaluate_float64
    except ImportError as exc:
        return {"ok": False, "unavailable": True, "error": f"{type(exc).__name__}: {exc}"}
    model = onnx.load(args.model)
    stored = dict(np.load(args.feeds))
    initializer_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in initializer_names]
    feeds = {n: stored[n] for n in graph_inputs if n in stored}
    started = time.perf_counter()
    result = evaluate_float64(model, feeds)
    elapsed = time.perf_counter() - started
    output_names = [o.name for o in model.graph.output]
    if isinstance(result, dict):
        outputs = [result[n] for n in output_names]
    else:
        outputs = list(result)
    np.savez(args.outputs, **{f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    return {"ok": True, "seconds": elapsed, "output_names": output_names}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["optimize", "evaluate", "float64"])
    parser.add_argument("--report", required=True)
    parser.add_argument("--tool", choices=TOOLS)
    parser.add_argument("--input")
    parser.add_argument("--output")
    parser.add_argument("--model")
    parser.add_argument("--baseline")
    parser.add_argument("--feeds")
    parser.add_argument("--outputs")
    parser.add_argument("--latency-runs", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    try:
        handler = {"optimize": run_optimize, "evaluate": run_evaluate, "float64": run_float64}
        report = handler[args.mode](args)
    except BaseException as exc:  # noqa: BLE001 - a failing tool is a result, not a crash
        report = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}".strip()[:2000],
            "traceback": traceback.format_exc()[-4000:],
            "peak_rss_bytes": peak_rss_bytes(),
        }
    with open(args.report + ".tmp", "w") as handle:
        json.dump(report, handle)
    os.replace(args.report + ".tmp", args.report)
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
