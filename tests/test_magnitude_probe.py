"""The probed magnitude of the terms behind an op without a bound rule (reference/magnitude_probe.py):
what the verdict reads per element where no rule derives M, in place of a whole-output term.

Tight: on a mixed-sign running sum (CumSum, no rule) the probe lies near the terms' root-sum-square
and never above their total; on an elementwise op it is the exact carry. Guarded: where the op jumps
within the step (ThresholdedRelu at its threshold) the probe derives nothing, and the wrong candidate
the jump would otherwise excuse is a mismatch.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, ROUNDING, verify_models
from onnxrefine.verify.reference import evaluate_float64, magnitude_of

F = TensorProto.FLOAT


def _magnitude(model, x):
    return np.asarray(magnitude_of(evaluate_float64(model, {"x": x})["y"]), np.float64)


def test_probed_magnitude_of_a_running_sum_lies_between_its_terms_root_sum_square_and_their_total():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 64)).astype(np.float32)
    model = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [value_info("x", F, [512, 64])],
                       [value_info("y", F, None)], [tensor("axis", np.array(1, np.int64))])
    probed = _magnitude(model, x)
    terms = np.abs(x.astype(np.float64))
    root_sum_square, total = np.sqrt(np.cumsum(terms ** 2, axis=1)), np.cumsum(terms, axis=1)
    # the worst-case magnitude sum |terms| above (the same-sign move reaches it where every term's
    # coefficient is positive), never below the root-sum-square by much (random signs reach that)
    assert np.all(np.isfinite(probed))
    assert np.all(probed <= total * (1 + 1e-6))
    assert np.all(probed >= 0.999 * root_sum_square)


def test_a_bilinear_resize_of_cancelling_neighbours_keeps_their_magnitude():
    # +-1 in a checkerboard, upsampled bilinearly: between four neighbours of about equal weight the
    # value cancels to near 0, and random signs + - - + cancel the probe too (two trials in a row on
    # deeplabv3's output, where a peer's fold was then a false alarm); the same-sign move does not
    x = np.where(np.indices((1, 1, 8, 8)).sum(axis=0) % 2, 1.0, -1.0).astype(np.float32)
    model = make_model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
                       [value_info("x", F, [1, 1, 8, 8])], [value_info("y", F, None)],
                       [tensor("scales", np.array([1, 1, 16, 16], np.float32))], opset=13)
    assert np.all(_magnitude(model, x) >= 0.999)


def test_probed_magnitude_of_an_elementwise_op_is_its_exact_carry():
    x = np.linspace(-4, 4, 1001).astype(np.float32)
    model = make_model([helper.make_node("Elu", ["x"], ["y"], alpha=0.7)], [value_info("x", F, [1001])],
                       [value_info("y", F, None)])
    x64 = x.astype(np.float64)
    derivative = np.where(x64 > 0, 1.0, 0.7 * np.exp(x64))
    np.testing.assert_allclose(_magnitude(model, x), derivative * np.abs(x64), rtol=1e-4, atol=1e-12)


def _thresholded(scale):
    nodes = [helper.make_node("ThresholdedRelu", ["x"], ["t"], alpha=1.0), helper.make_node("Mul", ["t", "s"], ["y"])]
    return make_model(nodes, [value_info("x", F, [64])], [value_info("y", F, None)],
                      [tensor("s", np.array(scale, np.float32))])


def test_a_jump_within_the_step_derives_no_magnitude_and_excuses_nothing():
    # just above the threshold: a step of 2^-20 of x down crosses it, and the jump of about 1 read as a
    # derivative would be a magnitude of about 2^19, an allowance of a percent
    x = (1.0 + 2.0 ** -23 * (1 + np.arange(64) % 7)).astype(np.float32)
    assert np.all(np.isnan(_magnitude(make_model(
        [helper.make_node("ThresholdedRelu", ["x"], ["y"], alpha=1.0)], [value_info("x", F, [64])],
        [value_info("y", F, None)]), x)))
    report = verify_models(_thresholded(1.0), _thresholded(1.01), inputs=[{"x": x}], trials=2, localize=False)
    assert report.verdict == MISMATCH, report.outputs[0].to_dict()
    assert report.outputs[0].unexplained == 64


@pytest.fixture(params=["probed", "derived"])
def conv_transpose_rule(request, monkeypatch):
    """ConvTranspose with its bound rule removed stands in for an op without one ("probed"); with it
    ("derived") the same folds are judged by the rule."""
    if request.param == "probed":
        from onnxrefine.verify.reference import bound

        monkeypatch.delitem(bound.BOUND_RULES, "ConvTranspose")
    return request.param


def _float16_fold(seed, scale_error=1.0, input_scale=100.0):
    """ConvTranspose then BatchNormalization in float16, and the fold of the two (weights and bias
    rounded once to float16, optionally off by `scale_error`)."""
    rng = np.random.default_rng(seed)
    half = TensorProto.FLOAT16
    w = rng.standard_normal((3, 2, 2, 2)).astype(np.float16)
    b = rng.standard_normal(2).astype(np.float16)
    scale, shift = rng.uniform(0.05, 0.4, 2).astype(np.float16), rng.standard_normal(2).astype(np.float16)
    mean, var = rng.standard_normal(2).astype(np.float16), rng.uniform(0.5, 1.5, 2).astype(np.float16)
    x, y = value_info("x", half, [1, 3, 7, 3]), value_info("y", half, None)
    original = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"]),
                           helper.make_node("BatchNormalization", ["c", "g", "s", "m", "v"], ["y"])], [x], [y],
                          [tensor("w", w), tensor("b", b), tensor("g", scale), tensor("s", shift), tensor("m", mean),
                           tensor("v", var)])
    factor = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5) * scale_error
    folded = [tensor("w", (w.astype(np.float64) * factor[None, :, None, None]).astype(np.float16)),
              tensor("b", ((b.astype(np.float64) - mean) * factor + shift).astype(np.float16))]
    candidate = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"])], [x], [y], folded)
    sets = [{"x": (rng.standard_normal((1, 3, 7, 3)) * input_scale).astype(np.float16)} for _ in range(2)]
    return original, candidate, sets


def test_a_float16_fold_past_an_op_without_a_rule_is_judged_by_its_terms(conv_transpose_rule):
    # the probe reads the float16 ConvTranspose against its unrounded result: a legitimate fold's
    # cancelling elements (x - mean near 0) keep their terms' size (28 of 40 seeds were false alarms
    # judged by |R_i|), and a 1% scale stays a mismatch
    for seed in range(10):
        original, candidate, sets = _float16_fold(seed)
        assert verify_models(original, candidate, inputs=sets, trials=2, localize=False).verdict == ROUNDING, seed
        original, wrong, sets = _float16_fold(seed, scale_error=1.01)
        assert verify_models(original, wrong, inputs=sets, trials=2, localize=False).verdict == MISMATCH, seed


def test_a_folded_constant_summand_counts_among_the_terms(conv_transpose_rule):
    # tiny inputs: the ConvTranspose's terms are far below BatchNormalization's mean * s and shift, the
    # summands the fold rounds into its float16 bias: they are terms of the element although no input
    # error moves them (reference/bound.py's _constant_summands), and a 10% scale stays a mismatch (1% is
    # within float16's allowance where the bias cancels: 12 summands, gamma_12 about 0.6% of each)
    for seed in range(10):
        original, candidate, sets = _float16_fold(seed, input_scale=1e-3)
        report = verify_models(original, candidate, inputs=sets, trials=2, localize=False)
        assert report.verdict == ROUNDING, (seed, report.outputs[0].to_dict())
        original, wrong, sets = _float16_fold(seed, scale_error=1.1, input_scale=1e-3)
        assert verify_models(original, wrong, inputs=sets, trials=2, localize=False).verdict == MISMATCH, seed


def _evaluations(monkeypatch) -> list:
    """The `magnitudes` argument of every float64 evaluation the session's default reference makes."""
    from onnxrefine.verify.reference import evaluator

    calls, original = [], evaluator.evaluate_float64

    def counting(*args, magnitudes=True, **kwargs):
        calls.append(magnitudes)
        return original(*args, magnitudes=magnitudes, **kwargs)

    monkeypatch.setattr("onnxrefine.verify.reference.evaluate_float64", counting)
    return calls


