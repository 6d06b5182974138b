"""Progress reporting: the phase/report API, the plain and live displays, and what the commands
report. No timing assertions: the plain display's delay is set to 0 (show every phase) or to an
hour (show none)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from rich.console import Console

from onnxrefine import progress
from onnxrefine.progress import LiveDisplay, PlainDisplay, _Render, display_for_stderr

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from make_example import build as build_example  # noqa: E402


class Recorder:
    def __init__(self):
        self.events = []

    def push(self, name, total, detail):
        self.events.append(("push", name, total, detail))

    def update(self, done, total, detail, note):
        self.events.append(("update", done, total, detail, note))

    def pop(self, ok=True):
        self.events.append(("pop", ok))


def test_phase_and_report_are_no_ops_without_a_reporter():
    with progress.phase("nothing listens"):
        progress.report(done=1, total=2, detail="x")

    @progress.in_phase("decorated")
    def work(value):
        return value * 2

    assert work(21) == 42


def test_reporting_routes_events_and_restores_the_previous_reporter():
    recorder = Recorder()

    @progress.in_phase("inner")
    def work():
        progress.report(done=1, total=3, detail="step")
        return "result"

    with progress.reporting(recorder):
        with progress.phase("outer", total=2):
            assert work() == "result"
    progress.report(detail="after the block: nobody listens")
    assert recorder.events == [
        ("push", "outer", 2, ""), ("push", "inner", None, ""), ("update", 1, 3, "step", None),
        ("pop", True), ("pop", True),
    ]


def test_phase_pops_when_the_block_raises():
    recorder = Recorder()
    with progress.reporting(recorder), pytest.raises(ValueError):
        with progress.phase("failing"):
            raise ValueError("boom")
    assert recorder.events[-1] == ("pop", False)


def test_plain_display_prints_nested_phases_with_counts():
    stream = io.StringIO()
    with PlainDisplay(stream, delay=0.0, heartbeat=3600) as display, progress.reporting(display):
        with progress.phase("optimize", total=3):
            progress.report(done=1, detail="round 1: fold_constants", note="512 nodes visited")
            with progress.phase("verify", total=7):
                progress.report(done=2, detail="input set normal1: candidate run")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("onnxrefine [") and lines[0].endswith("] optimize 0/3")
    assert lines[1].endswith("] optimize 1/3 round 1: fold_constants (512 nodes visited) > verify 0/7")
    # Count updates within a phase are not phase changes: no line each (only the heartbeat).
    assert len(lines) == 3 and "] optimize: done in " in lines[2]


def test_plain_display_has_no_done_line_for_a_failed_phase():
    stream = io.StringIO()
    with PlainDisplay(stream, delay=0.0, heartbeat=3600) as display, progress.reporting(display):
        with pytest.raises(ValueError), progress.phase("optimize"):
            raise ValueError("boom")
    assert [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()] == ["optimize"]


def _report_from_a_worker():
    with progress.phase("in the worker"):
        progress.report(done=1, detail="worker step")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_workers_do_not_report_to_the_parents_display(tmp_path):
    import multiprocessing

    log = tmp_path / "progress.log"
    with open(log, "w") as stream:
        display = PlainDisplay(stream, delay=0.0, heartbeat=3600)
        with display, progress.reporting(display), progress.phase("parent"):
            worker = multiprocessing.get_context("fork").Process(target=_report_from_a_worker)
            worker.start()
            worker.join(60)
            assert worker.exitcode == 0
    text = log.read_text()
    assert "parent" in text and "worker" not in text


def test_plain_display_is_silent_for_phases_shorter_than_the_delay():
    stream = io.StringIO()
    with PlainDisplay(stream, delay=3600, heartbeat=3600) as display, progress.reporting(display):
        with progress.phase("load"):
            progress.report(detail="reading")
        with progress.phase("optimize", total=2):
            progress.report(done=1)
    assert stream.getvalue() == ""


def test_live_render_fits_the_width_and_keeps_counts_and_elapsed():
    display = LiveDisplay(io.StringIO())
    display._start = lambda: None  # render by hand, no refresh thread
    display.push("optimize resnet50.onnx")
    display.push("rewrite", total=9)
    display.update(3, None, "round 1: fold_constants " + "x" * 200, "12034 nodes visited")
    for width in (50, 80, 160):
        console = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=True)
        console.print(_Render(display))
        lines = console.file.getvalue().splitlines()
        assert len(lines) == 2, lines
        assert all(len(line.rstrip()) <= width for line in lines)
        assert "optimize resnet50.onnx" in lines[0] and lines[0].rstrip().endswith("s")
        assert "rewrite" in lines[1] and "3/9" in lines[1] and lines[1].rstrip().endswith("s")


def test_live_display_leaves_a_line_for_long_phases_only():
    stream = io.StringIO()
    display = LiveDisplay(stream, keep_after=0.0)
    with display, progress.reporting(display):
        with progress.phase("load big.onnx"):
            pass
    assert "✓ load big.onnx" in stream.getvalue()
    stream = io.StringIO()
    display = LiveDisplay(stream, keep_after=3600)
    with display, progress.reporting(display):
        with progress.phase("load small.onnx"):
            pass
    assert "load small.onnx" not in stream.getvalue()
    stream = io.StringIO()
    display = LiveDisplay(stream, keep_after=0.0)
    with display, progress.reporting(display), pytest.raises(ValueError):
        with progress.phase("load broken.onnx"):
            raise ValueError("the error line says what happened; no check mark before it")
    assert "broken.onnx" not in stream.getvalue()


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_display_choice(monkeypatch):
    monkeypatch.delenv("ONNXREFINE_PROGRESS", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert isinstance(display_for_stderr(FakeTerminal()), LiveDisplay)
    assert isinstance(display_for_stderr(io.StringIO()), PlainDisplay)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(display_for_stderr(FakeTerminal()), PlainDisplay)
    monkeypatch.setenv("ONNXREFINE_PROGRESS", "plain")
    monkeypatch.setenv("TERM", "xterm")
    assert isinstance(display_for_stderr(FakeTerminal()), PlainDisplay)
    monkeypatch.setenv("ONNXREFINE_PROGRESS", "off")
    assert display_for_stderr(FakeTerminal()) is None


# --- the commands, as a user runs them with stderr not a terminal --------------------------------


@pytest.fixture
def example(tmp_path) -> Path:
    path = tmp_path / "tiny.onnx"
    onnx.save(build_example(), path)
    return path


def run_cli(*args, delay="0") -> subprocess.CompletedProcess:
    env = {**os.environ, "ONNXREFINE_PROGRESS": "plain", "ONNXREFINE_PROGRESS_DELAY": delay}
    return subprocess.run([sys.executable, "-m", "onnxrefine", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=env)


def progress_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("onnxrefine [")]


def test_optimize_reports_load_passes_verification_and_save(example):
    result = run_cli("optimize", example)
    assert result.returncode == 0, result.stderr
    lines = progress_lines(result)
    text = "\n".join(lines)
    assert lines[0].endswith("] load tiny.onnx")
    assert "optimize tiny.onnx" in text
    assert "rewrite" in text and "round 1" not in lines[0]
    assert "verify" in text  # the example runs in onnxruntime: verified by default
    phases = [line.split("] ", 1)[1] for line in lines]
    saved = next(i for i, phase in enumerate(phases) if phase.startswith("save tiny.opt.onnx: done in"))
    assert phases[-1].startswith("check tiny.opt.onnx: done in") and saved < len(phases) - 1  # it loads
    assert "onnxrefine [" not in result.stdout  # the result table stays clean
    assert "wrote" in result.stdout


def test_verify_reports_input_sets(example, tmp_path):
    result = run_cli("verify", example, example)
    assert result.returncode == 0, result.stderr
    text = "\n".join(progress_lines(result))
    assert "] verify" in text
    assert result.stdout.strip().splitlines()[-1] == "verdict: exact"


def test_bisect_reports_steps(example, tmp_path):
    result = run_cli("bisect", example, "--out", tmp_path / "bundle",
                     "--passes", "fuse_bn_into_conv,eliminate_identity")
    assert result.returncode == 0, result.stderr
    text = "\n".join(progress_lines(result))
    assert "] load tiny.onnx" in text and "] bisect 0/2 step fuse_bn_into_conv" in text


def test_default_delay_keeps_quick_errors_one_line(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"not a model")
    result = run_cli("optimize", path, delay="1")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
