"""The bad-input suite in CI: every case of catalog_*.py against each command it names
(optimize, verify, bisect, reduce), one test per (case, command), so a failure names its case.

The runs go to a runner subprocess, one per test process, kept up between cases (isolation: a case
that crashes or hogs memory kills the runner, which fails that case and is restarted for the next;
its address space is capped). The full catalogue (~620 runs, about a minute) is marked slow; the
first case of each family for each command (35 runs) is not, so CI still runs every family
through every command."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"
sys.path.insert(0, str(HERE))

from hostile_cases import COMMANDS  # noqa: E402
from hostile_runner import all_cases  # noqa: E402

ANSWER_WITHIN_S = 300  # the runner's own alarm fails a hung case after 90 s


def _pairs():
    return [(case, command) for case in all_cases() for command in case.commands if command in COMMANDS]


def representative(pairs) -> set[tuple[str, str]]:
    """The first case of each family for each command: the subset CI runs without --runslow."""
    chosen: dict[tuple[str, str], str] = {}
    for case, command in pairs:
        if not case.slow:
            chosen.setdefault((case.family, command), case.name)
    return {(name, command) for (_, command), name in chosen.items()}


def _params():
    pairs = _pairs()
    fast = representative(pairs)
    params = []
    for case, command in pairs:
        marks = [] if (case.name, command) in fast else [pytest.mark.slow]
        if case.requires and importlib.util.find_spec(case.requires) is None:
            marks.append(pytest.mark.skip(reason=f"needs {case.requires}"))
        params.append(pytest.param(case.name, command, marks=marks, id=f"{case.name}-{command}"))
    return params


class Runner:
    """hostile_runner.py --serve: one request line in, one JSON row out, on pipes of their own."""

    def __init__(self, workdir: Path):
        self.workdir, self.process = workdir, None

    def _start(self) -> None:
        self.requests_r, self.requests_w = os.pipe()
        self.rows_r, self.rows_w = os.pipe()
        env = dict(os.environ, ONNXREFINE_PROGRESS="off",
                   PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
        self.log = open(self.workdir / "runner.log", "ab")  # noqa: SIM115 - closed in stop()
        argv = [sys.executable, str(HERE / "hostile_runner.py"), "--keep", str(self.workdir / "work"),
                "--serve", f"{self.requests_r},{self.rows_w}"]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=env,
                                        pass_fds=(self.requests_r, self.rows_w))
        os.close(self.requests_r)
        os.close(self.rows_w)
        self.requests = os.fdopen(self.requests_w, "w")
        self.rows = os.fdopen(self.rows_r, "r")

    def run(self, case: str, command: str) -> dict:
        if self.process is None or self.process.poll() is not None:
            self._start()
        try:
            self.requests.write(json.dumps({"case": case, "command": command}) + "\n")
            self.requests.flush()
            ready, _, _ = select.select([self.rows], [], [], ANSWER_WITHIN_S)
            line = self.rows.readline() if ready else ""
        except BrokenPipeError:
            line = ""
        if line:
            return json.loads(line)
        self.stop()  # died or hung on this case: the next case gets a new runner
        tail = (self.workdir / "runner.log").read_text(errors="replace")[-2000:]
        return {"case": case, "command": command, "problem": f"the runner died or hung on this case: {tail}"}

    def stop(self) -> None:
        if self.process is None:
            return
        for stream in (self.requests, self.rows, self.log):
            try:
                stream.close()
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None


@pytest.fixture(scope="session")
def hostile_runner(tmp_path_factory):
    runner = Runner(tmp_path_factory.mktemp("hostile"))
    yield runner
    runner.stop()


@pytest.mark.parametrize(("case", "command"), _params())
def test_hostile_case(case, command, hostile_runner):
    row = hostile_runner.run(case, command)
    assert not row["problem"], f"{case} / {command}: {row['problem']}"


def test_suite_covers_the_issue_classes():
    """The catalogue keeps its size and its families (a refactor that drops cases fails here)."""
    cases = all_cases()
    families = {case.family for case in cases}
    assert {"file", "link", "extdata", "tensor", "names", "graph", "cli", "inputs", "valid", "bombs"} <= families
    runs = sum(len(case.commands) for case in cases if not case.requires)
    assert len(cases) >= 150 and runs >= 400, (len(cases), runs)
    # what CI runs without --runslow: every family through every command it is run with
    fast = representative(_pairs())
    names = {case.name: case for case in cases}
    assert {(names[name].family, command) for name, command in fast} == {
        (case.family, command) for case, command in _pairs()}
    assert len(fast) <= 60, len(fast)


def test_canary_notices_a_reader(tmp_path):
    """The canary check can fail: opening the FIFO for reading (as open() or onnx's loader would)
    is seen; a stat (what the checks do) is not."""
    from hostile_runner import Canary

    canary = Canary(tmp_path / "read")
    with open(tmp_path / "read", "rb") as handle:
        handle.read()
    assert canary.close()
    canary = Canary(tmp_path / "stat")
    os.stat(tmp_path / "stat")
    assert not canary.close()
