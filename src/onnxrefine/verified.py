"""Optimization with proof: the schedule runs once, the result is verified end to end, once.

The schedule is passes/pipeline.py's, the one `--no-verify` runs, so both apply the same rewrites.
Before anything runs, verify/plan.py estimates what one verification costs from the model and
says what will happen (how many input sets, or why verification is skipped). After the schedule,
the final model is verified against the original. Only when that verdict is not exact/rounding
does onnxrefine bisect the schedule's deterministic replay: pass run by pass run, then rewrite by
rewrite inside the culprit run, to the first step whose prefix turns the verdict. That rewrite
is vetoed (a graph-level pass run is disabled as a whole), the schedule re-runs and the result is
verified again, at most `max_rollbacks` times. A final model whose verdict is `mismatch` is never
returned, so never written.

Events for `on_event(kind, **info)`, besides the schedule's (see passes/pipeline.py):
"verify_plan" (run, text, estimate_s, budget_s) before any verification; "verify" (phase "start":
what, sets; phase "done": what, verdict, seconds) around each verify_models call; "bisect" (step,
verdict) when bisection names a culprit. Replays during bisection emit no schedule events.

The original stays a FILE throughout, so a model of any size (over protobuf's 2 GiB too) is
optimized and verified with its weights read memory-mapped: the user's path when the model came
from one (`source_path`), else the in-memory model written once by the streaming saver into a temp
folder (removed at the end). Every run and replay loads that file lazily (io.load_model: unchanged
weights stay memory-mapped), the plan reads only its graph (verify/ort/files.py light_proto), and
verify_models gets the original as that file and each candidate as an ir.Model (written to a temp
folder whose unchanged weights are hard links, verify/ort/files.py open_model). Nothing serializes
the whole model.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxrefine import portable, progress
from onnxrefine.errors import BadInputError, OnnxRefineError
from onnxrefine.ir import io, traversal
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.passes import interface
from onnxrefine.passes.bisection import first_bad_step
from onnxrefine.passes.pipeline import Step, run_passes
from onnxrefine.rewrite.log import DEFERRED, RewriteLog
from onnxrefine.rewrite.rule import EXACT
from onnxrefine.verify.judge import Verdict

DEFAULT_VERIFY_BUDGET_S = 120.0  # the most auto mode spends unless --verify-budget says otherwise
AUTO_BUDGET_FACTOR = 2.0
MAX_ROLLBACKS = 4
ACCEPTED = tuple(verdict for verdict in Verdict if verdict.accepted)  # exact, rounding


class VerificationFailed(OnnxRefineError):
    """The optimized model does not compute what the original computes; nothing is written."""


@dataclass
class VerifySettings:
    enabled: bool | None = None  # None: verify when the estimate fits the budget; True: always
    budget_s: float | None = None  # None: scaled to the schedule's time (see _budget)
    seed: int = 0
    # Random input sets besides the stress sets. One: the stress sets find what a second random
    # set would, and every set costs a float64 evaluation of the whole model.
    trials: int = 1
    dims: Mapping[str, int] | None = None
    inputs: Sequence[Mapping[str, np.ndarray]] | None = None
    max_rollbacks: int = MAX_ROLLBACKS


@dataclass
class VerifiedRun:
    model: ir.Model
    log: RewriteLog
    rolled_back: list[dict] = field(default_factory=list)
    summary: dict | None = None


def _noop(kind: str, **info) -> None:
    return None


@progress.in_phase("optimize and verify")
def optimize_verified(
    model: ir.Model,
    pass_names: Sequence[str],
    *,
    settings: VerifySettings,
    budget: ConstantBudget,
    fixed_point: bool = True,
    on_progress: Callable[[int], None] | None = None,
    on_event: Callable[..., None] | None = None,
    certifier=None,
    source_path: str | os.PathLike | None = None,
) -> VerifiedRun:
    """Run the schedule and verify its result (see the module docstring).

    `source_path`: the file `model` was loaded from, unchanged since (the original is read from
    it); None: `model` is written to a temp folder first. `model` itself is not modified: the
    schedule runs on fresh loads of the original file (every replay starts from the same
    original), and the returned model's unchanged weights stay memory-mapped from the user's file
    (from a temp folder they are read into memory before it goes). When
    verification is in auto mode and cannot run (over the limit, the model does not run in
    onnxruntime), the optimized copy is returned and the summary says why it was not verified.
    With `settings.enabled` such a problem raises BadInputError.
    """
    started = time.perf_counter()
    original = _original_file(model, source_path)
    try:
        state = _Schedule(original, pass_names, budget, fixed_point, on_progress, on_event or _noop, settings,
                          certifier)
        with portable.one_blas_thread():  # the certificates' float64 work too (see portable.py)
            run = _run_and_verify(state, settings, started)
        _detach(run.model, original.temp_dir)
        return run
    finally:
        original.close()


def _run_and_verify(state: "_Schedule", settings: VerifySettings, started: float) -> VerifiedRun:
    from onnxrefine.verify.plan import VerifyPlan, make_plan  # numpy-heavy: only when verifying

    emit = state.emit
    forced = bool(settings.enabled)
    original = state.original
    work, log, steps = state.run(record=True)
    if not steps and not forced:  # no change at all: the model is the original (--verify still runs it)
        summary = {"status": "verified", "verdict": Verdict.EXACT, "per_output": {}, "verifications": 0,
                   "notes": ["no rewrite applied: the model is unchanged"], "input_sets": [], "seconds": 0.0}
        emit("verify_plan", run=False, text="nothing to verify: no rewrite applied", estimate_s=0.0, budget_s=0.0)
        return VerifiedRun(work, log, summary=summary)
    budget_s, budget_text = _budget(settings, time.perf_counter() - started)
    # Input sets are cut to the budget; only when one set would exceed the limit (the user's
    # --verify-budget, else DEFAULT_VERIFY_BUDGET_S) is verification skipped.
    limit_s = settings.budget_s if settings.budget_s is not None else DEFAULT_VERIFY_BUDGET_S

    def planned(dims, why: str = "") -> VerifyPlan:
        try:
            for assignment in dims if isinstance(dims, list) else [dims]:
                _check_resources(original, assignment)
            plan = make_plan(original.proto, budget_s=budget_s, forced=forced, trials=settings.trials,
                             seed=settings.seed, dims=dims, inputs=settings.inputs,
                             weight_bytes=io.tensor_bytes(work), budget_text=budget_text, limit_s=limit_s,
                             differs=any(entry.kind != EXACT for entry in log.applied))
        except BadInputError as exc:
            if forced:
                raise BadInputError(f"cannot verify: {exc}") from None
            plan = VerifyPlan(False, f"skipped: {exc}", reason=str(exc))
        plan.text += why
        emit("verify_plan", run=plan.run, text=plan.text, estimate_s=plan.estimate_s, budget_s=budget_s)
        return plan

    plan = planned(settings.dims)
    if not plan.run:
        return _unverified(state, work, log, {"status": "skipped", "reason": plan.reason, "plan": plan.text})
    report, sizes = _verify_end_to_end(state, work, plan, forced, budget_s), None
    if isinstance(report, BadInputError) and not settings.dims and settings.inputs is None:
        # The original fails at the generated sets' default sizes of its symbolic dims (a KV
        # cache's mask as long as past + sequence): verified where the model runs, if anywhere.
        sizes = _runnable_sizes(state, settings.seed, report)
        if sizes is not None:
            plan = planned(sizes[0], f"; at {sizes[1]}")
            if not plan.run:
                return _unverified(state, work, log, {"status": "skipped", "reason": plan.reason, "plan": plan.text})
            report = _verify_end_to_end(state, work, plan, forced, budget_s)
    if isinstance(report, BadInputError):
        if forced:
            raise BadInputError(f"cannot verify: {report}") from None
        reason = _not_runnable(report)
        return _unverified(state, work, log, {"status": "skipped", "reason": reason, "plan": plan.text})
    rolled_back: list[dict] = []
    while report.verdict not in ACCEPTED and len(rolled_back) < settings.max_rollbacks and steps:
        culprit, culprit_report = state.bisect(steps, report)
        rolled_back.append(_rollback_record(culprit, culprit_report))
        state.roll_back(culprit)
        work, log, steps = state.run(record=True)
        report = state.verify(work, "end to end, after rollback")
    if report.verdict == Verdict.MISMATCH:
        outputs = ", ".join(report.failing_outputs)
        raise VerificationFailed(
            f"the optimized model changes output(s) {outputs} (verdict: mismatch) and "
            f"{len(rolled_back)} rollback(s) did not fix it; nothing written")
    summary = {
        "status": "verified", "verdict": report.verdict,
        "per_output": {o.name: o.verdict for o in report.outputs}, "notes": report.notes,
        "plan": plan.text, "estimate_s": round(plan.estimate_s, 2),
        # The final check may have stopped early on a loaded machine (its notes say so).
        "input_sets": [label for label, _ in plan.sets][: len(report.input_sets)],
        "verifications": state.verifications,
        "seconds": round(state.verify_seconds, 3),
    }
    if sizes is not None:
        summary["sizes"] = sizes[1]
    return VerifiedRun(work, log, rolled_back, summary)


def _verify_end_to_end(state: "_Schedule", work: ir.Model, plan, forced: bool, budget_s: float):
    """The end-to-end report on the plan's sets, or the BadInputError that stopped it (the
    original does not run there, a resource limit)."""
    from onnxrefine import resources  # a watched run (Loop, unknown shapes) also stops at the guard

    state.use_inputs([feeds for _, feeds in plan.sets], plan.trials)
    # In auto mode a gross underestimate (a loaded machine) stops starting further input sets.
    guard = None if forced else max(budget_s, 2 * plan.estimate_s)
    try:
        with resources.limits(time_limit_s=guard):
            return state.verify(work, "end to end", time_budget_s=guard)
    except BadInputError as exc:
        return exc


def _runnable_sizes(state: "_Schedule", seed: int, failure: BadInputError) -> tuple[list, str] | None:
    """(assignments, what to say) of the symbolic dims at which the original runs, when the
    default sizes are why it failed; None otherwise (a resource limit, no such sizes)."""
    from onnxrefine.verify.ort import sizes_it_runs_at
    from onnxrefine.verify.sizes import default_sizes_failed, sizes_note

    if not default_sizes_failed(failure):
        return None
    sizes = sizes_it_runs_at(io.load_model(state.original.path), seed)
    return None if isinstance(sizes, str) else (sizes, sizes_note(sizes, failure))


def _unverified(state: "_Schedule", work: ir.Model, log: RewriteLog, summary: dict) -> VerifiedRun:
    """Verification will not run after all (auto mode decides on the optimized model): rewrites
    left to its verdict (evidence "deferred") would stand on faith, so the schedule runs again
    with the certifier refusing them (certificate.uncertifiable), and the summary says how many."""
    certifier = state.certifier
    deferred = sum(1 for entry in log.applied if entry.evidence == DEFERRED)
    if certifier is None or not deferred:
        return VerifiedRun(work, log, summary=summary)
    certifier.defer_uncertified = False
    work, log, _ = state.run(record=False)
    summary["notes"] = [f"{deferred} rewrite(s) no certificate could be made for were refused: the "
                        "verification that was to judge them did not run"]
    return VerifiedRun(work, log, summary=summary)


def _original_file(model: ir.Model, source_path):
    """The original as a verify/ort/files.py ModelFile: the user's file, or `model` written to a temp
    folder (hard links for weights already memory-mapped from a file, else the streaming saver:
    large tensors as external data). Its graph is read without the large weights' bytes."""
    from onnxrefine.verify.ort import ModelFile, light_proto, write_temp

    if source_path is not None:
        path = os.fspath(source_path)
        proto = light_proto(path, "original model")
        path = os.path.realpath(path)  # the file io.load_model read, weights beside it (ir/load.py)
        return ModelFile(proto, path, os.path.dirname(path))
    return write_temp(model, "original model")


