"""Never write a model that does not load: every node keeps its outputs as given (a function
call's trailing "" included), and the written file is checked (onnx's checker, an onnxruntime
session) before the run reports success."""

from __future__ import annotations

import numpy as np
import onnx
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


def test_a_written_model_that_does_not_load_is_an_error_and_removed(tmp_path, capsys, monkeypatch):
    # The writer's old fault, planted back: trailing "" outputs dropped. The run must fail (exit 2,
    # one line), leave no output, and never print a verdict.
    from onnxrefine.ir import wire

    monkeypatch.setattr(wire, "_restore_trailing_outputs", lambda graph, node_protos: None)
    source, output = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_call_with_a_trailing_unread_output(), source)
    assert main(["optimize", str(source), "-o", str(output)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "the optimized model does not load (onnxruntime: " in line and "it was removed" in line
    assert not output.exists() and "exact" not in captured.out


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
    io.check_written(output, input_path=source)
    assert output.exists()
