"""Render the benchmark cache (bench/results.json) as markdown for BENCHMARKS.md."""
from __future__ import annotations

import math
import statistics

MB = 1e6


def _fmt_seconds(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _fmt_error(value) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "**mismatch**"
    if value == 0:
        return "0"
    return f"{value:.1e}"


def _fmt_mb(value) -> str:
    return "-" if value is None else f"{value / MB:,.0f}"


def _ordered(names, order):
    known = [n for n in order if n in names]
    return known + sorted(n for n in names if n not in order)


def _model_table(cache, models) -> list[str]:
    lines = [
        "| model | file MB | nodes | BN | top ops | ORT latency ms | original max abs vs float64 |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for name in models:
        m = cache["models"][name]
        histogram = sorted(m.get("op_histogram", {}).items(), key=lambda kv: (-kv[1], kv[0]))
        top = ", ".join(f"{op} {n}" for op, n in histogram[:4])
        float64 = m.get("float64", {})
        if float64.get("status") == "ok":
            ref = _fmt_error(m.get("original_max_abs_vs_float64"))
        else:
            ref = float64.get("status", "n/a")
        lines.append(
            f"| {name} | {m['file_bytes'] / MB:.1f} | {m['nodes']} | {m['batchnorm_nodes']} | {top} "
            f"| {m.get('latency_ms', 0):.1f} | {ref} |"
        )
    return lines


def _result_table(cache, models, tools) -> list[str]:
    lines = [
        "| model | tool | nodes before → after | BN left | time s (median) | peak RSS MB (× file) "
        "| latency ratio | max abs vs original | max abs vs float64 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in models:
        model = cache["models"][name]
        for tool in tools:
            row = cache["rows"].get(f"{name}|{tool}")
            if row is None:
                continue
            if row["status"] != "ok":
                message = row.get("error", "").replace("|", "\\|").replace("\n", " ")[:90]
                lines.append(
                    f"| {name} | {tool} | {row['status'].upper()} ({row.get('stage', '?')}) | | | "
                    f"| | {message} | |"
                )
                continue
            rss = row.get("peak_rss_bytes")
            rss_text = f"{_fmt_mb(rss)} ({rss / model['file_bytes']:.1f}×)" if rss else "-"
            lines.append(
                f"| {name} | {tool} | {model['nodes']} → {row['nodes_after']} | {row['batchnorm_after']} "
                f"| {_fmt_seconds(row.get('time_s'))} | {rss_text} | {row['latency_ratio']:.3f} "
                f"| {_fmt_error(row.get('max_abs_vs_original'))} "
                f"| {_fmt_error(row.get('max_abs_vs_float64'))} |"
            )
    return lines


def _summary_table(cache, models, tools) -> list[str]:
    ok_rows = {}
    for name in models:
        rows = [cache["rows"].get(f"{name}|{t}") for t in tools]
        ok_rows[name] = [r for r in rows if r and r["status"] == "ok"]
    lines = [
        "| tool | models ok / run | won on nodes | geo-mean latency ratio | median time s "
        "| median peak RSS × file | worst max abs vs original | worst max abs vs float64 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for tool in tools:
        rows = [cache["rows"].get(f"{n}|{tool}") for n in models]
        rows = [r for r in rows if r]
        if not rows:
            lines.append(f"| {tool} | not run | | | | | | |")
            continue
        good = [r for r in rows if r["status"] == "ok"]
        wins = 0
        for name in models:
            candidates = ok_rows[name]
            mine = [r for r in candidates if r["tool"] == tool]
            if mine and mine[0]["nodes_after"] == min(r["nodes_after"] for r in candidates):
                wins += 1
        ratios = [r["latency_ratio"] for r in good if r.get("latency_ratio")]
        geo = math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None
        times = [r["time_s"] for r in good if r.get("time_s") is not None]
        rss_ratio = [
            r["peak_rss_bytes"] / cache["models"][r["model"]]["file_bytes"]
            for r in good
            if r.get("peak_rss_bytes")
        ]
        errors = [r.get("max_abs_vs_original") for r in good if r.get("max_abs_vs_original") is not None]
        errors64 = [r.get("max_abs_vs_float64") for r in good if r.get("max_abs_vs_float64") is not None]
        lines.append(
            f"| {tool} | {len(good)} / {len(rows)} | {wins} | {'-' if geo is None else f'{geo:.3f}'} "
            f"| {_fmt_seconds(statistics.median(times)) if times else '-'} "
            f"| {f'{statistics.median(rss_ratio):.1f}×' if rss_ratio else '-'} "
            f"| {_fmt_error(max(errors)) if errors else 'n/a'} "
            f"| {_fmt_error(max(errors64)) if errors64 else 'n/a'} |"
        )
    return lines


def render(cache: dict, model_order: list[str], tool_order: list[str]) -> str:
    models = _ordered(list(cache["models"]), model_order)
    tools = _ordered({r["tool"] for r in cache["rows"].values()} | set(tool_order), tool_order)
    machine = cache.get("machine", {})
    versions = cache.get("versions", {})
    dates = sorted({r["date"][:10] for r in cache["rows"].values() if r.get("date")})
    settings = cache["runs"][-1]["settings"] if cache.get("runs") else {}
    failures = [r for r in cache["rows"].values() if r.get("status") != "ok"]
    out = [
        "# onnxrefine vs peer ONNX optimizers",
        "",
        "Generated by `bench/run_peers.py` from `bench/results.json`; do not edit by hand.",
        "",
        f"- Date(s) measured: {', '.join(dates) if dates else '-'}",
        f"- Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, "
        f"{machine.get('ram_gib', '?')} GiB RAM, Python {machine.get('python', '?')} "
        f"(load average at start of the last run: {machine.get('loadavg_at_start', 0):.2f})",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- Settings: optimizer runs per cell {settings.get('repeats', '?')} (median wall time), "
        f"latency runs {settings.get('latency_runs', '?')} (median, after 3 warm-ups), "
        f"timeout {settings.get('timeout_s', '?')} s per process",
        "",
        "## Method",
        "",
        "- Corpus: `bench/build_corpus.py`, random weights (BN statistics randomized too), eval mode, "
        "classic TorchScript exporter, opset 17, `TrainingMode.PRESERVE` (inference-form "
        "BatchNormalization kept), exporter constant folding off. Batch 1; images 224×224; BERT/GPT-2 "
        "sequence length 128.",
        "- Each tool runs in a fresh subprocess: load, optimize, save. **time** is that wall time "
        "(tool import excluded; for ort-basic it is the session creation that writes the optimized "
        "model), median of the runs. **peak RSS** is the worker's own high-water mark (`VmHWM`; "
        "includes the Python interpreter and the tool's imports; rows measured before this was "
        "switched from `ru_maxrss`, which Linux inherits from the parent process, say so in the "
        "notes), median of the runs; × file is relative to the input model file size. onnxrefine "
        "runs as its CLI does (`load_model` from the path, weights memory-mapped; streamed save), "
        "without its own verification, like the peers.",
        "- **latency ratio**: onnxruntime CPU, graph optimizations OFF, 1 thread; optimized vs "
        "original, interleaved in one process; median of the runs each. Below 1 is faster.",
        "- **max abs vs original**: largest |Δ| over all outputs against the original model in "
        "onnxruntime (same settings, same fixed inputs). **max abs vs float64**: against "
        "`onnxrefine.verify.reference.evaluator.evaluate_float64` of the original (n/a if not available); "
        "compare with the original's own float64 error in the corpus table: a rewrite that only "
        "re-rounds stays near that figure.",
        "- Tools: onnxrefine `optimize(model)` default pipeline; onnxoptimizer "
        "`optimize(m, get_fuse_and_elimination_passes(), fixed_point=True)`; onnxsim `simplify(m)` "
        "(API defaults, no self-check runs); onnxslim `slim(m)`; onnxscript "
        "`optimizer.optimize(m)` (constant folding + default rewrite rules + CSE/DCE); ort-basic: "
        "onnxruntime `ORT_ENABLE_BASIC` with `optimized_model_filepath`.",
        "- **won on nodes**: models where the tool's node count equals the lowest among tools that "
        "succeeded on that model (ties count for each).",
        "",
        *(["## Conditions of this run", "", *[f"- {note}" for note in cache.get("notes", [])], ""]
          if cache.get("notes") else []),
        "## Corpus",
        "",
        *_model_table(cache, models),
        "",
        "## Summary per tool",
        "",
        *_summary_table(cache, models, tools),
        "",
        "## Per model and tool",
        "",
        *_result_table(cache, models, tools),
        "",
    ]
    if failures:
        out += ["## Failures", ""]
        for row in sorted(failures, key=lambda r: (r["tool"], r["model"])):
            out.append(f"- {row['tool']} on {row['model']} ({row.get('stage', '?')}): "
                       f"{row.get('error', '').splitlines()[0][:300] if row.get('error') else '?'}")
        out.append("")
    return "\n".join(out)
