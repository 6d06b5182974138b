"""Sessions are created from model files, never from the bytes of a whole large model; the float64
reference reads weights memory-mapped and frees values after their last use.

">2 GB" is simulated by lowering sizes.EXTERNAL_DATA_THRESHOLD_BYTES (the size above which a model must
go through a file and its saver writes external data); one real 2.1 GB case is marked slow.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.ir import io, sizes
from onnxrefine.verify import verify_models
from onnxrefine.verify.ort import ModelRunner, files
from onnxrefine.verify.reference.evaluator import _Evaluator, evaluate_float64


def mlp(layers: int = 3, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.1, f"W{i}"),
                  numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"y{i}"])]
        x = f"y{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def ort_outputs(model: onnx.ModelProto, feeds) -> list:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture
def small_limit(monkeypatch, tmp_path):
    """Simulate the protobuf limit with a 1 KiB threshold; temp folders go under tmp_path/tmp."""
    monkeypatch.setattr(sizes, "EXTERNAL_DATA_THRESHOLD_BYTES", 1024)
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    return temp_root


def test_large_in_memory_model_runs_from_a_temp_folder_with_external_data(small_limit):
    model = mlp()
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    opened = files.open_model(model)
    assert opened.path is not None and Path(opened.path).parent.parent == small_limit
    assert (Path(opened.path).parent / "model.onnx.data").is_file()  # the saver wrote external data
    big = [t for t in opened.proto.graph.initializer if t.name.startswith("W")]
    assert big and all(t.data_location == TensorProto.EXTERNAL and not t.raw_data for t in big)
    with ModelRunner(opened, "model") as run:
        got = run.run(feeds)
    expected = ort_outputs(model, feeds)
    np.testing.assert_array_equal(got["y2"], expected[0])
    opened.close()
    assert list(small_limit.iterdir()) == []  # cleaned up


def test_small_in_memory_model_keeps_the_in_memory_path(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    opened = files.open_model(mlp(hidden=8))
    assert opened.path is None and opened.temp_dir is None
    assert list(tmp_path.iterdir()) == []


def test_verify_models_on_large_protos_goes_through_files_and_cleans_up(small_limit, monkeypatch):
    written = []
    original_write = files.write_temp

    def spy(model, role):
        opened = original_write(model, role)
        written.append(opened.temp_dir)
        return opened

    monkeypatch.setattr(files, "write_temp", spy)
    model = mlp()
    report = verify_models(model, mlp(), trials=1, stress=False)
    assert report.verdict == "exact"
    assert len(written) == 2  # original and candidate, each through its own temp folder
    assert list(small_limit.iterdir()) == []


def test_onnx_ir_model_is_accepted_and_written_with_the_streaming_saver(small_limit):
    model = io.proto_to_ir(mlp())
    report = verify_models(model, mlp(), trials=1, stress=False, deployment=None)
    assert report.verdict == "exact"
    assert list(small_limit.iterdir()) == []


def test_weights_mapped_from_a_file_are_linked_not_copied_and_changed_ones_written(small_limit, tmp_path):
    """An onnx-ir model loaded from a path (weights memory-mapped) with one weight rewritten: the
    unchanged weights are read through a hard link to the original data file."""
    import onnx_ir as ir

    path = tmp_path / "m.onnx"
    onnx.save_model(mlp(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=1024)
    model = io.load_model(path)
    assert isinstance(model.graph.initializers["W0"].const_value, ir.ExternalTensor)
    doubled = model.graph.initializers["W1"].const_value.numpy() * 2
    model.graph.initializers["W1"].const_value = ir.Tensor(doubled, name="W1")
    expected_model = mlp()
    expected_model.graph.initializer[2].CopyFrom(numpy_helper.from_array(doubled, "W1"))
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)}
    with files.open_model(model) as opened:
        folder = Path(opened.temp_dir)
        linked = folder / "linked0.data"
        assert linked.is_file() and os.path.samefile(linked, tmp_path / "m.onnx.data")
        assert doubled.nbytes <= (folder / "model.onnx.data").stat().st_size < 2 * doubled.nbytes  # only W1
        with ModelRunner(opened) as run:
            np.testing.assert_array_equal(run.run(feeds)["y2"], ort_outputs(expected_model, feeds)[0])
        reference = evaluate_float64(opened.proto, feeds, base_dir=opened.base_dir)["y2"]
        np.testing.assert_array_equal(reference, evaluate_float64(expected_model, feeds)["y2"])
    assert list(small_limit.iterdir()) == []
    # The caller's model is left as it was.
    assert isinstance(model.graph.initializers["W0"].const_value, ir.ExternalTensor)
    assert model.graph.initializers["W1"].const_value.numpy() is not None
    np.testing.assert_array_equal(model.graph.initializers["W1"].const_value.numpy(), doubled)


def test_a_path_stays_a_path_and_its_weights_stay_on_disk(tmp_path):
    model = mlp()
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=1024)
    opened = files.open_model(str(path))
    assert opened.path == str(path) and opened.temp_dir is None
    weights = [t for t in opened.proto.graph.initializer if t.name.startswith("W")]
    assert all(t.data_location == TensorProto.EXTERNAL and not t.raw_data for t in weights)
    assert verify_models(str(path), str(path), trials=1, stress=False).verdict == "exact"


def test_large_embedded_file_is_read_lazily(tmp_path, monkeypatch):
    monkeypatch.setattr(sizes, "LAZY_LOAD_THRESHOLD_BYTES", 0)
    path = tmp_path / "m.onnx"
    onnx.save_model(mlp(), str(path))
    proto = files.light_proto(str(path))
    weights = [t for t in proto.graph.initializer if t.name.startswith("W")]
    assert all(t.data_location == TensorProto.EXTERNAL for t in weights)  # references into m.onnx itself
    feeds = {"x": np.ones((2, 64), np.float32)}
    got = evaluate_float64(proto, feeds, base_dir=str(tmp_path))["y2"]
    np.testing.assert_array_equal(got, evaluate_float64(mlp(), feeds)["y2"])


def test_reference_reads_external_weights_memory_mapped(tmp_path):
    model = mlp()
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    proto = onnx.load(str(path), load_external_data=False)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)}
    got = evaluate_float64(proto, feeds, base_dir=str(tmp_path))["y2"]
    np.testing.assert_array_equal(got, evaluate_float64(mlp(), feeds)["y2"])  # (save moved model's data)


def _chain(length: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Add", [f"v{i}", "one"], [f"v{i + 1}"]) for i in range(length)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info(f"v{length}", TensorProto.FLOAT, [3])],
                              [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_reference_frees_each_value_after_its_last_use():
    model = _chain(200)
    evaluator = _Evaluator({"": 17}, {})
    env = evaluator.bind_graph_inputs(model.graph, {"v0": np.zeros(3, np.float32)})
    result = evaluator.run_graph(model.graph, env, None, ["v200"])
    np.testing.assert_array_equal(result["v200"], np.full(3, 200.0))
    assert evaluator.peak_live <= 3  # not 200: each step's input is dropped once read


def test_freed_values_are_still_there_for_later_readers_and_subgraphs():
    """x is read again at the end, inside an If branch, and is a graph output itself."""
    then_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])])
    else_branch = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Exp", ["r"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["branch"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Add", ["branch", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [3])],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    got = evaluate_float64(model, {"x": x})
    r = np.maximum(x.astype(np.float64), 0)
    np.testing.assert_allclose(got["y"], -x + r)
    np.testing.assert_allclose(got["s"], np.exp(r))


@pytest.mark.slow
def test_real_model_over_2gb_is_verified_from_its_path(tmp_path):
    """33 layers of 4096x4096 float32 = 2.1 GB: beyond protobuf's limit, so only files work."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from big_model import build

    path = build(tmp_path / "big.onnx", layers=33, hidden=4096)
    assert os.path.getsize(str(path) + ".data") > 2 * 1024 ** 3
    report = verify_models(str(path), str(path), trials=1, stress=False)
    assert report.verdict == "exact" and report.deployment
    # An in-memory onnx-ir model of it (weights memory-mapped) goes through a temp folder.
    report = verify_models(io.load_model(path), str(path), trials=1, stress=False, deployment=None)
    assert report.verdict == "exact"


