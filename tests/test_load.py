"""ir/load.py and ir/load_checks.py: every byte read from the file that was checked; every defect
one BadInputError naming it. Each test fails without the guard it names."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.errors import BadInputError
from onnxrefine.ir import io, sizes, wire
from onnxrefine.verify.graphinfo import InputSpec
from onnxrefine.verify.inputs import check_input_sets


def _matmul_model(w: np.ndarray) -> onnx.ModelProto:
    return make_model([helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
                      [value_info("X", shape=[1, w.shape[0]])], [value_info("Y", shape=[1, w.shape[1]])],
                      [tensor("W", w)])


def _weights(model) -> np.ndarray:
    return model.graph.initializers["W"].const_value.numpy()


@pytest.fixture
def lazy(monkeypatch):
    """Every model file parsed lazily (weights memory-mapped from the model file), as big ones are."""
    from onnxrefine.ir import io

    monkeypatch.setattr(sizes, "LAZY_LOAD_THRESHOLD_BYTES", 0)
    monkeypatch.setattr(wire, "LAZY_THRESHOLD_BYTES", 0)


def test_symlinked_model_reads_its_targets_weights_not_a_decoy(tmp_path, lazy):
    """model/best.onnx -> runs/epoch3.onnx, with an unrelated runs/best.onnx: the old lazy loader
    re-opened <target folder>/<link name> and read the decoy's weights."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "model").mkdir()
    right = np.arange(16, dtype=np.float32).reshape(4, 4)
    onnx.save(_matmul_model(right), tmp_path / "runs" / "epoch3.onnx")
    onnx.save(_matmul_model(-right), tmp_path / "runs" / "best.onnx")
    os.symlink("../runs/epoch3.onnx", tmp_path / "model" / "best.onnx")
    np.testing.assert_array_equal(_weights(io.load_model(tmp_path / "model" / "best.onnx")), right)


def test_symlinked_model_external_data_from_the_real_folder(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "model").mkdir()
    right = np.arange(16, dtype=np.float32).reshape(4, 4)
    model = _matmul_model(right)
    onnx.save(model, tmp_path / "runs" / "m.onnx", save_as_external_data=True, location="w.bin",
              size_threshold=0)
    (tmp_path / "model" / "w.bin").write_bytes((-right).tobytes())  # a decoy beside the link
    os.symlink("../runs/m.onnx", tmp_path / "model" / "m.onnx")
    np.testing.assert_array_equal(_weights(io.load_model(tmp_path / "model" / "m.onnx")), right)


def test_weights_come_from_the_file_that_was_checked(tmp_path):
    """A data file replaced after loading (a rename over it) is not read: the tensor maps the
    descriptor opened while checking."""
    right = np.arange(16, dtype=np.float32).reshape(4, 4)
    onnx.save(_matmul_model(right), tmp_path / "m.onnx", save_as_external_data=True, location="w.bin",
              size_threshold=0)
    model = io.load_model(tmp_path / "m.onnx")
    (tmp_path / "other.bin").write_bytes((right * 100).tobytes())
    os.replace(tmp_path / "other.bin", tmp_path / "w.bin")
    np.testing.assert_array_equal(_weights(model), right)


def test_hard_linked_lazy_model_loads(tmp_path, lazy):
    """onnx-ir refuses to map a file with a second hard link; the pinned tensor does not ask."""
    right = np.arange(16, dtype=np.float32).reshape(4, 4)
    onnx.save(_matmul_model(right), tmp_path / "m.onnx")
    os.link(tmp_path / "m.onnx", tmp_path / "again.onnx")
    np.testing.assert_array_equal(_weights(io.load_model(tmp_path / "m.onnx")), right)


def _with_w(w_tensor: TensorProto) -> onnx.ModelProto:
    return make_model([helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
                      [value_info("X", shape=[1, 4])], [value_info("Y", shape=[1, 4])], [w_tensor])


def _raw(dims, data: bytes, dtype=TensorProto.FLOAT) -> TensorProto:
    t = TensorProto(name="W", data_type=dtype, dims=dims)
    t.raw_data = data
    return t


@pytest.mark.parametrize("w_tensor, message", [
    (_raw([4, 4], bytes(60)), "raw_data holds 60 bytes.*need 64"),
    (_raw([4, 4], bytes(68)), "raw_data holds 68 bytes"),
    (_raw([2**20, 2**20], bytes(64)), "need 4398046511104"),
    (_raw([4, -4], bytes(64)), "negative dim"),
    (_raw([4, 4], bytes(64), dtype=0), "undefined data type"),
    (TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4], float_data=[1.0] * 15), "float_data holds 15"),
])
def test_tensor_bytes_checked_against_dtype_and_dims(tmp_path, w_tensor, message):
    path = tmp_path / "m.onnx"
    path.write_bytes(_with_w(w_tensor).SerializeToString())
    with pytest.raises(BadInputError, match=message):
        io.load_model(path)


