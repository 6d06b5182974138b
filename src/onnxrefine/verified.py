"""Optimization with proof: every pass is verified against the model before it, and rolled back
when its result is a real mismatch; the final model is verified against the original.

Passes run one at a time (in registry order, rounds to a fixed point). A pass that changes nothing
costs nothing; a pass that changes the model costs one `verify_models` call on the same input sets
(generated once from the seed, or the user's). A model whose end-to-end verdict is `mismatch` is
never returned, so never written.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.errors import BadInputError, OnnxRefineError
from onnxrefine.ir import io
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.passes.pipeline import MAX_ROUNDS, run_passes
from onnxrefine.passes.registry import get_pass
from onnxrefine.rewrite.log import RewriteLog

DEFAULT_VERIFY_BUDGET_S = 120.0
# A pass that changes the model is verified once; a typical run verifies a handful of passes.
EXPECTED_VERIFICATIONS = 8


class VerificationFailed(OnnxRefineError):
    """The optimized model does not compute what the original computes; nothing is written."""


@dataclass
class VerifySettings:
    enabled: bool | None = None  # None: verify when the model runs in onnxruntime within the budget
    budget_s: float = DEFAULT_VERIFY_BUDGET_S
    seed: int = 0
    trials: int = 2
    dims: Mapping[str, int] | None = None
    inputs: Sequence[Mapping[str, np.ndarray]] | None = None


@dataclass
class VerifiedRun:
    model: ir.Model
    log: RewriteLog
    rolled_back: list[dict] = field(default_factory=list)
    summary: dict | None = None


def _verify(before: onnx.ModelProto, after: onnx.ModelProto, settings: VerifySettings):
    from onnxrefine.verify import verify_models

    return verify_models(
        before, after, inputs=settings.inputs, trials=settings.trials, seed=settings.seed, dims=settings.dims
    )


def _verify_end_to_end(original: onnx.ModelProto, optimized: onnx.ModelProto, settings: VerifySettings):
    """Per-pass verdicts compose, but rounding can accumulate: check the whole chain once."""
    return _verify(original, optimized, settings)


def _probe(original: onnx.ModelProto, settings: VerifySettings) -> str | None:
    """None when verification can run within the budget, else why it cannot."""
    started = time.perf_counter()
    try:
        control = _verify(original, original, settings)
    except OnnxRefineError as exc:
        return f"the model does not run in onnxruntime ({exc})"
    seconds = time.perf_counter() - started
    if control.verdict not in ("exact",):
        return f"the original does not reproduce itself (control verdict: {control.verdict})"
    if seconds * EXPECTED_VERIFICATIONS > settings.budget_s:
        return (
            f"one verification takes {seconds:.1f}s; {EXPECTED_VERIFICATIONS} would exceed the "
            f"{settings.budget_s:g}s budget"
        )
    return None


def optimize_verified(
    model: ir.Model,
    pass_names: Sequence[str],
    *,
    settings: VerifySettings,
    budget: ConstantBudget,
    fixed_point: bool = True,
    on_progress: Callable[[int], None] | None = None,
    certifier=None,
) -> VerifiedRun | None:
    """Run `pass_names` with per-pass verification. Returns None when verification is in auto
    mode and cannot run (the caller then optimizes without it and says so)."""
    original = io.to_proto(model)
    problem = _probe(original, settings)
    if problem is not None:
        if settings.enabled:
            raise BadInputError(f"cannot verify: {problem}")
        return VerifiedRun(model, RewriteLog(), summary={"status": "skipped", "reason": problem})

    current = original
    log = RewriteLog()
    rolled_back: list[dict] = []
    refused_passes: set[str] = set()
    ordered = sorted(dict.fromkeys(pass_names), key=lambda n: get_pass(n).order)
    for _ in range(MAX_ROUNDS):
        changed = False
        for name in ordered:
            if name in refused_passes:
                continue
            candidate_ir = io.proto_to_ir(current)
            pass_budget = copy.copy(budget)
            pass_log = run_passes(candidate_ir, [name], budget=pass_budget, fixed_point=True, on_progress=on_progress,
                                  certifier=certifier)
            if not pass_log.applied:
                log.extend(pass_log)
                continue
            candidate = io.to_proto(candidate_ir)
            report = _verify(current, candidate, settings)
            if report.verdict == "mismatch":
                refused_passes.add(name)
                rolled_back.append({
                    "pass": name,
                    "verdict": report.verdict,
                    "outputs": report.failing_outputs,
                    "rewrites": len(pass_log.applied),
                })
                continue
            current = candidate
            budget.added_bytes, budget.freed_bytes = pass_budget.added_bytes, pass_budget.freed_bytes
            log.extend(pass_log)
            changed = True
        if not changed or not fixed_point:
            break
    final = _verify_end_to_end(original, current, settings)
    if final.verdict == "mismatch":
        outputs = ", ".join(final.failing_outputs)
        raise VerificationFailed(f"the optimized model changes output(s) {outputs} (verdict: mismatch); nothing written")
    summary = {"status": "verified", "verdict": final.verdict, "per_output": {o.name: o.verdict for o in final.outputs},
               "notes": final.notes}
    return VerifiedRun(io.proto_to_ir(current), log, rolled_back, summary)
