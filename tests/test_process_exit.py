"""The command ends without tearing down the interpreter's heap (onnxrefine.__main__.exit_now): the
exit code, the streams and the exit handlers (temp folders, worker pools) are still what a normal
exit gives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_exit_now_keeps_code_streams_and_exit_handlers(tmp_path):
    marker = tmp_path / "handler-ran"
    script = (
        "import atexit, sys, tempfile\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
        f"folder = tempfile.TemporaryDirectory(dir={str(tmp_path)!r})\n"  # removed by its finalizer at exit
        "sys.stdout.write('last line without newline')\n"
        "from onnxrefine.__main__ import exit_now\n"
        "exit_now(3)\n"
        "print('not reached')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("ONNXREFINE_FULL_TEARDOWN", None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stdout == "last line without newline"
    assert marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["handler-ran"]


def test_a_native_crash_is_one_line_and_exit_3(tmp_path):
    """onnxruntime or onnx dying by a signal (a segfault, an assertion) took the command with it,
    silently (exit -11 / -6). The command runs supervised: the crash is one line and exit 3."""
    script = ("import os, signal, sys\n"
              "from onnxrefine.__main__ import supervised\n"
              "sys.exit(supervised(lambda: os.kill(os.getpid(), signal.SIGSEGV)))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("ONNXREFINE_NO_SUPERVISOR", None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "crashed (SIGSEGV)" in result.stderr


def test_the_supervised_command_keeps_its_exit_code_and_output(tmp_path):
    script = ("import sys\n"
              "from onnxrefine.__main__ import supervised\n"
              "sys.exit(supervised(lambda: (print('done'), 7)[1]))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 7 and result.stdout == "done\n" and result.stderr == ""


def test_a_native_crash_leaves_no_temp_files_beside_the_outputs(tmp_path):
    """A crash runs no clean-up: the temp files and folders a run had staged beside its outputs
    stayed (`.out.onnx.<random>.tmp`). The supervisor removes those its worker listed; a committed
    output, and a file the worker did not make, stay."""
    work = tmp_path / "work"
    work.mkdir()
    (work / ".unrelated.tmp").write_text("not ours")
    script = ("import ctypes, os, sys\n"
              "from onnxrefine import atomic\n"
              "from onnxrefine.__main__ import supervised\n"
              "def run():\n"
              "    atomic.write_atomic('done.json', '{}')\n"
              "    with atomic.staging():\n"
              "        atomic.write_atomic('out.onnx', b'model')\n"
              "        with atomic.staged_folder('folder'):\n"
              "            open(os.path.join(sys.argv[1], 'unused'), 'w').close()\n"
              "            ctypes.string_at(0)\n"  # a segfault in native code
              "sys.exit(supervised(run))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TMPDIR=str(tmp_path))
    env.pop("ONNXREFINE_NO_SUPERVISOR", None)
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, cwd=work,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 3 and "crashed (SIGSEGV)" in result.stderr
    assert sorted(p.name for p in work.iterdir()) == [".unrelated.tmp", "done.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unused", "work"]  # the list has no name


def test_the_sweep_touches_only_the_temp_names_it_makes(tmp_path):
    from onnxrefine import atomic

    kept, temp = tmp_path / "model.onnx", tmp_path / ".model.onnx.x1.tmp"
    kept.write_text("a user's file")
    temp.write_text("staged")
    listed = f"{kept}\n{temp}\n{tmp_path / '.gone.tmp'}\n".encode()
    assert atomic.sweep_journal(listed) == [str(temp)]
    assert kept.exists() and not temp.exists()
