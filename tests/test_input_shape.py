"""--input-shape / input_shapes=: fixing symbolic input dims lets shape arithmetic fold; the
result computes what the dynamic original computes at those shapes; bad names/dims are one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine import optimize
from onnxrefine.api import optimize_with_report
from onnxrefine.errors import BadInputError
from onnxrefine.input_shapes import parse_input_shape, parse_input_shapes
from onnxrefine.verified import VerifySettings


def dynamic_model() -> onnx.ModelProto:
    """x [batch, 3, h, w], y [batch, 4]. A YOLO-style Shape->Gather->Div->Mul chain reads h; the
    two inputs meet in an Add that only runs when their batch sizes agree (no broadcasting)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "two"], ["h"], axis=0),
        helper.make_node("Div", ["h", "two"], ["half"]),
        helper.make_node("Mul", ["half", "three"], ["scaled"]),
        helper.make_node("Cast", ["scaled"], ["scaled_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Unsqueeze", ["m", "one_axis"], ["m2"]),
        helper.make_node("Mul", ["m2", "scaled_f"], ["z"]),
        helper.make_node("Expand", ["z", "four_cols"], ["zz"]),
        helper.make_node("Add", ["zz", "y"], ["out"]),
    ]
    inits = [tensor("two", np.array(2, np.int64)), tensor("three", np.array(3, np.int64)),
             tensor("one_axis", np.array([1], np.int64)),
             tensor("four_cols", np.array([1, 4], np.int64))]
    return make_model(nodes, [value_info("x", shape=["batch", 3, "h", "w"]), value_info("y", shape=["batch", 4])],
                      [value_info("out", shape=None)], inits)


def feeds(batch=3, h=8, w=6, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 3, h, w)).astype(np.float32),
            "y": rng.standard_normal((batch, 4)).astype(np.float32)}


def run_at(model, inputs, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def test_parse_input_shape():
    assert parse_input_shape("x:1,3,224,224") == ("x", [1, 3, 224, 224])
    assert parse_input_shape("input:0:2,5") == ("input:0", [2, 5])  # TF-style names keep their ':'
    assert parse_input_shape("scalar:") == ("scalar", [])
    for bad, fragment in [("x", "expected NAME:DIMS"), (":1,2", "expected NAME:DIMS"), ("x:1,a", "'a'"),
                          ("x:1,0", "positive"), ("x:-1", "positive"), ("x:1,,2", "''")]:
        with pytest.raises(BadInputError, match=fragment):
            parse_input_shape(bad)
    with pytest.raises(BadInputError, match="given twice"):
        parse_input_shapes(["x:1", "x:2"])


def test_fixed_shapes_fold_the_shape_chain_and_keep_the_outputs():
    original = dynamic_model()
    plain = optimize(original)
    fixed, report = optimize_with_report(original, input_shapes={"x": [3, 3, 8, 6], "y": [3, 4]})
    # The chain Shape->Gather->Div->Mul->Cast folds to one constant only with the shape fixed.
    assert {"Shape", "Gather", "Div"} <= {n.op_type for n in plain.graph.node}
    assert not {"Shape", "Gather", "Div", "Cast"} & {n.op_type for n in fixed.graph.node}
    assert len(fixed.graph.node) < len(plain.graph.node)
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in fixed.graph.input]
    assert dims == [[3, 3, 8, 6], [3, 4]]
    assert report.input_shapes["fixed"][0] == {"input": "x", "before": "[batch, 3, h, w]", "after": [3, 3, 8, 6]}
    assert report.input_shapes["folded"].get("fold_shapes", 0) >= 1
    assert report.to_dict()["input_shapes"] == report.input_shapes
    for seed in range(3):
        inputs = feeds(seed=seed)
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            expected = run_at(original, inputs, level)
            np.testing.assert_array_equal(run_at(fixed, inputs, level)[0], expected[0])
    with pytest.raises(Exception):  # the fixed model accepts only the fixed shapes
        run(fixed, feeds(batch=2))


