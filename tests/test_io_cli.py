"""Loading, saving and the optimize command: bad input is one line and exit 2, nothing written."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper, numpy_helper

import onnxrefine
from onnxrefine.cli.main import main
from onnxrefine.errors import BadInputError
from onnxrefine.ir import io, sizes

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
from make_example import build as build_example  # noqa: E402


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "onnxrefine", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def assert_one_line_error(result: subprocess.CompletedProcess, fragment: str):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in lines[0]


def test_optimize_writes_default_output_and_keeps_input(example, tmp_path):
    before = digest(example)
    result = run_cli("optimize", example, "--report", tmp_path / "report.json")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "tiny.opt.onnx"
    assert out.exists()
    assert digest(example) == before
    optimized = onnx.load(out)
    onnx.checker.check_model(optimized, full_check=True)
    metadata = {p.key: p.value for p in optimized.metadata_props}
    assert metadata["onnxrefine.version"] == onnxrefine.__version__
    assert json.loads(metadata["onnxrefine.rewrites"])["conv_bn"] >= 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["nodes_after"] < report["nodes_before"]
    assert all({"rule", "kind", "root", "removed", "added"} <= set(entry) for entry in report["applied"])
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    (expected,) = run(build_example(), {"image": x})
    (actual,) = run(optimized, {"image": x})
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_list_passes(capsys):
    assert main(["optimize", "--list-passes"]) == 0
    out = capsys.readouterr().out
    assert "fuse_bn_into_conv" in out and "reassociating" in out


def test_refuses_to_overwrite_input(example):
    before = digest(example)
    result = run_cli("optimize", example, "-o", example)
    assert_one_line_error(result, "overwrite the input")
    assert digest(example) == before


@pytest.mark.parametrize(
    "content,fragment",
    [(b"this is not a model", "not a readable ONNX model"), (b"", "not an ONNX model")],
)
def test_not_onnx(tmp_path, content, fragment):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    result = run_cli("optimize", path)
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "bad.opt.onnx").exists()


def test_truncated_protobuf(example, tmp_path):
    data = example.read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    result = run_cli("optimize", path)
    assert_one_line_error(result, "truncated.onnx")
    assert not (tmp_path / "truncated.opt.onnx").exists()


def test_not_a_file(tmp_path):
    assert_one_line_error(run_cli("optimize", tmp_path / "missing.onnx"), "no such file")
    assert_one_line_error(run_cli("optimize", tmp_path), "no .onnx model in this folder")  # a folder: batch mode


def test_unknown_pass(example):
    assert_one_line_error(run_cli("optimize", example, "--passes", "no_such_pass"), "unknown pass")


def external_model(tmp_path: Path, location: str) -> Path:
    model = build_example()
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    if location != "ext.data":
        proto = onnx.load(tmp_path / "ext.onnx", load_external_data=False)
        for init in proto.graph.initializer:
            for entry in init.external_data:
                if entry.key == "location":
                    entry.value = location
        onnx.save(proto, tmp_path / "ext.onnx")
    return tmp_path / "ext.onnx"


def test_external_data_loads_lazily_and_optimizes(tmp_path):
    path = external_model(tmp_path, "ext.data")
    model = io.load_model(path)
    weight = model.graph.initializers["conv1_w"].const_value
    assert isinstance(weight, ir.ExternalTensor)
    result = run_cli("optimize", path, "-o", tmp_path / "out.onnx")
    assert result.returncode == 0, result.stderr
    onnx.checker.check_model(onnx.load(tmp_path / "out.onnx"), full_check=True)


def test_missing_external_data(tmp_path):
    path = external_model(tmp_path, "ext.data")
    (tmp_path / "ext.data").unlink()
    assert_one_line_error(run_cli("optimize", path), "is missing")


def test_external_data_path_traversal_refused(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    path = external_model(inner, "../secret.bin")
    (tmp_path / "secret.bin").write_bytes(b"\0" * 100000)
    assert_one_line_error(run_cli("optimize", path), "outside the model's folder")
    assert not (inner / "ext.opt.onnx").exists()


def write(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def test_cycle_refused(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    model = make_model(nodes, [value_info("x", shape=[2])], [value_info("b", shape=[2])])
    assert_one_line_error(run_cli("optimize", write(model, tmp_path / "cycle.onnx")), "cycle")


def test_undefined_input_refused(tmp_path):
    model = make_model([helper.make_node("Relu", ["nowhere"], ["y"])], [value_info("x", shape=[2])],
                       [value_info("y", shape=[2])])
    assert_one_line_error(run_cli("optimize", write(model, tmp_path / "undef.onnx")), "never defined")


def test_undefined_input_in_subgraph_refused():
    branch = helper.make_graph([helper.make_node("Relu", ["ghost"], ["t"])], "then", [], [value_info("t")])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [], [value_info("e")])
    model = make_model([helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=other)],
                       [value_info("x", shape=[2]), value_info("flag", TensorProto.BOOL, [])], [value_info("y")])
    with pytest.raises(BadInputError, match="ghost"):
        onnxrefine.optimize(model)


def test_api_returns_the_type_it_was_given(example):
    proto = onnx.load(example)
    assert isinstance(onnxrefine.optimize(proto), onnx.ModelProto)
    assert isinstance(onnxrefine.optimize(ir.from_proto(proto)), ir.Model)
    assert isinstance(onnxrefine.optimize(str(example)), onnx.ModelProto)


def test_api_does_not_modify_a_given_proto(example):
    proto = onnx.load(example)
    before = proto.SerializeToString()
    onnxrefine.optimize(proto)
    assert proto.SerializeToString() == before


def test_sparse_initializers_are_kept_as_dense(tmp_path):
    values = numpy_helper.from_array(np.array([5.0, -3.0], np.float32), "sp")
    indices = numpy_helper.from_array(np.array([1, 3], np.int64), "sp_idx")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "sp"], ["y"])], "g", [value_info("x", shape=[4])],
                              [value_info("y", shape=[4])], sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    optimized = onnxrefine.optimize(model)
    x = np.arange(4, dtype=np.float32)
    assert np.array_equal(run(optimized, {"x": x})[0], x + np.array([0, 5, 0, -3], np.float32))


def test_save_is_atomic_on_failure(example, tmp_path, monkeypatch):
    model = io.load_model(example)
    target = tmp_path / "out.onnx"

    def explode(model, handle, *args):
        handle.write(b"partial")
        raise OSError("disk full")

    from onnxrefine.ir import external_save

    monkeypatch.setattr(external_save, "write", explode)
    with pytest.raises(OSError):
        io.save_model(model, target, input_path=example)
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.onnx"]


def test_initializer_graph_input_override_respected(tmp_path):
    # An initializer that is also an input is a default, not a constant: never folded.
    rng = np.random.default_rng(0)
    inits = [tensor("W", rng.standard_normal((2, 2, 1, 1)).astype(np.float32)), tensor("M", np.float32(2.0))]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Mul", ["c", "M"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[1, 2, 2, 2]), value_info("M", shape=[])], [value_info("y")], inits)
    optimized = onnxrefine.optimize(model)
    feeds = {"x": np.ones((1, 2, 2, 2), np.float32), "M": np.array(-7.0, np.float32)}
    assert np.array_equal(run(model, feeds)[0], run(optimized, feeds)[0])


def test_cli_exit_code_two_for_missing_argument():
    result = run_cli("optimize")
    assert_one_line_error(result, "no input model")


def test_main_without_command_prints_help(capsys):
    assert main([]) == 2
    assert "optimize" in capsys.readouterr().out


def test_large_model_weights_stay_memory_mapped_and_output_is_self_contained(tmp_path, monkeypatch):
    monkeypatch.setattr(sizes, "LAZY_LOAD_THRESHOLD_BYTES", 0)
    monkeypatch.setattr(io.wire, "LAZY_THRESHOLD_BYTES", 64)
    source = tmp_path / "in" / "model.onnx"
    source.parent.mkdir()
    onnx.save(build_example(), source)
    model = io.load_model(source)
    assert isinstance(model.graph.initializers["conv1_w"].const_value, ir.ExternalTensor)
    model, _ = onnxrefine.api.optimize_ir(model)
    # Written elsewhere, then the input removed: the output must not reference the input file.
    target = tmp_path / "out" / "model.opt.onnx"
    target.parent.mkdir()
    io.save_model(model, target, input_path=source)
    source.unlink()
    optimized = onnx.load(target)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in optimized.graph.initializer)
    onnx.checker.check_model(optimized, full_check=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, {"image": x})[0], run(build_example(), {"image": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_external_data_input_gives_self_contained_output_elsewhere(tmp_path):
    path = external_model(tmp_path, "ext.data")
    target = tmp_path / "elsewhere" / "out.onnx"
    target.parent.mkdir()
    result = run_cli("optimize", path, "-o", target)
    assert result.returncode == 0, result.stderr
    (tmp_path / "ext.data").unlink()
    onnx.checker.check_model(onnx.load(target), full_check=True)


def test_api_does_not_modify_a_proto_whose_values_get_renamed():
    # Inlining an If renames branch values; onnx-ir renames a wrapped TensorProto in place, so
    # the API must work on a copy (found by the fuzzer: eliminate_if_with_const_cond).
    from onnxrefine.fuzz.generator import generate_model

    proto = generate_model(1, target="eliminate_if_with_const_cond").model
    before = proto.SerializeToString()
    onnxrefine.optimize(proto, ["eliminate_if_with_const_cond"])
    assert proto.SerializeToString() == before


@pytest.mark.parametrize("lazy", [False, True])
def test_streaming_save_round_trips_every_dtype(tmp_path, monkeypatch, lazy):
    import ml_dtypes

    if lazy:
        monkeypatch.setattr(sizes, "LAZY_LOAD_THRESHOLD_BYTES", 0)
        monkeypatch.setattr(io.wire, "LAZY_THRESHOLD_BYTES", 1)

    arrays = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "f16": np.array([1.5, -2.0], np.float16),
        "f64": np.array(3.25),
        "i64": np.array([-1, 2**40], np.int64),
        "u8": np.array([0, 255], np.uint8),
        "b": np.array([True, False]),
        "empty": np.zeros((0, 3), np.float32),
        "bf16": np.array([1.0, 2.5], ml_dtypes.bfloat16),
    }
    inits = [numpy_helper.from_array(a, n) if n != "bf16" else
             helper.make_tensor(n, TensorProto.BFLOAT16, [2], a.view(np.uint16).tobytes(), raw=True)
             for n, a in arrays.items()]
    inits.append(helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", b"c"]))
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in list(arrays) + ["s"]]
    outputs = [helper.make_tensor_value_info(f"{n}_out", t.data_type, None) for n, t in zip(list(arrays) + ["s"], inits)]
    graph = helper.make_graph(nodes, "g", [], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    source = tmp_path / "all.onnx"
    onnx.save(model, source)
    io.save_model(io.load_model(source), tmp_path / "copy.onnx", input_path=source)
    copied = {t.name: t for t in onnx.load(tmp_path / "copy.onnx").graph.initializer}
    for tensor in inits:
        expected, actual = numpy_helper.to_array(tensor), numpy_helper.to_array(copied[tensor.name])
        if expected.dtype == object:
            assert actual.tolist() == expected.tolist()
        else:
            assert actual.tobytes() == expected.tobytes()
        assert list(copied[tensor.name].dims) == list(tensor.dims)
        assert copied[tensor.name].data_type == tensor.data_type


def test_models_over_the_protobuf_limit_are_saved_with_external_data(tmp_path, monkeypatch):
    # The real limit is 2 GB; lower the threshold so a small model takes the same path.
    monkeypatch.setattr(sizes, "EXTERNAL_DATA_THRESHOLD_BYTES", 1000)
    source = tmp_path / "in.onnx"
    onnx.save(build_example(), source)
    model, _ = onnxrefine.api.optimize_ir(io.load_model(source))
    target = tmp_path / "out" / "big.onnx"
    target.parent.mkdir()
    io.save_model(model, target, input_path=source)
    assert (target.parent / "big.onnx.data").exists()
    stored = onnx.load(target, load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    loaded = onnx.load(target)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(run(loaded, {"image": x})[0], run(build_example(), {"image": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_outputs_get_the_umask_mode_not_the_temp_files_0600(tmp_path):
    """mkstemp makes 0600 files; an optimized model, its report and a bundle folder must be as
    readable as any file the user's umask allows (other users, containers)."""
    import os
    import stat

    out = tmp_path / "tiny.opt.onnx"
    report = tmp_path / "report.json"
    old = os.umask(0o022)
    try:
        done = subprocess.run([sys.executable, "-m", "onnxrefine", "optimize",
                               str(EXAMPLES / "tiny_cnn.onnx"), "-o", str(out), "--no-verify",
                               "--report", str(report)], capture_output=True, text=True)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    for path in (out, report):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
