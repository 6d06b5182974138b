"""Optimization with verification keeps the original as a FILE (for `optimize` as for `verify`):
the user's path, else the in-memory model written once to a temp folder that goes away. Replays
load that file; no whole-model ModelProto is built; the plan reads no weights.

A model over protobuf's 2 GiB limit is simulated by lowering the sizes that send tensors to
external data (sizes.EXTERNAL_DATA_THRESHOLD_BYTES) and models to temp files
(files.IN_MEMORY_SESSION_MAX_BYTES)."""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from helpers import run
from test_schedule import conv_bn_residual, planted_rule  # noqa: F401 (a fixture)

import onnxrefine
from onnxrefine.verify import plan as verify_plan
from onnxrefine.api import optimize_ir
from onnxrefine.cli.main import main
from onnxrefine.ir import io, sizes
from onnxrefine.verified import VerifySettings
from onnxrefine.verify.ort import files
from onnxrefine.verify.ort import light_proto

ROOT = Path(__file__).resolve().parent.parent
THRESHOLD = 256  # bytes: conv_bn_residual's weights (W1, W2, G: 576-1536 bytes) go external


@pytest.fixture(autouse=True)
def big_model_sizes(monkeypatch):
    monkeypatch.setattr(sizes, "EXTERNAL_DATA_THRESHOLD_BYTES", THRESHOLD)
    monkeypatch.setattr(files, "IN_MEMORY_SESSION_MAX_BYTES", THRESHOLD)
    monkeypatch.setattr(verify_plan, "machine_slowdown", lambda: 1.0)


@pytest.fixture
def spies(monkeypatch):
    """Every io.to_proto call (the weight bytes of the model it serialized) and every
    io.load_model call (the path it loaded)."""
    calls = {"to_proto": [], "load_model": []}
    real_to_proto, real_load = io.to_proto, io.load_model

    def to_proto(model, **options):
        calls["to_proto"].append(io.tensor_bytes(model))
        return real_to_proto(model, **options)

    def load_model(path):
        calls["load_model"].append(os.path.abspath(path))
        return real_load(path)

    monkeypatch.setattr(io, "to_proto", to_proto)
    monkeypatch.setattr(io, "load_model", load_model)
    return calls


def save_external(model: onnx.ModelProto, path: Path) -> Path:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # saving with external data rewrites the proto it is given
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=THRESHOLD)
    return path


def weight_bytes(model: onnx.ModelProto) -> int:
    return sum(onnx.numpy_helper.to_array(init).nbytes for init in model.graph.initializer)


