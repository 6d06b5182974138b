"""Differential verification: did a rewritten model change what the original computes?

`verify_models(original, candidate)` runs both in onnxruntime (CPU, optimizations off, one
thread; then both again under deployment settings, see runner.RunSettings) on given or generated
input sets, runs controls on the original (a second run and
few-ulp input perturbations), evaluates the original in float64 where the two differ, and
returns a VerificationReport whose verdict is exact, rounding, unstable or mismatch (see
verdict.py for the formula).
"""

from __future__ import annotations

import contextlib
import os
import time
from contextvars import ContextVar
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from onnxrefine import progress
from onnxrefine.errors import BadInputError
from onnxrefine.verify import compare, graphinfo
from onnxrefine.verify import verdict as verdict_rules
from onnxrefine.verify.inputs import (check_inputs, generate_inputs, generate_labelled_inputs,
                                      load_inputs, save_inputs)
from onnxrefine.verify.report import OutputReport, VerificationReport
from onnxrefine.verify.runner import (ModelRunner, RunFailedError, RunSettings, check_run_settings,
                                      open_model)
from onnxrefine.verify.verdict import EXACT, MISMATCH, ROUNDING, UNSTABLE, VERDICTS
from onnxrefine.resources import ResourceLimitError  # noqa: E402  (issue 13: the resource budget)

__all__ = [
    "EXACT", "ROUNDING", "UNSTABLE", "MISMATCH", "VERDICTS", "verify_models", "VerificationReport",
    "OutputReport", "generate_inputs", "load_inputs", "save_inputs", "RunSettings", "run_settings",
]


DEFAULT_DEPLOYMENT = RunSettings()
_UNSET: Any = object()
# Run settings a caller chose for every verification below it (`onnxrefine optimize` sets the
# user's flags here, so whatever verifies on its behalf runs the models the user's way).
_SCOPED: ContextVar[dict] = ContextVar("onnxrefine_verify_run_settings", default={})


@contextlib.contextmanager
def run_settings(**settings):
    """Within the block, verify_models' `deployment`, `custom_op_library`, `atol` and `rtol`
    default to the given values (an explicit argument still wins)."""
    unknown = set(settings) - {"deployment", "custom_op_library", "atol", "rtol"}
    if unknown:
        raise TypeError(f"unknown run settings: {', '.join(sorted(unknown))}")
    token = _SCOPED.set({**_SCOPED.get(), **settings})
    try:
        yield
    finally:
        _SCOPED.reset(token)