def _embedded_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(sizes, "LAZY_LOAD_THRESHOLD_BYTES", 0)  # its weights: references into the file
    path = tmp_path / "m.onnx"
    onnx.save_model(mlp(), str(path))
    return path


def test_a_file_embedding_its_weights_is_given_to_onnxruntime_mapped(tmp_path, monkeypatch):
    # onnxruntime copies a weight out of the parsed protobuf on every session; as external data
    # it maps it from the file. The session gets the light graph (references into the file
    # itself) and the file's folder; the outputs are the path's, at both levels.
    path = _embedded_file(tmp_path, monkeypatch)
    opened = files.open_model(str(path))
    data, folder = opened.mapped_source()
    assert folder == str(tmp_path) and len(data) < path.stat().st_size // 4
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    from onnxrefine.verify.ort.settings import RunSettings
    for settings in (RunSettings.strict(), RunSettings()):
        with ModelRunner(opened, settings=settings) as runner:
            got = runner.run(feeds)
        expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds) \
            if settings.level == "all" else ort_outputs(mlp(), feeds)
        np.testing.assert_array_equal(got["y2"], expected[0])
    # a file whose weights are external already is read from its path as before
    external = tmp_path / "e.onnx"
    onnx.save_model(mlp(), str(external), save_as_external_data=True, location="e.onnx.data", size_threshold=1024)
    assert files.open_model(str(external)).mapped_source() is None


