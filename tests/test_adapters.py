"""Peer adapters: each declared once (triage/adapters.py `_PEERS`), and every declaration complete
enough for the three readers (bisect's --optimizer choices, campaign steps, repro commands)."""

from __future__ import annotations

import pytest

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.reduce import _optimize_command
from onnxrefine.triage.adapters import ADAPTERS, get_adapter


def test_every_peer_is_declared_once_under_its_own_name():
    assert list(ADAPTERS) == ["onnxrefine", "onnxrefine-pipeline", "onnxoptimizer", "onnxsim", "onnxslim",
                              "onnxscript", "ort"]
    for name, adapter in ADAPTERS.items():
        assert adapter.name == name and adapter.package and adapter.describe and callable(adapter.build)


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_repro_command_reads_and_writes_the_bundle_files(name):
    """fuzz reduce and bundles rename original.onnx / optimized.onnx in the command: both must appear."""
    command = ADAPTERS[name].command("some_step")
    assert "original.onnx" in command and "optimized.onnx" in command
    renamed = _optimize_command({"optimizer": name, "step": "some_step"})
    assert "model.onnx" in renamed and "model.opt.onnx" in renamed and "original.onnx" not in renamed


def test_onnxoptimizer_command_names_the_step():
    assert "['fuse_bn_into_conv']" in ADAPTERS["onnxoptimizer"].command("fuse_bn_into_conv")
    assert "--passes eliminate_identity" in ADAPTERS["onnxrefine"].command("eliminate_identity")


def test_unknown_peer_is_one_line_error():
    with pytest.raises(BadInputError, match="unknown optimizer 'nope' \\(choose from onnxrefine, "):
        get_adapter("nope")


def test_onnxrefine_steps_are_its_passes():
    steps = ADAPTERS["onnxrefine"].steps(["eliminate_identity", "fuse_bn_into_conv"])
    assert [name for name, _ in steps] == ["eliminate_identity", "fuse_bn_into_conv"]
