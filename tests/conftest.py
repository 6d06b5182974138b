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