def _detach(model: ir.Model, folder: str | None) -> None:
    """Read into memory the tensors of `model` memory-mapped from `folder` (about to be removed):
    a lazily mapped file that is gone can no longer be read."""
    if folder is None:
        return
    root = os.path.realpath(folder) + os.sep
    for value in list(_external_tensors(model)):
        tensor = value.const_value
        if os.path.realpath(tensor.path).startswith(root):
            value.const_value = ir.Tensor(np.array(tensor.numpy()), name=value.name)  # a copy, not a view
            with contextlib.suppress(BufferError):
                tensor.release()


def _external_tensors(model: ir.Model):
    for site in traversal.graphs(model):
        for value in site.graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                yield value


def _unmap(model: ir.Model) -> None:
    """Close the memory maps of weights the schedule read (passes read every weight of a big
    model): their pages would count in this process's memory while onnxruntime holds its own copy
    of the weights during verification (measured: peak RSS 2.1x the weights on the 3 GiB model,
    1.1x after). They map again, lazily, when read (saving the result)."""
    for value in _external_tensors(model):
        try:
            value.const_value.release()
        except BufferError:  # an array still views the map (a cache): it stays mapped
            pass


def _budget(settings: VerifySettings, schedule_s: float) -> tuple[float, str]:
    """Seconds auto mode may spend verifying: the user's --verify-budget, else a multiple of what
    the schedule itself took (verification should not dwarf the optimization it checks), at most
    DEFAULT_VERIFY_BUDGET_S. No floor in seconds: a small model's verification costs what the
    model costs; what every auto run keeps is a number of input sets (verify/plan.py: min_auto_sets)."""
    if settings.budget_s is not None:
        return settings.budget_s, f"{settings.budget_s:g} s"
    budget = min(DEFAULT_VERIFY_BUDGET_S, AUTO_BUDGET_FACTOR * schedule_s)
    return budget, f"{budget:.1f} s ({AUTO_BUDGET_FACTOR:g}x the optimization's {schedule_s:.1f} s)"


