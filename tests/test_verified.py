"""optimize with verification: a wrong pass is rolled back, a failing model is never written."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, plant_wrong_pass, run, tensor, value_info
from onnx import helper

import onnxrefine
from onnxrefine.cli.main import main
from onnxrefine.verified import VerificationFailed, VerifySettings

BN_PASSES = ["fuse_bn_into_conv", "fuse_bn_into_gemm"]


@pytest.fixture
def planted_pass(monkeypatch):
    return plant_wrong_pass(monkeypatch, "planted_wrong_pass")


def model_with_bn_and_relu() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        tensor("W", rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32)),
        tensor("s", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
        tensor("b", rng.normal(0, 0.2, 4).astype(np.float32)),
        tensor("m", rng.normal(0, 0.2, 4).astype(np.float32)),
        tensor("v", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    return make_model(nodes, [value_info("x", shape=["N", 3, 6, 6])], [value_info("y", shape=["N", 4, 6, 6])], inits)


def test_wrong_pass_is_rolled_back_and_the_rest_kept(planted_pass):
    model = model_with_bn_and_relu()
    optimized, report = onnxrefine.optimize_with_report(
        model, BN_PASSES + [planted_pass], verify=VerifySettings(enabled=True),
        certify=False,  # the certificate would refuse the planted rule before verification sees it
    )
    # The end-to-end check fails; bisection names the planted rewrite, which is rolled back.
    assert [(r["pass"], r.get("rule")) for r in report.rolled_back] == [(planted_pass, "relu_to_abs")]
    assert report.rolled_back[0]["verdict"] == "mismatch"
    assert op_types(optimized) == ["Conv", "Relu"]
    assert report.verification["status"] == "verified"
    assert report.verification["verdict"] == "rounding"
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_without_verification_the_wrong_pass_goes_through(planted_pass):
    # The control for the test above: the planted rule really does change the model.
    optimized = onnxrefine.optimize(model_with_bn_and_relu(), [planted_pass], certify=False)
    assert "Abs" in op_types(optimized)


def test_model_failing_final_verification_is_not_written(tmp_path, monkeypatch):
    import onnxrefine.verify as verify_package

    class FakeReport:
        verdict = "mismatch"
        failing_outputs = ["y"]
        outputs = []
        notes = []

    # Every verification reports a mismatch: bisection rolls back every rewrite and the
    # verdict still says mismatch, so nothing may be returned or written.
    monkeypatch.setattr(verify_package, "verify_models", lambda *args, **kwargs: FakeReport())
    path = tmp_path / "m.onnx"
    onnx.save(model_with_bn_and_relu(), path)
    with pytest.raises(VerificationFailed):
        onnxrefine.optimize(str(path), BN_PASSES, verify=VerifySettings(enabled=True))
    assert main(["optimize", str(path), "--passes", ",".join(BN_PASSES), "--verify"]) == 2
    assert not (tmp_path / "m.opt.onnx").exists()


def test_cli_verifies_by_default_and_reports_it(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model_with_bn_and_relu(), path)
    result = subprocess.run(
        [sys.executable, "-m", "onnxrefine", "optimize", str(path), "--passes", ",".join(BN_PASSES)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "rounding (end to end" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "onnxrefine", "optimize", str(path), "--passes", ",".join(BN_PASSES), "--no-verify"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0 and "off (--no-verify)" in result.stdout


def test_explicit_verify_on_a_model_onnxruntime_cannot_run_is_bad_input(tmp_path):
    node = helper.make_node("MysteryOp", ["x"], ["y"], domain="com.example")
    model = make_model([node], [value_info("x", shape=[2])], [value_info("y", shape=[2])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    assert main(["optimize", str(path), "--verify"]) == 2
    assert main(["optimize", str(path)]) == 0  # auto mode: optimizes, says verification was skipped