@progress.in_phase("verify")
def verify_models(original, candidate, *,
                  inputs: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | None = None,
                  trials: int = 3, seed: int = 0, dims: Mapping[str, int] | None = None,
                  stress: bool = True, time_budget_s: float | None = None,
                  deployment: RunSettings | None = _UNSET,
                  custom_op_library: str | None = _UNSET,
                  atol: float | None = _UNSET, rtol: float | None = _UNSET,
                  localize: bool = True) -> VerificationReport:
    """Compare `candidate` against `original` (paths, ModelProtos or onnx_ir Models).

    `inputs`: one input set (name -> array) or a sequence of them; when None, `trials` random
    sets plus (with `stress`) the stress sets of inputs.py are generated from `seed` and `dims`.
    `trials` is also the number of perturbation runs of the original per set (at least 8 when the
    graph holds discrete ops). `time_budget_s`: once spent, no further input sets are started
    (the first set always runs); the report notes how many were skipped.

    Besides the strict runs (optimizations off, one thread), both models run under `deployment`
    (default: onnxruntime's default level, ORT_ENABLE_ALL; None: strict only); the candidate is
    judged there against the original run the same way, with the same float64 reference, in the
    report's `deployment` section, and it counts in the verdict. `custom_op_library`: registered
    in every session. `atol`/`rtol`: a hard bound on top of the derived one (a differing element
    beyond atol + rtol*|reference| is a mismatch). Left out, these four come from an enclosing
    `run_settings(...)` block, else the defaults above.

    Models are run from files (a path as given; an in-memory model through a temp folder when it
    is large), one session at a time, so the weights are held once by onnxruntime.

    Raises BadInputError for a missing/non-ONNX file, inputs that do not fit the original, an
    original that onnxruntime cannot load or run, or bad run settings. A candidate that
    onnxruntime cannot load or run is a `mismatch` (the rewrite broke the model), not bad input.

    `localize`: also judge the intermediate values both models hold (paired by name or role) and
    name the first bad one (localize.py); a mismatch there makes the verdict a mismatch. It costs
    one float64 evaluation of the original, 3 onnxruntime runs and the judging of every paired
    value per input set: about 3x the time of verification without it on resnet50.
    """
    scoped = _SCOPED.get()
    if deployment is _UNSET:
        deployment = scoped.get("deployment", DEFAULT_DEPLOYMENT)
    if custom_op_library is _UNSET:
        custom_op_library = scoped.get("custom_op_library")
    if atol is _UNSET:
        atol = scoped.get("atol")
    if rtol is _UNSET:
        rtol = scoped.get("rtol")
    check_run_settings(deployment, custom_op_library)
    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not (value >= 0):
            raise BadInputError(f"--{name} must be a non-negative number")
    with np.errstate(all="ignore"):  # inf/NaN arithmetic is expected on stress inputs
        original_file = open_model(original, "original model")
        candidate_file, candidate_failure = None, None
        try:
            try:
                candidate_file = open_model(candidate, "candidate model")
            except BadInputError as exc:
                if isinstance(candidate, (str, os.PathLike)):
                    raise  # a missing or unreadable file is bad input, not a finding
                candidate_failure = str(exc)
            labelled = _input_sets(original_file.proto, inputs, trials, seed, dims, stress)
            early = _early_localisation(original, candidate, seed) if localize and candidate_file is not None else None
            report = _verify(original_file, candidate_file, candidate_failure, labelled, inputs is not None,
                             trials, seed, dims, stress, time_budget_s, deployment, custom_op_library,
                             (atol, rtol), early=early)
            if localize:
                _localize(report, original, candidate, labelled, seed, time_budget_s, early)
            return report
        finally:
            for opened, given in ((original_file, original), (candidate_file, candidate)):
                if opened is not None and opened is not given:
                    opened.close()


def _input_sets(model: onnx.ModelProto, inputs, trials, seed, dims, stress) -> list:
    """(label, feeds) pairs: the given sets, or generated ones; checked against the model's inputs."""
    if inputs is None:
        labelled = generate_labelled_inputs(model, seed=seed, dims=dims, stress=stress, trials=trials)
    else:
        sets = [inputs] if isinstance(inputs, Mapping) else list(inputs)
        if not sets:
            raise BadInputError("no input sets given")
        labelled = [(f"given{index}", feeds) for index, feeds in enumerate(sets)]
    checked = check_inputs(model, [feeds for _, feeds in labelled])
    return [(label, feeds) for (label, _), feeds in zip(labelled, checked)]


def _early_localisation(original, candidate, seed):
    """Localisation that observes the output check's float64 evaluations (localize_shared.py); it
    loads the whole models when the output check reaches them."""
    from onnxrefine.verify.localize_shared import EarlyLocalisation

    return EarlyLocalisation(original, candidate, seed, _whole_proto)


def _localize(report, original, candidate, labelled, seed, time_budget_s, early=None) -> None:
    """Layer-wise localisation on the input sets the output checks used (see localize.py)."""
    from onnxrefine.verify.localize import include_outputs, localize

    if any("candidate failed" in note for note in report.notes):
        report.localisation = {"status": "not run: the candidate failed to load or run"}
        return
    if early is not None:
        original_model, candidate_model = early.load()
    else:
        original_model = _whole_proto(original, "original model")
        candidate_model = _whole_proto(candidate, "candidate model")
    if original_model is None or candidate_model is None:
        report.localisation = {"status": f"not run: a model's weights exceed {LOCALIZE_MAX_BYTES >> 20} MiB "
                                         "(localisation holds both models in memory)"}
        return
    used = [(label, feeds) for label, feeds in labelled if label in report.input_sets]
    from onnxrefine import resources  # the float64 evaluation of every value must fit the budget

    refusal = resources.reference_refusal(resources.estimate_peak(original_model, used[0][1])) if used else None
    if refusal is not None:
        report.localisation = {"status": f"not run: {refusal}"}
        return
    spent = report.timings.get("total_s", 0.0)
    section = localize(original_model, candidate_model, used, u=report.settings["unit_roundoff"],
                       perturb_count=report.settings["perturbation_runs"], seed=seed,
                       time_budget_s=None if time_budget_s is None else max(0.0, time_budget_s - spent),
                       early=early)
    include_outputs(section, original_model, report.outputs)
    report.localisation = section
    report.verdict = verdict_rules.worst([report.verdict,
                                          VerificationReport.overall(report.outputs, section)])
    report.timings["localisation_s"] = section.get("seconds", 0.0)


