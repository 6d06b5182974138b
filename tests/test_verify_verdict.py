"""Verdicts of verify_models on hand-built original/candidate pairs.

Every verdict test runs twice: with the float64 reference (when the evaluator is importable) and
with a reference that declines every model (session.DECLINING_REFERENCE, injected through
run_settings), which exercises the documented fallback.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import make_model, tensor, value_info
from onnxrefine.verify import EXACT, MISMATCH, ROUNDING, UNSTABLE, run_settings, verify_models
from onnxrefine.verify.session import DECLINING_REFERENCE
from onnxrefine.verify.judge.verdict import RoundingBound, SetEvidence, judge_output


@pytest.fixture(params=["float64", "fallback"])
def reference_mode(request):
    if request.param == "fallback":
        with run_settings(reference=DECLINING_REFERENCE):
            yield request.param
        return
    try:
        import onnxrefine.verify.reference.evaluator  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"float64 reference not importable: {exc}")
    yield request.param


# ---------------------------------------------------------------------------------------------
# (a) Conv + BatchNormalization, folded in float32: rounding


def _conv_bn_models(mode: str, *, eps: float = 1e-5, small_variance: bool = False, seed: int = 0):
    """A multi-output graph around Conv+BN; mode: "original", "fold" or "fold_without_epsilon"."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    shift = rng.standard_normal(4).astype(np.float32)
    mean = rng.standard_normal(4).astype(np.float32)
    var = (rng.uniform(0.01, 0.05, 4) if small_variance else rng.uniform(0.5, 2.0, 4)).astype(np.float32)
    matrix = rng.standard_normal((3, 5)).astype(np.float32)
    shared = [
        helper.make_node("Relu", ["bn"], ["relu_out"]),
        helper.make_node("GlobalAveragePool", ["bn"], ["pool_out"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["xt", "M"], ["mm_out"]),
        helper.make_node("Sigmoid", ["x"], ["sig_out"]),
        helper.make_node("Shape", ["x"], ["shape_out"]),
    ]
    inits = [tensor("M", matrix)]
    if mode == "original":
        nodes = [helper.make_node("Conv", ["x", "W", "B"], ["conv"], pads=[1, 1, 1, 1]),
                 helper.make_node("BatchNormalization", ["conv", "scale", "shift", "mean", "var"],
                                  ["bn"], epsilon=eps)]
        inits += [tensor("W", weight), tensor("B", bias), tensor("scale", scale), tensor("shift", shift),
                  tensor("mean", mean), tensor("var", var)]
    else:
        denominator = var if mode == "fold_without_epsilon" else var + np.float32(eps)
        factor = (scale / np.sqrt(denominator, dtype=np.float32)).astype(np.float32)
        folded_weight = (weight * factor[:, None, None, None]).astype(np.float32)
        folded_bias = ((bias - mean) * factor + shift).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "W", "B"], ["bn"], pads=[1, 1, 1, 1])]
        inits += [tensor("W", folded_weight), tensor("B", folded_bias)]
    outputs = [value_info(name, TensorProto.FLOAT, None)
               for name in ("relu_out", "pool_out", "mm_out", "sig_out")]
    outputs.append(value_info("shape_out", TensorProto.INT64, None))
    return make_model(nodes + shared, [value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])], outputs, inits)


def test_conv_bn_fold_in_float32_is_rounding(reference_mode):
    report = verify_models(_conv_bn_models("original"), _conv_bn_models("fold"), seed=0)
    verdicts = {out.name: out.verdict for out in report.outputs}
    assert report.verdict == ROUNDING, report.to_dict()
    assert verdicts["relu_out"] == ROUNDING and verdicts["pool_out"] == ROUNDING
    assert verdicts["mm_out"] == EXACT and verdicts["sig_out"] == EXACT and verdicts["shape_out"] == EXACT
    relu = next(out for out in report.outputs if out.name == "relu_out")
    assert 0 < relu.comparison["max_abs"] < 1e-4
    assert report.exit_code == 0
    expected_reference = "float64" if reference_mode == "float64" else "no float64 reference"
    assert relu.reference == expected_reference
    if reference_mode == "float64":
        assert relu.orig_err_max is not None and relu.cand_err_max is not None
        assert len(relu.scatter["ref"]) > 0


