"""Re-check every reduced onnxoptimizer repro in this folder and print a table.

For each <class>/: apply the pass named in reduce.json to model.onnx with the installed
onnxoptimizer, then `verify_models` (float64 reference, controls, stress inputs) with the seed and
dims the campaign used. Every row should read `mismatch`; see ../FUZZ_FINDINGS.md.

Run (needs onnxoptimizer, e.g. in bench/.venv-bench): python bench/fuzz_findings/reproduce.py
"""

from __future__ import annotations

import json
import os
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    import onnxoptimizer

    from onnxrefine.fuzz.campaign import mismatch_kind
    from onnxrefine.verify import verify_models

    rows, failures = [], 0
    for name in sorted(os.listdir(HERE)):
        folder = os.path.join(HERE, name)
        if not os.path.isfile(os.path.join(folder, "reduce.json")):
            continue
        with open(os.path.join(folder, "reduce.json")) as handle:
            info = json.load(handle)
        model = onnx.load(os.path.join(folder, "model.onnx"))
        optimized = onnxoptimizer.optimize(model, [info["step"]])
        report = verify_models(model, optimized, seed=int(info["seed"]), dims=info["input_dims"], trials=2)
        kind = mismatch_kind(report) if report.verdict == "mismatch" else "-"
        failures += report.verdict != "mismatch"
        ops = " ".join(node.op_type for node in model.graph.node)
        rows.append((name, info["step"], str(len(model.graph.node)), ops, report.verdict, kind))
    widths = [max(len(row[i]) for row in rows + [("class", "pass", "nodes", "ops", "verdict", "kind")])
              for i in range(6)]
    for row in [("class", "pass", "nodes", "ops", "verdict", "kind")] + rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    print(f"onnxoptimizer {onnxoptimizer.__version__}: {len(rows) - failures}/{len(rows)} repros still mismatch")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
