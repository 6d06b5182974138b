"""Arguments are checked before any work: each bad output/inputs path is one line on stderr,
exit 2, no traceback, and the model is never loaded nor optimized (the work functions are
replaced by ones that fail the test if called)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from helpers import make_model, tensor, value_info
from onnx import helper

from onnxrefine.cli import checks
from onnxrefine.cli.main import main



@pytest.fixture
def no_work(monkeypatch):
    """Loading or running anything is a test failure: the checks must come first."""

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    import onnxrefine.cli.bisect_cmd as bisect_cmd
    import onnxrefine.cli.optimize_cmd as optimize_cmd
    import onnxrefine.fuzz.campaign as campaign
    import onnxrefine.fuzz.reduce as reduce
    import onnxrefine.ir.io as io
    import onnxrefine.verify as verify

    monkeypatch.setattr(io, "load_model", forbidden)
    monkeypatch.setattr(optimize_cmd, "optimize_ir", forbidden)
    monkeypatch.setattr(verify, "verify_models", forbidden)
    monkeypatch.setattr(bisect_cmd, "bisect", forbidden)
    monkeypatch.setattr(campaign, "run_campaign", forbidden)
    monkeypatch.setattr(reduce, "reduce_bundle", forbidden)


def assert_early_error(argv, capsys, fragment):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("onnxrefine: error:") and "Traceback" not in captured.err
    assert fragment in lines[0], lines[0]
    assert "verdict" not in captured.out


# --- optimize ----------------------------------------------------------------------------------


def test_optimize_output_folder_missing(example, tmp_path, capsys, no_work):
    assert_early_error(["optimize", example, "-o", tmp_path / "no" / "such" / "out.onnx"], capsys,
                       "folder does not exist")


def test_optimize_output_is_a_folder(example, tmp_path, capsys, no_work):
    assert_early_error(["optimize", example, "-o", tmp_path], capsys, "is a folder")


def test_optimize_output_is_the_input(example, tmp_path, capsys, no_work):
    assert_early_error(["optimize", example, "-o", example], capsys, "overwrite the input")
    link = tmp_path / "link.onnx"
    link.symlink_to(example)
    assert_early_error(["optimize", example, "-o", link], capsys, "overwrite the input")
    hard = tmp_path / "hard.onnx"
    os.link(example, hard)
    assert_early_error(["optimize", example, "-o", hard], capsys, "overwrite the input")
    # the input named through a symlinked folder
    folder_link = tmp_path / "alias"
    folder_link.symlink_to(tmp_path, target_is_directory=True)
    assert_early_error(["optimize", example, "-o", folder_link / "tiny.onnx"], capsys, "overwrite the input")


def test_optimize_output_would_overwrite_the_inputs_external_data(tmp_path, capsys, no_work):
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [value_info("x", shape=[4])],
                       [value_info("y", shape=[4])], [tensor("w", np.arange(4, dtype=np.float32))])
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="out.onnx.data", size_threshold=0)
    assert (tmp_path / "out.onnx.data").exists()
    assert_early_error(["optimize", path, "-o", tmp_path / "out.onnx"], capsys, "external data")


def test_optimize_inputs_file_missing(example, tmp_path, capsys, no_work):
    assert_early_error(["optimize", example, "--inputs", tmp_path / "missing.npz"], capsys,
                       "--inputs: ")


def test_optimize_report_folder_missing_or_same_as_output(example, tmp_path, capsys, no_work):
    assert_early_error(["optimize", example, "--report", tmp_path / "nope" / "r.json"], capsys,
                       "--report: folder does not exist")
    out = tmp_path / "out.onnx"
    assert_early_error(["optimize", example, "-o", out, "--report", out], capsys, "the same file")


def test_optimize_and_bisect_bad_dims(example, capsys, no_work):
    assert_early_error(["optimize", example, "--dims", "N=two"], capsys, "--dims")
    assert_early_error(["bisect", example, "--dims", "N"], capsys, "--dims")


def test_optimize_output_folder_not_writable(example, tmp_path, capsys, no_work, monkeypatch):
    # Tests run as root here, where chmod does not stop writes: ask os.access what a user sees.
    real_access = os.access
    monkeypatch.setattr(checks.os, "access",
                        lambda path, mode: False if mode & os.W_OK else real_access(path, mode))
    assert_early_error(["optimize", example, "-o", tmp_path / "out.onnx"], capsys, "not writable")


def test_optimize_missing_model_keeps_its_message(tmp_path, capsys, no_work):
    assert_early_error(["optimize", tmp_path / "missing.onnx"], capsys, "no such file")
    # A folder is a batch of models (onnxrefine.batch); an empty one is still a one-line error.
    assert_early_error(["optimize", tmp_path], capsys, "no .onnx model in this folder")


def test_checks_pass_for_good_arguments_and_the_command_runs(example, tmp_path, capsys):
    out = tmp_path / "sub" / "out.onnx"
    out.parent.mkdir()
    assert main(["optimize", str(example), "-o", str(out), "--report", str(tmp_path / "r.json")]) == 0
    assert out.exists() and (tmp_path / "r.json").exists()
    capsys.readouterr()


# --- verify, bisect, fuzz, reduce ------------------------------------------------------------------


def test_verify_arguments(example, tmp_path, capsys, no_work):
    assert_early_error(["verify", example, tmp_path / "missing.onnx"], capsys, "candidate: ")
    assert_early_error(["verify", example, example, "--inputs", tmp_path / "no.npz"], capsys, "--inputs: ")
    assert_early_error(["verify", example, example, "--json", tmp_path / "no" / "r.json"], capsys,
                       "--json: folder does not exist")
    assert_early_error(["verify", example, example, "--html", example], capsys, "overwrite the input")
    both = tmp_path / "r.out"
    assert_early_error(["verify", example, example, "--json", both, "--html", both], capsys, "the same file")


def test_bisect_arguments(example, tmp_path, capsys, no_work):
    existing = tmp_path / "bundle"
    existing.mkdir()
    assert_early_error(["bisect", example, "--out", existing], capsys, "already exists")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_early_error(["bisect", example, "--out", blocker / "bundle"], capsys, "is not a folder")
    assert_early_error(["bisect", example, "--inputs", tmp_path / "no.npz"], capsys, "--inputs: ")


def test_fuzz_out_is_a_file(tmp_path, capsys, no_work):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_early_error(["fuzz", "--cases", "1", "--out", blocker], capsys, "not a folder")


def test_reduce_arguments(tmp_path, capsys, no_work):
    assert_early_error(["reduce", tmp_path / "missing"], capsys, "no such folder")
    assert_early_error(["reduce", tmp_path], capsys, "is not a fuzz bundle")
    (tmp_path / "model.onnx").write_bytes(b"")
    (tmp_path / "report.json").write_text("{}")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_early_error(["reduce", tmp_path, "--out", blocker], capsys, "not a folder")


def test_real_process_one_line_and_fast_path(example, tmp_path):
    """The real entry point: one line, exit 2, and the output file was never created."""
    out = tmp_path / "missing" / "out.onnx"
    done = subprocess.run([sys.executable, "-m", "onnxrefine", "optimize", str(example), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"onnxrefine: error: -o/--output: folder does not exist: {out.parent}"]
    assert not out.parent.exists()