def test_html_report_is_self_contained_with_a_scatter_plot(tmp_path, reference_mode):
    report = verify_models(_conv_bn_models("original"), _conv_bn_models("fold"), trials=1, stress=False)
    path = tmp_path / "report.html"
    report.write_html(path)
    page = path.read_text()
    assert "<table" in page and "relu_out" in page
    assert "<link" not in page and "<script src" not in page
    if reference_mode == "float64":
        assert page.count("<svg") >= 2 and "<circle" in page
    else:
        assert "no float64 reference" in page


# ---------------------------------------------------------------------------------------------
# (b) real bugs: mismatch


def test_fold_without_epsilon_is_mismatch(reference_mode):
    original = _conv_bn_models("original", eps=1e-2, small_variance=True)
    candidate = _conv_bn_models("fold_without_epsilon", eps=1e-2, small_variance=True)
    report = verify_models(original, candidate)
    assert report.verdict == MISMATCH
    assert report.exit_code == 1
    assert {out.name for out in report.outputs if out.verdict == MISMATCH} == {"relu_out", "pool_out"}


def _transpose_pair(perm_first, perm_second=None, composed=None, shape=(3, 3, 3)):
    if composed is None:
        nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm_first),
                 helper.make_node("Transpose", ["t"], ["y"], perm=perm_second)]
    else:
        nodes = [helper.make_node("Transpose", ["x"], ["y"], perm=composed)]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, list(shape))],
                      [value_info("y", TensorProto.FLOAT, None)])


def test_transpose_pair_composed_the_wrong_way_is_mismatch(reference_mode):
    first, second = [1, 2, 0], [0, 2, 1]
    right = [first[axis] for axis in second]   # y = x.transpose(first).transpose(second)
    wrong = [second[axis] for axis in first]
    assert right != wrong
    x = np.random.default_rng(0).standard_normal((3, 3, 3)).astype(np.float32)
    assert np.array_equal(x.transpose(first).transpose(second), x.transpose(right))
    original = _transpose_pair(first, second)
    assert verify_models(original, _transpose_pair(None, composed=right)).verdict == EXACT
    report = verify_models(original, _transpose_pair(None, composed=wrong))
    assert report.verdict == MISMATCH
    # with distinct dims the wrong composition even changes the output shape
    report = verify_models(_transpose_pair(first, second, shape=(2, 3, 4)),
                           _transpose_pair(None, composed=wrong, shape=(2, 3, 4)))
    assert report.verdict == MISMATCH
    assert "shape" in " ".join(report.outputs[0].notes) or report.outputs[0].candidate_shape != report.outputs[0].shape


def test_zero_pad_folded_into_maxpool_is_mismatch_on_negative_inputs(reference_mode):
    x_info = [value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model(
        [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
         helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3])],
        x_info, y_info, [tensor("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    candidate = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                           x_info, y_info)
    negative = {"x": -np.abs(np.random.default_rng(0).standard_normal((1, 2, 5, 5))).astype(np.float32) - 0.1}
    assert verify_models(original, candidate, inputs=negative).verdict == MISMATCH
    # generated inputs include a negative stress set, so the bug is found without help
    assert verify_models(original, candidate).verdict == MISMATCH
    positive = {"x": np.abs(negative["x"])}
    assert verify_models(original, candidate, inputs=positive).verdict == EXACT


def test_reshape_pair_collapsed_with_zero_dim_is_mismatch():
    x_info = [value_info("x", TensorProto.FLOAT, [2, 12])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model(
        [helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Reshape", ["r", "s2"], ["y"])],
        x_info, y_info, [tensor("s1", np.array([6, 4], np.int64)), tensor("s2", np.array([0, -1], np.int64))])
    candidate = make_model([helper.make_node("Reshape", ["x", "s2"], ["y"])], x_info, y_info,
                           [tensor("s2", np.array([0, -1], np.int64))])
    report = verify_models(original, candidate)
    assert report.verdict == MISMATCH
    out = report.outputs[0]
    assert out.shape == [6, 4] and out.candidate_shape == [2, 12]


def test_scale_error_of_1e_minus_3_is_caught(reference_mode):
    weight = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    x_info = [value_info("x", TensorProto.FLOAT, [4, 8])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])], x_info, y_info, [tensor("W", weight)])
    scaled = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])], x_info, y_info,
                        [tensor("W", (weight * np.float32(1.001)).astype(np.float32))])
    assert verify_models(original, scaled).verdict == MISMATCH