# Localisation builds sessions exposing intermediates from whole in-memory models: above this
# many bytes of weights it is not run (and says so) rather than hold a large model twice.
LOCALIZE_MAX_BYTES = 1 << 30


def _whole_proto(given, role: str) -> onnx.ModelProto | None:
    """The model with every weight loaded, or None when its weights exceed LOCALIZE_MAX_BYTES."""
    if isinstance(given, onnx.ModelProto):
        return given
    if not isinstance(given, (str, os.PathLike)):  # an onnx_ir.Model
        from onnxrefine.ir import io

        return io.to_proto(given) if io.tensor_bytes(given) <= LOCALIZE_MAX_BYTES else None
    path = os.fspath(given)
    light = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    files = {entry.value for tensor in onnx.external_data_helper._get_all_tensors(light)
             for entry in tensor.external_data if entry.key == "location"}
    size = os.path.getsize(path) + sum(os.path.getsize(os.path.join(folder, name)) for name in files
                                       if os.path.isfile(os.path.join(folder, name)))
    if size > LOCALIZE_MAX_BYTES:
        return None
    try:
        return onnx.load(path)
    except Exception as exc:
        raise BadInputError(f"{role} {path}: {exc}") from None


def _verify(original_file, candidate_file, candidate_failure, labelled, inputs_given, trials, seed, dims,
            stress, time_budget_s, deployment, custom_op_library, tolerance, early=None) -> VerificationReport:
    started = time.perf_counter()
    original_model = original_file.proto
    candidate_model = candidate_file.proto if candidate_file is not None else None
    notes: list[str] = []

    float_dtypes = graphinfo.float_dtypes(original_model)
    if candidate_model is not None:
        float_dtypes |= graphinfo.float_dtypes(candidate_model)
    if any(np.dtype(dtype) == np.float16 for dtype in float_dtypes):
        notes.append("float16 graph: onnxruntime on the CPU may insert float16<->float32 casts of "
                     "its own, so discrete results can differ from a pure float16 evaluation")
    u = verdict_rules.lowest_precision_u(float_dtypes)
    discrete = graphinfo.has_discrete_ops(original_model)
    perturb_count = verdict_rules.perturbation_runs(trials, discrete)

    # Sessions run one at a time (each holds its own copy of the weights): the original on every
    # set, then the candidate, then both again under the deployment settings. The time budget is
    # checked while the first runs; its share of it is the share of the runs it makes.
    strict = RunSettings.strict()
    share = 2 / 3 if deployment is None else 1 / 3
    deadline = None if time_budget_s is None else started + time_budget_s * share
    output_names, first_runs = _original_runs(original_file, strict, labelled, custom_op_library,
                                              deadline, inputs_given)
    if len(first_runs) < len(labelled):
        notes.append(f"time budget of {time_budget_s:g}s spent: {len(labelled) - len(first_runs)} of "
                     f"{len(labelled)} input sets not run")
        labelled = labelled[:len(first_runs)]
    if candidate_failure is None:
        candidate_failure = _candidate_input_problem(original_model, candidate_model)
    output_map = _match_outputs(output_names, [out.name for out in candidate_model.graph.output], notes) \
        if candidate_failure is None else {}
    strict_track = _Track(strict, first_runs)
    _candidate_runs(strict_track, candidate_file, labelled, custom_op_library, candidate_failure)
    tracks = [strict_track]
    if deployment is not None:
        try:
            _, deployed = _original_runs(original_file, deployment, labelled, custom_op_library, None,
                                         inputs_given)
        except BadInputError as exc:
            notes.append(f"deployment check not run: the original does not run under the deployment "
                         f"settings ({deployment.describe()}): {exc}")
        else:
            tracks.append(_Track(deployment, deployed))
            _candidate_runs(tracks[-1], candidate_file, labelled, custom_op_library, candidate_failure)

    reference_state = {"status": "not needed", "reason": ""}
    needs_reference: dict[int, set] = {}
    for track in tracks:
        track.collect(output_names, output_map, labelled)
        for index, names in track.differing_float.items():
            needs_reference.setdefault(index, set()).update(names)
    if early is not None and strict_track.candidate_failure is None:
        early.start(labelled, u, perturb_count)  # localisation observes the evaluations below
    for index, names in sorted(needs_reference.items()):
        _add_reference(original_file, labelled[index][1], sorted(names),
                       [track.set_evidence[index] for track in tracks if index < len(track.set_evidence)],
                       reference_state, None if early is None or early.localizer is None else
                       (lambda i=index: early.observer(labelled[i][0], i, labelled[i][1])))
    for track in tracks:
        for index in track.differing_sets:
            _add_decision_evidence(original_file, labelled[index][1], track.set_evidence[index],
                                   reference_state)

    bounds = _bounds(original_model, labelled[0][1], output_names, u)
    # The controls on the original (few-ulp perturbation runs) only add excuses (sensitivity,
    # unstable positions), so a set whose differences the bound explains without them needs none.
    # Sets holding inf/NaN always get their run: it also measures the dependency cones, which
    # narrow what the inf/NaN rules excuse.
    for track in tracks:
        pending = [index for index in track.differing_sets
                   if _has_nonfinite(labelled[index][1])
                   or not _explained_without_controls(track.set_evidence[index], bounds)]
        if pending:
            _add_perturbation_runs(track, original_file, labelled, pending, perturb_count, seed,
                                   custom_op_library)

    sections = []
    for track in tracks:
        failure = track.candidate_failure
        section = []
        for name in output_names:
            report = _output_report(name, track.evidence[name], track.comparisons[name], bounds[name],
                                    output_map.get(name), failure, reference_state)
            _apply_hard_bound(report, track.evidence[name], tolerance)
            section.append(report)
        sections.append(section)
    if candidate_model is not None and any(np.dtype(d).name in ("float16", "bfloat16") for d in float_dtypes):
        _excuse_float16_runtime(sections, tracks, original_model, candidate_model, output_map, labelled)
    outputs, deployed_outputs = sections[0], (sections[1] if len(sections) > 1 else [])
    if strict_track.candidate_failure is not None:
        notes.append(f"candidate failed: {strict_track.candidate_failure}")
    elif len(tracks) > 1 and tracks[1].candidate_failure is not None:
        notes.append(f"candidate failed under the deployment settings: {tracks[1].candidate_failure}")
    if reference_state["status"] == "unavailable":
        notes.append(f"no float64 reference ({reference_state['reason']}): differing float outputs "
                     "judged by the fallback (ulp statistics, re-run and perturbation controls)")
    for track in tracks:
        where = "" if track is strict_track else " under the deployment settings"
        for name, sets in track.evidence.items():
            if any(not np.all(compare.bit_identical(item.rerun, item.original)) for item in sets):
                notes.append(f"control: the original is not deterministic on output {name}{where}")
    if discrete:
        notes.append(f"graph has discrete ops: {perturb_count} perturbation runs of the original "
                     "per input set where the candidate differs")
    elapsed = time.perf_counter() - started
    return VerificationReport(
        verdict=VerificationReport.overall(outputs + deployed_outputs),
        outputs=outputs,
        deployment=deployed_outputs,
        notes=notes,
        input_sets=[label for label, _ in labelled],
        settings={"trials": trials, "seed": seed, "dims": dict(dims or {}), "stress": stress,
                  "time_budget_s": time_budget_s, "unit_roundoff": u,
                  "perturbation_runs": perturb_count, "inputs": "given" if inputs_given else "generated",
                  "strict": strict.to_dict(),
                  "deployment": deployment.to_dict() if deployment is not None else None,
                  "custom_op_library": custom_op_library, "atol": tolerance[0], "rtol": tolerance[1]},
        timings={"total_s": round(elapsed, 4)},
    )