def test_the_magnitude_of_terms_is_evaluated_again_only_for_a_set_whose_judgement_reads_it(monkeypatch):
    # a cancelling float16 fold: no bound is in force where the bias cancels, and the element is judged by
    # its terms' magnitude (rule within-bound), which the first evaluation left out
    from onnxrefine.verify import terms
    from onnxrefine.verify.reference import bound

    monkeypatch.delitem(bound.BOUND_RULES, "ConvTranspose")  # the stand-in for an op without a rule

    calls = _evaluations(monkeypatch)
    original, candidate, sets = _float16_fold(0, input_scale=1e-3)
    assert terms.reads_magnitudes(original)  # an op without a rule: made at once, with it ...
    assert verify_models(original, candidate, inputs=sets[:1], trials=2, localize=False).verdict == ROUNDING
    assert calls[0] is True
    calls.clear()
    monkeypatch.setattr(terms, "reads_magnitudes", lambda model: False)  # ... else deferred:
    assert verify_models(original, candidate, inputs=sets[:1], trials=2, localize=False).verdict == ROUNDING
    # the original's reference without it; the original's again, with it; then, for that set only, the
    # float16 candidate's own bounds (rule float16-skipped-rounding, which reads them where no bound of
    # the original's is in force), never with it
    assert calls == [False, True, False]