# ---------------------------------------------------------------------------------------------
# (c) structural rewrites: exact


def test_identity_removal_is_exact():
    x_info = [value_info("x", TensorProto.FLOAT, [2, 3])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model([helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])],
                          x_info, y_info)
    candidate = make_model([helper.make_node("Relu", ["x"], ["y"])], x_info, y_info)
    report = verify_models(original, candidate)
    assert report.verdict == EXACT and report.exit_code == 0
    assert report.outputs[0].reference == "not needed"


def test_cancelled_transpose_pair_is_exact():
    x_info = [value_info("x", TensorProto.FLOAT, [2, 3, 4])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model([helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
                           helper.make_node("Transpose", ["t"], ["u"], perm=[1, 2, 0]),
                           helper.make_node("Tanh", ["u"], ["y"])], x_info, y_info)
    candidate = make_model([helper.make_node("Tanh", ["x"], ["y"])], x_info, y_info)
    assert verify_models(original, candidate).verdict == EXACT


# ---------------------------------------------------------------------------------------------
# (d) ArgMax on a one-ulp tie: unstable, not mismatch


def _argmax_models():
    x_info = [value_info("x", TensorProto.FLOAT, [1, 6])]
    y_info = [value_info("y", TensorProto.INT64, None)]
    third = np.float32(1.0) / np.float32(3.0)
    original = make_model(
        [helper.make_node("Mul", ["x", "three"], ["a"]), helper.make_node("Mul", ["a", "third"], ["b"]),
         helper.make_node("ArgMax", ["b"], ["y"], axis=1, keepdims=0)],
        x_info, y_info, [tensor("three", np.float32(3.0)), tensor("third", third)])
    # x * 3 * (1/3) == x in exact arithmetic: an algebraic simplification, rounding-only
    candidate = make_model([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], x_info, y_info)
    return original, candidate, third


def _one_ulp_tie_input(third):
    """A row whose top two values are one ulp apart and where x*3*(1/3) changes the argmax."""
    rng = np.random.default_rng(0)
    for _ in range(10000):
        row = rng.uniform(-1, 1, 6).astype(np.float32)
        top = np.float32(rng.uniform(1.0, 2.0))
        row[1], row[4] = top, np.nextafter(top, np.float32(3.0))
        rounded = (row * np.float32(3.0)).astype(np.float32) * third
        if np.argmax(rounded) != np.argmax(row):
            return row[None, :]
    raise AssertionError("no such row found")


def test_argmax_over_one_ulp_gap_is_unstable_not_mismatch(reference_mode):
    original, candidate, third = _argmax_models()
    x = _one_ulp_tie_input(third)
    report = verify_models(original, candidate, inputs={"x": x})
    assert report.verdict == UNSTABLE, report.to_dict()
    assert report.exit_code == 1
    assert report.outputs[0].unstable_positions > 0


def test_argmax_real_change_is_still_mismatch():
    original, _, _ = _argmax_models()
    x_info = [value_info("x", TensorProto.FLOAT, [1, 6])]
    y_info = [value_info("y", TensorProto.INT64, None)]
    argmin = make_model([helper.make_node("ArgMin", ["x"], ["y"], axis=1, keepdims=0)], x_info, y_info)
    x = np.array([[0.1, 0.9, -0.5, 0.3, 0.2, 0.0]], np.float32)
    assert verify_models(original, argmin, inputs={"x": x}).verdict == MISMATCH


# ---------------------------------------------------------------------------------------------
# the decision on hand-made evidence (no runtime involved)


def _bound():
    return RoundingBound.for_output(2.0 ** -24, depth=2, width=8)


def test_judge_rounding_within_bound_and_mismatch_beyond():
    rng = np.random.default_rng(0)
    reference = rng.standard_normal(1000)
    original = reference.astype(np.float32)
    near = (reference * (1 + 3e-7)).astype(np.float32)
    far = (reference * (1 + 1e-3)).astype(np.float32)
    evidence = SetEvidence(original, original.copy(), near, reference=reference)
    assert judge_output([evidence], _bound()).verdict == ROUNDING
    evidence = SetEvidence(original, original.copy(), far, reference=reference)
    assert judge_output([evidence], _bound()).verdict == MISMATCH


def test_judge_nan_pattern_change_follows_the_reference():
    reference = np.array([1.0, np.inf, 2.0])
    original = np.array([1.0, 3.0e38, 2.0], np.float32)  # the original missed the overflow
    candidate = np.array([1.0, np.inf, 2.0], np.float32)
    evidence = SetEvidence(original, original.copy(), candidate, reference=reference)
    assert judge_output([evidence], _bound()).verdict == ROUNDING
    candidate = np.array([np.nan, 3.0e38, 2.0], np.float32)
    evidence = SetEvidence(original, original.copy(), candidate, reference=reference)
    assert judge_output([evidence], _bound()).verdict == MISMATCH


def test_judge_nondeterministic_original_makes_unstable():
    original = np.array([1, 2, 3])
    rerun = np.array([1, 5, 3])
    candidate = np.array([1, 4, 3])
    assert judge_output([SetEvidence(original, rerun, candidate)], _bound()).verdict == UNSTABLE
    candidate = np.array([9, 2, 3])
    assert judge_output([SetEvidence(original, rerun, candidate)], _bound()).verdict == MISMATCH


def test_judge_shape_change_is_mismatch():
    evidence = SetEvidence(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), np.zeros(6, np.float32))
    assert judge_output([evidence], _bound()).verdict == MISMATCH