def _check_resources(original, dims=None) -> None:
    """ResourceLimitError before any plan when the original cannot run within the memory budget
    or holds a Loop over the trip-count limit (resources.py; symbolic dims at the user's --dims,
    else taken as 1 here; the runner checks again with each input set's shapes)."""
    from onnxrefine import resources
    from onnxrefine.verify.ort import peak_estimate

    resources.check_runnable(peak_estimate(original, None, dims), "original model")


def _not_runnable(exc: Exception) -> str:
    from onnxrefine.resources import ResourceLimitError

    if isinstance(exc, ResourceLimitError):  # over the memory/time budget: say so, not "does not run"
        return str(exc)
    return f"the model does not run in onnxruntime ({exc})"


def _rollback_record(step: Step, report) -> dict:
    record = {"pass": step.pass_name, "verdict": report.verdict, "outputs": list(report.failing_outputs),
              "step": step.index, "round": step.round}
    if step.rule is not None:
        record.update(rule=step.rule, graph=step.graph, root=step.root, rewrites=1, what="rewrite")
    else:
        record.update(what="pass")
    return record


class _Schedule:
    """The schedule from the original, replayable to any prefix, with vetoes and disabled passes."""

    def __init__(self, original, pass_names, budget, fixed_point, on_progress, emit,
                 settings: VerifySettings, certifier=None):
        self.original = original  # a verify/ort/files.py ModelFile with a path
        self.certifier = certifier  # shared by every replay: its caches keep replays cheap and alike
        self.pass_names = list(pass_names)
        self.budget = budget
        self.fixed_point = fixed_point
        self.on_progress = on_progress
        self.emit = emit
        self.settings = settings
        self.input_sets: list = []
        self.trials = settings.trials
        self.vetoed: set[tuple[str, str, str]] = set()
        self.disabled: set[str] = set()
        self.verifications = 0
        self.verify_seconds = 0.0

    def run(self, max_steps: int | None = None, *, record: bool = False):
        """(model, log, steps) of the schedule from a fresh load of the original file, so every
        run and replay starts from the same model and takes the same steps (its weights stay
        memory-mapped until a rewrite reads them)."""
        model = io.load_model(self.original.path)
        steps: list[Step] = []

        def hook(kind, **info):
            if kind == "step":
                steps.append(info["step"])
            if record:
                self.emit(kind, **info)

        budget = copy.copy(self.budget)
        log = run_passes(model, [n for n in self.pass_names if n not in self.disabled], budget=budget,
                         fixed_point=self.fixed_point, on_progress=self.on_progress if record else None,
                         max_steps=max_steps, vetoed=self.vetoed, on_event=hook, certifier=self.certifier)
        _unmap(model)
        return model, log, steps

    def use_inputs(self, input_sets: list, trials: int) -> None:
        """The input sets every verification of this run uses, so verdicts are comparable."""
        self.input_sets, self.trials = input_sets, trials

    def verify(self, candidate: ir.Model, what: str, time_budget_s: float | None = None):
        import onnxrefine.verify as verify_package  # looked up at call time: tests count the calls

        self.emit("verify", phase="start", what=what, sets=len(self.input_sets))
        progress.report(detail=f"verify {what}")
        started = time.perf_counter()
        # Outputs only: every rule rewrite was already checked on its own subgraph by its
        # certificate (which catches a bad fold that the outputs dilute); layer-wise localisation
        # would cost 2-5x this verification (bench/localize_cost.py) for what the certificates cover.
        # A pass that edited the interface on purpose (passes/interface.py): compared through a view
        # with the original's interface, names and dtypes paired as the pass recorded them.
        original, candidate = interface.verification_pair(self.original, candidate)
        report = verify_package.verify_models(original, candidate, inputs=self.input_sets, trials=self.trials,
                                              seed=self.settings.seed, dims=self.settings.dims,
                                              time_budget_s=time_budget_s, localize=False)
        seconds = time.perf_counter() - started
        self.verifications += 1
        self.verify_seconds += seconds
        self.emit("verify", phase="done", what=what, verdict=report.verdict, seconds=seconds)
        return report

    def bisect(self, steps: list[Step], final_report):
        """The first step whose prefix turns the verdict, and that prefix's report
        (passes/bisection.py: pass runs first, then rewrites inside the run)."""

        def is_bad(verdict: str) -> bool:
            if final_report.verdict == Verdict.MISMATCH:
                return verdict == Verdict.MISMATCH
            return verdict not in ACCEPTED

        reports: dict[int, object] = {len(steps): final_report}

        def bad_at(count: int) -> bool:
            model, _, _ = self.run(max_steps=count)
            reports[count] = self.verify(model, f"bisect: first {count} of {len(steps)} steps")
            return is_bad(reports[count].verdict)

        culprit = first_bad_step(steps, bad_at)
        report = reports[culprit.index]  # every bad prefix was verified (the last one is the final model)
        self.emit("bisect", step=culprit, verdict=report.verdict)
        return culprit, report

    def roll_back(self, step: Step) -> None:
        if step.rewrite_key is not None:
            self.vetoed.add(step.rewrite_key)
        else:
            self.disabled.add(step.pass_name)

