"""What refusing uncertifiable rewrites costs: per model, the default no-verify run (each rewrite
certified or proved, or refused) against the same run applying uncertifiable rewrites on faith.

    python bench/certificate_coverage.py --corpus bench/corpus
    python bench/certificate_coverage.py --corpus bench/corpus --models resnet18,bert-base --json out.json

Each model runs in its own process (`--timeout` seconds each), through `optimize_ir` with the
default pipeline and no end-to-end verification, twice: as the API runs it (a rewrite no
certificate can be made for is refused: certificate.uncertifiable), and "on faith" (the certifier
defers those rewrites, as it does for a verifying run, but nothing verifies: what the API applied
before). Columns: nodes before, after the refusing run and after the on-faith run; the refusing
run's coverage (certified / proved / refused / unchecked: rewrites a graph-level pass logged with
no evidence); "on faith" the rewrites the second run applied without a certificate. Under the
table: the refusals by rule, and their reasons by kind.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure_one(path: str) -> dict:
    """Both runs of one model (in this process)."""
    from onnxrefine import api
    from onnxrefine.ir import io
    from onnxrefine.verify.certificate import Certifier

    model = io.load_model(path)
    _, report = api.optimize_ir(model)
    refused = [r for r in report.log.refused.values() if r.guard == "certificate.uncertifiable"]
    failed = [r for r in report.log.refused.values() if r.guard == "certificate.failed"]
    row = {"nodes_before": report.nodes_before, "nodes_after": report.nodes_after,
           "coverage": report.certificates["coverage"],
           "refused_rules": dict(Counter(r.rule for r in refused)),
           "reasons": dict(Counter(_reason_kind(r.reason) for r in refused)), "failed": len(failed)}
    api.Certifier = lambda **_: Certifier(defer_uncertified=True)  # the old behaviour: skips applied
    try:
        _, faith = api.optimize_ir(io.load_model(path))
    finally:
        api.Certifier = Certifier
    row["nodes_after_faith"] = faith.nodes_after
    row["on_faith"] = sum(1 for a in faith.log.applied if a.evidence == "deferred")
    return row


def _reason_kind(reason: str) -> str:
    """A refusal's reason with the model's names taken out ("the shape of '...' is not known")."""
    return re.sub(r"'[^']*'", "'…'", reason.removeprefix("no certificate: "))[:90]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--models", default="", help="comma-separated names (default: every model of the corpus)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: measure this file, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one)))
        return 0
    corpus = Path(args.corpus)
    wanted = [m for m in args.models.split(",") if m]
    paths = sorted(corpus.glob("*.onnx"))
    paths = [p for p in paths if not wanted or p.stem in wanted]
    rows = {}
    for path in paths:
        try:
            done = subprocess.run([sys.executable, __file__, "--corpus", args.corpus, "--one", str(path)],
                                  capture_output=True, text=True, timeout=args.timeout)
            rows[path.stem] = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else \
                {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:120]}
        except subprocess.TimeoutExpired:
            rows[path.stem] = {"error": f"over {args.timeout:g} s"}
        print(path.stem, rows[path.stem].get("error", "done"), file=sys.stderr, flush=True)
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def print_table(rows: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="certificate coverage, no end-to-end verification")
    for column in ("model", "nodes before", "after", "after on faith", "certified", "proved", "refused",
                   "unchecked", "on faith"):
        table.add_column(column, justify="left" if column == "model" else "right")
    totals, rules, reasons = Counter(), Counter(), Counter()
    for name, row in rows.items():
        if "error" in row:
            table.add_row(name, row["error"], *[""] * 7)
            continue
        c = row["coverage"]
        values = [row["nodes_before"], row["nodes_after"], row["nodes_after_faith"], c["certified"], c["proved"],
                  c["refused"], c["unchecked"], row["on_faith"]]
        table.add_row(name, *(str(v) for v in values))
        totals.update(dict(zip(("before", "after", "faith", "certified", "proved", "refused", "unchecked",
                                "on_faith"), values)))
        rules.update(row["refused_rules"])
        reasons.update(row["reasons"])
    table.add_section()
    table.add_row("total", *(str(totals[k]) for k in ("before", "after", "faith", "certified", "proved", "refused",
                                                       "unchecked", "on_faith")))
    console = Console(width=160)
    console.print(table)
    console.print("refused by rule: " + ", ".join(f"{rule} {n}" for rule, n in rules.most_common()))
    for reason, n in reasons.most_common(12):
        console.print(f"  {n:5d}  {reason}", markup=False, highlight=False)


if __name__ == "__main__":
    sys.exit(main())