def _external(tmp_path, location="w.bin", offset=None, length=None, data=bytes(64)) -> str:
    w = numpy_helper.from_array(np.zeros((4, 4), np.float32), "W")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            w.external_data.add(key=key, value=str(value))
    if data is not None:
        (tmp_path / "w.bin").write_bytes(data)
    path = tmp_path / "m.onnx"
    path.write_bytes(_with_w(w).SerializeToString())
    return str(path)


@pytest.mark.parametrize("kwargs, message", [
    ({"length": 32}, "length 32 bytes.*need 64"),
    ({"length": -64}, "negative external data length"),
    ({"offset": -16}, "negative external data offset"),
    ({"data": bytes(40)}, r"range \[0, 64\) exceeds"),
    ({"data": b""}, r"range \[0, 64\) exceeds"),
    ({"location": "w.bin\0x"}, "NUL byte"),
    ({"location": "../w.bin"}, "outside the model's folder"),
])
def test_external_data_checked_before_use(tmp_path, kwargs, message):
    with pytest.raises(BadInputError, match=message):
        io.load_model(_external(tmp_path, **kwargs))


def test_fifo_as_external_data_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "w.bin")
    with pytest.raises(BadInputError, match="not a regular file"):
        io.load_model(_external(tmp_path, data=None))


def test_invalid_utf8_is_named(tmp_path):
    model = _with_w(numpy_helper.from_array(np.zeros((4, 4), np.float32), "W"))
    model.graph.node[0].name = "QQQQ"
    data = model.SerializeToString().replace(b"QQQQ", b"\xff\xfe\xfd\xfc")
    (tmp_path / "m.onnx").write_bytes(data)
    with pytest.raises(BadInputError, match="NodeProto.name is not valid UTF-8"):
        io.load_model(tmp_path / "m.onnx")


def test_tensor_written_by_two_nodes_is_named(tmp_path):
    model = make_model([helper.make_node("Relu", ["X"], ["t"], name="a"),
                        helper.make_node("Neg", ["X"], ["t"], name="b"),
                        helper.make_node("Abs", ["t"], ["Y"], name="c")],
                       [value_info("X", shape=[2])], [value_info("Y", shape=[2])])
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(BadInputError, match="tensor 't' is written by two nodes \\('a' and 'b'\\)"):
        io.load_model(tmp_path / "m.onnx")


def test_string_tensors_load(tmp_path):
    words = [b"alpha", b"", "\u00e9".encode()]
    model = make_model([helper.make_node("Identity", ["K"], ["Y"], name="id")], [],
                       [value_info("Y", TensorProto.STRING, [3])],
                       [helper.make_tensor("K", TensorProto.STRING, [3], words)])
    onnx.save(model, tmp_path / "m.onnx")
    loaded = io.load_model(tmp_path / "m.onnx")
    assert list(loaded.graph.initializers["K"].const_value.numpy()) == words


def test_input_sets_bind_symbolic_dims_consistently():
    specs = [InputSpec("X", np.dtype(np.float32), ("N", 4), 1), InputSpec("Z", np.dtype(np.float32), ("N", 4), 1)]
    ok = {"X": np.ones((3, 4), np.float32), "Z": np.ones((3, 4), np.float32)}
    assert check_input_sets(specs, [ok])[0].keys() == {"X", "Z"}
    with pytest.raises(BadInputError, match="input 'Z' has N=2 .*but input 'X' has N=3"):
        check_input_sets(specs, [{"X": ok["X"], "Z": np.ones((2, 4), np.float32)}])
    with pytest.raises(BadInputError, match="'X' is float64"):
        check_input_sets(specs, [{"X": ok["X"].astype(np.float64), "Z": ok["Z"]}])


def test_markup_names_print_as_plain_text():
    from rich.console import Console

    from onnxrefine.plain import plain

    console = Console(record=True, width=200)
    console.print(plain("node [/] \x1b[2J [bold]x"))
    assert "node [/] \\x1b[2J [bold]x" in console.export_text()
