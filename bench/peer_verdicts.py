"""Do `verify` verdicts on other optimizers' outputs change? Each peer's output of each named corpus
model is judged by verify_models, on the corpus inputs and on generated ones; the verdicts print as a
table and, with --json, are saved so that two runs (two versions of the code) can be compared.

    bench/.venv-bench/bin/python bench/peer_verdicts.py produce --corpus DIR --out WORK MODEL[,MODEL...]
    python bench/peer_verdicts.py judge --corpus DIR --out WORK [--json FILE] MODEL[,MODEL...]
    python bench/peer_verdicts.py compare BEFORE.json AFTER.json

`produce` runs each tool (onnxoptimizer, onnxsim, onnxslim, onnxscript; onnxrefine as
`optimize --no-verify`) in its own process and writes WORK/MODEL.TOOL.onnx; `judge` needs only the
package. `compare` lists every (model, tool, inputs) whose verdict differs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from parity_counts import TOOL_WORKER

TOOLS = ["onnxrefine", "onnxoptimizer", "onnxsim", "onnxslim", "onnxscript"]


def produce(models, corpus: Path, out: Path, timeout: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for model in models:
        for tool in TOOLS:
            target = out / f"{model}.{tool}.onnx"
            if target.exists():
                continue
            try:
                done = subprocess.run([sys.executable, "-c", TOOL_WORKER, tool, str(corpus / f"{model}.onnx"), str(target)],
                                      capture_output=True, text=True, timeout=timeout)
                status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            except subprocess.TimeoutExpired:
                status = "timeout"
            print(f"{model} {tool}: {status}", flush=True)


def judge(models, corpus: Path, out: Path) -> list:
    from onnxrefine.verify import verify_models
    from onnxrefine.verify.inputs import load_inputs

    rows = []
    for model in models:
        original = corpus / f"{model}.onnx"
        given = load_inputs(corpus / f"{model}.inputs.npz")
        for tool in TOOLS:
            candidate = out / f"{model}.{tool}.onnx"
            if not candidate.exists():
                continue
            for mode, inputs in (("given", given), ("generated", None)):
                started = time.perf_counter()
                try:
                    report = verify_models(str(original), str(candidate), inputs=inputs, trials=2, localize=False)
                    verdict = str(report.verdict)
                    detail = "; ".join(f"{o.name}:{o.verdict}" for o in report.outputs if o.verdict != "exact")[:160]
                except Exception as exc:  # noqa: BLE001 - a failure is a row
                    verdict, detail = "error", f"{type(exc).__name__}: {str(exc)[:120]}"
                rows.append({"model": model, "tool": tool, "inputs": mode, "verdict": verdict, "detail": detail,
                             "seconds": round(time.perf_counter() - started, 2)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def compare(before: Path, after: Path) -> None:
    key = lambda row: (row["model"], row["tool"], row["inputs"])  # noqa: E731
    old = {key(row): row for row in json.loads(before.read_text())}
    new = {key(row): row for row in json.loads(after.read_text())}
    counts = {}
    for name, rows in (("before", old), ("after", new)):
        for row in rows.values():
            counts.setdefault(row["verdict"], {"before": 0, "after": 0})[name] += 1
    print("| verdict | before | after |\n|---|---|---|")
    for verdict, count in sorted(counts.items()):
        print(f"| {verdict} | {count['before']} | {count['after']} |")
    print("\n| model | tool | inputs | before | after | after: outputs not exact |\n|---|---|---|---|---|---|")
    for item in sorted(set(old) | set(new)):
        a, b = old.get(item, {}).get("verdict"), new.get(item, {}).get("verdict")
        if a != b:
            print(f"| {item[0]} | {item[1]} | {item[2]} | {a} | {b} | {new.get(item, {}).get('detail', '')} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["produce", "judge", "compare"])
    parser.add_argument("models", nargs="?", default="")
    parser.add_argument("after", nargs="?")
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    if args.step == "compare":
        compare(Path(args.models), Path(args.after))
        return 0
    models = [name for name in args.models.split(",") if name]
    if args.step == "produce":
        produce(models, args.corpus, args.out, args.timeout)
        return 0
    rows = judge(models, args.corpus, args.out)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