def test_where_the_mapped_form_does_not_load_the_path_does(tmp_path, monkeypatch):
    from onnxrefine.verify.ort import child

    path = _embedded_file(tmp_path, monkeypatch)
    monkeypatch.setattr(child, "EXTERNAL_FOLDER_KEY", "session.no_such_option")  # an onnxruntime without it
    opened = files.open_model(str(path))
    feeds = {"x": np.ones((2, 64), np.float32)}
    loads = []
    original = ort.InferenceSession.__init__

    def recording(self, source, *args, **kwargs):
        loads.append(type(source).__name__)
        original(self, source, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "__init__", recording)
    with ModelRunner(opened) as runner:
        got = runner.run(feeds)
    assert loads == ["bytes", "str"]  # the mapped form refused, then the path
    np.testing.assert_array_equal(got["y2"], ort_outputs(mlp(), feeds)[0])


def test_a_watched_session_is_mapped_too(tmp_path, monkeypatch):
    from onnxrefine.verify.ort import child

    path = _embedded_file(tmp_path, monkeypatch)
    opened = files.open_model(str(path))
    # the child opens the mapped form first: a source that is no model at all is not read
    options = ort.SessionOptions()
    session = child.open_session(ort, b"not a model", opened.mapped_source(), options, ["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["y2"]
    monkeypatch.setenv("ONNXREFINE_WATCH", "always")
    sent = []
    watched = child.WatchedSession.__init__

    def recording(self, *args, **kwargs):
        sent.append(kwargs.get("mapped"))
        watched(self, *args, **kwargs)

    monkeypatch.setattr(child.WatchedSession, "__init__", recording)
    feeds = {"x": np.ones((2, 64), np.float32)}
    with ModelRunner(opened) as runner:
        got = runner.run(feeds)
    assert sent == [opened.mapped_source()]
    np.testing.assert_array_equal(got["y2"], ort_outputs(mlp(), feeds)[0])
