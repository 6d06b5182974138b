"""Batch optimize / verify: a folder of models, each in its own process; one failure does not stop
the others, limits kill only their model, one summary (table, summary.json, summary.html), and the
exit code says whether any model failed."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.cli.main import main


def small_model(path, scale: float, op: str = "Relu") -> None:
    """y = op(x * scale + 0): the Add of a zero constant is something for optimize to remove."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    inits = [numpy_helper.from_array(np.full((2, 3), scale, np.float32), "s"),
             numpy_helper.from_array(np.zeros((2, 3), np.float32), "z")]
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "z"], ["a"]),
             helper.make_node(op, ["a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))


@pytest.fixture
def collection(tmp_path):
    root = tmp_path / "models"
    (root / "vision").mkdir(parents=True)
    small_model(root / "first.onnx", 2.0)
    small_model(root / "vision" / "second.onnx", -1.5)
    (root / "vision" / "broken.onnx").write_bytes(b"not a model")
    return root


def summary_of(folder) -> dict:
    data = json.loads((folder / "summary.json").read_text())
    assert (folder / "summary.html").read_text().startswith("<!doctype html>")
    return {row["model"].split("models/")[-1]: row for row in data["models"]}


def test_optimize_then_verify_a_folder(collection, tmp_path, capsys):
    out = tmp_path / "out"
    # The broken model fails; the other two are still optimized: exit 1.
    assert main(["optimize", str(collection), "--jobs", "2", "--out-dir", str(out), "--no-verify"]) == 1
    rows = summary_of(out)
    assert rows["broken.onnx" if "broken.onnx" in rows else "vision/broken.onnx"]["status"] == "failed"
    for name in ("first.onnx", "vision/second.onnx"):
        assert rows[name]["status"] == "ok" and rows[name]["nodes_after"] < rows[name]["nodes_before"]
    assert (out / "first.opt.onnx").is_file() and (out / "vision" / "second.opt.onnx").is_file()
    feeds = {"x": np.arange(-3, 3, dtype=np.float32).reshape(2, 3)}
    got = ort.InferenceSession(str(out / "vision" / "second.opt.onnx")).run(None, feeds)[0]
    np.testing.assert_array_equal(got, np.maximum(feeds["x"] * -1.5, 0))
    table = capsys.readouterr().out
    assert "3 models: 2 ok, 1 failed" in table

    # verify: each model against its candidate under --out-dir. Plant a wrong candidate (Abs
    # where Relu was): that model fails with a mismatch, the other passes.
    small_model(out / "vision" / "second.opt.onnx", -1.5, op="Abs")
    assert main(["verify", str(collection), "--out-dir", str(out), "--summary-dir", str(tmp_path / "v"),
                 "--trials", "1", "--no-localize"]) == 1
    rows = summary_of(tmp_path / "v")
    assert rows["first.onnx"]["status"] == "ok" and rows["first.onnx"]["verdict"] in ("exact", "rounding")
    assert rows["vision/second.onnx"]["status"] == "failed"
    assert rows["vision/second.onnx"]["verdict"] == "mismatch"
    assert rows["vision/broken.onnx"]["status"] == "missing"


def test_limits_stop_only_their_model(tmp_path):
    small_model(tmp_path / "a.onnx", 2.0)
    list_file = tmp_path / "models.txt"
    list_file.write_text("# one model\na.onnx\n")
    # No Python process starts and imports onnxruntime in 50 ms or in 20 MiB.
    for option, value, status in (("--time-limit", "0.05", "timeout"), ("--memory-limit", "20MiB", "memory")):
        folder = tmp_path / status
        assert main(["optimize", str(list_file), "--out-dir", str(folder), option, value]) == 1
        (row,) = summary_of(folder).values()
        assert row["status"] == status, row
    # Without a limit the same model succeeds: exit 0.
    assert main(["optimize", str(list_file), "--out-dir", str(tmp_path / "free"), "--no-verify"]) == 0


@pytest.mark.parametrize("extra, fragment", [
    (["-o", "x.onnx"], "use --out-dir"),
    (["--jobs", "2", "--ray", "local"], "give one of them"),
    (["--time-limit", "0"], "positive"),
    (["--memory-limit", "lots"], "--memory-limit: not a size"),  # a size, as --memory-budget takes
])
def test_batch_bad_input_is_one_line(collection, tmp_path, capsys, extra, fragment):
    assert main(["optimize", str(collection), "--out-dir", str(tmp_path / "o")] + extra) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.strip().count("\n") == 0, err


def test_batch_names_clashing_outputs_and_empty_folders(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "empty").mkdir()
    small_model(tmp_path / "a" / "m.onnx", 1.0)
    small_model(tmp_path / "b" / "m.onnx", 1.0)
    assert main(["optimize", str(tmp_path / "a" / "m.onnx"), str(tmp_path / "b" / "m.onnx"),
                 "--out-dir", str(tmp_path / "o")]) == 2
    assert "would both write" in capsys.readouterr().err
    assert main(["optimize", str(tmp_path / "empty"), "--out-dir", str(tmp_path / "o")]) == 2
    assert "no .onnx model" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "a" / "m.onnx")]) == 2
    assert "needs ORIGINAL and CANDIDATE" in capsys.readouterr().err
