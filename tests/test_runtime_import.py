"""A Ctrl-C during onnxruntime's first import stays a Ctrl-C (onnxrefine/runtime.py).

pybind11 turns an exception raised while onnxruntime's native module initialises into
ImportError("initialization failed") with the original as its cause. On CI a SIGINT landed there:
a certificate's session creation caught the ImportError as "onnxruntime cannot load this", the
rewrite was refused, and the run exited 0 with a different model."""

from __future__ import annotations


import pytest

from onnxrefine import runtime


def _interrupted_import(fail) -> None:
    """`import onnxruntime` fails the way pybind11 reports a Ctrl-C during initialisation."""
    fail(ImportError("initialization failed"), cause=KeyboardInterrupt())


def test_an_interrupted_import_raises_keyboard_interrupt(failing_onnxruntime_import):
    _interrupted_import(failing_onnxruntime_import)
    with pytest.raises(KeyboardInterrupt):
        runtime.require_onnxruntime()


def test_another_import_failure_stays_an_import_error(failing_onnxruntime_import):
    failing_onnxruntime_import(ImportError("libonnxruntime.so: cannot open shared object file"))
    with pytest.raises(ImportError, match="cannot open shared object"):
        runtime.require_onnxruntime()


def test_the_cli_exits_130_and_writes_nothing(failing_onnxruntime_import, tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    from onnxrefine.cli.main import main

    # bench/big_model.py's layers hold Shape->Concat->Reshape chains whose rewrite is certified by
    # a run in onnxruntime: the first import happens inside the certifier, whose session creation
    # catches every Exception (that is where the interrupt used to be swallowed).
    spec = importlib.util.spec_from_file_location("big_model", Path(__file__).resolve().parent.parent / "bench" / "big_model.py")
    big_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(big_model)
    source = big_model.build(tmp_path / "m.onnx", layers=1, hidden=8)
    _interrupted_import(failing_onnxruntime_import)
    assert main(["optimize", str(source), "-o", str(tmp_path / "out.onnx"), "--no-verify"]) == 130
    assert not (tmp_path / "out.onnx").exists()
    assert "interrupted" in capsys.readouterr().err


def test_a_terminate_during_the_import_stays_a_terminate(failing_onnxruntime_import):
    """SIGTERM is raised as a KeyboardInterrupt subclass (cli/main.py) so that clean-up runs; the
    import's re-raise must keep it that subclass, or the command exits 130 instead of 143."""
    from onnxrefine import runtime
    from onnxrefine.cli.main import Terminated

    failing_onnxruntime_import(ImportError("initialization failed"), cause=Terminated(15))
    with pytest.raises(Terminated):
        runtime.require_onnxruntime()
