"""What verification costs: `onnxrefine optimize --no-verify` against the default (auto) run.

For each corpus model (bench/build_corpus.py's output folder, `<name>.onnx`), runs the CLI in a
fresh process twice, `--no-verify` then the default, and prints a markdown table: wall times,
the verification's share of the default run (its own seconds from the JSON report), the
default run's peak RSS (the child's ru_maxrss), the verdict, the number of input sets and the
plan's estimate against the measured verification time, and what was rolled back.

    python bench/verify_cost.py --corpus bench/corpus resnet18 resnet50 mobilenet_v2 bert-base gpt2-small
    python bench/verify_cost.py --big 48 --big 8 --forced   # bench/big_model.py models only: 3 GiB, 0.5 GiB

`--big LAYERS` (repeatable) adds a bench/big_model.py model of LAYERS 4096x4096 MatMul layers
(external data, 64 MiB a layer: 48 layers are 3 GiB), built in the temporary folder and deleted
after. `--forced` also runs `--verify` (every input set, whatever the estimate) and adds its row.
Outputs go to a temporary folder (`--work` to choose where: big models need disk); the corpus is
only read.
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


def measure(model: Path, work: Path, timeout: float, forced: bool = False, plain=None) -> dict:
    """One row: `--no-verify` (or the given `plain` (seconds, rss) of an earlier row), then the
    default run, or `--verify` when `forced`."""
    plain_out, default_out = work / f"{model.stem}.plain.onnx", work / f"{model.stem}.default.onnx"
    report_path = work / f"{model.stem}.report.json"
    if plain is None:
        plain_s, _, plain_rss, _ = run_cli(["optimize", str(model), "-o", str(plain_out), "--no-verify"], timeout)
        _remove_output(plain_out)
    else:
        plain_s, plain_rss = plain
    default_s, rc, rss, text = run_cli(["optimize", str(model), "-o", str(default_out), "--report",
                                        str(report_path), *(["--verify"] if forced else [])], timeout)
    _remove_output(default_out)
    row = {"model": model.stem + (" --verify" if forced else ""), "no_verify_s": plain_s, "default_s": default_s, "peak_rss_mib": rss,
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
    row["plan"] = _plan_line(text)
    return row


def _plan_line(text: str) -> str:
    """The plan as printed (rich wraps it over several lines: up to the table's title)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("verification:"):
            rest = []
            for more in lines[index + 1:]:
                # ...or the progress display's log lines (stderr shares the output here)
                if not more.strip() or more.strip().startswith(("onnxrefine optimize", "onnxrefine [", "\u250f")):
                    break
                rest.append(more.strip())
            return " ".join([line.strip(), *rest])
    return ""


def _remove_output(path: Path) -> None:
    path.unlink(missing_ok=True)
    Path(str(path) + ".data").unlink(missing_ok=True)


def measure_big(layers: int, work: Path, timeout: float, forced: bool) -> list[dict]:
    """Rows for a bench/big_model.py model of `layers` layers (built in `work`, deleted after)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import big_model

    path = big_model.build(work / f"big{layers}.onnx", layers=layers)
    try:
        weights = (work / f"big{layers}.onnx.data").stat().st_size
        rows = [measure(path, work, timeout)]
        if forced:
            rows.append(measure(path, work, timeout, forced=True,
                                plain=(rows[0]["no_verify_s"], rows[0]["plain_rss_mib"])))
        for row in rows:
            row["model"] = row["model"].replace(path.stem, f"big_model {layers} layers ({weights / 2**30:.2f} GiB)")
            row["weights_mib"] = weights // 2**20
        return rows
    finally:
        _remove_output(path)


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
    parser.add_argument("--big", type=int, action="append", default=[], metavar="LAYERS",
                        help="add a bench/big_model.py model of LAYERS layers (repeatable; 48: 3 GiB)")
    parser.add_argument("--forced", action="store_true", help="with --big: also a --verify row")
    parser.add_argument("--work", help="folder for outputs and built models (default: a temp folder)")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    names = args.models or ([] if args.big else DEFAULT_MODELS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="verify_cost_", dir=args.work) as work:
        for layers in args.big:
            big_rows = measure_big(layers, Path(work), args.timeout, args.forced)
            rows.extend(big_rows)
            for row in big_rows:
                print(f"{row['model']}: {row.get('plan', '')}", file=sys.stderr)
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
