"""Per-class tables for BENCHMARKS.md: quantized, float16 and contrib-op models.

    # 1. build the models (bench venv), 2. run the peers keeping their outputs, 3. verify and render
    python bench/build_corpus.py --corpus DIR --models resnet18-qdq,bert-base-dynq,resnet18-fp16,bert-base-fp16,bert-base-contrib
    python bench/run_peers.py --corpus DIR --models ... --keep-models --runs-dir bench/corpus/_runs_classes --results R.json
    python bench/class_tables.py --corpus DIR --runs-dir bench/corpus/_runs_classes --results R.json --verify --markdown bench/BENCHMARKS.md

`--verify` runs `onnxrefine verify ORIGINAL CANDIDATE --inputs <fixed inputs> --no-localize` (strict
check with optimizations off, and the deployment check at onnxruntime's default level) on every
tool's kept output and caches the verdicts beside the results (R.verdicts.json). The tables go
between `<!-- classes:start -->` and `<!-- classes:end -->` in the markdown file.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from corpus_classes import DERIVED_MODELS, QUANT_OPS

TOOLS = ["onnxrefine", "onnxoptimizer", "onnxsim", "onnxslim", "onnxscript", "ort-basic"]
CONTRIB_OPS = ("Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu", "FastGelu", "Gelu",
               "QuickGelu", "FusedMatMul", "BiasAdd")
TITLES = {
    "quantized": ("Quantized models", "Q / DQ / DynamicQuantizeLinear (DynQ), integer ops before → after"),
    "half": ("Float16 models", "Cast nodes before → after"),
    "contrib": ("Contrib-op models (com.microsoft)", "contrib ops before → after"),
}
SHORT = {"QuantizeLinear": "Q", "DequantizeLinear": "DQ", "DynamicQuantizeLinear": "DynQ"}
START, END = "<!-- classes:start -->\n", "<!-- classes:end -->"


def _counts(histogram: dict, kind: str) -> str:
    if kind == "quantized":
        return " ".join(f"{SHORT.get(op, op)} {histogram[op]}" for op in QUANT_OPS if histogram.get(op)) or "0"
    if kind == "half":
        return str(histogram.get("Cast", 0))
    return str(sum(histogram.get(op, 0) for op in CONTRIB_OPS))


def _verify(original: Path, candidate: Path, inputs: Path, timeout: float) -> dict:
    out = candidate.with_suffix(".verify.json")
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-m", "onnxrefine", "verify", str(original), str(candidate), "--inputs",
                        str(inputs), "--no-localize", "--json", str(out)], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"verdict": f"timeout ({timeout:g} s)"}
    if not out.exists():
        return {"verdict": "error"}
    report = json.loads(out.read_text())
    worst = lambda rows: max((r.get("comparison", {}).get("max_abs") or 0.0 for r in rows or []), default=None)  # noqa: E731
    return {"verdict": report["verdict"], "strict": [r["verdict"] for r in report.get("outputs", [])],
            "deployment": [r["verdict"] for r in report.get("deployment") or []],
            "deployment_max_abs": worst(report.get("deployment")), "seconds": round(time.perf_counter() - started, 1)}


def _fmt(value, digits=2) -> str:
    return "-" if value is None else (f"{value:.{digits}f}" if value < 10 else f"{value:.1f}")


def render(rows: dict, manifest: dict, verdicts: dict) -> str:
    lines = [START, "One run on the shared 2-core machine (`--repeats 1`); **time** is the optimizer's wall time "
             "in a fresh process (onnxrefine through its API, verification off, as the peers run), **peak RSS** its "
             "VmHWM; **max abs vs original**: run_peers' comparison of the outputs in onnxruntime (optimizations "
             "off). **verdict** is `onnxrefine verify` of the tool's output "
             "against the original on the corpus inputs (strict check with optimizations off, then the deployment "
             "check at onnxruntime's default level; `mismatch` at deployment shows as `mismatch (deployment Δ)`).", ""]
    for kind, (title, counts_title) in TITLES.items():
        models = [m for m, spec in DERIVED_MODELS.items() if spec[1] == kind and m in manifest]
        if not models:
            continue
        lines += [f"### {title}", "", f"| model | tool | nodes before → after | time s | peak RSS MB | max abs vs "
                  f"original | verdict | {counts_title} |", "|---|---|---:|---:|---:|---:|---|---|"]
        for model in models:
            entry = manifest[model]
            for tool in TOOLS:
                row = rows.get(f"{model}|{tool}")
                if row is None:
                    continue
                if row.get("status") != "ok":
                    lines.append(f"| {model} | {tool} | {entry['nodes']} → {row.get('status')} | | | | | |")
                    continue
                v = verdicts.get(f"{model}|{tool}", {})
                verdict = v.get("verdict", "-")
                if "mismatch" in v.get("deployment", []) and "mismatch" not in v.get("strict", []):
                    verdict = f"mismatch (deployment {v.get('deployment_max_abs', 0):.2g})"
                rss = row.get("peak_rss_bytes")
                lines.append(
                    f"| {model} | {tool} | {entry['nodes']} → {row['nodes_after']} | {_fmt(row.get('time_s'))} "
                    f"| {'-' if rss is None else f'{rss / 1e6:,.0f}'} | {row.get('max_abs_vs_original', 0):.2g} "
                    f"| {verdict} | {_counts(entry['op_histogram'], kind)} → "
                    f"{_counts(row.get('op_histogram_after', {}), kind)} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--runs-dir", type=Path, required=True)
    parser.add_argument("--results", type=Path, action="append", required=True)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--verify-timeout", type=float, default=900.0)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    manifest = json.loads((args.corpus / "manifest.json").read_text())["models"]
    rows = {}
    for path in args.results:
        rows.update(json.loads(path.read_text())["rows"])
    cache_path = args.results[0].with_suffix(".verdicts.json")
    verdicts = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    if args.verify:
        for key, row in sorted(rows.items()):
            model, tool = key.split("|")
            candidate = args.runs_dir / model / f"{tool}.onnx"
            if model not in DERIVED_MODELS or row.get("status") != "ok" or key in verdicts or not candidate.exists():
                continue
            entry = manifest[model]
            verdicts[key] = _verify(args.corpus / entry["file"], candidate, args.corpus / entry["inputs_file"],
                                    args.verify_timeout)
            print(f"{key:40s} {verdicts[key]}", flush=True)
            cache_path.write_text(json.dumps(verdicts, indent=1, sort_keys=True) + "\n")
    text = render(rows, manifest, verdicts)
    if args.markdown:
        current = args.markdown.read_text()
        if START in current:
            current = current[:current.index(START)] + text + current[current.index(END) + len(END):]
        else:
            current = current.rstrip("\n") + "\n\n## Quantized, float16 and contrib-op models (`bench/class_tables.py`)\n\n" + text + "\n"
        args.markdown.write_text(current)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
