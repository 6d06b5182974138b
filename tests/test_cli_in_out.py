"""`onnxrefine optimize IN OUT`, as onnxsim and onnxslim are called: the second path is the output
(also when it exists), never a second input; what could mean two things is a one-line error, and
batch mode needs a folder, a list file, a glob or --batch."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.cli.main import main


def _model(path, scale: float) -> None:
    """y = Relu(x * scale + 0): the Add of zero is removed by optimize."""
    inits = [numpy_helper.from_array(np.full((2, 3), scale, np.float32), "s"),
             numpy_helper.from_array(np.zeros((2, 3), np.float32), "z")]
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "z"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))


def _scale(path) -> float:
    model = onnx.load(str(path))
    return float(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "s")).flat[0])


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a batch run would leave its summary folder here
    _model(tmp_path / "in.onnx", 2.0)
    return tmp_path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("onnxrefine: error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("out_exists", [False, True])
def test_in_out_writes_the_output(folder, capsys, out_exists):
    before = (folder / "in.onnx").read_bytes()
    if out_exists:
        _model(folder / "out.onnx", 5.0)  # a stale model at OUT is replaced, not optimized as an input
    assert main(["optimize", "in.onnx", "out.onnx", "--no-verify"]) == 0
    out = onnx.load(str(folder / "out.onnx"))
    assert [n.op_type for n in out.graph.node] == ["Mul", "Relu"] and _scale(folder / "out.onnx") == 2.0
    assert (folder / "in.onnx").read_bytes() == before
    assert not (folder / "onnxrefine-optimize-batch").exists() and not (folder / "out.opt.onnx").exists()
    assert "wrote out.onnx" in capsys.readouterr().out


def test_output_given_twice_is_refused(folder, capsys):
    assert main(["optimize", "in.onnx", "out.onnx", "-o", "other.onnx", "--no-verify"]) == 2
    assert "the output is given twice" in _one_line_error(capsys)
    assert not (folder / "out.onnx").exists() and not (folder / "other.onnx").exists()


def test_three_paths_need_batch(folder, capsys):
    _model(folder / "b.onnx", 3.0)
    assert main(["optimize", "in.onnx", "b.onnx", "c.onnx", "--no-verify"]) == 2
    assert "give --batch" in _one_line_error(capsys)


def test_a_folder_after_a_model_is_ambiguous(folder, capsys):
    (folder / "outs").mkdir()
    assert main(["optimize", "in.onnx", "outs", "--no-verify"]) == 2
    err = _one_line_error(capsys)
    assert "outs is a folder" in err and "--out-dir" in err and "--batch" in err


def test_batch_flag_makes_two_paths_two_models(folder, capsys):
    _model(folder / "b.onnx", 3.0)
    assert main(["optimize", "in.onnx", "b.onnx", "--batch", "--no-verify"]) == 0
    assert _scale(folder / "in.opt.onnx") == 2.0 and _scale(folder / "b.opt.onnx") == 3.0
    assert (folder / "onnxrefine-optimize-batch" / "summary.json").is_file()


def test_a_quoted_glob_is_a_batch(folder, capsys):
    (folder / "zoo" / "deep").mkdir(parents=True)
    _model(folder / "zoo" / "a.onnx", 3.0)
    _model(folder / "zoo" / "deep" / "b.onnx", 4.0)
    assert main(["optimize", "zoo/**/*.onnx", "--no-verify"]) == 0
    assert _scale(folder / "zoo" / "a.opt.onnx") == 3.0 and _scale(folder / "zoo" / "deep" / "b.opt.onnx") == 4.0
    assert main(["optimize", "nothing/*.onnx", "--no-verify"]) == 2
    assert "no .onnx model matches" in _one_line_error(capsys)
