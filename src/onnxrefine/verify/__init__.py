"""Differential verification: did a rewritten model change what the original computes?

`verify_models(original, candidate)` runs both in onnxruntime (CPU, optimizations off, one
thread) on given or generated input sets, runs controls on the original (a second run and
few-ulp input perturbations), evaluates the original in float64 where the two differ, and
returns a VerificationReport whose verdict is exact, rounding, unstable or mismatch (see
verdict.py for the formula).
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.verify import compare, graphinfo
from onnxrefine.verify import verdict as verdict_rules
from onnxrefine.verify.inputs import (check_inputs, generate_inputs, generate_labelled_inputs,
                                      load_inputs, save_inputs)
from onnxrefine.verify.report import OutputReport, VerificationReport
from onnxrefine.verify.runner import ModelRunner, RunFailedError, load_model
from onnxrefine.verify.verdict import EXACT, MISMATCH, ROUNDING, UNSTABLE, VERDICTS

__all__ = [
    "EXACT", "ROUNDING", "UNSTABLE", "MISMATCH", "VERDICTS", "verify_models", "VerificationReport",
    "OutputReport", "generate_inputs", "load_inputs", "save_inputs",
]


def verify_models(original, candidate, *,
                  inputs: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | None = None,
                  trials: int = 3, seed: int = 0, dims: Mapping[str, int] | None = None,
                  stress: bool = True, time_budget_s: float | None = None,
                  localize: bool = True) -> VerificationReport:
    """Compare `candidate` against `original` (ModelProtos or paths).

    `inputs`: one input set (name -> array) or a sequence of them; when None, `trials` random
    sets plus (with `stress`) the stress sets of inputs.py are generated from `seed` and `dims`.
    `trials` is also the number of perturbation runs of the original per set (at least 8 when the
    graph holds discrete ops). `time_budget_s`: once spent, no further input sets are started
    (the first set always runs); the report notes how many were skipped.

    Raises BadInputError for a missing/non-ONNX file, inputs that do not fit the original, or an
    original that onnxruntime cannot load or run. A candidate that onnxruntime cannot load or run
    is a `mismatch` (the rewrite broke the model), not bad input.

    `localize`: also judge the intermediate values both models hold (paired by name or role) and
    name the first bad one (localize.py); a mismatch there makes the verdict a mismatch. It costs
    one float64 evaluation of the original, 3 onnxruntime runs and the judging of every paired
    value per input set: about 3x the time of verification without it on resnet50.
    """
    with np.errstate(all="ignore"):  # inf/NaN arithmetic is expected on stress inputs
        original = load_model(original, "original model")  # once, for both passes below
        candidate = load_model(candidate, "candidate model")
        report = _verify(original, candidate, inputs, trials, seed, dims, stress, time_budget_s)
        if localize:
            _localize(report, original, candidate, inputs, trials, seed, dims, stress, time_budget_s)
        return report


def _localize(report, original, candidate, inputs, trials, seed, dims, stress, time_budget_s) -> None:
    """Layer-wise localisation on the input sets the output checks used (see localize.py)."""
    from onnxrefine.verify.localize import include_outputs, localize

    if any("candidate failed" in note for note in report.notes):
        report.localisation = {"status": "not run: the candidate failed to load or run"}
        return
    original_model, candidate_model = original, candidate
    if inputs is None:
        labelled = generate_labelled_inputs(original_model, seed=seed, dims=dims, stress=stress, trials=trials)
    else:
        labelled = [(f"given{index}", feeds) for index, feeds in
                    enumerate([inputs] if isinstance(inputs, Mapping) else list(inputs))]
    checked = check_inputs(original_model, [feeds for _, feeds in labelled])
    used = [(label, feeds) for (label, _), feeds in zip(labelled, checked) if label in report.input_sets]
    spent = report.timings.get("total_s", 0.0)
    section = localize(original_model, candidate_model, used, u=report.settings["unit_roundoff"],
                       perturb_count=report.settings["perturbation_runs"], seed=seed,
                       time_budget_s=None if time_budget_s is None else max(0.0, time_budget_s - spent))
    include_outputs(section, original_model, report.outputs)
    report.localisation = section
    report.verdict = VerificationReport.overall(report.outputs, section)
    report.timings["localisation_s"] = section.get("seconds", 0.0)


def _verify(original, candidate, inputs, trials, seed, dims, stress, time_budget_s) -> VerificationReport:
    started = time.perf_counter()
    original_model = load_model(original, "original model")
    candidate_model = load_model(candidate, "candidate model")
    notes: list[str] = []

    if inputs is None:
        labelled = generate_labelled_inputs(original_model, seed=seed, dims=dims, stress=stress,
                                            trials=trials)
    else:
        sets = [inputs] if isinstance(inputs, Mapping) else list(inputs)
        if not sets:
            raise BadInputError("no input sets given")
        labelled = [(f"given{index}", feeds) for index, feeds in enumerate(sets)]
    checked = check_inputs(original_model, [feeds for _, feeds in labelled])
    labelled = [(label, feeds) for (label, _), feeds in zip(labelled, checked)]

    original_runner = ModelRunner(original_model, "original model")
    output_names = list(original_runner.output_names)
    candidate_failure = _candidate_input_problem(original_model, candidate_model)
    candidate_runner = None
    if candidate_failure is None:
        try:
            candidate_runner = ModelRunner(candidate_model, "candidate model")
        except BadInputError as exc:
            candidate_failure = str(exc)
    output_map = _match_outputs(output_names, candidate_runner.output_names, notes) \
        if candidate_runner else {}

    float_dtypes = graphinfo.float_dtypes(original_model) | graphinfo.float_dtypes(candidate_model)
    if any(np.dtype(dtype) == np.float16 for dtype in float_dtypes):
        notes.append("float16 graph: onnxruntime on the CPU may insert float16<->float32 casts of "
                     "its own, so discrete results can differ from a pure float16 evaluation")
    u = verdict_rules.lowest_precision_u(float_dtypes)
    discrete = graphinfo.has_discrete_ops(original_model)
    perturb_count = verdict_rules.perturbation_runs(trials, discrete)

    evidence: dict[str, list] = {name: [] for name in output_names}
    comparisons: dict[str, list] = {name: [] for name in output_names}
    reference_state = {"status": "not needed", "reason": ""}
    used_labels = []
    for set_index, (label, feeds) in enumerate(labelled):
        if time_budget_s is not None and set_index > 0 and time.perf_counter() - started > time_budget_s:
            notes.append(f"time budget of {time_budget_s:g}s spent: {len(labelled) - set_index} of "
                         f"{len(labelled)} input sets not run")
            break
        used_labels.append(label)
        try:
            first = original_runner.run(feeds)
        except RunFailedError as exc:
            hint = "" if inputs is not None else " (generated inputs; pass --inputs or --dims)"
            raise BadInputError(f"input set {label}: {exc}{hint}") from None
        second = original_runner.run(feeds)
        if candidate_failure is None:
            try:
                produced = candidate_runner.run(feeds)
            except RunFailedError as exc:
                candidate_failure = f"input set {label}: {exc}"
        if candidate_failure is not None:
            break
        cand_out = {name: produced[output_map[name]] for name in output_names if name in output_map}
        extreme = _is_extreme(feeds)
        nonfinite = _has_nonfinite(feeds)
        differing, differing_float = [], []
        set_evidence = {}
        for name in output_names:
            if name not in cand_out:
                continue
            comparisons[name].append(compare.compare_arrays(cand_out[name], first[name]))
            item = verdict_rules.SetEvidence(first[name], second[name], cand_out[name],
                                             extreme=extreme, nonfinite_inputs=nonfinite)
            set_evidence[name] = item
            evidence[name].append(item)
            if _comparable(item) and not np.all(compare.bit_identical(item.candidate, item.original)):
                differing.append(name)
                if graphinfo.is_float_dtype(item.original.dtype):
                    differing_float.append(name)
        if differing:
            _add_perturbation_runs(original_runner, feeds, set_evidence, perturb_count,
                                   np.random.default_rng([seed, 7919, set_index]))
        if differing_float:
            _add_reference(original_model, feeds, differing_float, set_evidence, reference_state)

    outputs = []
    bounds = _bounds(original_model, labelled[0][1], output_names, u)
    for name in output_names:
        outputs.append(_output_report(name, evidence[name], comparisons[name], bounds[name],
                                      output_map.get(name), candidate_failure, reference_state))
    if candidate_failure is not None:
        notes.append(f"candidate failed: {candidate_failure}")
    if reference_state["status"] == "unavailable":
        notes.append(f"no float64 reference ({reference_state['reason']}): differing float outputs "
                     "judged by the fallback (ulp statistics, re-run and perturbation controls)")
    for name, sets in evidence.items():
        if any(not np.all(compare.bit_identical(item.rerun, item.original)) for item in sets):
            notes.append(f"control: the original is not deterministic on output {name}")
    if discrete:
        notes.append(f"graph has discrete ops: {perturb_count} perturbation runs of the original "
                     "per input set where the candidate differs")
    elapsed = time.perf_counter() - started
    return VerificationReport(
        verdict=VerificationReport.overall(outputs),
        outputs=outputs,
        notes=notes,
        input_sets=used_labels,
        settings={"trials": trials, "seed": seed, "dims": dict(dims or {}), "stress": stress,
                  "time_budget_s": time_budget_s, "unit_roundoff": u,
                  "perturbation_runs": perturb_count, "inputs": "given" if inputs is not None else "generated"},
        timings={"total_s": round(elapsed, 4)},
    )


def _candidate_input_problem(original: onnx.ModelProto, candidate: onnx.ModelProto) -> str | None:
    want = {spec.name: spec.dtype for spec in graphinfo.graph_inputs(original)}
    have = {spec.name: spec.dtype for spec in graphinfo.graph_inputs(candidate)}
    if want != have:
        return (f"candidate inputs {sorted(have)} do not match the original's {sorted(want)} "
                "(names or types)")
    return None


def _match_outputs(original_names, candidate_names, notes) -> dict[str, str]:
    if set(original_names) <= set(candidate_names):
        return {name: name for name in original_names}
    if len(original_names) == len(candidate_names):
        notes.append("candidate output names differ from the original's; matched by position")
        return dict(zip(original_names, candidate_names))
    missing = [name for name in original_names if name not in candidate_names]
    notes.append(f"candidate lacks output(s) {', '.join(missing)}")
    return {name: name for name in original_names if name in candidate_names}


def _add_perturbation_runs(runner, feeds, set_evidence, count, rng) -> None:
    if not any(graphinfo.is_float_dtype(np.asarray(value).dtype) for value in feeds.values()):
        return  # nothing to move by an ulp
    for run_index in range(count):
        pattern = run_index if run_index < 2 else None
        moved = {name: verdict_rules.perturb(np.asarray(value), rng, checkerboard=pattern)
                 for name, value in feeds.items()}
        try:
            results = runner.run(moved)
        except RunFailedError:
            continue
        for name, item in set_evidence.items():
            item.perturbed.append(results[name])


def _add_reference(model, feeds, names, set_evidence, state) -> None:
    if state["status"] == "unavailable":
        return
    try:
        from onnxrefine.verify.reference import UnsupportedOperatorError, evaluate_float64
    except ImportError as exc:
        state.update(status="unavailable", reason=f"float64 evaluator not importable: {exc}")
        return
    try:
        values = evaluate_float64(model, feeds, outputs=names)
    except UnsupportedOperatorError as exc:
        state.update(status="unavailable", reason=str(exc).splitlines()[0] if str(exc) else "unsupported")
        return
    except Exception as exc:  # a reference bug must not sink the verdict: fall back, say why
        state.update(status="unavailable", reason=f"float64 evaluator failed: {type(exc).__name__}: {exc}")
        return
    state["status"] = "float64"
    for name in names:
        value = values.get(name)
        if value is not None and np.shape(value) == set_evidence[name].original.shape:
            set_evidence[name].reference = np.asarray(value, dtype=np.float64)


def _bounds(model, feeds, names, u) -> dict:
    try:
        depths = graphinfo.accumulation_depths(model, feeds)
    except Exception:
        depths = {}
    return {name: verdict_rules.RoundingBound.for_output(u, *depths.get(name, (1, graphinfo.UNKNOWN_DIM)))
            for name in names}


def _output_report(name, sets, comps, bound, candidate_name, candidate_failure, reference_state):
    if candidate_failure is not None or candidate_name is None or not sets:
        reason = candidate_failure or "candidate has no such output"
        return OutputReport(name=name, verdict=MISMATCH, dtype="?", shape=[], candidate_shape=[],
                            candidate_dtype="?", comparison={}, notes=[reason],
                            bound=bound.to_dict())
    judgement = verdict_rules.judge_output(sets, bound)
    # The table summarizes ordinary input sets; extreme-magnitude sets (overflowing intermediates)
    # would drown it, so they are summarized apart.
    ordinary = [comp for comp, item in zip(comps, sets) if not item.extreme] or comps
    extreme = [comp for comp, item in zip(comps, sets) if item.extreme]
    merged = compare.merge(ordinary)
    first = sets[0]
    needs_reference = judgement.verdict != EXACT and graphinfo.is_float_dtype(first.original.dtype) \
        and first.original.shape == first.candidate.shape
    if not needs_reference:
        reference = "not needed"
    elif judgement.used_reference:
        reference = "float64"
    else:
        reference = "no float64 reference"
    notes = list(judgement.notes)
    if reference == "no float64 reference" and judgement.verdict != EXACT:
        notes.append("no float64 reference: judged by ulp statistics and the original's "
                     "re-run/perturbation spread")
    if judgement.overflow_excused:
        notes.append(f"{judgement.overflow_excused} difference(s) in overflow territory on "
                     "extreme-magnitude inputs not judged")
    if judgement.nonfinite_excused:
        notes.append(f"{judgement.nonfinite_excused} inf<->NaN or inf<->largest-finite difference(s) on "
                     "inf/NaN inputs (order of inf arithmetic, saturation) not blamed")
    if judgement.verdict == UNSTABLE:
        notes.append(f"the original itself is unstable at {judgement.unstable_positions} element(s); "
                     "the candidate's differences there are not blamed on it")
    return OutputReport(
        name=name, verdict=judgement.verdict, dtype=str(first.original.dtype),
        shape=list(first.original.shape), candidate_shape=list(first.candidate.shape),
        candidate_dtype=str(first.candidate.dtype), comparison=merged.to_dict(),
        comparison_extreme=compare.merge(extreme).to_dict() if extreme and len(extreme) < len(comps) else {},
        differing=judgement.differing, unexplained=judgement.unexplained,
        unstable_positions=judgement.unstable_positions, orig_err_max=judgement.orig_err_max,
        cand_err_max=judgement.cand_err_max, reference=reference, bound=bound.to_dict(),
        scatter=judgement.scatter if judgement.used_reference else {}, notes=notes,
    )


def _is_extreme(feeds) -> bool:
    for value in feeds.values():
        value = np.asarray(value)
        if graphinfo.is_float_dtype(value.dtype) and value.size:
            magnitude = np.abs(value.astype(np.float64))
            limit = np.sqrt(graphinfo.finite_max(value.dtype))
            if np.any(np.isfinite(magnitude) & (magnitude > limit)):
                return True
    return False


def _has_nonfinite(feeds) -> bool:
    return any(graphinfo.is_float_dtype(np.asarray(value).dtype)
               and not np.all(np.isfinite(np.asarray(value).astype(np.float64)))
               for value in feeds.values())


def _comparable(item) -> bool:
    return item.original.shape == item.candidate.shape and item.original.dtype == item.candidate.dtype
