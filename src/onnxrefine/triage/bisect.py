"""Bisection: apply an optimizer's steps one at a time, verify after each, name the first step
whose result is a real mismatch, and write a repro bundle for it.

Verification localises (verify/localize/layerwise.py), so a step that breaks a value deep inside the model
is found even where the outputs dilute the change, and the result, the bundle's report and README
title name the first bad intermediate value with the rewrite that broke it.

For onnxrefine the failing pass is narrowed further to a single rewrite by the schedule's one
bisector (passes/bisection.py), which optimization with verification uses too: the schedule is
deterministic, so replaying the pass with `max_steps=k` gives its first k rewrites, and the bisector
finds the rewrite after which the verdict turns to mismatch. Verification takes the settings that
optimization with verification takes (verified.py's VerifySettings: seed, trials, dims, inputs).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from onnxrefine import progress
from onnxrefine.ir import io
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.passes.bisection import first_bad_step
from onnxrefine.passes.pipeline import Step, run_passes
from onnxrefine.passes.registry import get_pass
from onnxrefine.resources import ResourceLimitError
from onnxrefine.triage.adapters import get_adapter
from onnxrefine.triage.bundle import write_bundle
from onnxrefine.verified import VerifySettings
from onnxrefine.verify.judge import Verdict

# Random input sets per verification when the caller names no settings (`--trials`' default): a
# bisection verifies small prefixes, where a second random set is cheap.
TRIALS = 2


# A bisection's verdict when no step changes what the model computes (else Verdict.MISMATCH).
CLEAN = "clean"


@dataclass
class BisectResult:
    verdict: str  # Verdict.MISMATCH when a culprit was found, else CLEAN
    step: str | None = None
    rewrite: dict | None = None
    bundle: str | None = None
    steps: list[dict] = field(default_factory=list)
    first_bad_value: dict | None = None  # {"name", "op", "node", "description"} from localisation

    def to_dict(self) -> dict:
        return asdict(self)


def _verify(before: onnx.ModelProto, after: onnx.ModelProto, settings: VerifySettings):
    from onnxrefine.verify import verify_models

    return verify_models(before, after, inputs=settings.inputs, trials=settings.trials, seed=settings.seed,
                         dims=settings.dims)


def _input_sets(model: onnx.ModelProto, settings: VerifySettings) -> list:
    if settings.inputs is not None:
        return list(settings.inputs)
    from onnxrefine.verify.inputs import generate_inputs

    return generate_inputs(model, seed=settings.seed, dims=settings.dims, stress=True, trials=settings.trials)


def replay(model: onnx.ModelProto, pass_name: str, max_steps: int | None, on_event=None):
    """The model after the first `max_steps` rewrites of one onnxrefine pass, and its log."""
    ir_model = io.proto_to_ir(model)
    budget = ConstantBudget(io.tensor_bytes(ir_model))
    log = run_passes(ir_model, [pass_name], budget=budget, max_steps=max_steps, on_event=on_event)
    return io.to_proto(ir_model), log


def narrow_to_rewrite(before: onnx.ModelProto, pass_name: str, settings: VerifySettings):
    """(model before the culprit rewrite, model after it, the rewrite) for a failing rule pass; None
    where the pass alone rewrites nothing (the step's change came from elsewhere: it stays whole)."""
    steps: list[Step] = []
    replay(before, pass_name, None, lambda kind, **info: steps.append(info["step"]) if kind == "step" else None)
    if not steps:
        return None

    def bad_at(count: int) -> bool:
        progress.report(detail=f"step {pass_name}: narrowing to one rewrite (first {count} of {len(steps)})")
        candidate, _ = replay(before, pass_name, count)
        return _verify(before, candidate, settings).verdict == Verdict.MISMATCH

    culprit = first_bad_step(steps, bad_at)
    previous, _ = replay(before, pass_name, culprit.index - 1) if culprit.index > 1 else (before, None)
    culprit_model, log = replay(before, pass_name, culprit.index)
    rewrite = next((asdict(entry) for entry in reversed(log.applied)
                    if (entry.rule, entry.graph, entry.root) == culprit.rewrite_key), None)
    if _verify(previous, culprit_model, settings).verdict != Verdict.MISMATCH:
        # The change only shows cumulatively: keep the whole prefix as the repro.
        previous = before
    return previous, culprit_model, rewrite


def _same_computation(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Equal graphs and functions; metadata and value_info annotations an optimizer adds are not
    changes to what the model computes."""

    def essence(model: onnx.ModelProto) -> bytes:
        graph = onnx.GraphProto()
        graph.CopyFrom(model.graph)
        del graph.value_info[:]
        parts = [graph.SerializeToString(deterministic=True)]
        parts += [f.SerializeToString(deterministic=True) for f in model.functions]
        return b"\0".join(parts)

    return essence(a) == essence(b)


@progress.in_phase("bisect")
def bisect(
    model: onnx.ModelProto,
    *,
    optimizer: str = "onnxrefine",
    passes: Sequence[str] | None = None,
    out_dir: str | os.PathLike = "bisect_bundle",
    settings: VerifySettings | None = None,
) -> BisectResult:
    settings = settings or VerifySettings(trials=TRIALS)
    adapter = get_adapter(optimizer)
    result = BisectResult(verdict=CLEAN)
    current = model
    steps = adapter.steps(passes)
    for name, apply in steps:
        progress.report(done=len(result.steps), total=len(steps), detail=f"step {name}")
        try:
            candidate = apply(current)
        except ResourceLimitError:
            raise  # over the memory budget: the bisection cannot say anything
        except Exception as exc:  # a peer crashing is worth reporting, not fatal to the bisection
            result.steps.append({"step": name, "status": f"optimizer failed: {type(exc).__name__}: {exc}"})
            continue
        if _same_computation(candidate, current):
            result.steps.append({"step": name, "status": "unchanged"})
            continue
        report = _verify(current, candidate, settings)
        result.steps.append({"step": name, "status": report.verdict})
        if report.verdict != Verdict.MISMATCH:
            current = candidate
            continue
        before, after, rewrite = current, candidate, None
        narrowed = None
        if optimizer == "onnxrefine" and get_pass(name).rules:
            narrowed = narrow_to_rewrite(current, name, settings)
        if narrowed is not None:
            before, after, rewrite = narrowed
            report = _verify(before, after, settings)
        title = f"{optimizer}: step '{name}' changes what the model computes"
        if rewrite:
            title += f" (rewrite {rewrite['rule']} at {rewrite['root']})"
        first_bad = _first_bad_value(report)
        if first_bad:
            title += f"; first bad value: {first_bad['name']} ({first_bad['op']} node {first_bad['node']})"
        bundle = write_bundle(
            out_dir,
            original=before,
            optimized=after,
            input_sets=_input_sets(before, settings),
            report={"optimizer": optimizer, "step": name, "rewrite": rewrite, "steps": result.steps,
                    "first_bad_value": first_bad, "verification": report.to_dict()},
            title=title,
            produced_by=f"onnxrefine bisect --optimizer {optimizer}",
            reproduce_optimizer=adapter.command(name),
        )
        result.verdict, result.step, result.rewrite, result.bundle = Verdict.MISMATCH, name, rewrite, str(Path(bundle))
        result.first_bad_value = first_bad
        return result
    return result


def _first_bad_value(report) -> dict | None:
    first = report.first_bad_value
    if not first:
        return None
    return {key: first.get(key) for key in ("name", "op", "node", "candidate_op", "description")}
