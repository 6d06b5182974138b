"""The bad-input suite (issue 13) in CI: every case of hostile_cases/catalog_*.py against optimize,
verify, bisect and reduce, one subprocess per command (isolation: a case that crashes or hogs
memory fails its command's batch, not the test session; the batch's address space is capped).
Each test prints the runner's table (case, command, expected, got, problem/message); a failure's
assertion message lists the failing rows by case name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"


def _run(command: str, tmp_path: Path, runslow: bool) -> list[dict]:
    out = tmp_path / "rows.json"
    env = dict(os.environ, ONNXREFINE_PROGRESS="off",
               PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, str(HERE / "hostile_runner.py"), "--commands", command, "--json", str(out),
            "--keep", str(tmp_path / "work")]
    if runslow:
        argv.append("--slow")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    print(done.stdout)
    assert out.exists(), f"the runner did not finish: {done.stderr[-2000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("command", ["optimize", "verify", "bisect", "reduce"])
def test_hostile_inputs(command, tmp_path, request):
    rows = _run(command, tmp_path, request.config.getoption("--runslow"))
    assert rows, "no case ran"
    failed = [f"{row['case']}: {row['problem']}" for row in rows if row["problem"]]
    assert not failed, f"{len(failed)} of {len(rows)} {command} cases failed:\n" + "\n".join(failed)


def test_suite_covers_the_issue_classes():
    """The catalogue keeps its size and its families (a refactor that drops cases fails here)."""
    sys.path.insert(0, str(HERE))
    from hostile_runner import all_cases

    cases = all_cases()
    families = {case.family for case in cases}
    assert {"file", "link", "extdata", "tensor", "names", "graph", "cli", "inputs", "valid", "bombs"} <= families
    runs = sum(len(case.commands) for case in cases if not case.requires)
    assert len(cases) >= 150 and runs >= 400, (len(cases), runs)


def test_canary_notices_a_reader(tmp_path):
    """The canary check can fail: opening the FIFO for reading (as open() or onnx's loader would)
    is seen; a stat (what the checks do) is not."""
    sys.path.insert(0, str(HERE))
    from hostile_runner import Canary

    canary = Canary(tmp_path / "read")
    with open(tmp_path / "read", "rb") as handle:
        handle.read()
    assert canary.close()
    canary = Canary(tmp_path / "stat")
    os.stat(tmp_path / "stat")
    assert not canary.close()
