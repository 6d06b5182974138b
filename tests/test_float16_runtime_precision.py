"""Float16 graphs where onnxruntime, not the rewrite, moves the answer (verify/judge/spec_identity.py).

onnxruntime computes float16 Exp and Log in float32 and drops the float16 rounding between them
when one Unsqueeze separates them, but not when two do; fusing the two Unsqueezes (an exact
rewrite) then changes what onnxruntime returns. Fuzz case 3969 of seed 20000 was filed as a
mismatch of fuse_consecutive_unsqueezes for this."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify import verify_models
from onnxrefine.verify.judge.spec_identity import SpecIdentity

X = np.array([1e-4, -2e-4, 3e-4, 2e-4], np.float16)   # exp(x) rounds to 1.0 in float16


def exp_log(unsqueezes: int, *, bump: float = 0.0, float32_arith: bool = False, abs_before_log: bool = False,
            float32_prefix: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("Exp", ["x"], ["e"])]
    inits = []
    if float32_prefix:   # x computed in float32 by the same nodes in both models, then rounded to float16
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
        nodes[:0] = [helper.make_node("Mul", ["x32", "half"], ["h"]), helper.make_node("Cast", ["h"], ["x"], to=10)]
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
    inputs = [helper.make_tensor_value_info("x32", TensorProto.FLOAT, [4]) if float32_prefix
              else helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])]
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


def test_float32_arithmetic_off_the_path_leaves_the_excuse():
    # z * z is computed in float32, but y does not depend on it: the reference models all of y
    assert SpecIdentity(exp_log(2, float32_arith=True), exp_log(1, float32_arith=True)).applies("y", "y")
    assert not SpecIdentity(exp_log(2, float32_arith=True), exp_log(1, float32_arith=True)).applies("z2", "z2")
    feeds = {"x": X, "z": np.ones(4, np.float32)}
    report = verify_models(exp_log(2, float32_arith=True), exp_log(1, float32_arith=True), inputs=feeds,
                           deployment=None)
    assert report.verdict == "unstable", report.to_dict()


def test_a_float32_prefix_both_models_share_leaves_the_excuse():
    # as in fuzz case 26320 of seed 1400000 (a float32 Gemm, cast to float16, before the fused ops)
    feeds = {"x32": (2 * X).astype(np.float32)}
    report = verify_models(exp_log(2, float32_prefix=True), exp_log(1, float32_prefix=True), inputs=feeds,
                           deployment=None)
    assert report.verdict == "unstable", report.to_dict()
    bug = verify_models(exp_log(2, float32_prefix=True), exp_log(1, bump=float(np.float16(2.0 ** -10)),
                                                                 float32_prefix=True), inputs=feeds, deployment=None)
    assert bug.verdict == "mismatch"


def _scaled(factors, *, in_branch: bool = False) -> onnx.ModelProto:
    # y = float16(z * f0 * f1 * ...), computed in float32; in_branch: inside a constant If's branch
    inits = [numpy_helper.from_array(np.array(f, np.float32), f"f{i}") for i, f in enumerate(factors)]
    nodes, current = [], "z"
    for index in range(len(factors)):
        nodes.append(helper.make_node("Mul", [current, f"f{index}"], [f"m{index}"]))
        current = f"m{index}"
    nodes.append(helper.make_node("Cast", [current], ["y" if not in_branch else "b"], to=10))
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])]
    if in_branch:
        branch = helper.make_graph(nodes, "then", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT16, [4])])
        other = helper.make_graph([helper.make_node("Cast", ["z"], ["e"], to=10)], "else", [],
                                  [helper.make_tensor_value_info("e", TensorProto.FLOAT16, [4])])
        inits.append(numpy_helper.from_array(np.array(True), "cond"))
        nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])], out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_float32_reassociation_that_overflows_stays_a_mismatch():
    # z * 2^-20 rewritten as z * 2^100 * 2^-120: float32 overflows at z = 2^30 (inf where the original
    # gives 1024), while the reference's real arithmetic gives both the same value. A float32 node on
    # the path that the rewrite changed leaves the difference unexplained; in a branch as in the graph.
    feeds = {"z": np.array([2.0 ** 30, 1.0, 2.0, 3.0], np.float32)}
    for in_branch in (False, True):
        original, candidate = _scaled([2.0 ** -20], in_branch=in_branch), _scaled([2.0 ** 100, 2.0 ** -120], in_branch=in_branch)
        assert not SpecIdentity(original, candidate).applies("y", "y")
        report = verify_models(original, candidate, inputs=feeds, deployment=None)
        assert report.verdict == "mismatch", (in_branch, report.to_dict()["outputs"][0]["notes"])


@pytest.mark.parametrize("index, step", [(10707, "eliminate_if_with_const_cond"),
                                         (26320, "fuse_consecutive_log_softmax"),
                                         (24768, "eliminate_nop_split")])
def test_campaign_cases_where_onnxruntime_skips_a_float16_rounding_are_not_mismatches(index, step):
    # fuzz campaign of seed 1400000: an inlined If branch (Sqrt of a product onnxruntime leaves unrounded,
    # NaN where float16 gives -0), LogSoftmax of a float32 Gemm cast to float16, and an ArgMax over an Exp
    # that overflows float16 (a tie of infinities) but not the float32 onnxruntime computes in
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    seed = 1400000 + index
    case = generate_model(seed, max_nodes=20, opset=18, target=step)
    candidate = onnxrefine.optimize(case.model, [step])
    report = verify_models(case.model, candidate, seed=seed, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict == "unstable", report.to_dict()["outputs"]
    assert any(SpecIdentity.NOTE in note for out in report.outputs for note in out.notes)


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


def _squeezed(axes_lists) -> onnx.ModelProto:
    # x[3] unsqueezed to [1, 1, 3, 1, 1], then Squeezes of the given axes, then Abs (float16)
    inits = [numpy_helper.from_array(np.array([0, 1, 3, 4], np.int64), "u")]
    nodes, current = [helper.make_node("Unsqueeze", ["x", "u"], ["x5"])], "x5"
    for index, axes in enumerate(axes_lists):
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"a{index}"))
        nodes.append(helper.make_node("Squeeze", [current, f"a{index}"], [f"s{index}"]))
        current = f"s{index}"
    nodes.append(helper.make_node("Abs", [current], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_value_of_another_shape_is_no_precision_departure():
    # onnxoptimizer's fuse_consecutive_squeezes (fuzz case 995 of seed 1300000) merged [4, 3, -4] and
    # [-2] into [-4, -1, 3, 4], an axis named twice: onnxruntime squeezes three axes and gives [1, 3]
    # where the original gives [3], while the reference, which reads the duplicate its own way, gives
    # both models the same values. A rounding moves values, never a shape: mismatch.
    original, candidate = _squeezed([[4, 3, -4], [-2]]), _squeezed([[-4, -1, 3, 4]])
    feeds = {"x": np.array([1.5, -2.0, 3.0], np.float16)}
    assert _ort(candidate, feeds).shape == (1, 3)
    report = verify_models(original, candidate, inputs=feeds, deployment=None)
    assert report.verdict == "mismatch", report.to_dict()["outputs"][0]["notes"]
    assert not any(SpecIdentity.NOTE in note for note in report.outputs[0].notes)


def _log_softmax64(fused: bool) -> onnx.ModelProto:
    # a float64 Log(Softmax), fused or not, beside a float16 output
    tail = [helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)] if fused else \
        [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("Log", ["s"], ["y"])]
    graph = helper.make_graph(tail + [helper.make_node("Abs", ["h"], ["g"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 4]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT16, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 4]),
                               helper.make_tensor_value_info("g", TensorProto.FLOAT16, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_value_with_no_float16_behind_it_is_no_float16_precision():
    # onnxoptimizer's fuse_consecutive_log_softmax on float64 (fuzz case 1188 of seed 1300000):
    # onnxruntime's float64 LogSoftmax gives finite values in a row holding a NaN after its first
    # element, where the spec (and the original) give NaN. The graph computes float16 elsewhere, but
    # nothing float16 lies behind y: not onnxruntime's float16 precision, a mismatch.
    feeds = {"x": np.array([[0.5, np.nan, 1.0, 2.0]]), "h": np.ones(4, np.float16)}
    session = ort.InferenceSession(_log_softmax64(True).SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.isfinite(session.run(["y"], feeds)[0]).any()  # the premise
    assert not SpecIdentity(_log_softmax64(False), _log_softmax64(True)).applies("y", "y")
    report = verify_models(_log_softmax64(False), _log_softmax64(True), inputs=feeds, deployment=None)
    assert report.verdict == "mismatch", report.to_dict()["outputs"]