def _excuse_float16_runtime(sections, tracks, original_model, candidate_model, output_map, labelled) -> None:
    """A float16 output judged mismatch that the spec says both models compute alike on every set
    where it differs is onnxruntime's precision, not the rewrite's (spec_identity.py): unstable."""
    from onnxrefine.verify.spec_identity import SpecIdentity

    spec = None
    for section, track in zip(sections, tracks):
        if track.candidate_failure is not None:
            continue
        for report in section:
            if report.verdict != verdict_rules.MISMATCH or report.name not in output_map:
                continue
            spec = spec or SpecIdentity(original_model, candidate_model)
            sets = [labelled[index][1] for index in track.differing_sets]
            if spec.outputs_same([(report.name, output_map[report.name])], sets):
                report.verdict = verdict_rules.UNSTABLE
                report.notes.append(spec.NOTE)


class _Track:
    """The runs of both models under one RunSettings, and the evidence built from them."""

    def __init__(self, settings: RunSettings, original_runs: list):
        self.settings = settings
        self.original_runs = original_runs  # per set: (first, second) output dicts
        self.candidate_runs: list = []
        self.candidate_failure: str | None = None
        self.evidence: dict[str, list] = {}
        self.comparisons: dict[str, list] = {}
        self.set_evidence: list[dict] = []
        self.differing_sets: list[int] = []
        self.differing_float: dict[int, list] = {}

    def collect(self, output_names, output_map, labelled) -> None:
        self.evidence = {name: [] for name in output_names}
        self.comparisons = {name: [] for name in output_names}
        if self.candidate_failure is not None:
            return
        for index, ((first, second), produced) in enumerate(zip(self.original_runs, self.candidate_runs)):
            feeds = labelled[index][1]
            cand_out = {name: produced[output_map[name]] for name in output_names if name in output_map}
            extreme, nonfinite = _is_extreme(feeds), _has_nonfinite(feeds)
            set_evidence = {}
            differing_float = []
            for name in output_names:
                if name not in cand_out:
                    continue
                self.comparisons[name].append(compare.compare_arrays(cand_out[name], first[name]))
                item = verdict_rules.SetEvidence(first[name], second[name], cand_out[name],
                                                 extreme=extreme, nonfinite_inputs=nonfinite)
                set_evidence[name] = item
                self.evidence[name].append(item)
                if _comparable(item) and not np.all(compare.bit_identical(item.candidate, item.original)):
                    if index not in self.differing_sets:
                        self.differing_sets.append(index)
                    if graphinfo.is_float_dtype(item.original.dtype):
                        differing_float.append(name)
            self.set_evidence.append(set_evidence)
            if differing_float:
                self.differing_float[index] = differing_float