def test_no_magnitude_of_terms_where_every_difference_lies_within_its_derived_bound(monkeypatch):
    calls = _evaluations(monkeypatch)
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
    scale = np.float32(0.3)
    original = make_model([helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Mul", ["t", "s"], ["y"])],
                          [value_info("x", TensorProto.FLOAT, [1, 64])], [value_info("y", TensorProto.FLOAT, None)],
                          [tensor("w", w), tensor("s", np.array(scale))])
    folded = (w.astype(np.float64) * float(scale)).astype(np.float32)  # the scale folded into the weight, rounded once
    candidate = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                           [value_info("x", TensorProto.FLOAT, [1, 64])], [value_info("y", TensorProto.FLOAT, None)],
                           [tensor("w", folded)])
    report = verify_models(original, candidate, inputs=[{"x": x}], trials=2, localize=False)
    assert report.verdict == ROUNDING and report.outputs[0].excused == {"within-derived-bound": report.outputs[0].differing}
    assert calls == [False]


def test_a_graph_with_an_op_no_bound_rule_covers_reads_the_magnitude():
    from onnxrefine.verify import terms

    def model(node, functions=()):
        proto = make_model([node], [value_info("x", TensorProto.FLOAT, [1, 4])],
                           [value_info("y", TensorProto.FLOAT, None)], [])
        proto.functions.extend(functions)
        return proto

    assert not terms.reads_magnitudes(model(helper.make_node("Relu", ["x"], ["y"])))
    assert terms.reads_magnitudes(model(helper.make_node("Resize", ["x", "", "s"], ["y"])))
    assert terms.reads_magnitudes(model(helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")))
    body = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                [helper.make_opsetid("", 18)])
    assert not terms.reads_magnitudes(model(helper.make_node("Twice", ["x"], ["y"], domain="local"), [body]))


def test_a_maxpool_carries_the_terms_of_the_finite_elements_it_may_pick():
    # a window holding -inf or NaN beside finite elements: its finite maximum's terms are those of a
    # finite element, which a NaN magnitude at the non-finite ones left underived; a window of only
    # non-finite elements derives nothing it could be read at (its result is not finite)
    x = np.array([[[-np.inf, 0.5, np.nan, -0.25, -np.inf, np.inf]]], np.float32)
    model = make_model([helper.make_node("Mul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "c"], ["s"]),
                        helper.make_node("MaxPool", ["s"], ["y"], kernel_shape=[2], strides=[2])],
                       [value_info("x", F, [1, 1, 6])], [value_info("y", F, None)],
                       [tensor("w", np.float32(4.0)), tensor("c", np.float32(-1.5))])
    value = evaluate_float64(model, {"x": x}, outputs=["y"])["y"]
    magnitude = magnitude_of(value)
    assert np.asarray(value)[0, 0, :2].tolist() == [0.5, -2.5]
    # 4x - 1.5: terms |4x| + |1.5| (a constant summand counts)
    assert np.allclose(magnitude[0, 0, :2], [2.0 + 1.5, 1.0 + 1.5])


def test_a_float16_bn_fold_before_a_maxpool_beside_infinities_is_rounding():
    # fuzz campaign of seed 1100000, case 468: a float16 BatchNormalization folded into a Conv, a MaxPool
    # after it whose windows hold the -inf and NaN of the inf/NaN set beside the finite maximum; no bound
    # is in force there (a window's element has none), and within-bound read the picked element's terms
    # as not derived: the fold's 4-ulp difference at 0.29 beyond gamma * |R|
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1100468, max_nodes=20, opset=18, target="fuse_bn_into_conv")
    candidate = onnxrefine.optimize(case.model, ["fuse_bn_into_conv"])
    report = verify_models(case.model, candidate, seed=1100468, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs if o.verdict != "exact"]
    # a fold whose bias is off by 2% of its terms there stays a mismatch
    import onnx

    wrong = onnx.ModelProto()
    wrong.CopyFrom(candidate)
    bias = next(t for t in wrong.graph.initializer if t.name.endswith("_bias_folded"))
    values = onnx.numpy_helper.to_array(bias).astype(np.float32)
    bias.CopyFrom(onnx.numpy_helper.from_array((values + 0.05).astype(values.dtype), bias.name))
    report = verify_models(case.model, wrong, seed=1100468, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict == MISMATCH


def _log_softmax(bias: float = 0.0):
    nodes = [helper.make_node("Mul", ["x", "x"], ["p"]), helper.make_node("Neg", ["p"], ["q"]),
             helper.make_node("LogSoftmax", ["q"], ["s"], axis=-1), helper.make_node("Add", ["s", "d"], ["y"])]
    return make_model(nodes, [value_info("x", F, [1, 6])], [value_info("y", F, None)],
                      [tensor("d", np.float32(bias))])


def test_a_log_softmax_row_beside_an_infinite_logit_carries_its_finite_terms():
    # -x*x at x = inf is the logit -inf: exp(-inf) = 0 is an exact term of the row's sum, and the magnitude
    # of the others (each about 1: the log-sum's rounding is absolute) is what a run errs by
    x = np.array([[np.inf, 0.03, -0.5, 1.0, np.inf, 0.7]], np.float32)
    magnitude = _magnitude(_log_softmax(), x)
    assert np.isfinite(magnitude[0, 1:4]).all() and (magnitude[0, 1:4] >= 1.0).all()


def test_a_log_softmax_beside_an_infinite_logit_is_rounding_and_a_shift_of_it_is_not():
    # fuzz campaign of seed 1100000, case 64533: Log(Softmax(x)) fused into LogSoftmax on the inf/NaN set,
    # a row's -inf logit left no bound and no magnitude; an element near the row's maximum (y = -0.0013,
    # its log-sum's rounding absolute) differed by 0.4 u, beyond gamma * |R|
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1164533, max_nodes=20, opset=18, target="fuse_consecutive_log_softmax")
    candidate = onnxrefine.optimize(case.model, ["fuse_consecutive_log_softmax"])
    report = verify_models(case.model, candidate, seed=1164533, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs if o.verdict != "exact"]
    # a LogSoftmax shifted by 1e-4 (a bias, 1700 u) on such rows is no rounding of its terms
    x = np.array([[np.inf, 0.03, -0.5, 1.0, np.inf, 0.7], [0.2, np.inf, 0.1, -0.3, 0.9, 0.05]], np.float32)
    original = _log_softmax()
    original.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    shifted = _log_softmax(1e-4)
    shifted.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    report = verify_models(original, shifted, inputs=[{"x": x}], localize=False)
    assert report.verdict == MISMATCH
