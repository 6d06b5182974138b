"""Fuzz campaigns that survive faults: crashed --jobs workers are replaced and their cases re-run
exactly once, a case that always kills its worker is counted as `crashed`, and an interrupted
campaign resumed with --resume ends with the summary of an uninterrupted one (same bundles).

A planted wrong Pad-into-MaxPool fold (test_fuzz_campaign) stands in for the optimizer so that
the campaigns file real mismatch bundles, duplicates included."""

from __future__ import annotations

import functools
import json
import os

import pytest

import onnxrefine.fuzz.campaign as campaign
from onnxrefine.cli.main import main
from onnxrefine.fuzz import journal
from onnxrefine.fuzz.scheduler import MAX_ATTEMPTS, LocalBackend, schedule
from test_fuzz_campaign import wrong_pad_into_maxpool

SETTINGS = campaign.CampaignSettings(passes=("fuse_pad_into_pool",), cases=30, seed=0, max_nodes=8)
REAL_RUN_CHUNK = campaign.run_chunk


def planted_steps(optimizer, passes):
    return [("fuse_pad_into_pool", wrong_pad_into_maxpool)]


def planted_chunk(settings, indices):
    """Runs in spawned workers too (pickled by reference to this module)."""
    campaign.optimizer_steps = planted_steps
    return REAL_RUN_CHUNK(settings, indices)


def crashing_chunk(folder, always, settings, indices):
    """Kills its worker the first time it meets a case whose marker file in `folder` is absent (a
    fault that happens once), and every time for case `always` (a case that always crashes)."""
    for index in indices:
        marker = os.path.join(folder, f"crash_{index}")
        if index == always or (index % 7 == 3 and not os.path.exists(marker)):
            open(marker, "w").close()
            os._exit(9)
    return planted_chunk(settings, indices)


