"""The onnxruntime runs of one verification, per track (strict or deployment settings): the
original once on every input set, the candidate on the same sets, then the original's re-run
(the determinism control) on the sets where the candidate differs from its first run.

The re-run only ever excuses a difference (judge/controls.py: positions the original itself does
not reproduce), so a set on which the candidate is bit-identical to the original's first run
needs none: its first run stands for both. That skips a third of the runs of an exact-only
schedule's verification (every set identical), and the identical sets (inf/NaN ones, often) of
the others. The original's session stays open across the candidate's runs when its weights are
small (KEEP_OPEN_MAX_BYTES: two sessions' copies are cheap there); a larger one is closed first
(sessions run one at a time, each holding the weights) and opened again only when a set differs.
The controls' perturbation runs of the original (add_perturbation_runs) are made here too.

Where a session must be watched (resources.py: its peak is uncertain, a shape no inference
resolves) and the weights are small, the watching child is a fork of this process (`_runner`):
each session here makes a few runs and is closed, and a new interpreter's imports cost about
0.1 s of CPU (tiny_yolo's original, a Resize of computed sizes: its verified run at 0.88 of the
CPU). Large weights keep the new interpreter: a fork shares this process's pages, and every page
this process writes while the child lives is copied.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from onnxrefine import progress
from onnxrefine.errors import BadInputError
from onnxrefine.resources import ResourceLimitError
from onnxrefine.verify import evidence, graphinfo, judge
from onnxrefine.verify.ort import ModelRunner, RunFailedError, proto_tensor_bytes

# Weights up to this many bytes: the original's session is kept open while the candidate runs.
KEEP_OPEN_MAX_BYTES = 128 * 1024 * 1024


def _runner(model_file, role, settings, custom_op_library) -> ModelRunner:
    """A session for a few runs; watched (if at all) by a forked child where the weights are small
    (the module docstring)."""
    small = proto_tensor_bytes(model_file.proto) <= KEEP_OPEN_MAX_BYTES
    return ModelRunner(model_file, role, settings, custom_op_library, scoped=small)


class OriginalRuns:
    """The original's first run on each set under one RunSettings, and the session they ran in
    while it is kept open for the re-runs (None: closed, see the module docstring)."""

    def __init__(self, model_file, settings, custom_op_library):
        self.model_file, self.settings, self.custom_op_library = model_file, settings, custom_op_library
        self.runner = None

    def first_runs(self, labelled, deadline, given_inputs):
        """(output names, per set the first run's outputs or None for a branch set that failed,
        map outputs); stops starting sets past `deadline` (perf_counter seconds)."""
        runner = _runner(self.model_file, "original model", self.settings, self.custom_op_library)
        try:
            results = []
            for index, (label, feeds) in enumerate(labelled):
                if deadline is not None and index > 0 and time.perf_counter() > deadline:
                    break
                progress.report(done=index, total=len(labelled),
                                detail=f"input set {label}: original runs ({self.settings.level})")
                try:
                    results.append(runner.run(feeds))
                except RunFailedError as exc:
                    if not given_inputs and label.startswith("branch:"):
                        results.append(None)  # a set drawn to reach a branch may leave the valid domain
                        continue
                    raise BadInputError(f"input set {label}: {exc}" + (
                        "" if given_inputs else " (generated inputs; pass --inputs or --dims)")) from None
            names, map_outputs = list(runner.output_names), runner.map_outputs
        except BaseException:
            runner.close()
            raise
        if proto_tensor_bytes(self.model_file.proto) <= KEEP_OPEN_MAX_BYTES:
            self.runner = runner
        else:
            runner.close()
        return names, results, map_outputs

    def rerun(self, track, output_names, output_map, labelled) -> None:
        """Make track.original_runs (first, second) pairs: the re-run where the candidate differs
        from the first run on the set, the first run itself where it does not."""
        try:
            firsts = track.original_runs
            differing = [index for index, first in enumerate(firsts)
                         if not _candidate_identical(track, index, first, output_names, output_map)]
            seconds = dict.fromkeys(range(len(firsts)))
            if differing:
                runner = self.runner or _runner(self.model_file, "original model", self.settings,
                                                self.custom_op_library)
                self.runner = runner
                for index in differing:
                    progress.report(detail=f"input set {labelled[index][0]}: original re-run ({self.settings.level})")
                    seconds[index] = runner.run(labelled[index][1])
            track.original_runs = [(first, first if seconds[index] is None else seconds[index])
                                   for index, first in enumerate(firsts)]
        finally:
            self.close()

    @contextlib.contextmanager
    def closed_on_error(self):
        """A kept session is closed when the block between the first runs and the re-runs fails."""
        try:
            yield
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None


def _candidate_identical(track, index: int, first: dict, output_names, output_map) -> bool:
    """The candidate's outputs on set `index` are the original's first run bit for bit (any two
    NaNs alike, as judge.bit_identical counts them), every output paired, shape and dtype equal.
    A failed candidate is judged without any run's values: nothing to re-run for."""
    if track.candidate_failure is not None:
        return True
    if index >= len(track.candidate_runs):
        return False
    produced = track.candidate_runs[index]
    for name in output_names:
        other = output_map.get(name)
        if other is None or other not in produced or name in track.output_failures:
            return False
        mine, theirs = np.asarray(first[name]), np.asarray(produced[other])
        if mine.dtype != theirs.dtype or mine.shape != theirs.shape or mine.dtype.kind not in "fiub":
            return False
        if not np.all(judge.bit_identical(theirs, mine)):
            return False
    return True


def candidate_runs(track, run, custom_op_library) -> None:
    """The candidate on every set of `run` under the track's settings; a load or run failure is
    the track's candidate_failure (a finding), a resource limit is raised (nobody's fault)."""
    candidate_file, labelled = run.candidate_file, run.labelled
    track.candidate_failure = run.candidate_failure
    if run.candidate_failure is not None:
        return
    try:
        runner = _runner(candidate_file, "candidate model", track.settings, custom_op_library)
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
                track.candidate_runs.append(runner.run(evidence.declared_feeds(candidate_file.proto, feeds)))
            except RunFailedError as exc:
                track.candidate_failure = f"input set {label}: {exc}"
                return
        track.compare_map_keys(runner.map_outputs, run.output_map)


def add_perturbation_runs(track, original_file, labelled, indices, count, seed, custom_op_library) -> None:
    """Controls on the original on the sets `indices`: runs on inputs moved by a few ulps, under
    the track's own settings."""
    with _runner(original_file, "original model (perturbation runs)", track.settings, custom_op_library) as runner:
        for index in indices:
            feeds = labelled[index][1]
            if evidence.has_nonfinite(feeds):
                evidence.add_nonfinite_cones(runner, feeds, track.set_evidence[index])
            if not any(graphinfo.is_float_dtype(np.asarray(value).dtype) for value in feeds.values()):
                continue  # nothing to move by an ulp
            rng = np.random.default_rng([seed, 7919, index])
            progress.report(detail=f"input set {labelled[index][0]}: {count} perturbation runs of the original")
            for run_index in range(count):
                pattern = run_index if run_index < 2 else None
                moved = {name: judge.perturb(np.asarray(value), rng, checkerboard=pattern)
                         for name, value in feeds.items()}
                try:
                    results = runner.run(moved)
                except RunFailedError:
                    continue
                for name, item in track.set_evidence[index].items():
                    item.perturbed.append(results[name])
                    item.perturbation_u = judge.moved_u(feeds)
