"""One verification, as named steps: VerificationSession (verify_models is a thin wrapper of it).

The session holds the options and the reference evaluator, injected: by default the float64 reference
(reference/evaluator.py, imported on first use); a caller (a test, a benchmark column) may pass any callable
of the same signature, DECLINING_REFERENCE among them, which declines every model so that verification takes
the documented no-reference fallback. Nothing is swapped in sys.modules.

verify() runs the steps in this order, each a method below:
  plan_inputs     the input sets (given or generated), checked against the original's inputs
  plan_precision  u, discrete ops, perturbation runs, float16 note
  run_original    the original once per set (strict settings; the time budget is spent here)
  run_candidate   the candidate on the same sets, the original's re-run on those where it differs
                  (runs.py); both again under the deployment settings
  add_reference   the original (and a narrower candidate) in float64 where the outputs differ; decision evidence
  add_controls    perturbation runs of the original on the inf/NaN sets
  compare         one OutputReport per output and track (the verdict rules, the hard bound); then
                  add_controls on the sets it did not accept, and compare again if any ran
  verdict         the VerificationReport: overall verdict, notes, settings
  localise        layer-wise localisation (localize/layerwise.py), which can turn the verdict to mismatch
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from onnxrefine import portable, progress
from onnxrefine.errors import BadInputError
from onnxrefine.verify import conversion, evidence, graphinfo, judge, run_reference, terms
from onnxrefine.verify.discrete import perturbation_sees_discrete_ops
from onnxrefine.verify.evidence import Track
from onnxrefine.verify.inputs import check_inputs, generate_labelled_inputs
from onnxrefine.verify.reference import UnsupportedOperatorError
from onnxrefine.verify.judge import EXACT, ROUNDING, excuse_float16_runtime
from onnxrefine.verify.report import VerificationReport
from onnxrefine.verify.runs import OriginalRuns, add_perturbation_runs, candidate_runs
from onnxrefine.verify.ort import RunSettings, check_run_settings, open_model, whole_proto

__all__ = ["DECLINING_REFERENCE", "DecliningReference", "ReferenceEvaluator", "VerificationSession",
           "float64_reference"]

# evaluate(model, feeds, *, outputs=None, base_dir=None, observe=None) -> {name: float64 array};
# raises UnsupportedOperatorError when it cannot evaluate the model (reference.evaluate_float64's contract)
ReferenceEvaluator = Callable[..., dict]


class ReferenceNotImportable(Exception):
    """The float64 evaluator's module could not be imported."""


def float64_reference(model, feeds, *, outputs=None, base_dir=None, observe=None, **options) -> dict:
    """The default reference: reference.evaluate_float64, imported when first needed, with its options
    (without `magnitudes` its values carry the bounds but not the magnitude of their terms)."""
    try:
        from onnxrefine.verify.reference import evaluate_float64
    except ImportError as exc:
        raise ReferenceNotImportable(str(exc)) from exc
    return evaluate_float64(model, feeds, outputs=outputs, base_dir=base_dir, observe=observe, **options)


class DecliningReference:
    """A reference that declines every model: verification judges by the no-reference fallback."""

    def __init__(self, reason: str = "declined by the caller"):
        self.reason = reason

    def __call__(self, model, feeds, *, outputs=None, base_dir=None, observe=None) -> dict:
        raise UnsupportedOperatorError(self.reason)


DECLINING_REFERENCE = DecliningReference()

DEFAULT_DEPLOYMENT = RunSettings()
# Localisation builds sessions exposing intermediates from whole in-memory models: above this
# many bytes of weights it is not run (and says so) rather than hold a large model twice.
LOCALIZE_MAX_BYTES = 1 << 30


@dataclass
class _Run:
    """The state of one verify() call, handed from step to step."""

    original_file: Any
    candidate_file: Any
    candidate_failure: str | None
    labelled: list
    inputs_given: bool
    early: Any = None
    started: float = field(default_factory=time.perf_counter)
    notes: list = field(default_factory=list)
    float_dtypes: set = field(default_factory=set)  # of both graphs
    u: float = 0.0
    discrete: bool = False
    perturb_count: int = 0
    output_names: list = field(default_factory=list)
    output_map: dict = field(default_factory=dict)
    tracks: list = field(default_factory=list)  # the strict track first, then the deployment one
    reference_state: dict = field(default_factory=lambda: {"status": "not needed", "reason": ""})
    strict_original: Any = None  # runs.OriginalRuns of the strict track, until its re-runs
    bounds: dict = field(default_factory=dict)
    referenced: dict = field(default_factory=dict)  # input set index -> outputs evaluated in float64
    with_magnitudes: set = field(default_factory=set)  # sets evaluated again with the magnitude of terms

    @property
    def strict(self) -> Track:
        return self.tracks[0]