def _has_ray() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def comparable(summary) -> dict:
    data = summary.to_dict() if not isinstance(summary, dict) else dict(summary)
    data.pop("cases_per_minute", None)
    data.pop("workers_replaced", None)
    data.pop("settings", None)
    data["bundles"] = [os.path.basename(path) for path in data["bundles"]]
    return data


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted, serial campaign every other run must equal."""
    mp = pytest.MonkeyPatch()
    mp.setattr(campaign, "optimizer_steps", planted_steps)
    try:
        out = tmp_path_factory.mktemp("reference")
        summary = campaign.run_campaign(SETTINGS, str(out), jobs=0)   # serial, in this process
    finally:
        mp.undo()
    data = comparable(summary)
    # The campaign must be worth comparing: filed bundles and duplicates of them.
    assert data["statuses"].get("mismatch", 0) >= 3 and data["duplicates"] >= 1, data
    return data


def test_interrupted_campaign_resumes_to_the_same_summary(reference, tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "run_chunk", planted_chunk)   # pickled by reference: the worker runs it

    def stop_after_some(result, summary):
        if summary.cases == 11:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        campaign.run_campaign(SETTINGS, str(tmp_path), on_result=stop_after_some)
    assert journal.count_entries(str(tmp_path)) == 11
    # A torn last line (the machine went down mid-write) is ignored: that case re-runs.
    with open(tmp_path / journal.JOURNAL_FILE, "a") as handle:
        handle.write('{"index": 11, "sta')
    resumed = campaign.run_campaign(None, str(tmp_path), resume=True)
    assert comparable(resumed) == reference
    indices = [entry["index"] for entry in journal.read_entries(str(tmp_path))]
    assert sorted(indices) == list(range(SETTINGS.cases))   # each case journaled exactly once
    bundles = sorted(name for name in os.listdir(tmp_path) if name.startswith("case_"))
    assert bundles == sorted(reference["bundles"])
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert comparable(saved) == reference


@pytest.mark.parametrize("jobs", [1, 2])
def test_workers_that_crash_are_replaced(reference, tmp_path, monkeypatch, jobs):
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setattr(campaign, "run_chunk", functools.partial(crashing_chunk, str(markers), -1))
    summary = campaign.run_campaign(SETTINGS, str(tmp_path / "out"), jobs=jobs)
    crashed_once = [i for i in range(SETTINGS.cases) if i % 7 == 3]
    assert summary.workers_replaced >= len(crashed_once)
    assert comparable(summary) == reference   # every case once, same bundles as a serial run


def test_a_case_that_always_kills_its_worker_is_counted_not_fatal(tmp_path):
    settings = campaign.CampaignSettings(passes=("fuse_pad_into_pool",), cases=4, seed=0, max_nodes=8)
    backend = LocalBackend(functools.partial(crashing_chunk, str(tmp_path), 1), settings, 2)
    try:
        results = list(schedule(backend, list(range(4)), campaign._crashed(settings)))
    finally:
        backend.close()
    assert sorted(r["index"] for r in results) == list(range(4))
    crashed = [r for r in results if r["status"] == "crashed"]
    assert [r["index"] for r in crashed] == [1] and "exit code 9" in crashed[0]["error"]
    assert backend.replaced >= MAX_ATTEMPTS + 1   # case 1 three times, case 3 once


def test_cli_resume_and_its_errors(tmp_path, capsys):
    out = str(tmp_path / "c")
    argv = ["fuzz", "--passes", "eliminate_nop_transpose", "--cases", "3", "--seed", "4", "--out", out]
    assert main(argv) == 0
    first = json.loads((tmp_path / "c" / "summary.json").read_text())
    capsys.readouterr()
    # A second campaign into the same folder would mix two campaigns' results.
    assert main(argv) == 2
    assert "--resume" in capsys.readouterr().err
    # Resuming a finished campaign re-runs nothing and keeps its summary.
    assert main(["fuzz", "--resume", "--out", out]) == 0
    again = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert comparable(again) == comparable(first)
    capsys.readouterr()
    for bad, fragment in ((["fuzz", "--resume", "--out", out, "--seed", "5"], "seed differ"),
                          (["fuzz", "--resume", "--out", str(tmp_path / "none")], "holds no campaign"),
                          (["fuzz", "--ray", "local", "--jobs", "2", "--out", str(tmp_path / "r")],
                           "give one of them"),
                          # A closed port: Ray itself would retry for minutes.
                          (["fuzz", "--ray", "127.0.0.1:1", "--cases", "1", "--out", str(tmp_path / "u")],
                           "cannot reach a Ray cluster" if _has_ray() else "pip install 'onnxrefine[ray]'")):
        assert main(bad) == 2
        err = capsys.readouterr().err
        assert fragment in err and err.strip().count("\n") == 0, err


def test_the_lowest_index_case_is_the_bundle_whatever_the_arrival_order(tmp_path):
    """Parallel workers finish out of order; the filed case must not depend on it (else a resumed
    or parallel campaign would file other bundles than a serial one)."""
    def written(index):
        folder = tmp_path / f"case_{index}_seed{index}"
        folder.mkdir()
        return str(folder)

    summary = campaign.CampaignSummary()
    filing = journal.Filing(str(tmp_path), summary)
    late, early = ({"index": i, "step": "s", "signature": "x", "status": "mismatch"} for i in (9, 4))
    assert filing.file(late, lambda: written(9)) is not None
    assert filing.file(early, lambda: written(4)) is not None   # lower index: replaces case 9
    assert filing.file({**late, "index": 12}, lambda: written(12)) is None
    assert [os.path.basename(p) for p in summary.bundles] == ["case_4_seed4"]
    assert summary.duplicates == 2 and not (tmp_path / "case_9_seed9").exists()
    # Replaying the journal (bundle paths as they were journaled) gives the same filing.
    replayed = campaign.CampaignSummary()
    again = journal.Filing(str(tmp_path), replayed)
    for entry in ({**late, "bundle": str(tmp_path / "case_9_seed9")},
                  {**early, "bundle": str(tmp_path / "case_4_seed4")}, {**late, "index": 12}):
        again.replay(entry)
    assert replayed.bundles == summary.bundles and replayed.duplicates == 2


def test_a_case_that_always_crashes_gets_a_bundle_with_its_seed(tmp_path, monkeypatch):
    """A crashed case used to leave only a count: no model, no seed. It is filed now (one bundle
    per step that crashes), with the generated model and how to reproduce the crash."""
    import onnx

    settings = campaign.CampaignSettings(passes=("fuse_pad_into_pool",), cases=4, seed=0, max_nodes=8)
    monkeypatch.setattr(campaign, "run_chunk", functools.partial(crashing_chunk, str(tmp_path), 1))
    summary = campaign.run_campaign(settings, str(tmp_path / "out"), jobs=1)
    crash = [path for path in summary.bundles if os.path.basename(path) == "case_1_seed1"]
    assert crash, summary.bundles
    meta = json.loads(open(os.path.join(crash[0], "report.json")).read())
    assert meta["status"] == "crashed" and meta["seed"] == 1 and "exit code 9" in meta["error"]
    readme = open(os.path.join(crash[0], "README.md")).read()
    assert "seed 1" in readme and "crashes the process" in readme and "--trials 2" in readme
    regenerated = campaign.generate_model(1, max_nodes=8, opset=settings.opset,
                                          target=campaign.case_pattern(settings, 1, "fuse_pad_into_pool")).model
    assert onnx.load(os.path.join(crash[0], "model.onnx")).SerializeToString() == regenerated.SerializeToString()


def _dies(model, seed, trials):
    os.abort()


def test_a_crash_of_onnxruntime_on_the_original_alone_is_counted_not_filed_against_the_step(tmp_path, monkeypatch):
    """A generated original whose session onnxruntime itself cannot make without dying (ORT 1.32's
    deployment level crashed on one such model) kills every worker that verifies the step's output:
    the step is not what crashed, so the case is `runtime_crash` and no bundle names the step."""
    settings = campaign.CampaignSettings(passes=("fuse_pad_into_pool",), cases=4, seed=0, max_nodes=8)
    monkeypatch.setattr(campaign, "run_chunk", functools.partial(crashing_chunk, str(tmp_path), 1))
    monkeypatch.setattr(campaign, "_verified_against_itself", _dies)
    summary = campaign.run_campaign(settings, str(tmp_path / "out"), jobs=1)
    assert not [path for path in summary.bundles if os.path.basename(path) == "case_1_seed1"], summary.bundles
    assert summary.statuses["runtime_crash"] == 1 and summary.statuses["crashed"] == 0
    assert "runtime_crash 1" in summary.line()


def test_an_original_that_runs_leaves_the_crash_to_the_step():
    settings = campaign.CampaignSettings(passes=("fuse_pad_into_pool",), cases=4, seed=0, max_nodes=8)
    result = {"index": 1, "seed": 1, "step": "fuse_pad_into_pool"}
    assert not campaign.original_crashes_runtime(settings, result)


def test_mismatch_bundle_readme_gives_the_trials_its_verify_needs(tmp_path, monkeypatch):
    """The README's verify line without --trials used the default 3 sets where the campaign used
    its own count: a different set of inputs, and some bundles then showed `rounding`."""
    settings = campaign.CampaignSettings(passes=("fuse_pad_into_pool",), cases=30, seed=0, max_nodes=8, trials=4)
    # In this process (jobs=0): the planted step through monkeypatch, so that it is undone after the
    # test (planted_chunk's own assignment is for worker processes and would outlive it here).
    monkeypatch.setattr(campaign, "optimizer_steps", planted_steps)
    summary = campaign.run_campaign(settings, str(tmp_path / "out"), jobs=0)
    assert summary.bundles
    readme = open(os.path.join(summary.bundles[0], "README.md")).read()
    assert "--trials 4" in readme


def test_fuzz_help_names_every_target():
    from onnxrefine.cli.fuzz_cmd import TARGET_HELP
    from onnxrefine.triage.adapters import ADAPTERS

    assert all(name in TARGET_HELP.replace("[", " ").split() or f"{name}[" in TARGET_HELP for name in ADAPTERS)