def _original_runs(model_file, settings, labelled, custom_op_library, deadline, given_inputs):
    """The original run twice on each set (the second run is the determinism control)."""
    with ModelRunner(model_file, "original model", settings, custom_op_library) as runner:
        results = []
        for index, (label, feeds) in enumerate(labelled):
            if deadline is not None and index > 0 and time.perf_counter() > deadline:
                break
            progress.report(done=index, total=len(labelled),
                            detail=f"input set {label}: original runs ({settings.level})")
            try:
                first = runner.run(feeds)
            except RunFailedError as exc:
                hint = "" if given_inputs else " (generated inputs; pass --inputs or --dims)"
                raise BadInputError(f"input set {label}: {exc}{hint}") from None
            results.append((first, runner.run(feeds)))
        return list(runner.output_names), results


def _candidate_runs(track, candidate_file, labelled, custom_op_library, failure) -> None:
    track.candidate_failure = failure
    if failure is not None:
        return
    try:
        runner = ModelRunner(candidate_file, "candidate model", track.settings, custom_op_library)
    except ResourceLimitError:
        raise  # over the budget: verification cannot say anything, the candidate is not to blame
    except BadInputError as exc:
        track.candidate_failure = str(exc)
        return
    with runner:
        for index, (label, feeds) in enumerate(labelled):
            progress.report(done=index, total=len(labelled),
                            detail=f"input set {label}: candidate run ({track.settings.level})")
            try:
                track.candidate_runs.append(runner.run(feeds))
            except RunFailedError as exc:
                track.candidate_failure = f"input set {label}: {exc}"
                return


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


