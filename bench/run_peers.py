"""Benchmark onnxrefine against the peer optimizers on the corpus from build_corpus.py.

    bench/.venv-bench/bin/python bench/run_peers.py --quick                 # smoke run, 3 small models
    bench/.venv-bench/bin/python bench/run_peers.py                         # every model in the corpus
    bench/.venv-bench/bin/python bench/run_peers.py --tools onnxrefine      # rerun one tool, merge
    bench/.venv-bench/bin/python bench/run_peers.py --report-only           # re-render BENCHMARKS.md

Every optimizer run and every evaluation happens in a fresh subprocess (bench/_tool_worker.py) with a
timeout, so a tool that raises, crashes, hangs or runs out of memory becomes an error row. Results are
merged into bench/results.json keyed by (model, tool); BENCHMARKS.md is rendered from the whole cache.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import _report
from build_corpus import ALL_MODELS, QUICK_MODELS

BENCH_DIR = Path(__file__).resolve().parent
WORKER = BENCH_DIR / "_tool_worker.py"
TOOLS = ["onnxrefine", "onnxoptimizer", "onnxsim", "onnxslim", "onnxscript", "ort-basic"]


def run_worker(mode: str, report_path: Path, log_path: Path, timeout: float, **options) -> dict:
    """Run one worker in its own process group; always return a report dict."""
    command = [sys.executable, str(WORKER), mode, "--report", str(report_path)]
    for key, value in options.items():
        if value is not None:
            command += [f"--{key.replace('_', '-')}", str(value)]
    report_path.unlink(missing_ok=True)
    started = time.perf_counter()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=BENCH_DIR
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return {"ok": False, "timeout": True, "error": f"timed out after {timeout:g} s"}
    process_s = time.perf_counter() - started
    if report_path.exists():
        report = json.loads(report_path.read_text())
        report["process_s"] = process_s
        return report
    tail = log_path.read_bytes()[-1500:].decode("utf-8", "replace").strip().splitlines()
    reason = f"worker died (exit {returncode}"
    if returncode < 0:
        reason += f", {signal.Signals(-returncode).name}"
    reason += ")"
    return {"ok": False, "error": reason + (": " + tail[-1] if tail else "")}


def load_outputs(path: Path) -> list[np.ndarray] | None:
    if not path.exists():
        return None
    with np.load(path) as data:
        return [data[f"out{i}"] for i in range(len(data.files))]


def max_abs_difference(candidate: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """Largest |candidate - reference| over all outputs; inf on a shape or NaN-pattern mismatch."""
    if len(candidate) != len(reference):
        return float("inf")
    worst = 0.0
    for got, want in zip(candidate, reference):
        got = np.asarray(got)
        want = np.asarray(want)
        if got.shape != want.shape:
            return float("inf")
        if got.dtype.kind not in "fc" and want.dtype.kind not in "fc":
            worst = max(worst, float(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64)), initial=0)))
            continue
        got64 = got.astype(np.float64)
        want64 = want.astype(np.float64)
        nan_got, nan_want = np.isnan(got64), np.isnan(want64)
        if np.any(nan_got != nan_want):
            return float("inf")
        both = ~nan_got
        same_inf = np.isinf(got64) & (got64 == want64)
        diff = np.abs(got64[both & ~same_inf] - want64[both & ~same_inf])
        if diff.size:
            worst = max(worst, float(np.max(diff)))
    return worst


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    except (OSError, StopIteration):
        mem_kib = 0
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kib / 2**20, 1),
        "python": sys.version.split()[0],
        "platform": sys.platform,
        "loadavg_at_start": os.getloadavg()[0],
    }


def tool_versions() -> dict:
    from importlib import metadata

    versions = {}
    for package in [
        "onnxrefine", "onnxoptimizer", "onnxsim", "onnxslim", "onnxscript",
        "onnxruntime", "onnx", "onnx-ir", "torch", "torchvision", "transformers", "numpy",
    ]:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    try:
        commit = subprocess.run(
            ["git", "-C", str(BENCH_DIR.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(BENCH_DIR.parent), "status", "--porcelain", "--", "src"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        # The measured code may include uncommitted work in the tree: say so beside the commit.
        versions["onnxrefine"] += f" (git {commit}{' + uncommitted changes' if dirty else ''})"
    except (OSError, subprocess.CalledProcessError):
        pass
    return versions


TOOL_PACKAGE = {"ort-basic": "onnxruntime"}


def ensure_original(name: str, entry: dict, corpus: Path, runs: Path, cache: dict, args) -> dict:
    """Outputs, latency and float64 reference of the unoptimized model, computed once per file."""
    model_path = corpus / entry["file"]
    stamp = [model_path.stat().st_size, model_path.stat().st_mtime_ns]
    record = cache["models"].get(name, {})
    if record.get("stamp") != stamp:
        # A re-exported model invalidates everything measured on the old file.
        record = {"stamp": stamp}
        for stale in ("original.npz", "float64.npz"):
            (runs / stale).unlink(missing_ok=True)
    record.update({k: entry[k] for k in ("file_bytes", "nodes", "batchnorm_nodes", "op_histogram")})
    original_npz = runs / "original.npz"
    if not record.get("latency_ms") or not original_npz.exists():
        report = run_worker(
            "evaluate", runs / "original.report.json", runs / "original.log", args.timeout,
            model=model_path, feeds=corpus / entry["inputs_file"], outputs=original_npz,
            latency_runs=args.latency_runs,
        )
        if not report.get("ok"):
            raise RuntimeError(f"original model does not run in onnxruntime: {report.get('error')}")
        record["latency_ms"] = report["latency_ms"]
    float64_npz = runs / "float64.npz"
    if args.refresh_float64 or not float64_npz.exists():
        float64_npz.unlink(missing_ok=True)
        report = run_worker(
            "float64", runs / "float64.report.json", runs / "float64.log", args.float64_timeout,
            model=model_path, feeds=corpus / entry["inputs_file"], outputs=float64_npz,
        )
        if report.get("ok"):
            record["float64"] = {"status": "ok", "seconds": report["seconds"]}
        elif report.get("unavailable"):
            record["float64"] = {"status": "n/a", "error": report["error"]}
        else:
            record["float64"] = {"status": "error", "error": report.get("error")}
    cache["models"][name] = record
    return record


def measure_tool(name: str, entry: dict, tool: str, corpus: Path, runs: Path, args, versions) -> dict:
    model_path = corpus / entry["file"]
    optimized_path = runs / f"{tool}.onnx"
    row = {
        "model": name,
        "tool": tool,
        "tool_version": versions.get(TOOL_PACKAGE.get(tool, tool), "?"),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "outputs_file": None,
    }
    log_path = runs / f"{tool}.log"
    log_path.unlink(missing_ok=True)
    reports = []
    for attempt in range(args.repeats):
        report = run_worker(
            "optimize", runs / f"{tool}.report.json", log_path, args.timeout,
            tool=tool, input=model_path, output=optimized_path,
        )
        if not report.get("ok"):
            row.update(status="timeout" if report.get("timeout") else "error", stage="optimize")
            row["error"] = report.get("error", "unknown failure")
            if report.get("peak_rss_bytes"):
                row["peak_rss_bytes"] = report["peak_rss_bytes"]
            return row
        reports.append(report)
        if attempt == 0 and report["total_s"] > args.single_run_above:
            break  # one run of a very slow tool is enough to rank it
    row["runs_s"] = [r["total_s"] for r in reports]
    row["time_s"] = statistics.median(row["runs_s"])
    row["optimize_s"] = statistics.median(r["optimize_s"] for r in reports)
    row["peak_rss_bytes"] = int(statistics.median(r["peak_rss_bytes"] for r in reports))
    row["rss_after_import_bytes"] = int(statistics.median(r["rss_after_import_bytes"] for r in reports))
    outputs_npz = runs / f"{tool}.npz"
    outputs_npz.unlink(missing_ok=True)
    report = run_worker(
        "evaluate", runs / f"{tool}.eval.json", log_path, args.timeout,
        model=optimized_path, baseline=model_path, feeds=corpus / entry["inputs_file"],
        outputs=outputs_npz, latency_runs=args.latency_runs,
    )
    if not args.keep_models:
        optimized_path.unlink(missing_ok=True)
    if not report.get("ok"):
        row.update(status="error", stage="evaluate", error=report.get("error", "unknown failure"))
        return row
    row.update(
        status="ok",
        nodes_after=report["nodes"],
        batchnorm_after=report["batchnorm_nodes"],
        file_bytes_after=report["file_bytes"],
        op_histogram_after=report["op_histogram"],
        latency_ms=report["latency_ms"],
        baseline_latency_ms=report["baseline_latency_ms"],
        latency_ratio=report["latency_ms"] / report["baseline_latency_ms"],
        # relative inside bench/, absolute for a --runs-dir elsewhere (BENCH_DIR / absolute = absolute)
        outputs_file=str(outputs_npz.relative_to(BENCH_DIR) if outputs_npz.is_relative_to(BENCH_DIR) else outputs_npz),
    )
    return row


def compare_all(cache: dict) -> None:
    """(Re)compute error columns for every cached row whose outputs are still on disk."""
    for row in cache["rows"].values():
        if row.get("status") != "ok" or not row.get("outputs_file"):
            continue
        runs = (BENCH_DIR / row["outputs_file"]).parent
        try:
            candidate = load_outputs(BENCH_DIR / row["outputs_file"])
            original = load_outputs(runs / "original.npz")
            reference = load_outputs(runs / "float64.npz")
        except (OSError, ValueError, KeyError) as exc:  # e.g. a file another run is writing
            print(f"{row['model']}/{row['tool']}: outputs unreadable ({exc}); errors not updated")
            continue
        if candidate is None or original is None:
            continue
        row["max_abs_vs_original"] = max_abs_difference(candidate, original)
        row["max_abs_vs_float64"] = max_abs_difference(candidate, reference) if reference else None
        model = cache["models"].get(row["model"])
        if model is not None and reference is not None:
            model["original_max_abs_vs_float64"] = max_abs_difference(original, reference)
            model["float64"] = {"status": "ok", **{
                k: v for k, v in model.get("float64", {}).items() if k == "seconds"}}


def merge_caches(cache: dict, other: dict) -> None:
    """Fold another results file into this one: the newer row per (model, tool) wins."""
    for key, row in other.get("rows", {}).items():
        mine = cache["rows"].get(key)
        if mine is None or row.get("date", "") >= mine.get("date", ""):
            cache["rows"][key] = row
    for name, model in other.get("models", {}).items():
        mine = cache["models"].setdefault(name, model)
        if mine is not model and model.get("float64", {}).get("status") == "ok":
            if mine.get("float64", {}).get("status") != "ok":
                mine["float64"] = model["float64"]
                mine["original_max_abs_vs_float64"] = model.get("original_max_abs_vs_float64")
    for package, version in other.get("versions", {}).items():
        if package == "onnxrefine" or package not in cache.setdefault("versions", {}):
            cache["versions"][package] = version
    cache["runs"].extend(other.get("runs", []))


def load_cache(path: Path) -> dict:
    if path.exists():
        cache = json.loads(path.read_text())
    else:
        cache = {}
    cache.setdefault("models", {})
    cache.setdefault("rows", {})
    cache.setdefault("runs", [])
    return cache


PEERS_START, PEERS_END = "<!-- peers:start -->\n", "<!-- peers:end -->"


def save_cache(path: Path, cache: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="only " + ", ".join(QUICK_MODELS))
    parser.add_argument("--models", help="comma-separated model names (default: whole corpus)")
    parser.add_argument("--tools", help="comma-separated subset of: " + ", ".join(TOOLS))
    parser.add_argument("--corpus", type=Path, default=BENCH_DIR / "corpus")
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results.json")
    parser.add_argument("--markdown", type=Path, default=BENCH_DIR / "BENCHMARKS.md")
    parser.add_argument("--repeats", type=int, default=3, help="optimizer runs per tool (median)")
    parser.add_argument("--single-run-above", type=float, default=120.0,
                        help="seconds after which one optimizer run is enough")
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per worker process")
    parser.add_argument("--float64-timeout", type=float, default=300.0)
    parser.add_argument("--refresh-float64", action="store_true")
    parser.add_argument("--keep-models", action="store_true", help="keep optimized .onnx files")
    parser.add_argument("--report-only", action="store_true", help="only re-render from the cache")
    parser.add_argument("--note", action="append", default=[],
                        help="a line about the run's conditions, kept in the cache and the report")
    parser.add_argument("--runs-dir", type=Path, help="working files (default: CORPUS/_runs)")
    parser.add_argument("--merge", type=Path, action="append", default=[],
                        help="fold rows from another results JSON into --results (repeatable)")
    args = parser.parse_args(argv)
    # Workers run with cwd=bench/, so every path handed to them must be absolute.
    args.corpus = args.corpus.resolve()
    args.runs_dir = args.runs_dir.resolve() if args.runs_dir else None

    tools = TOOLS if not args.tools else [t.strip() for t in args.tools.split(",") if t.strip()]
    if unknown := [t for t in tools if t not in TOOLS]:
        parser.error(f"unknown tools: {', '.join(unknown)}")
    manifest_path = args.corpus / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"models": {}}
    if args.models:
        names = [n.strip() for n in args.models.split(",") if n.strip()]
    else:
        order = QUICK_MODELS if args.quick else ALL_MODELS + sorted(set(manifest["models"]) - set(ALL_MODELS))
        names = [n for n in order if n in manifest["models"]]  # extras and @fold/@dynamo variants too
    missing = [n for n in names if n not in manifest["models"]]
    if missing and not args.report_only:
        parser.error(f"not in the corpus (run build_corpus.py first): {', '.join(missing)}")

    cache = load_cache(args.results)
    versions = tool_versions()
    if not args.report_only:
        cache["machine"] = machine_info()
        cache["versions"] = versions
        cache["runs"].append({
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "models": names, "tools": tools,
            "settings": {"repeats": args.repeats, "latency_runs": args.latency_runs,
                         "timeout_s": args.timeout},
        })
        for name in names:
            entry = manifest["models"][name]
            runs = (args.runs_dir or args.corpus / "_runs") / name
            runs.mkdir(parents=True, exist_ok=True)
            try:
                ensure_original(name, entry, args.corpus, runs, cache, args)
            except RuntimeError as exc:
                print(f"{name}: skipped, {exc}", file=sys.stderr)
                continue
            for tool in tools:
                started = time.perf_counter()
                row = measure_tool(name, entry, tool, args.corpus, runs, args, versions)
                cache["rows"][f"{name}|{tool}"] = row
                compare_all(cache)
                save_cache(args.results, cache)
                outcome = row["status"] if row["status"] == "ok" else f"{row['status']}: {row['error'][:100]}"
                print(f"{name:30s} {tool:14s} {time.perf_counter() - started:7.1f} s  {outcome}", flush=True)
    if args.note:
        cache.setdefault("notes", []).extend(args.note)
    for other in args.merge:
        merge_caches(cache, load_cache(other))
    compare_all(cache)
    save_cache(args.results, cache)
    text = _report.render(cache, model_order=ALL_MODELS, tool_order=TOOLS)
    document = text
    if args.markdown.exists():  # the rendered tables replace their own section, between the markers
        current = args.markdown.read_text()
        if PEERS_START in current and PEERS_END in current:
            head, rest = current.split(PEERS_START, 1)
            section = text.split("\n", 1)[1].lstrip("\n").replace("\n## ", "\n### ")  # under the file's own heading
            document = head + PEERS_START + section.rstrip("\n") + "\n" + rest[rest.index(PEERS_END):]
    tmp = args.markdown.with_suffix(".md.tmp")
    tmp.write_text(document)
    os.replace(tmp, args.markdown)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