def test_verified_optimize_runs_at_the_fixed_shapes():
    """Verification compares against the original at the fixed shapes; the other input sharing
    the fixed dim name 'batch' gets the same size (else the original itself could not run)."""
    original = dynamic_model()
    fixed, report = optimize_with_report(original, input_shapes={"x": [3, 3, 8, 6]},
                                         verify=VerifySettings(enabled=True))
    assert report.verification["status"] == "verified", report.verification
    assert report.verification["verdict"] == "exact"
    assert not report.rolled_back
    assert "Shape" not in {n.op_type for n in fixed.graph.node}
    np.testing.assert_array_equal(run(fixed, feeds())[0], run(original, feeds())[0])


@pytest.mark.parametrize("shapes, fragment", [
    ({"nope": [1]}, "'nope' is not an input of the model (inputs: x, y)"),
    ({"two": [1]}, "'two' is not an input"),  # an initializer is not fed
    ({"x": [3, 3, 8]}, "'x' has rank 4 [batch, 3, h, w], got 3 dims"),
    ({"x": [3, 4, 8, 6]}, "'x' axis 1 is fixed at 3 in the model, got 4"),
    ({"x": [3, 3, 8, 6], "y": [2, 4]}, "dim 'batch' is 3 for 'x' but 2 for 'y'"),
    ({"x": [3, 3, 0, 6]}, "positive"),
    ({"x": "1,3,8,6"}, "list of integers"),
    ({"x": [3, 3, 8.5, 6]}, "not an integer"),
])
def test_api_rejects_bad_shapes_before_any_work(shapes, fragment):
    with pytest.raises(BadInputError) as caught:
        optimize(dynamic_model(), input_shapes=shapes)
    assert fragment in str(caught.value)


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxrefine", *map(str, args)], capture_output=True,
                          text=True, timeout=180)


def assert_one_line_error(result, fragment):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert fragment in lines[0], lines[0]


def test_cli_optimize_and_verify_with_input_shape(tmp_path):
    source, out, report = tmp_path / "m.onnx", tmp_path / "m.opt.onnx", tmp_path / "r.json"
    onnx.save(dynamic_model(), source)
    result = cli("optimize", source, "-o", out, "--input-shape", "x:3,3,8,6", "--input-shape", "y:3,4",
                 "--report", report)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "input shapes fixed: x [batch, 3, h, w] -> [3, 3, 8, 6]; y [batch, 4] -> [3, 4]" in text
    assert re.search(r"then folded \(rewrites\): .*fold_shapes [1-9]", text), text
    assert json.loads(report.read_text())["input_shapes"]["fixed"][1]["input"] == "y"
    # verify: the fixed candidate against the dynamic original, at the fixed shapes.
    result = cli("verify", source, out, "--input-shape", "x:3,3,8,6", "--no-localize")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == "verdict: exact"
    # Without the override the generated inputs (dims 2) do not fit the fixed candidate.
    result = cli("verify", source, out, "--no-localize")
    assert result.returncode == 1
    assert result.stdout.strip().splitlines()[-1] == "verdict: mismatch"


@pytest.mark.parametrize("command", ["optimize", "verify"])
@pytest.mark.parametrize("option, fragment", [
    ("z:1,2", "'z' is not an input of the model"),
    ("x:1,2", "'x' has rank 4"),
    ("x:1,3,a,4", "dim 'a' is not an integer"),
    ("x", "expected NAME:DIMS"),
])
def test_cli_bad_input_shape_is_one_line_exit_2(tmp_path, command, option, fragment):
    source = tmp_path / "m.onnx"
    onnx.save(dynamic_model(), source)
    args = [source, "-o", tmp_path / "o.onnx"] if command == "optimize" else [source, source]
    result = cli(command, *args, "--input-shape", option)
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "o.onnx").exists()