def _explained_without_controls(set_evidence: dict, bounds: dict) -> bool:
    return all(verdict_rules.judge_output([item], bounds[name]).verdict in (EXACT, ROUNDING)
               for name, item in set_evidence.items())


def _add_perturbation_runs(track, original_file, labelled, indices, count, seed, custom_op_library) -> None:
    """Controls on the original on the sets `indices`: runs on inputs moved by a few ulps, under
    the track's own settings."""
    with ModelRunner(original_file, "original model", track.settings, custom_op_library) as runner:
        for index in indices:
            feeds = labelled[index][1]
            if _has_nonfinite(feeds):
                _add_nonfinite_cones(runner, feeds, track.set_evidence[index])
            if not any(graphinfo.is_float_dtype(np.asarray(value).dtype) for value in feeds.values()):
                continue  # nothing to move by an ulp
            rng = np.random.default_rng([seed, 7919, index])
            progress.report(detail=f"input set {labelled[index][0]}: {count} perturbation runs of the original")
            for run_index in range(count):
                pattern = run_index if run_index < 2 else None
                moved = {name: verdict_rules.perturb(np.asarray(value), rng, checkerboard=pattern)
                         for name, value in feeds.items()}
                try:
                    results = runner.run(moved)
                except RunFailedError:
                    continue
                for name, item in track.set_evidence[index].items():
                    item.perturbed.append(results[name])


def _add_reference(model_file, feeds, names, evidence_sets, state, observer=None) -> None:
    """`observer`: a callable giving (observe, finish) for localisation to watch this evaluation
    (localize_shared.py) or None."""
    if state["status"] == "unavailable":
        return
    try:
        from onnxrefine.verify.reference import UnsupportedOperatorError, evaluate_float64
    except ImportError as exc:
        state.update(status="unavailable", reason=f"float64 evaluator not importable: {exc}")
        return
    # Weights stay on disk (memory-mapped) when the model is a file.
    extra = {"base_dir": model_file.base_dir} if model_file.base_dir is not None else {}
    refusal = _reference_refusal(model_file, feeds)
    if refusal is not None:
        state.update(status="unavailable", reason=refusal)
        return
    progress.report(detail="float64 reference")
    watch = observer() if observer is not None else None
    try:
        values = evaluate_float64(model_file.proto, feeds, outputs=names, observe=watch and watch[0], **extra)
    except UnsupportedOperatorError as exc:
        if watch:
            watch[1](exc)
        state.update(status="unavailable", reason=str(exc).splitlines()[0] if str(exc) else "unsupported")
        return
    except Exception as exc:  # a reference bug must not sink the verdict: fall back, say why
        if watch:
            watch[1](exc)
        state.update(status="unavailable", reason=f"float64 evaluator failed: {type(exc).__name__}: {exc}")
        return
    if watch:
        watch[1](None)
    state["status"] = "float64"
    for set_evidence in evidence_sets:
        for name in names:
            value = values.get(name)
            item = set_evidence.get(name)
            if item is not None and value is not None and np.shape(value) == item.original.shape:
                item.reference = np.asarray(value, dtype=np.float64)


def _reference_refusal(model_file, feeds) -> str | None:
    """Why the float64 reference must not evaluate the model on `feeds` (resources.py), or None."""
    from onnxrefine import resources
    from onnxrefine.verify.runner import peak_estimate

    return resources.reference_refusal(peak_estimate(model_file, feeds))


