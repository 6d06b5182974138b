"""What verification costs: `onnxrefine optimize --no-verify` against the default (auto) run.

For each corpus model (bench/build_corpus.py's output folder, `<name>.onnx`), runs the CLI in a
fresh process twice, `--no-verify` then the default, and prints a markdown table: wall times,
the verification's share of the default run (its own seconds from the JSON report), the
default run's peak RSS (the child's ru_maxrss), the verdict, the number of input sets and the
plan's estimate against the measured verification time, and what was rolled back.

    python bench/verify_cost.py --corpus /work/corpus resnet18 resnet50 mobilenet_v2 bert-base gpt2-small

Outputs go to a temporary folder; the corpus is only read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "bert-base", "gpt2-small"]


def run_cli(args: list[str], timeout: float) -> tuple[float, int, int, str]:
    """(wall seconds, exit code, peak RSS in MiB, combined output) of one CLI process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen([sys.executable, "-m", "onnxrefine", *args], stdout=output,
                                   stderr=subprocess.STDOUT, text=True)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    return seconds, process.returncode, usage.ru_maxrss // 1024, text


def measure(model: Path, work: Path, timeout: float) -> dict:
    plain_out, default_out = work / f"{model.stem}.plain.onnx", work / f"{model.stem}.default.onnx"
    report_path = work / f"{model.stem}.report.json"
    plain_s, plain_rc, plain_rss, plain_text = run_cli(["optimize", str(model), "-o", str(plain_out),
                                                        "--no-verify"], timeout)
    default_s, rc, rss, text = run_cli(["optimize", str(model), "-o", str(default_out), "--report",
                                        str(report_path)], timeout)
    row = {"model": model.stem, "no_verify_s": plain_s, "default_s": default_s, "peak_rss_mib": rss,
           "plain_rss_mib": plain_rss, "rc": rc}
    if rc != 0 or not report_path.is_file():
        row["verdict"] = f"exit {rc}: {text.strip().splitlines()[-1] if text.strip() else ''}"
        return row
    report = json.loads(report_path.read_text())
    verification = report.get("verification") or {}
    row["verdict"] = verification.get("verdict") or f"{verification.get('status')}: {verification.get('reason')}"
    row["verify_s"] = verification.get("seconds")
    row["estimate_s"] = verification.get("estimate_s")
    row["sets"] = len(verification.get("input_sets") or [])
    row["rolled_back"] = [r.get("rule") or r.get("pass") for r in report.get("rolled_back", [])]
    row["plan"] = next((line for line in text.splitlines() if line.startswith("verification:")), "")
    for path in (plain_out, default_out):
        path.unlink(missing_ok=True)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | --no-verify s | default s | ratio | verification s (share) | estimate s | input sets "
             "| peak RSS MiB (--no-verify) | verdict | rolled back |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        verify_s = row.get("verify_s")
        share = f"{verify_s:.1f} ({verify_s / row['default_s']:.0%})" if verify_s is not None else "-"
        estimate = f"{row['estimate_s']:.1f}" if row.get("estimate_s") is not None else "-"
        rolled = ", ".join(row.get("rolled_back") or []) or "none"
        lines.append(
            f"| {row['model']} | {row['no_verify_s']:.1f} | {row['default_s']:.1f} | "
            f"{row['default_s'] / row['no_verify_s']:.1f}x | {share} | {estimate} | {row.get('sets', '-')} | "
            f"{row['peak_rss_mib']:,} ({row['plain_rss_mib']:,}) | {row['verdict']} | {rolled} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"model names in the corpus (default: {' '.join(DEFAULT_MODELS)})")
    parser.add_argument("--corpus", default=os.environ.get("ONNXREFINE_CORPUS", "bench/corpus"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per CLI run")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    names = args.models or DEFAULT_MODELS
    rows = []
    with tempfile.TemporaryDirectory(prefix="verify_cost_") as work:
        for name in names:
            path = corpus / f"{name}.onnx"
            if not path.is_file():
                print(f"skipping {name}: {path} not found", file=sys.stderr)
                continue
            row = measure(path, Path(work), args.timeout)
            rows.append(row)
            print(f"{name}: {row.get('plan', '')}", file=sys.stderr)
    try:
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", file=sys.stderr)
    except OSError:
        pass
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