def test_candidate_that_onnxruntime_rejects_is_mismatch_not_bad_input():
    x_info = [value_info("x", TensorProto.FLOAT, [2, 3])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model([helper.make_node("Relu", ["x"], ["y"])], x_info, y_info)
    broken = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])], x_info, y_info,
                        [tensor("s", np.array([7], np.int64))])
    report = verify_models(original, broken)
    assert report.verdict == MISMATCH
    assert any("candidate failed" in note for note in report.notes)


def test_a_float16_accumulation_of_billions_of_terms_has_no_relative_accuracy_and_does_not_raise():
    # fuzz campaign of seed 1100000, cases 22820 and 52977 (fuse_concat_into_reshape, float16): a path
    # sum of 5 * 2^30 overflowed math.expm1 and stopped the verification
    bound = RoundingBound.for_output(2.0 ** -11, 4, 1, path_sum=5 * 2 ** 30)
    assert bound.gamma == float("inf")
    assert RoundingBound.for_output(2.0 ** -11, 4, 1, path_sum=1000).gamma < 1.0
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1122820, max_nodes=20, opset=18, target="fuse_concat_into_reshape")
    candidate = onnxrefine.optimize(case.model, ["fuse_concat_into_reshape"])
    report = verify_models(case.model, candidate, seed=1122820, dims=case.input_dims, trials=2)
    assert report.verdict in (EXACT, ROUNDING)
