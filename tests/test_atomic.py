"""onnxrefine.atomic: the one way files and folders are written (reports, inputs, summaries,
bundles): ordinary permissions, data on disk before the rename, and nothing half-written."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from onnxrefine import atomic
from onnxrefine.errors import BadInputError
from onnxrefine.verify.inputs import load_inputs, save_inputs


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_written_file_has_the_mode_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        atomic.write_atomic(tmp_path / "a.json", "{}\n")
        atomic.write_atomic(tmp_path / "b.bin", b"\x00\x01")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.json") == 0o644  # mkstemp alone would leave 0600
    assert _mode(tmp_path / "b.bin") == 0o644
    assert (tmp_path / "a.json").read_text() == "{}\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"


def test_text_is_utf8_whatever_the_locale(tmp_path):
    atomic.write_atomic(tmp_path / "t.txt", "naïve µ")
    assert (tmp_path / "t.txt").read_bytes() == "naïve µ".encode()


def test_data_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    atomic.write_atomic(tmp_path / "x.json", "1")
    assert events == ["fsync", "replace"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_file(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["report.json"]


def test_only_whole_file_modes(tmp_path):
    with pytest.raises(ValueError), atomic.atomic_file(tmp_path / "x", "a"):
        pass


def test_save_inputs_goes_through_it(tmp_path, monkeypatch):
    """inputs.npz is written atomically too (np.savez into the temp file, not beside it)."""
    calls = []
    real = atomic.atomic_file
    monkeypatch.setattr("onnxrefine.verify.inputs.atomic_file", lambda *a: (calls.append(a), real(*a))[1])
    feeds = {"x": np.arange(3, dtype=np.float32)}
    save_inputs(tmp_path / "inputs.npz", [feeds])
    assert calls and os.listdir(tmp_path) == ["inputs.npz"]
    np.testing.assert_array_equal(load_inputs(str(tmp_path / "inputs.npz"))[0]["x"], feeds["x"])
    assert _mode(tmp_path / "inputs.npz") == 0o666 & ~_umask()


def test_staged_folder_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "bundle"
    with pytest.raises(RuntimeError), atomic.staged_folder(target) as staging:
        (staging / "model.onnx").write_bytes(b"x")
        raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []
    with atomic.staged_folder(target) as staging:
        (staging / "model.onnx").write_bytes(b"x")
    assert os.listdir(target) == ["model.onnx"]
    assert _mode(target) == 0o777 & ~_umask()
    with pytest.raises(BadInputError, match="already exists"), atomic.staged_folder(target):
        pass
    with atomic.staged_folder(target, replace=True) as staging:
        (staging / "other").write_bytes(b"y")
    assert os.listdir(target) == ["other"]


def test_temp_file_sits_beside_the_name_not_the_symlink_target(tmp_path):
    """A rename only replaces atomically within one folder (and one file system): the temp file is
    made where the name lives, so a symlinked output is replaced by the new file, its target kept."""
    elsewhere = tmp_path / "elsewhere"
    here = tmp_path / "here"
    elsewhere.mkdir()
    here.mkdir()
    (elsewhere / "target.json").write_text("old")
    (here / "out.json").symlink_to(elsewhere / "target.json")
    fd, temp = atomic.temp_beside(here / "out.json")
    os.close(fd)
    assert os.path.dirname(temp) == str(here)
    os.unlink(temp)
    atomic.write_atomic(here / "out.json", "new")
    assert not (here / "out.json").is_symlink() and (here / "out.json").read_text() == "new"
    assert (elsewhere / "target.json").read_text() == "old"
    assert sorted(os.listdir(here)) == ["out.json"] and os.listdir(elsewhere) == ["target.json"]