@dataclass
class VerificationSession:
    """The options of verify_models (see its docstring) and the reference evaluator."""

    trials: int = 3
    seed: int = 0
    dims: Mapping[str, int] | None = None
    stress: bool = True
    time_budget_s: float | None = None
    deployment: RunSettings | None = DEFAULT_DEPLOYMENT
    custom_op_library: str | None = None
    atol: float | None = None
    rtol: float | None = None
    localize: bool = True
    reference: ReferenceEvaluator = float64_reference
    match_outputs: str = "name"  # or "position" (evidence.match_outputs)

    def check_settings(self) -> None:
        check_run_settings(self.deployment, self.custom_op_library)
        if self.match_outputs not in (evidence.MATCH_BY_NAME, evidence.MATCH_BY_POSITION):
            raise BadInputError(f"match_outputs must be 'name' or 'position', not {self.match_outputs!r}")
        for name, value in (("atol", self.atol), ("rtol", self.rtol)):
            if value is not None and not (value >= 0):
                raise BadInputError(f"--{name} must be a non-negative number")

    def verify(self, original, candidate, inputs=None) -> VerificationReport:
        """Compare `candidate` against `original` (paths, ModelProtos or onnx_ir Models)."""
        self.check_settings()
        # inf/NaN arithmetic is expected on stress inputs; float64 products run on one BLAS thread
        with np.errstate(all="ignore"), portable.one_blas_thread():
            original_file = open_model(original, "original model")
            candidate_file, candidate_failure = None, None
            try:
                try:
                    candidate_file = open_model(candidate, "candidate model")
                except BadInputError as exc:
                    if isinstance(candidate, (str, os.PathLike)):
                        raise  # a missing or unreadable file is bad input, not a finding
                    candidate_failure = str(exc)
                labelled = self.plan_inputs(original_file.proto, inputs)
                early = None
                if self.localize and candidate_file is not None:
                    from onnxrefine.verify.localize import EarlyLocalisation

                    # localisation observes the output check's float64 evaluations (localize/shared.py)
                    early = EarlyLocalisation(original, candidate, self.seed, _whole_proto)
                run = _Run(original_file, candidate_file, candidate_failure, labelled, inputs is not None, early)
                report = self.check_outputs(run)
                if self.localize:
                    self.localise(report, original, candidate, run.labelled, early)
                return report
            finally:
                for opened, given in ((original_file, original), (candidate_file, candidate)):
                    if opened is not None and opened is not given:
                        opened.close()

    def check_outputs(self, run: _Run) -> VerificationReport:
        """The output check: every step but localisation."""
        conversion.apply_conversion(run, None if run.inputs_given else  # how a converted candidate is fed
                                  lambda: dict(self.plan_inputs(run.candidate_file.proto, None)))
        self.plan_precision(run)
        self.run_original(run)
        self.run_candidate(run)
        # the magnitude of terms and a float16 candidate's own bounds only where read (terms.py)
        deferred = self.reference is float64_reference and run.early is None and not terms.reads_magnitudes(
            run.original_file.proto)
        self.add_reference(run, magnitudes=not deferred)
        self._bounds(run)
        evidence.add_static_facts(run.original_file.proto, run.candidate_file, run.tracks, run.output_map)
        self.add_controls(run, nonfinite=True)
        sections = self.judged(run, deferred)
        if self.add_controls(run, nonfinite=False):
            sections = self.judged(run, deferred)
        return self.verdict(run, sections)

    def judged(self, run: _Run, deferred: bool) -> list:
        """compare(); where the magnitude of terms was deferred, again with it on the sets whose
        judgement read it."""
        sections = self.compare(run)
        if deferred and self._magnitudes_read(run):
            sections = self.compare(run)
        return sections

    def _magnitudes_read(self, run: _Run) -> bool:
        """Evaluate with the magnitude of terms the sets whose judgement read it (terms.py); True if any."""
        again = terms.sets_reading(run)
        for index, names in sorted(again.items()):
            self._reference_on_set(run.original_file, run.labelled[index][1], sorted(names),
                                   [track.set_evidence[index] for track in run.tracks if index < len(track.set_evidence)],
                                   run.reference_state, None, magnitudes=True, magnitude_only=True)
        conversion.attach_candidate_bounds(run, again, self._bounds_only(), narrower_part=False)
        return bool(again)

    # -- the steps --------------------------------------------------------------------------------

    def plan_inputs(self, model: onnx.ModelProto, inputs) -> list:
        """(label, feeds) pairs: the given sets, or generated ones; checked against the model's inputs."""
        if inputs is None:
            labelled = generate_labelled_inputs(model, seed=self.seed, dims=self.dims, stress=self.stress,
                                                trials=self.trials)
        else:
            sets = [inputs] if isinstance(inputs, Mapping) else list(inputs)
            if not sets:
                raise BadInputError("no input sets given")
            labelled = [(f"given{index}", feeds) for index, feeds in enumerate(sets)]
        checked = check_inputs(model, [feeds for _, feeds in labelled])
        return [(label, feeds) for (label, _), feeds in zip(labelled, checked)]

    def plan_precision(self, run: _Run) -> None:
        original_model = run.original_file.proto
        float_dtypes = graphinfo.float_dtypes(original_model)
        if run.candidate_file is not None:
            float_dtypes |= graphinfo.float_dtypes(run.candidate_file.proto)
        if any(np.dtype(dtype) == np.float16 for dtype in float_dtypes):
            run.notes.append("float16 graph: onnxruntime on the CPU may insert float16<->float32 casts of "
                             "its own, so discrete results can differ from a pure float16 evaluation")
        run.float_dtypes = float_dtypes
        run.u = judge.lowest_precision_u(float_dtypes)
        run.discrete = perturbation_sees_discrete_ops(original_model)
        run.perturb_count = judge.perturbation_runs(self.trials, run.discrete)

    def run_original(self, run: _Run) -> None:
        """The original on every set under the strict settings (its re-runs come after the
        candidate's, verify/runs.py). Sessions run one at a time where the weights are large (each
        holds its own copy): the original, then the candidate, then both under the deployment
        settings. The time budget is checked while the first runs; its share of it is the share
        of the runs it makes."""
        strict = RunSettings.strict()
        share = 2 / 3 if self.deployment is None else 1 / 3
        deadline = None if self.time_budget_s is None else run.started + self.time_budget_s * share
        run.strict_original = OriginalRuns(run.original_file, strict, self.custom_op_library)
        run.output_names, first_runs, map_outputs = run.strict_original.first_runs(run.labelled, deadline,
                                                                                   run.inputs_given)
        if len(first_runs) < len(run.labelled):
            run.notes.append(f"time budget of {self.time_budget_s:g}s spent: {len(run.labelled) - len(first_runs)} "
                             f"of {len(run.labelled)} input sets not run")
            run.labelled = run.labelled[:len(first_runs)]
        run.labelled, first_runs = evidence.runnable_sets(run.labelled, first_runs, run.notes)
        run.tracks = [Track(strict, first_runs, map_outputs)]

    def run_candidate(self, run: _Run) -> None:
        """The candidate on the strict track and the original's re-runs; then both models under
        the deployment settings."""
        with run.strict_original.closed_on_error():
            if run.candidate_failure is None:
                run.output_map, run.candidate_failure = evidence.match_outputs(
                    run.output_names, [out.name for out in run.candidate_file.proto.graph.output], run.notes,
                    self.match_outputs)
            candidate_runs(run.strict, run, self.custom_op_library)
        run.strict_original.rerun(run.strict, run.output_names, run.output_map, run.labelled)
        if self.deployment is None:
            return
        deployed = OriginalRuns(run.original_file, self.deployment, self.custom_op_library)
        try:
            _, first_runs, map_outputs = deployed.first_runs(run.labelled, None, run.inputs_given)
        except BadInputError as exc:
            run.notes.append(self._deployment_not_run(exc))
            return
        track = Track(self.deployment, first_runs, map_outputs)
        with deployed.closed_on_error():
            candidate_runs(track, run, self.custom_op_library)
        try:
            deployed.rerun(track, run.output_names, run.output_map, run.labelled)
        except BadInputError as exc:  # the original's own re-run failed: as when its first run fails
            run.notes.append(self._deployment_not_run(exc))
            return
        run.tracks.append(track)

    def _deployment_not_run(self, exc: BadInputError) -> str:
        return (f"deployment check not run: the original does not run under the deployment settings "
                f"({self.deployment.describe()}): {exc}")

    def add_reference(self, run: _Run, magnitudes: bool = True) -> None:
        """The evidence of every track; the original in float64 on each set where a float output
        differs (watched by the early localisation); the decision evidence of discrete outputs."""
        needs_reference: dict[int, set] = {}
        for track in run.tracks:
            track.collect(run.output_names, run.output_map, run.labelled)
            for index, names in track.differing_float.items():
                needs_reference.setdefault(index, set()).update(names)
        early, labelled = run.early, run.labelled
        if early is not None and run.strict.candidate_failure is None:
            early.start(labelled, run.u, run.perturb_count)  # localisation observes the evaluations below
        run.referenced = needs_reference
        for index, names in sorted(needs_reference.items()):
            self._reference_on_set(run.original_file, labelled[index][1], sorted(names),
                                   [track.set_evidence[index] for track in run.tracks if index < len(track.set_evidence)],
                                   run.reference_state, None if early is None or early.localizer is None else
                                   (lambda i=index: early.observer(labelled[i][0], i, labelled[i][1])),
                                   magnitudes=magnitudes)
        bounds_only = self._bounds_only()  # both read only the bounds
        for track in run.tracks:
            for index in track.differing_sets:
                evidence.add_decision_evidence(run.original_file, labelled[index][1], track.set_evidence[index],
                                               run.reference_state, bounds_only)
        # a narrower one's own bounds; a float16 graph's spec-same ones unless deferred (_magnitudes_read)
        conversion.attach_candidate_bounds(run, needs_reference, bounds_only, spec_same=magnitudes)

    def _reference_on_set(self, model_file, feeds, names, evidence_sets, state, observer=None,
                          magnitudes: bool = True, magnitude_only: bool = False) -> None:
        """`observer`: a callable giving (observe, finish) for localisation (localize/shared.py) or None."""
        if state["status"] == "unavailable":
            return
        refusal = evidence.reference_refusal(model_file, feeds)
        if refusal is not None:
            state.update(status="unavailable", reason=refusal)
            return
        # Weights stay on disk (memory-mapped) when the model is a file.
        extra = {"base_dir": model_file.base_dir} if model_file.base_dir is not None else {}
        progress.report(detail="float64 reference")
        watch = observer() if observer is not None else None
        try:
            if not magnitudes:
                extra["magnitudes"] = False  # only the default reference is asked (check_outputs)
            values = self.reference(model_file.proto, feeds, outputs=names, observe=watch and watch[0], **extra)
        except ReferenceNotImportable as exc:
            if watch:
                watch[1](exc)
            state.update(status="unavailable", reason=f"float64 evaluator not importable: {exc}")
            return
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
                    if magnitude_only and item.reference is not None:
                        item.attach_magnitude(value)  # bounds a conversion merged in stay as they are
                    else:
                        item.attach_reference(value)
        run_reference.attach_run_reference(self.reference, model_file.proto, feeds, [] if magnitude_only else [  # once a set
            (name, found.get(name)) for found in evidence_sets for name in names], model_file.base_dir)

    def add_controls(self, run: _Run, nonfinite: bool) -> bool:
        """The controls on the original (few-ulp perturbation runs) on the differing sets that lack
        them: with `nonfinite`, every set holding inf/NaN (its run also measures the dependency
        cones, which narrow what the inf/NaN rules excuse, so it comes before any judgement); else
        every set the latest judgement (compare) did not accept for some output. The controls only
        add excuses (sensitivity, unstable positions), so a set the bound explains without them
        needs none, and one judgement both judges and says where they are needed. True if any ran."""
        ran = False
        for track in run.tracks:
            pending = [index for index in track.differing_sets if index not in track.controlled
                       and (evidence.has_nonfinite(run.labelled[index][1]) if nonfinite else
                            not all(item.verdict in (EXACT, ROUNDING) for item in track.set_evidence[index].values()))]
            if pending:
                track.controlled.update(pending)
                add_perturbation_runs(track, run.original_file, run.labelled, pending, run.perturb_count,
                                       self.seed, self.custom_op_library)
                ran = True
        return ran

    def _bounds_only(self):
        """The reference for a caller that reads only the bounds (the default: no magnitude of terms)."""
        return functools.partial(float64_reference, magnitudes=False) \
            if self.reference is float64_reference else self.reference

    @staticmethod
    def _bounds(run: _Run) -> dict:
        """Each output's RoundingBound (evidence.bounds), made once."""
        if not run.bounds:
            run.bounds = evidence.bounds(run.original_file.proto, run.labelled[0][1], run.output_names, run.u)
        return run.bounds

    def compare(self, run: _Run) -> list:
        """Per track, one OutputReport per output of the original: the verdict rules, then the hard bound."""
        sections = []
        for track in run.tracks:
            section = []
            for name in run.output_names:
                report = evidence.output_report(name, track.evidence[name], track.comparisons[name],
                                                run.bounds[name], run.output_map.get(name),
                                                track.candidate_failure or track.output_failures.get(name),
                                                run.reference_state)
                evidence.apply_hard_bound(report, track.evidence[name], (self.atol, self.rtol))
                section.append(report)
            sections.append(section)
        if run.candidate_file is not None and any(np.dtype(d).name in ("float16", "bfloat16")
                                                  for d in run.float_dtypes):
            excuse_float16_runtime(sections, run.tracks, run.original_file.proto, run.candidate_file.proto,
                                   run.output_map, run.labelled, self.reference)
        return sections

    def verdict(self, run: _Run, sections: list) -> VerificationReport:
        """The report: the worst output verdict of both tracks, and what the reader must know."""
        outputs, deployed_outputs = sections[0], (sections[1] if len(sections) > 1 else [])
        notes, tracks = run.notes, run.tracks
        if run.strict.candidate_failure is not None:
            notes.append(f"candidate failed: {run.strict.candidate_failure}")
        elif len(tracks) > 1 and tracks[1].candidate_failure is not None:
            notes.append(f"candidate failed under the deployment settings: {tracks[1].candidate_failure}")
        if run.reference_state["status"] == "unavailable":
            notes.append(f"no float64 reference ({run.reference_state['reason']}): differing float outputs "
                         "judged by the fallback (ulp statistics, re-run and perturbation controls)")
        for track in tracks:
            where = "" if track is run.strict else " under the deployment settings"
            for name, sets in track.evidence.items():
                if any(not np.all(judge.bit_identical(item.rerun, item.original)) for item in sets):
                    notes.append(f"control: the original is not deterministic on output {name}{where}")
        notes.extend(conversion.converted_output_notes(tracks))
        if run.discrete:
            notes.append(f"discrete ops read moved inputs: {run.perturb_count} perturbation runs of the original "
                         "per input set where the candidate differs")
        elapsed = time.perf_counter() - run.started
        return VerificationReport(
            verdict=VerificationReport.overall(outputs + deployed_outputs),
            outputs=outputs,
            deployment=deployed_outputs,
            notes=notes,
            input_sets=[label for label, _ in run.labelled],
            settings={"trials": self.trials, "seed": self.seed, "dims": dict(self.dims or {}),
                      "stress": self.stress, "time_budget_s": self.time_budget_s, "unit_roundoff": run.u,
                      "perturbation_runs": run.perturb_count,
                      "inputs": "given" if run.inputs_given else "generated",
                      "strict": run.strict.settings.to_dict(),
                      "deployment": self.deployment.to_dict() if self.deployment is not None else None,
                      "custom_op_library": self.custom_op_library, "atol": self.atol, "rtol": self.rtol},
            timings={"total_s": round(elapsed, 4)},
        )

    def localise(self, report, original, candidate, labelled, early=None) -> None:
        """Layer-wise localisation on the input sets the output checks used (see localize/layerwise.py)."""
        from onnxrefine.verify.localize import include_outputs, localize

        if any("candidate failed" in note for note in report.notes):
            report.localisation = {"status": "not run: the candidate failed to load or run"}
            return
        if early is not None:
            original_model, candidate_model = early.load()
        else:
            original_model = _whole_proto(original, "original model")
            candidate_model = _whole_proto(candidate, "candidate model")
        refusal = conversion.localisation_refusal(original_model, candidate_model, LOCALIZE_MAX_BYTES)
        if refusal is not None:
            report.localisation = {"status": refusal}
            return
        used = [(label, feeds) for label, feeds in labelled if label in report.input_sets]
        from onnxrefine import resources  # the float64 evaluation of every value must fit the budget
        from onnxrefine.ir import peak

        refusal = resources.reference_refusal(peak.estimate_peak(original_model, used[0][1])) if used else None
        if refusal is not None:
            report.localisation = {"status": f"not run: {refusal}"}
            return
        spent = report.timings.get("total_s", 0.0)
        budget = None if self.time_budget_s is None else max(0.0, self.time_budget_s - spent)
        section = localize(original_model, candidate_model, used, u=report.settings["unit_roundoff"],
                           perturb_count=report.settings["perturbation_runs"], seed=self.seed,
                           time_budget_s=budget, early=early, reference=self.reference)
        include_outputs(section, original_model, report.outputs)
        report.localisation = section
        report.verdict = judge.worst([report.verdict,
                                              VerificationReport.overall(report.outputs, section)])
        report.timings["localisation_s"] = section.get("seconds", 0.0)


def _whole_proto(given, role: str) -> onnx.ModelProto | None:
    return whole_proto(given, role, LOCALIZE_MAX_BYTES)