def _apply_hard_bound(report: OutputReport, sets, tolerance) -> None:
    """The user's hard bound, on top of the derived one: a differing element whose candidate is
    beyond atol + rtol*|R| of the float64 reference R (the original where there is none) is a
    mismatch. Elements whose reference is not finite, and extreme-magnitude input sets, are left
    to the verdict rules."""
    atol, rtol = tolerance
    if atol is None and rtol is None or report.verdict == MISMATCH:
        return
    atol, rtol = atol or 0.0, rtol or 0.0
    beyond = 0
    for item in sets:
        if not _comparable(item) or not graphinfo.is_float_dtype(item.original.dtype) or item.extreme:
            continue
        ref = item.reference if item.reference is not None else item.original.astype(np.float64)
        cand = item.candidate.astype(np.float64)
        differ = ~compare.bit_identical(item.candidate, item.original)
        within = np.abs(cand - ref) <= atol + rtol * np.abs(ref)
        beyond += int(np.count_nonzero(differ & np.isfinite(ref) & ~within))
    if beyond:
        report.verdict = MISMATCH
        report.notes.append(f"{beyond} differing element(s) beyond the hard bound atol={atol:g} + "
                            f"rtol={rtol:g}*|reference|")


def _bounds(model, feeds, names, u) -> dict:
    try:
        profile = graphinfo.accumulation_profile(model, feeds)
    except Exception:  # an unreadable graph: the widest guess, sensitivity allowed
        return {name: verdict_rules.RoundingBound.for_output(u, 1, graphinfo.UNKNOWN_DIM) for name in names}
    return {name: verdict_rules.RoundingBound.for_value(u, profile[name]) for name in names}


# -- evidence for the verdict rules (verdict.py): dependency cones and discrete-output feeds -----

def _add_nonfinite_cones(runner, feeds, set_evidence) -> None:
    """SetEvidence.nonfinite_cone on inf/NaN input sets: the original rerun with two finite
    stand-ins for the inf/NaN inputs; an element that changes under either depends on them."""
    changed = {name: None for name in set_evidence}
    for stand_in in (1.0, -2.0):
        try:
            results = runner.run(verdict_rules.nonfinite_replaced(feeds, stand_in))
        except RunFailedError:
            return
        for name, item in set_evidence.items():
            moved = results[name]
            if moved.shape != item.original.shape:
                changed[name] = np.ones(item.original.shape, dtype=bool)
                continue
            flip = ~compare.bit_identical(moved, item.original)
            changed[name] = flip if changed[name] is None else changed[name] | flip
    for name, cone in changed.items():
        set_evidence[name].nonfinite_cone = cone


def _add_decision_evidence(model_file, feeds, set_evidence, reference_state) -> None:
    """SetEvidence.decision for differing discrete outputs: the float64 values feeding the op."""
    if reference_state["status"] == "unavailable":
        return
    from onnxrefine.verify.decisions import DECISION_OPS, DecisionEvidence

    model = model_file.proto
    producers = {out: node for node in model.graph.node for out in node.output}
    wanted = {}
    for name, item in set_evidence.items():
        node = producers.get(name)
        if node is None or node.op_type not in DECISION_OPS or graphinfo.is_float_dtype(item.original.dtype):
            continue
        if np.all(compare.bit_identical(item.candidate, item.original)):
            continue
        data = list(node.input[:2] if node.op_type in ("Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                                        "Equal") else node.input[:1])
        wanted[name] = (node, data)
    if not wanted or _reference_refusal(model_file, feeds) is not None:
        return
    extra = {"base_dir": model_file.base_dir} if model_file.base_dir is not None else {}
    try:
        from onnxrefine.verify.reference import evaluate_float64
        values = evaluate_float64(model, feeds, outputs=sorted({v for _, data in wanted.values() for v in data}),
                                  **extra)
    except Exception:  # no decision evidence: the perturbation controls decide instead
        return
    for name, (node, data) in wanted.items():
        arrays = [np.asarray(values[value]) for value in data]
        if not all(graphinfo.is_float_dtype(array.dtype) for array in arrays):
            continue
        attrs = {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}
        set_evidence[name].decision = DecisionEvidence(
            node.op_type, [array.astype(np.float64) for array in arrays], attrs)

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
