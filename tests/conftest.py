"""Shared pytest options: tests marked `slow` run only with --runslow."""

import os
import sys
from pathlib import Path

import onnx
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from make_example import build as build_example  # noqa: E402

# Progress lines depend on timing (a phase shows once it has run a second); tests that read stderr
# must not see them by chance. tests/test_progress.py turns them on explicitly.
os.environ.setdefault("ONNXREFINE_PROGRESS", "off")


def _newest_ir_version_onnxruntime_reads() -> int:
    """The newest IR version the installed onnxruntime loads (1.31 reads up to 13, while onnx 1.23
    writes 14 by default): probed with a one-node model, newest first."""
    import onnxruntime
    from onnx import TensorProto, helper

    info = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", info,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    for version in range(onnx.IR_VERSION, 6, -1):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=version)
        try:
            onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return version
        except Exception:  # noqa: BLE001 - "Unsupported model IR version": try an older one
            continue
    return onnx.IR_VERSION


def _build_test_models_for_the_installed_onnxruntime() -> None:
    """The tests build their models with onnx.helper.make_model, which writes the installed onnx's
    newest IR version; the declared minimum onnxruntime (.ci/minimums.txt) reads one less. The
    models' contents need no newer IR, so they are built at the newest version onnxruntime reads
    (an explicit ir_version= is kept)."""
    newest = _newest_ir_version_onnxruntime_reads()
    if newest >= onnx.IR_VERSION:
        return
    make_model = onnx.helper.make_model

    def make_model_onnxruntime_reads(graph, **kwargs):
        model = make_model(graph, **kwargs)
        if "ir_version" not in kwargs:
            model.ir_version = min(model.ir_version, newest)
        return model

    onnx.helper.make_model = make_model_onnxruntime_reads


_build_test_models_for_the_installed_onnxruntime()


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture
def example(tmp_path) -> Path:
    """The bundled example CNN (examples/make_example.py), saved to a temp folder."""
    path = tmp_path / "tiny.onnx"
    onnx.save(build_example(), path)
    return path


@pytest.fixture(autouse=True)
def _idle_machine_for_verification_plans(monkeypatch):
    """Verification plans scale their estimates by the machine's load average; tests pin it so a
    plan (how many input sets fit a budget) does not depend on what else the machine runs."""
    from onnxrefine.verify import plan as verify_plan

    monkeypatch.setattr(verify_plan, "machine_slowdown", lambda: 1.0)


@pytest.fixture
def failing_onnxruntime_import(monkeypatch):
    """`fail(error, cause=None)`: from then on in the test, `import onnxruntime` raises `error`
    (raised from `cause`, as pybind11 reports an exception during the native initialisation)."""
    import builtins

    real_import = builtins.__import__

    def fail(error: BaseException, cause: BaseException | None = None) -> None:
        def failing(name, *args, **kwargs):
            if name != "onnxruntime":
                return real_import(name, *args, **kwargs)
            if cause is None:
                raise error
            try:
                raise cause
            except BaseException as raised:
                raise error from raised

        monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
        monkeypatch.setattr(builtins, "__import__", failing)

    return fail
