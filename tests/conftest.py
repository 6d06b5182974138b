"""Shared pytest options: tests marked `slow` run only with --runslow."""

import os

import pytest

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