def check_close(model: onnx.ModelProto, optimized: onnx.ModelProto | str) -> None:
    x = np.random.default_rng(5).standard_normal((1, 4, 4, 4)).astype(np.float32)
    optimized = onnx.load(optimized) if isinstance(optimized, (str, Path)) else optimized
    np.testing.assert_allclose(run(optimized, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_path_is_verified_from_the_file_without_serializing_the_model(tmp_path, spies):
    model = conv_bn_residual()
    path = save_external(model, tmp_path / "m.onnx")
    assert main(["optimize", str(path), "-o", str(tmp_path / "out.onnx"), "--verify",
                 "--report", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verification"]["status"] == "verified"
    assert report["verification"]["verdict"] in ("exact", "rounding")
    # Serialized protos are small pieces (fold sessions), never the model with its weights.
    assert all(size < weight_bytes(model) / 2 for size in spies["to_proto"]), spies["to_proto"]
    # The CLI's load, then the schedule's run: both from the user's file.
    assert spies["load_model"] and set(spies["load_model"]) == {str(path.resolve())}
    assert len(spies["load_model"]) >= 2
    check_close(model, tmp_path / "out.onnx")


def test_verified_and_unverified_runs_apply_the_same_rewrites_from_a_path(tmp_path):
    path = save_external(conv_bn_residual(), tmp_path / "m.onnx")
    counts = {}
    for flag in ("--verify", "--no-verify"):
        report = tmp_path / f"{flag}.json"
        assert main(["optimize", str(path), "-o", str(tmp_path / f"{flag}.onnx"), flag, "--report",
                     str(report)]) == 0
        counts[flag] = json.loads(report.read_text())["rewrites_per_rule"]
    assert counts["--verify"] == counts["--no-verify"] and counts["--verify"]


def test_the_result_keeps_unchanged_weights_mapped_from_the_users_file(tmp_path):
    model = conv_bn_residual()
    path = save_external(model, tmp_path / "m.onnx")
    optimized, report = optimize_ir(io.load_model(path), verify=VerifySettings(enabled=True), source_path=path)
    assert report.verification["status"] == "verified"
    # G (the Gemm head's weight) is not rewritten: it still points into the user's data file.
    [head] = [v for v in optimized.graph.initializers.values() if v.name == "G"]
    assert isinstance(head.const_value, ir.ExternalTensor)
    assert os.path.samefile(head.const_value.path, str(path) + ".data")
    check_close(model, io.to_proto(optimized))


def temp_folders() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("onnxrefine-session-")}


def test_a_proto_is_written_once_to_a_temp_folder_that_is_removed(spies, tmp_path, monkeypatch):
    # A temp folder of this test's own: another test process writes session folders into the
    # shared one at any moment.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = conv_bn_residual()
    before = temp_folders()
    optimized, report = onnxrefine.optimize_with_report(model, verify=VerifySettings(enabled=True))
    assert report.verification["status"] == "verified"
    loaded = {os.path.dirname(path) for path in spies["load_model"]}
    [folder] = loaded  # every run of the schedule loaded the same written original
    assert os.path.basename(folder).startswith("onnxrefine-session-")
    assert not os.path.exists(folder) and temp_folders() <= before
    # Only the API's own conversion of the result back to a proto serializes the whole model.
    assert sum(size >= weight_bytes(model) / 2 for size in spies["to_proto"]) == 1
    plain, plain_report = onnxrefine.optimize_with_report(model, verify=None)
    assert report.log.counts() == plain_report.log.counts()
    check_close(model, optimized)


def test_an_ir_model_mapped_from_a_file_outlives_the_temp_folder(tmp_path):
    # An onnx_ir.Model memory-mapped from a file goes to the temp folder as hard links; the
    # result's unchanged weights are read in before the folder is removed, else they would
    # point into a folder that no longer exists.
    model = conv_bn_residual()
    path = save_external(model, tmp_path / "m.onnx")
    optimized, report = onnxrefine.optimize_with_report(io.load_model(path), verify=VerifySettings(enabled=True))
    assert report.verification["status"] == "verified"
    for value in optimized.graph.initializers.values():
        tensor = value.const_value
        assert not isinstance(tensor, ir.ExternalTensor) or os.path.exists(tensor.path)
    check_close(model, io.to_proto(optimized))


def test_a_planted_wrong_rewrite_is_rolled_back_with_replays_from_the_file(tmp_path, planted_rule, spies):
    model = conv_bn_residual()
    path = save_external(model, tmp_path / "m.onnx")
    out, report_path = tmp_path / "out.onnx", tmp_path / "r.json"
    assert main(["optimize", str(path), "-o", str(out), "--passes", f"fuse_bn_into_conv,{planted_rule}",
                 "--no-certify", "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    [rollback] = report["rolled_back"]
    assert (rollback["rule"], rollback["verdict"]) == ("flip_conv_weight", "mismatch")
    assert "flip_conv_weight" not in report["rewrites_per_rule"]
    assert report["verification"]["verdict"] in ("exact", "rounding")
    # CLI load, first run, bisection replays, the run after the rollback: all from the file.
    assert set(spies["load_model"]) == {str(path.resolve())} and len(spies["load_model"]) >= 4
    assert all(size < weight_bytes(model) / 2 for size in spies["to_proto"])
    check_close(model, out)


def test_the_plan_reads_no_weights(tmp_path, monkeypatch):
    path = save_external(conv_bn_residual(), tmp_path / "m.onnx")
    light = light_proto(str(path))

    def refuse(*args, **kwargs):
        raise AssertionError("the plan read weights")

    monkeypatch.setattr(mmap, "mmap", refuse)
    monkeypatch.setattr(onnx.external_data_helper, "load_external_data_for_tensor", refuse)
    monkeypatch.setattr(onnx.external_data_helper, "load_external_data_for_model", refuse)
    plan = verify_plan.make_plan(light, budget_s=60, forced=False, trials=1, seed=0, dims=None, inputs=None,
                                 weight_bytes=weight_bytes(conv_bn_residual()))
    assert plan.run and plan.sets


def load_big_model_builder():
    spec = importlib.util.spec_from_file_location("big_model", ROOT / "bench" / "big_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_estimate_sees_matmuls_behind_computed_reshape_targets(tmp_path):
    # bench/big_model.py's layers reshape x by a Shape->Gather->Unsqueeze->Concat target, as
    # exporters do; with data propagation the MatMuls get their real row count (the batch of the
    # input set), not the 128-row guess for an unknown shape.
    layers, hidden = 3, 64
    path = load_big_model_builder().build(tmp_path / "big.onnx", layers=layers, hidden=hidden)
    light = verify_plan.light_model(light_proto(str(path)))
    feeds = {"x": np.zeros((2, hidden), np.float32)}
    cost = verify_plan.estimate_cost(light, feeds, weight_bytes=0, perturbation_runs=1)
    matmul_flops = 2.0 * 2 * hidden * hidden * layers
    assert matmul_flops <= cost.flops < matmul_flops * 1.2
    assert cost.unknown_shapes == 0


@pytest.mark.slow
def test_a_real_model_over_2_gib_is_optimized_and_verified(tmp_path, monkeypatch):
    # No lowered sizes here: 33 layers of bench/big_model.py are 2.1 GB of weights, over protobuf's
    # limit; `optimize --verify` optimizes and verifies it (measured: 62 s, 2.3 GiB peak RSS).
    monkeypatch.setattr(sizes, "EXTERNAL_DATA_THRESHOLD_BYTES", 1_800_000_000)
    monkeypatch.setattr(files, "IN_MEMORY_SESSION_MAX_BYTES", 16 * 1024 * 1024)
    try:
        path = load_big_model_builder().build(tmp_path / "big.onnx", layers=33, hidden=4096)
        assert (tmp_path / "big.onnx.data").stat().st_size > 2**31
        out, report_path = tmp_path / "out.onnx", tmp_path / "r.json"
        assert main(["optimize", str(path), "-o", str(out), "--verify", "--report", str(report_path)]) == 0
        verification = json.loads(report_path.read_text())["verification"]
        assert verification["status"] == "verified" and verification["verdict"] in ("exact", "rounding")
        assert (tmp_path / "out.onnx.data").stat().st_size > 2**31
    finally:  # 4 GB: not left for pytest's retention of recent temp folders
        for name in ("big.onnx.data", "out.onnx.data"):
            (tmp_path / name).unlink(missing_ok=True)
