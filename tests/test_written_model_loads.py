"""Never write a model that does not load: every node keeps its outputs as given (a function
call's trailing "" included), and the written file is checked (onnx's checker, an onnxruntime
session) before the run reports success."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import run, session
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.cli.main import main


def _call_with_a_trailing_unread_output() -> onnx.ModelProto:
    body = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])]
    function = helper.make_function("local", "F", ["x"], ["y", "z"], body, [helper.make_opsetid("", 17)])
    call = helper.make_node("F", ["X"], ["Y", ""], domain="local")
    graph = helper.make_graph([call], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[function])
    model.ir_version = 8
    return model


def test_a_function_call_keeps_its_trailing_empty_output_through_the_api():
    model = _call_with_a_trailing_unread_output()
    optimized = onnxrefine.optimize(model)
    assert list(optimized.graph.node[0].output) == ["Y", ""]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(run(optimized, {"X": x})[0], run(model, {"X": x})[0])


def test_a_function_call_keeps_its_trailing_empty_output_in_the_written_file(tmp_path, capsys):
    source, output = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_call_with_a_trailing_unread_output(), source)
    assert main(["optimize", str(source), "-o", str(output)]) == 0
    written = onnx.load(output)
    assert list(written.graph.node[0].output) == ["Y", ""]
    session(written)  # loads in onnxruntime
    assert "exact (unchanged: no rewrite applied)" in capsys.readouterr().out


def test_a_written_model_that_does_not_load_is_an_error_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    # The writer's old fault, planted back: trailing "" outputs dropped. The run must fail (exit 3,
    # onnxrefine's own fault, one line), replace nothing, and never print a verdict.
    from onnxrefine.ir import wire

    monkeypatch.setattr(wire, "_restore_trailing_outputs", lambda graph, node_protos: None)
    source, output = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_call_with_a_trailing_unread_output(), source)
    output.write_bytes(b"the previous output")
    assert main(["optimize", str(source), "-o", str(output), "--report", str(tmp_path / "r.json")]) == 3
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "the optimized model does not load (onnxruntime: " in line and "nothing written" in line
    assert output.read_bytes() == b"the previous output" and not (tmp_path / "r.json").exists()
    assert "exact" not in captured.out and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


def test_a_check_the_input_fails_too_does_not_count_against_the_output(tmp_path):
    from onnxrefine.ir import io

    # An output without a shape: onnx's checker refuses input and output alike.
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    source, output = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    onnx.save(model, output)
    io.check_loads(output, input_path=source)
    with pytest.raises(io.WrittenModelInvalid, match="onnx's checker"):
        io.check_loads(output)


def test_a_model_with_external_data_is_checked_with_its_staged_data_file(tmp_path):
    from helpers import make_model, tensor, value_info

    weight = np.arange(512, dtype=np.float32)
    model = make_model([helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Add", ["t", "w"], ["y"])],
                       [value_info("x", shape=[512])], [value_info("y", shape=[512])], [tensor("w", weight)])
    source, output = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    assert main(["optimize", str(source), "-o", str(output), "--no-verify", "--external-data", "w.bin"]) == 0
    assert (tmp_path / "w.bin").stat().st_size >= weight.nbytes
    x = np.ones(512, np.float32)
    np.testing.assert_array_equal(run(onnx.load(output), {"x": x})[0], x + weight)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch folder left
