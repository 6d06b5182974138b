"""Repro bundles: a folder that reproduces one verdict with one command.

    <bundle>/original.onnx   the model before the failing step
    <bundle>/optimized.onnx  the model after it
    <bundle>/inputs.npz      the input sets the verdict was reached on
    <bundle>/report.json     the verification report plus what produced the pair
    <bundle>/README.md       the exact commands that reproduce it

The bundle is assembled in a temporary folder beside the target and renamed into place, so a
reader never sees half a bundle.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from onnxrefine.atomic import staged_folder

ORIGINAL = "original.onnx"
OPTIMIZED = "optimized.onnx"
INPUTS = "inputs.npz"
REPORT = "report.json"
README = "README.md"


def write_bundle(
    folder: str | os.PathLike,
    *,
    original: onnx.ModelProto,
    optimized: onnx.ModelProto,
    input_sets: Sequence[Mapping[str, np.ndarray]],
    report: dict,
    title: str,
    produced_by: str,
    reproduce_optimizer: str | None = None,
    model_names: tuple[str, str] = (ORIGINAL, OPTIMIZED),
) -> Path:
    """Write a bundle folder atomically and return its path (an existing folder is refused)."""
    from onnxrefine.verify.inputs import save_inputs

    target = Path(folder)
    with staged_folder(target) as staging:
        original_name, optimized_name = model_names
        onnx.save(original, staging / original_name)
        onnx.save(optimized, staging / optimized_name)
        save_inputs(staging / INPUTS, list(input_sets))
        (staging / REPORT).write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
        (staging / README).write_text(
            _readme(title, produced_by, report, reproduce_optimizer, original_name, optimized_name)
        )
    return target


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _readme(title, produced_by, report, reproduce_optimizer, original_name, optimized_name) -> str:
    verification = report.get("verification", {})
    lines = [
        f"# {title}",
        "",
        f"Produced by: {produced_by}",
        f"Verdict: **{verification.get('verdict', '?')}**",
        "",
        "## Reproduce the verdict",
        "",
        "```",
        f"onnxrefine verify {original_name} {optimized_name} --inputs {INPUTS}",
        "```",
        "",
        "The last line it prints is the verdict; the exit code is 1 for mismatch.",
    ]
    if reproduce_optimizer:
        lines += ["", "## Reproduce the optimization", "", "```", reproduce_optimizer, "```"]
    failing = [o for o in verification.get("outputs", []) if o.get("verdict") in ("mismatch", "unstable")]
    if failing:
        lines += ["", "## Outputs that differ", ""]
        for output in failing:
            comparison = output.get("comparison", {})
            lines.append(
                f"- `{output.get('name')}`: {output.get('verdict')}, max_abs={comparison.get('max_abs')}, "
                f"max_ulp={comparison.get('max_ulp')}, differing elements={output.get('differing')}"
            )
    notes = verification.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"
