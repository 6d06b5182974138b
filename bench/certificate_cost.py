"""What per-rewrite certificates cost: optimize time with and without them, per model.

    python bench/certificate_cost.py                       # bundled and synthetic models
    python bench/certificate_cost.py --corpus bench/corpus  # plus every <name>.onnx there
    python bench/certificate_cost.py --models resnet50,bert-base --corpus bench/corpus --runs 3

Each model is loaded from its file and optimized with the default pipeline through the API
(`optimize_ir`, no verification: the bench corpus's setting) with `certify=False` and
`certify=True`, alternating, `--runs` times each; the table shows the medians. Loading and saving
are not timed. "certifier s" is the certifier's own time in the certified run (the report's
`certificates.seconds`), with its share of the run without certificates in parentheses: the
overhead column also holds the machine's noise between the two runs, this one does not.
"cpu: without" and "certifier" are the same two figures in CPU time (`time.process_time`):
on a shared machine, wall time also counts the time other processes held the cores. "certified / cache hits / skipped" count the certificate calls of the last certified
run; "refused" counts the rewrites refused by a certificate in its log (the driver offers a node
again when a neighbour changes, so calls are in parentheses); each refusal and skip reason is
listed under the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def synthetic_models(folder: Path) -> dict[str, Path]:
    """The bundled example, and engine_scaling's chain and ResNet-50-shaped models."""
    from engine_scaling import chain_model, resnet50_model

    paths = {"tiny_cnn (example)": ROOT / "examples" / "tiny_cnn.onnx"}
    for name, model in (("chain-64 (synthetic)", chain_model(64)), ("resnet50-shaped (synthetic)", resnet50_model())):
        path = folder / f"{name.split()[0]}.onnx"
        onnx.save(model, path)
        paths[name] = path
    return paths


_CERTIFIER_CPU = [0.0]


def _count_certifier_cpu() -> None:
    """The certifier's own CPU time (process_time), next to the wall time it reports itself."""
    from onnxrefine.verify.certificate.certifier import Certifier

    call = Certifier.__call__

    def timed(self, request):
        started = time.process_time()
        try:
            return call(self, request)
        finally:
            _CERTIFIER_CPU[0] += time.process_time() - started

    Certifier.__call__ = timed


def optimize_once(path: Path, certify: bool):
    from onnxrefine.api import optimize_ir
    from onnxrefine.ir import io

    model = io.load_model(path)
    _CERTIFIER_CPU[0] = 0.0
    started, cpu = time.perf_counter(), time.process_time()
    _, report = optimize_ir(model, certify=certify)
    return time.perf_counter() - started, report, time.process_time() - cpu, _CERTIFIER_CPU[0]


def measure(path: Path, runs: int, pick=statistics.median) -> dict:
    plain, certified, own, report = [], [], [], None
    plain_cpu, certified_cpu, own_cpu = [], [], []
    for _ in range(runs):
        seconds, _, cpu, _ = optimize_once(path, False)
        plain.append(seconds)
        plain_cpu.append(cpu)
        seconds, report, cpu, certifier_cpu = optimize_once(path, True)
        certified.append(seconds)
        certified_cpu.append(cpu)
        own.append(report.certificates["seconds"])
        own_cpu.append(certifier_cpu)
    stats = report.certificates
    return {
        "plain": pick(plain),
        "certified": pick(certified),
        "own": pick(own),
        "plain_cpu": pick(plain_cpu),
        "certified_cpu": pick(certified_cpu),
        "own_cpu": pick(own_cpu),
        "rewrites": len(report.log.applied),
        "stats": stats,
        "unique_refusals": sum(1 for r in report.log.refused.values() if r.reason.startswith("certificate")),
        "refusals": [(r.rule, r.node, r.reason) for r in report.log.refused.values()
                     if r.reason.startswith("certificate")],
        "skips": sorted({a.certificate for a in report.log.applied if a.certificate.startswith("skipped")}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", help="folder of <name>.onnx models to add")
    parser.add_argument("--models", help="comma-separated names to keep (default: all)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-synthetic", action="store_true")
    parser.add_argument("--best", action="store_true",
                        help="the fastest of the runs instead of the median (each column on its own): on a loaded "
                             "machine, the runs least disturbed by other processes")
    args = parser.parse_args()
    console = Console(width=200)  # the table, whole, also when printed to a file
    _count_certifier_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {} if args.no_synthetic else synthetic_models(Path(tmp))
        if args.corpus:
            paths.update({p.stem: p for p in sorted(Path(args.corpus).glob("*.onnx"))})
        if args.models:
            keep = {m.strip() for m in args.models.split(",")}
            paths = {k: v for k, v in paths.items() if k.split()[0] in keep}
        how = "fastest" if args.best else "median"
        table = Table(title=f"per-rewrite certificates: optimize time ({how} of {args.runs})")
        for column in ("model", "without s", "with s", "overhead", "certifier s", "cpu: without", "certifier",
                       "rewrites", "certified", "proved", "cache hits", "skipped", "refused (calls)"):
            table.add_column(column, justify="left" if column == "model" else "right")
        notes = []
        total_plain = total_cert = total_own = total_plain_cpu = total_own_cpu = 0.0
        for name, path in paths.items():
            result = measure(path, args.runs, min if args.best else statistics.median)
            stats = result["stats"]
            total_plain += result["plain"]
            total_cert += result["certified"]
            table.add_row(
                name, f"{result['plain']:.3f}", f"{result['certified']:.3f}",
                f"{100 * (result['certified'] / result['plain'] - 1):+.0f}%",
                f"{result['own']:.3f} ({100 * result['own'] / result['plain']:.0f}%)",
                f"{result['plain_cpu']:.3f}", f"{result['own_cpu']:.3f} ({100 * result['own_cpu'] / result['plain_cpu']:.0f}%)",
                str(result["rewrites"]), str(stats["certified"]), str(stats.get("proved", "")), str(stats["cache_hits"]),
                str(stats["skipped"]), f"{result['unique_refusals']} ({stats['refused']})",
            )
            total_own += result["own"]
            total_plain_cpu += result["plain_cpu"]
            total_own_cpu += result["own_cpu"]
            notes += [f"{name}: refused {rule} at {node}: {reason}" for rule, node, reason in result["refusals"]]
            notes += [f"{name}: {skip}" for skip in result["skips"]]
        if total_plain:
            table.add_section()
            table.add_row("all", f"{total_plain:.3f}", f"{total_cert:.3f}",
                          f"{100 * (total_cert / total_plain - 1):+.0f}%",
                          f"{total_own:.3f} ({100 * total_own / total_plain:.0f}%)", f"{total_plain_cpu:.3f}",
                          f"{total_own_cpu:.3f} ({100 * total_own_cpu / total_plain_cpu:.0f}%)", "", "", "", "", "", "")
        console.print(table)
        for note in notes:
            console.print(note, soft_wrap=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
