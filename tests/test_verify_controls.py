"""The original's perturbation controls run only where the rounding bound alone leaves a
difference unexplained (they can only add excuses); inf/NaN sets always get their cone run."""

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxrefine.verify.session as verify_package  # where the perturbation runs are called
from onnxrefine.verify import verify_models


def _matmul_pair():
    rng = np.random.default_rng(3)
    b, c = rng.standard_normal((2, 8, 8)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])

    def model(nodes, inits):
        graph = helper.make_graph(nodes, "g", [x], [y], [onnx.numpy_helper.from_array(a, n) for n, a in inits])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    original = model([helper.make_node("MatMul", ["x", "B"], ["t"]), helper.make_node("MatMul", ["t", "C"], ["y"])],
                     [("B", b), ("C", c)])
    folded = model([helper.make_node("MatMul", ["x", "BC"], ["y"])], [("BC", (b.astype(np.float64) @ c).astype(np.float32))])
    return original, folded, rng


def _spy(monkeypatch):
    calls = []
    real = verify_package.add_perturbation_runs

    def spy(track, original_file, labelled, indices, *rest):
        calls.append([labelled[i][0] for i in indices])
        return real(track, original_file, labelled, indices, *rest)

    monkeypatch.setattr(verify_package, "add_perturbation_runs", spy)
    return calls


def test_rounding_explained_by_the_bound_runs_no_controls(monkeypatch):
    original, folded, rng = _matmul_pair()
    calls = _spy(monkeypatch)
    report = verify_models(original, folded, inputs=[{"x": rng.standard_normal((4, 8)).astype(np.float32)}],
                           deployment=None)
    assert report.verdict == "rounding"
    assert calls == []


def test_inf_sets_and_real_changes_get_controls(monkeypatch):
    original, folded, rng = _matmul_pair()
    calls = _spy(monkeypatch)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    x[0, 1] = np.inf
    verify_models(original, folded, inputs=[{"x": x}], deployment=None)
    assert calls == [["given0"]]  # the cone run for the inf set
    calls.clear()
    broken = onnx.ModelProto()
    broken.CopyFrom(folded)
    weights = onnx.numpy_helper.to_array(broken.graph.initializer[0]) * np.float32(1.01)
    broken.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(weights, "BC"))
    report = verify_models(original, broken, inputs=[{"x": rng.standard_normal((4, 8)).astype(np.float32)}],
                           deployment=None)
    assert report.verdict == "mismatch"
    assert calls == [["given0"]]  # unexplained: the controls ran before the verdict
