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
