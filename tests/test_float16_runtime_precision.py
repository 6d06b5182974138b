"""Float16 graphs where onnxruntime, not the rewrite, moves the answer (verify/judge/spec_identity.py).

onnxruntime computes float16 Exp and Log in float32 and drops the float16 rounding between them
when one Unsqueeze separates them, but not when two do; fusing the two Unsqueezes (an exact
rewrite) then changes what onnxruntime returns. Fuzz case 3969 of seed 20000 was filed as a
mismatch of fuse_consecutive_unsqueezes for this."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify import verify_models
from onnxrefine.verify.judge.spec_identity import rounding_fully_modelled

X = np.array([1e-4, -2e-4, 3e-4, 2e-4], np.float16)   # exp(x) rounds to 1.0 in float16


def exp_log(unsqueezes: int, *, bump: float = 0.0, float32_arith: bool = False, abs_before_log: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("Exp", ["x"], ["e"])]
    inits = []
    previous = "e"
    if unsqueezes == 1:
        inits.append(numpy_helper.from_array(np.array([0, 1], np.int64), "axes0"))
        nodes.append(helper.make_node("Unsqueeze", ["e", "axes0"], ["u0"]))
        previous = "u0"
    else:
        for index in range(unsqueezes):
            inits.append(numpy_helper.from_array(np.array([0], np.int64), f"axes{index}"))
            nodes.append(helper.make_node("Unsqueeze", [previous, f"axes{index}"], [f"u{index}"]))
            previous = f"u{index}"
    if bump:   # a real bug: a constant added that the original does not have
        inits.append(numpy_helper.from_array(np.array(bump, np.float16), "bump"))
        nodes.append(helper.make_node("Add", [previous, "bump"], ["bumped"]))
        previous = "bumped"
    if abs_before_log:   # as in the fuzz case: the rounding goes missing inside, not at an output
        nodes.append(helper.make_node("Abs", [previous], ["a"]))
        previous = "a"
    nodes.append(helper.make_node("Log", [previous], ["l"]))
    inits.append(numpy_helper.from_array(np.array([4], np.int64), "shape"))
    nodes.append(helper.make_node("Reshape", ["l", "shape"], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])]
    if float32_arith:   # a float32 value computed by arithmetic: the reference would not round it
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [4]))
        nodes.append(helper.make_node("Mul", ["z", "z"], ["z2"]))
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4]),
                   helper.make_tensor_value_info("z2", TensorProto.FLOAT, [4])]
    else:
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], feeds)[0]


def test_onnxruntime_drops_a_float16_rounding_after_the_exact_fusion():
    # The premise: if onnxruntime stops doing this, the tests below test nothing.
    assert np.all(_ort(exp_log(2), {"x": X}) == 0)
    assert np.all(_ort(exp_log(1), {"x": X}) != 0)


def test_fused_unsqueezes_are_not_a_mismatch():
    report = verify_models(exp_log(2), exp_log(1), inputs={"x": X}, deployment=None)
    assert report.verdict == "unstable", report.to_dict()
    out = report.outputs[0]
    assert out.verdict == "unstable" and any("float16 precision of onnxruntime" in n for n in out.notes)


def test_a_real_change_in_a_float16_graph_stays_a_mismatch():
    # 1 ulp of float16 at 1.0 added before Log: the spec says the values differ, so no excuse.
    report = verify_models(exp_log(2), exp_log(1, bump=float(np.float16(2.0 ** -10))), inputs={"x": X},
                           deployment=None)
    assert report.verdict == "mismatch"
    assert not any("float16 precision of onnxruntime" in n for n in report.outputs[0].notes)


def test_float32_arithmetic_anywhere_disables_the_excuse():
    assert rounding_fully_modelled(exp_log(2)) and rounding_fully_modelled(exp_log(1))
    assert not rounding_fully_modelled(exp_log(2, float32_arith=True))
    feeds = {"x": X, "z": np.ones(4, np.float32)}
    report = verify_models(exp_log(2, float32_arith=True), exp_log(1, float32_arith=True), inputs=feeds,
                           deployment=None)
    assert report.verdict == "mismatch"


def test_a_value_inside_the_graph_is_excused_the_same_way():
    # With Abs between the Unsqueezes and Log the rounding goes missing inside the graph, and
    # localisation, not the output check, is what judged the value `l` a mismatch.
    original, candidate = exp_log(2, abs_before_log=True), exp_log(1, abs_before_log=True)
    report = verify_models(original, candidate, inputs={"x": X}, deployment=None)
    assert report.verdict == "unstable"
    value = next(v for v in report.localisation["values"] if v["name"] == "l")
    assert value["verdict"] == "unstable" and "float16 precision of onnxruntime" in value["runtime_artefact"]
    bug = verify_models(original, exp_log(1, bump=float(np.float16(2.0 ** -10)), abs_before_log=True),
                        inputs={"x": X}, deployment=None)
    assert bug.verdict == "mismatch"
