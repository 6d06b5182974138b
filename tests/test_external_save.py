"""Saving with external data: the input's layout kept, --external-data / --no-external-data, weights
copied file to file (never read into Python), umask permissions, the size summary with external data."""

from __future__ import annotations

import errno
import re
import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper

from onnxrefine.cli.main import main as cli_main
from onnxrefine.ir import external_save, io, sizes, tensordata
from tests.helpers import make_model, tensor, value_info

HIDDEN = 64


def _model(layers: int = 3, seed: int = 0) -> onnx.ModelProto:
    """x -> (x @ W_i + b_i) * 1 per layer: the Mul by one is removed, MatMul+Add fuses into Gemm."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [tensor("one", np.float32(1.0))], "x"
    for i in range(layers):
        inits += [tensor(f"W{i}", rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)),
                  tensor(f"b{i}", rng.standard_normal(HIDDEN).astype(np.float32))]
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Mul", [f"a{i}", "one"], [f"y{i}"])]
        x = f"y{i}"
    return make_model(nodes, [value_info("x", shape=[2, HIDDEN])], [value_info(x, shape=[2, HIDDEN])], inits)


def _save_external(model: onnx.ModelProto, path: Path, location: str | None = None) -> Path:
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location or path.name + ".data", size_threshold=1024)
    return path


def _outputs(path: Path) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = np.random.default_rng(1).standard_normal((2, HIDDEN)).astype(np.float32)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _external_locations(path: Path) -> set[str]:
    proto = onnx.load_model(str(path), load_external_data=False)
    return {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}


def _optimize(*args) -> int:
    return cli_main(["optimize", *map(str, args), "--no-verify"])


def test_external_input_keeps_its_layout(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one summary row per line
    source = _save_external(_model(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    assert _optimize(source, "-o", out) == 0
    assert _external_locations(out) == {"out.onnx.data"}
    assert np.allclose(_outputs(source), _outputs(out), rtol=1e-5, atol=1e-5)
    onnx.load_model(str(out))  # onnx's own loader (checks locations) reads it
    loaded = ir.load(str(out))
    assert isinstance(loaded.graph.initializers["W0"].const_value, ir.ExternalTensor)
    # Aligned so onnxruntime can memory-map the weights.
    assert all(int(t.const_value.offset) % 4096 == 0 for t in loaded.graph.initializers.values()
               if isinstance(t.const_value, ir.ExternalTensor))
    size_row = next(line for line in capsys.readouterr().out.splitlines() if "file size" in line)
    before, after = (float(n) for n in re.findall(r"([\d.]+) KiB", size_row))
    assert "(external data included)" in size_row
    assert before > 48 and after > 48  # three 16 KiB weights, not the model file alone


def test_embedded_input_stays_embedded(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save_model(_model(), str(source))
    out = tmp_path / "out.onnx"
    assert _optimize(source, "-o", out) == 0
    assert _external_locations(out) == set()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


def test_external_data_on_request(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save_model(_model(), str(source))
    out = tmp_path / "out.onnx"
    assert _optimize(source, "-o", out, "--external-data", "weights.bin") == 0
    assert _external_locations(out) == {"weights.bin"}
    proto = onnx.load_model(str(out), load_external_data=False)
    small = [t.name for t in proto.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert small  # tensors under 1 KiB stay in the model file
    assert np.allclose(_outputs(source), _outputs(out), rtol=1e-5, atol=1e-5)
    # Without a name: <output>.data.
    out2 = tmp_path / "out2.onnx"
    assert _optimize(source, "-o", out2, "--external-data") == 0
    assert _external_locations(out2) == {"out2.onnx.data"}


def test_no_external_data_embeds(tmp_path):
    source = _save_external(_model(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    assert _optimize(source, "-o", out, "--no-external-data") == 0
    assert _external_locations(out) == set()
    assert not (tmp_path / "out.onnx.data").exists()
    assert np.allclose(_outputs(source), _outputs(out), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("location", ["m.onnx.data", "m.onnx", "out.onnx", "../x.data", "sub/x.data"])
def test_external_data_location_refused(tmp_path, capsys, location):
    source = _save_external(_model(), tmp_path / "m.onnx")
    before = (tmp_path / "m.onnx.data").read_bytes()
    assert _optimize(source, "-o", tmp_path / "out.onnx", "--external-data", location) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onnxrefine: error:") and len(err.splitlines()) == 1
    assert (tmp_path / "m.onnx.data").read_bytes() == before
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_outputs_get_umask_permissions(tmp_path, mask):
    source = _save_external(_model(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    previous = os.umask(mask)
    try:
        assert _optimize(source, "-o", out, "--report", tmp_path / "r.json") == 0
    finally:
        os.umask(previous)
    for name in ("out.onnx", "out.onnx.data", "r.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


def _forbid_reading_weights(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"weight {self.name} read into Python")

    for method in ("numpy", "tobytes", "__array__"):
        monkeypatch.setattr(ir.ExternalTensor, method, refuse)


def test_unchanged_external_weights_are_copied_file_to_file(tmp_path, monkeypatch):
    source = _save_external(_model(), tmp_path / "m.onnx")
    model = io.load_model(source)
    out = tmp_path / "out.onnx"
    _forbid_reading_weights(monkeypatch)
    io.save_model(model, out, input_path=source)
    monkeypatch.undo()
    assert _external_locations(out) == {"out.onnx.data"}
    assert np.array_equal(_outputs(source), _outputs(out))


def test_large_embedded_input_is_copied_file_to_file(tmp_path, monkeypatch):
    # Over the lazy-load threshold the loader leaves the weights in the input model file (external
    # references to it); saving copies them from there into the embedded output.
    rng = np.random.default_rng(0)
    model = make_model([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("MatMul", ["m", "V"], ["y"])],
                       [value_info("x", shape=[2, 1100])], [value_info("y", shape=[2, 1100])],
                       [tensor("W", rng.standard_normal((1100, 1100)).astype(np.float32)),  # 4.8 MB each
                        tensor("V", rng.standard_normal((1100, 1100)).astype(np.float32))])
    source = tmp_path / "m.onnx"
    onnx.save_model(model, str(source))
    assert source.stat().st_size >= sizes.LAZY_LOAD_THRESHOLD_BYTES
    loaded = io.load_model(source)
    out = tmp_path / "out.onnx"
    _forbid_reading_weights(monkeypatch)
    io.save_model(loaded, out, input_path=source)
    monkeypatch.undo()
    assert _external_locations(out) == set()
    saved = onnx.load_model(str(out))
    assert {t.name: t.raw_data for t in saved.graph.initializer} == {t.name: t.raw_data for t in model.graph.initializer}


def test_copy_falls_back_to_reads_and_writes(tmp_path, monkeypatch):
    data = np.random.default_rng(0).bytes(3 * tensordata.CHUNK_BYTES + 123)
    (tmp_path / "src").write_bytes(b"xyz" + data)

    def unsupported(*args, **kwargs):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", unsupported, raising=False)
    monkeypatch.setattr(os, "sendfile", unsupported, raising=False)
    fd = os.open(tmp_path / "src", os.O_RDONLY)
    try:
        with open(tmp_path / "dst", "wb") as dest:
            dest.write(b"head")
            tensordata.copy_range(fd, dest, 3, len(data))
            dest.write(b"tail")
    finally:
        os.close(fd)
    assert (tmp_path / "dst").read_bytes() == b"head" + data + b"tail"


def test_new_constants_go_external_with_an_external_input(tmp_path):
    # Folding creates an in-memory weight; with an external input it joins the data file.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    model = make_model([helper.make_node("Add", ["A", "B"], ["s"]), helper.make_node("MatMul", ["x", "s"], ["y"])],
                       [value_info("x", shape=[2, 64])], [value_info("y", shape=[2, 64])],
                       [tensor("A", a), tensor("B", b)])
    source = _save_external(model, tmp_path / "m.onnx")
    loaded = io.load_model(source)
    loaded.graph.initializers["A"].const_value = ir.Tensor(a + b, name="A")  # as a fold would
    out = tmp_path / "out.onnx"
    io.save_model(loaded, out, input_path=source)
    proto = onnx.load_model(str(out), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    full = onnx.load_model(str(out))
    assert np.array_equal(onnx.numpy_helper.to_array(full.graph.initializer[0]), a + b)


def test_stored_size_counts_external_data(tmp_path):
    source = _save_external(_model(), tmp_path / "m.onnx")
    model = io.load_model(source)
    model_bytes, data_bytes = external_save.stored_size(source, model)
    assert model_bytes == source.stat().st_size
    assert data_bytes == (tmp_path / "m.onnx.data").stat().st_size > 0
    written = io.save_model(model, tmp_path / "out.onnx", input_path=source)
    assert written == (tmp_path / "out.onnx").stat().st_size + (tmp_path / "out.onnx.data").stat().st_size


def test_link_data_clones_or_says_it_copied(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    source = _save_external(_model(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    assert _optimize(source, "-o", out, "--link-data") == 0
    printed = capsys.readouterr().out
    if "no reflink" in printed:  # ext4, tmpfs: copied as without the option
        assert _external_locations(out) == {"out.onnx.data"}
    else:
        assert "out.onnx.data.link0" in _external_locations(out)
    assert np.allclose(_outputs(source), _outputs(out), rtol=1e-5, atol=1e-5)


def test_linked_file_is_referenced_at_input_offsets(tmp_path, monkeypatch):
    # Cloning is emulated by a copy (this file system may not clone): the output must reference the
    # clone at the input's offsets, and write only the weights that are not in it.
    import shutil

    def fake_clone(source, folder, name):
        temp = folder / f".{name}.tmp"
        shutil.copyfile(source, temp)
        return str(temp)

    monkeypatch.setattr(external_save, "_link", fake_clone)
    source = _save_external(_model(), tmp_path / "m.onnx")
    model = io.load_model(source)
    new = np.full((HIDDEN, HIDDEN), 2, np.float32)
    model.graph.initializers["W0"].const_value = ir.Tensor(new, name="W0")  # as a fold would make
    out = tmp_path / "out.onnx"
    io.save_model(model, out, input_path=source, layout=external_save.Layout("same", link=True))
    proto = onnx.load_model(str(out), load_external_data=False)
    where = {t.name: {e.key: e.value for e in t.external_data} for t in proto.graph.initializer}
    original = {t.name: {e.key: e.value for e in t.external_data}
                for t in onnx.load_model(str(source), load_external_data=False).graph.initializer}
    assert where["W1"]["location"] == "out.onnx.data.link0" and where["W1"]["offset"] == original["W1"]["offset"]
    assert where["W0"]["location"] == "out.onnx.data"
    assert (tmp_path / "out.onnx.data").stat().st_size == new.nbytes
    full = onnx.load_model(str(out))
    arrays = {t.name: onnx.numpy_helper.to_array(t) for t in full.graph.initializer}
    assert np.array_equal(arrays["W0"], new)
    assert np.array_equal(arrays["W1"], onnx.numpy_helper.to_array(
        next(t for t in onnx.load_model(str(source)).graph.initializer if t.name == "W1")))


def test_constant_node_tensor_in_external_data_is_embedded(tmp_path):
    # onnx's saver can put a Constant node's tensor in the data file too; the output's data file
    # holds initializers only, so such a tensor is embedded (not left pointing at the input's file).
    rng = np.random.default_rng(0)
    value = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
    model = make_model([helper.make_node("Constant", [], ["c"], value=tensor("cv", value)),
                        helper.make_node("MatMul", ["x", "c"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                       [value_info("x", shape=[2, HIDDEN])], [value_info("y", shape=[2, HIDDEN])])
    source = tmp_path / "m.onnx"
    onnx.save_model(model, str(source), save_as_external_data=True, location="m.onnx.data", size_threshold=0,
                    convert_attribute=True)
    loaded = io.load_model(source)
    out = tmp_path / "sub" / "out.onnx"  # another folder: a stale reference would not resolve
    out.parent.mkdir()
    io.save_model(loaded, out, input_path=source)
    (tmp_path / "m.onnx.data").unlink()  # the output must not need the input's data
    full = onnx.load_model(str(out))
    x = np.random.default_rng(1).standard_normal((2, HIDDEN)).astype(np.float32)
    got = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(got, np.maximum(x @ value, 0), rtol=1e-5, atol=1e-5)


# --- replacing an output whose weights live in a data file ------------------------------------------


def _matmul_saved_external(tmp_path, scale: float):
    """An optimize-ready model whose weight (64 KiB) is saved external, and its expected output."""
    import onnx
    from onnx import helper, numpy_helper

    weight = np.full((128, 128), scale, np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 128])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 128])],
        [numpy_helper.from_array(weight, "w")])
    source = tmp_path / f"source{scale}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source,
              save_as_external_data=True, location=f"source{scale}.onnx.data", size_threshold=0)
    return source, np.full((1, 128), 128 * scale, np.float32)


def _run_ones(path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.ones((1, 128), np.float32)})[0]


def test_replacing_an_external_output_never_pairs_the_old_model_with_new_data(tmp_path, monkeypatch):
    from onnxrefine.ir import external_save, io

    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    first, expected_first = _matmul_saved_external(tmp_path, 1.0)
    second, expected_second = _matmul_saved_external(tmp_path, 2.0)
    io.save_model(io.load_model(first), out, input_path=first)
    assert (out.parent / "model.onnx.data").exists()
    np.testing.assert_array_equal(_run_ones(out), expected_first)

    # The run dies after its data files are in place, before the model's own rename: the model
    # already there must still read its own weights.
    real_replace = os.replace

    def dying(src, dst):
        if Path(dst) == out:
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(external_save.os, "replace", dying)
    with pytest.raises(KeyboardInterrupt):
        io.save_model(io.load_model(second), out, input_path=second)
    monkeypatch.undo()
    np.testing.assert_array_equal(_run_ones(out), expected_first)

    # Completed, the new model reads new data under the other name and the old file is gone.
    io.save_model(io.load_model(second), out, input_path=second)
    np.testing.assert_array_equal(_run_ones(out), expected_second)
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data.1"]
    # and the next replacement goes back to the first name
    io.save_model(io.load_model(first), out, input_path=first)
    np.testing.assert_array_equal(_run_ones(out), expected_first)
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
