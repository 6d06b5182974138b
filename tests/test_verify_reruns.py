"""The original's re-run (the determinism control) runs only on the input sets where the candidate
differs from the original's first run (verify/runs.py): on the others it could excuse nothing.
Counted through ModelRunner's runs and sessions; where it runs, its values are the ones judged."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from helpers import make_model, tensor, value_info
from onnxrefine.verify import runs, verify_models
from onnxrefine.verify.ort import ModelRunner

# Zeros come out the same from both scales; ones do not (3 * 1.001 is not 3 in float32).
SETS = [{"x": np.zeros(4, np.float32)}, {"x": np.ones(4, np.float32)}]


def scaled(scale: float):
    return make_model([helper.make_node("Mul", ["x", "s"], ["y"])], [value_info("x", shape=[4])],
                      [value_info("y", shape=[4])], [tensor("s", np.float32(scale))])


@pytest.fixture
def original_runs(monkeypatch):
    """Every run of the original the tracks make (not the controls' perturbation runs): (track
    level, first input value); and the sessions they open, by role."""
    seen = {"runs": [], "sessions": []}

    class Counting(ModelRunner):
        def __init__(self, model, role="model", *args, **kwargs):
            seen["sessions"].append(role)
            super().__init__(model, role, *args, **kwargs)

        def run(self, feeds):
            if self.role == "original model":
                seen["runs"].append((self.settings.level, float(np.asarray(feeds["x"]).reshape(-1)[0])))
            return super().run(feeds)

    monkeypatch.setattr(runs, "ModelRunner", Counting)
    return seen


def test_an_identical_candidate_costs_one_run_of_the_original_per_set_and_track(original_runs):
    report = verify_models(scaled(3.0), scaled(3.0), inputs=SETS, localize=False)
    assert report.verdict == "exact"
    assert sorted(original_runs["runs"]) == sorted([("disable", 0.0), ("disable", 1.0), ("all", 0.0), ("all", 1.0)])


def test_the_original_reruns_on_the_differing_sets_only(original_runs):
    verify_models(scaled(3.0), scaled(3.001), inputs=SETS, localize=False)
    strict = [x for level, x in original_runs["runs"] if level == "disable"]
    assert strict == [0.0, 1.0, 1.0]  # the first runs, then the re-run of set 1


def test_a_large_original_is_opened_again_only_when_a_set_differs(original_runs, monkeypatch):
    monkeypatch.setattr(runs, "KEEP_OPEN_MAX_BYTES", -1)  # every original counts as large
    verify_models(scaled(3.0), scaled(3.0), inputs=SETS, localize=False)
    assert original_runs["sessions"].count("original model") == 2  # one a track, no re-opening
    original_runs["sessions"].clear()
    verify_models(scaled(3.0), scaled(3.001), inputs=SETS, localize=False)
    assert original_runs["sessions"].count("original model") == 4  # and once more a track for the re-runs


def test_a_rerun_that_differs_from_the_first_run_is_judged(monkeypatch):
    """A planted nondeterministic original: its re-run on the differing set is what the controls
    see (the note), so the re-run is a run, not the first run's values again."""
    run = ModelRunner.run
    calls = {"count": 0}

    def drifting(self, feeds):
        values = run(self, feeds)
        if self.role == "original model" and self.settings.level == "disable":
            calls["count"] += 1
            if calls["count"] == 3:  # the strict re-run (after the two first runs)
                values = {name: np.nextafter(value, np.inf) for name, value in values.items()}
        return values

    monkeypatch.setattr(ModelRunner, "run", drifting)
    report = verify_models(scaled(3.0), scaled(3.001), inputs=SETS, localize=False)
    assert any("not deterministic" in note for note in report.notes)


def test_a_rerun_that_fails_under_the_deployment_settings_drops_that_check_with_a_note(monkeypatch):
    from onnxrefine.verify.ort import RunFailedError

    class FailingRerun(ModelRunner):
        calls = 0

        def run(self, feeds):
            if self.role == "original model" and self.settings.level == "all":
                FailingRerun.calls += 1
                if FailingRerun.calls > len(SETS):  # the first runs pass, the re-run fails
                    raise RunFailedError("planted failure")
            return super().run(feeds)

    monkeypatch.setattr(runs, "ModelRunner", FailingRerun)
    report = verify_models(scaled(3.0), scaled(3.001), inputs=SETS, localize=False)
    assert any(note.startswith("deployment check not run") and "planted failure" in note for note in report.notes)
    assert report.deployment == []
