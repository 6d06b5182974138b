"""Float16 false alarms of earlier fuzz campaigns, kept as tests with the real bugs beside them.

- An inlined If branch: onnxruntime's CPU computes float16 Exp and Mul in float32 and drops the Casts
  between them once no If boundary separates them, so the candidate skips the float16 rounding of
  Exp's result that the spec (and the original) make. Rule float16-skipped-rounding.
- A float16 BatchNormalization folded into its Conv, on inputs with a large offset that the BN's
  mean cancels: the error scales with the summands |w|*|x| (the derived bound's Conv term), not with
  the small result.
- A float16 BatchNormalization folded into a product of more than 1/u = 2048 terms: Higham's
  gamma_n = n*u / (1 - n*u) is negative there, and the allowance with it; the accumulation's gamma and
  the probable bound take the independent-rounding form, finite for every n.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, ROUNDING, verify_models
from onnxrefine.verify.judge import RoundingBound, SetEvidence, judge_output
from onnxrefine.verify.reference import bound_of, evaluate_float64, magnitude_of, probable_scale_of

H = TensorProto.FLOAT16


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def exp_mul(inline=False, k=-2.648):
    """If(true){Exp(x) * k} with Exp outside the If, or the branch inlined (fuzz campaign of seed 900000,
    eliminate_if_with_const_cond case 278)."""
    if inline:
        body = [node("Exp", ["x"], ["e"]), node("Mul", ["e", "k"], ["y"])]
    else:
        then = helper.make_graph([node("Mul", ["e", "k"], ["t"])], "then", [], [value_info("t", H, None)])
        other = helper.make_graph([node("Abs", ["e"], ["t"])], "else", [], [value_info("t", H, None)])
        body = [node("Exp", ["x"], ["e"]), node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    weights = [tensor("k", np.array(k, np.float16))] + ([] if inline else [tensor("cond", np.array(True))])
    return make_model(body, [value_info("x", H, [180])], [value_info("y", H, None)], weights)


# Most elements overflow Exp (a stress set of large inputs); of the rest some land in float16's subnormal
# range, where the skipped rounding of Exp's result moves the product by a subnormal step or more
X_OVERFLOW_AND_SUBNORMAL = np.concatenate([np.linspace(12, 200, 100), np.linspace(-17.3, -15.0, 40),
                                           np.linspace(-3, 2, 40)]).astype(np.float16)


def test_inlined_if_branch_skipping_a_float16_rounding_is_rounding():
    # judged by within-bound since the underflow floor and each element's own bound beside overflowing
    # ones (float16-skipped-rounding excused the subnormal ones before)
    report = verify_models(exp_mul(), exp_mul(inline=True), inputs=[{"x": X_OVERFLOW_AND_SUBNORMAL}], trials=2)
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()
    assert report.outputs[0].differing > 0
    assert set(report.outputs[0].excused) <= {"within-bound", "float16-skipped-rounding"}


def test_skipped_rounding_excuses_a_candidate_within_its_own_bound():
    # no bound of the original's in force, the difference beyond within-bound's allowance (the
    # original exact, its terms |R|): the candidate's own bound, where both models have the same
    # float64 value, judges the element
    reference = np.linspace(0.5, 0.9, 8)
    original = reference.astype(np.float16)
    candidate = original.copy()
    candidate[2] += np.float16(4 * 2.0 ** -11)  # 8 float16 ulps there
    evidence = SetEvidence(original, original.copy(), candidate, reference=original.astype(np.float64),
                           error_bound=np.full(8, np.inf), coherent_bound=np.zeros(8),
                           spec_same_bound=np.full(8, 0.01))
    bound = RoundingBound.for_output(2.0 ** -11, 1, 1, amplifiers=(), jumps=())
    judgement = judge_output([evidence], bound)
    assert judgement.verdict == ROUNDING and judgement.excused == {"float16-skipped-rounding": 1}
    evidence.spec_same_bound = None
    assert judge_output([evidence], bound).verdict == MISMATCH


def test_inlined_if_branch_with_a_changed_constant_is_mismatch():
    # the reference gives the two models other values where they are normal: the rule does not apply
    report = verify_models(exp_mul(), exp_mul(inline=True, k=-2.648 * 1.05), inputs=[{"x": X_OVERFLOW_AND_SUBNORMAL}],
                           trials=2)
    assert report.verdict == MISMATCH


def test_a_finite_element_keeps_its_bound_beside_overflowing_ones():
    # a bound infinite on most elements of a value was made infinite on all of them, and the
    # candidate's own bound with it: the subnormal products above had no bound in force
    value = evaluate_float64(exp_mul(inline=True), {"x": X_OVERFLOW_AND_SUBNORMAL})["y"]
    bound = bound_of(value)
    assert np.all(np.isinf(bound[:100])) and np.all(np.isfinite(bound[100:]))


def test_skipped_rounding_does_not_excuse_a_candidate_beyond_its_own_bound():
    reference = np.linspace(0.01, 0.05, 8)
    original = reference.astype(np.float16)
    candidate = original.copy()
    candidate[3] += np.float16(0.002)  # about 40 float16 ulps there; the candidate's own bound is 1 ulp
    spacing = np.spacing(original).astype(np.float64)
    evidence = SetEvidence(original, original.copy(), candidate, reference=reference,
                           error_bound=np.full(8, np.inf), coherent_bound=np.zeros(8), spec_same_bound=spacing)
    bound = RoundingBound.for_output(2.0 ** -11, 1, 1, amplifiers=(), jumps=())
    judgement = judge_output([evidence], bound)
    assert judgement.verdict == MISMATCH and judgement.unexplained == 1


# -- a float16 BatchNormalization fold with cancellation ----------------------------------------------

rng = np.random.default_rng(3)
W = (rng.standard_normal((6, 4, 3, 3)) / 3).astype(np.float16)
B = (rng.standard_normal(6) / 4).astype(np.float16)
SCALE = (1 + rng.standard_normal(6) / 4).astype(np.float16)
BETA = (rng.standard_normal(6) / 4).astype(np.float16)
VAR = (0.5 + rng.random(6)).astype(np.float16)
X_OFFSET = (40 + rng.standard_normal((1, 4, 8, 8))).astype(np.float16)  # the BN's mean cancels the offset
MEAN = (W.astype(np.float64).sum(axis=(1, 2, 3)) * 40 + B).astype(np.float16)
EPSILON = 0.1


def conv_bn():
    weights = [tensor(name, value) for name, value in
               (("W", W), ("B", B), ("S", SCALE), ("BE", BETA), ("M", MEAN), ("V", VAR))]
    return make_model([node("Conv", ["x", "W", "B"], ["c"]),
                       node("BatchNormalization", ["c", "S", "BE", "M", "V"], ["y"], epsilon=EPSILON)],
                      [value_info("x", H, [1, 4, 8, 8])], [value_info("y", H, None)], weights)


def folded(epsilon=EPSILON):
    """The fold in float64, rounded once to float16 (epsilon: the one the fold uses)."""
    s = SCALE.astype(np.float64) / np.sqrt(VAR.astype(np.float64) + epsilon)
    w = (W.astype(np.float64) * s[:, None, None, None]).astype(np.float16)
    b = ((B.astype(np.float64) - MEAN.astype(np.float64)) * s + BETA.astype(np.float64)).astype(np.float16)
    return make_model([node("Conv", ["x", "W", "B"], ["y"])], [value_info("x", H, [1, 4, 8, 8])],
                      [value_info("y", H, None)], [tensor("W", w), tensor("B", b)])


def test_float16_bn_fold_with_cancellation_is_rounding_by_the_summands():
    report = verify_models(conv_bn(), folded(), inputs=[{"x": X_OFFSET}], trials=2)
    assert report.verdict == ROUNDING
    assert set(report.outputs[0].excused) == {"within-derived-bound"}
    worst = max(report.outputs[0].worst_elements, key=lambda e: e["difference"] / max(abs(e["reference"]), 1e-30))
    # the case cancels: an allowance scaled by the result (a few float16 ulps of |R|) would flag it
    assert worst["difference"] > 8 * 2.0 ** -11 * abs(worst["reference"])


def test_float16_bn_fold_dropping_epsilon_is_mismatch():
    assert verify_models(conv_bn(), folded(epsilon=0.0), inputs=[{"x": X_OFFSET}], trials=2).verdict == MISMATCH


# -- a float16 BatchNormalization fold behind a product of more terms than 1/u ---------------------------

LONG = 300_000  # terms per dot product: n*u > 1 in float16 (u = 2^-11) also for n ~ 4 sqrt(N)
long_rng = np.random.default_rng(0)
W_LONG = (2.0 ** -14 * (1 + 3 * long_rng.random((LONG, 16)))).astype(np.float16)
BN_LONG = [long_rng.uniform(*span, 16).astype(np.float16) for span in ((0.5, 2), (-1, 1), (-1, 1), (0.5, 2))]
X_LONG = (0.5 + 0.5 * np.random.default_rng(1).random((4, LONG))).astype(np.float16)


def long_matmul_bn(fold=False, shift_error=0.0):
    """MatMul then BatchNormalization, or the BN folded into the weights and a bias (off by shift_error)."""
    if not fold:
        nodes = [node("MatMul", ["x", "w"], ["t"]), node("BatchNormalization", ["t", "s", "b", "m", "v"], ["y"])]
        weights = [tensor("w", W_LONG)] + [tensor(name, value) for name, value in zip("sbmv", BN_LONG)]
    else:
        scale, beta, mean, var = (value.astype(np.float64) for value in BN_LONG)
        s = scale / np.sqrt(var + 1e-5)
        nodes = [node("MatMul", ["x", "w"], ["t"]), node("Add", ["t", "c"], ["y"])]
        weights = [tensor("w", (W_LONG.astype(np.float64) * s).astype(np.float16)),
                   tensor("c", (beta - mean * s + shift_error).astype(np.float16))]
    return make_model(nodes, [value_info("x", H, [4, LONG])], [value_info("y", H, None)], weights)


def test_accumulation_gamma_stays_positive_and_finite_beyond_one_over_u():
    bound = RoundingBound.for_output(2.0 ** -11, 1, LONG)
    assert bound.n * bound.u > 1
    assert 1 < bound.gamma < 10
    # where n*u is small it agrees with Higham's gamma_n to first order
    small = RoundingBound.for_output(2.0 ** -24, 1, 64)
    assert small.gamma == pytest.approx(small.n * small.u / (1 - small.n * small.u), rel=1e-6)


def test_probable_bound_is_finite_for_a_float16_sum_of_more_than_2048_terms():
    value = evaluate_float64(long_matmul_bn(), {"x": X_LONG})["y"]
    scale = probable_scale_of(value)
    assert scale is not None and np.all(np.isfinite(scale))


def test_float16_bn_fold_behind_more_than_2048_terms_is_rounding():
    # localisation judges the MatMul's output too, as it did resnet18-fp16's last convolutions
    report = verify_models(long_matmul_bn(), long_matmul_bn(fold=True), inputs=[{"x": X_LONG}], trials=2)
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()
    assert report.outputs[0].differing > 0


def test_float16_bn_fold_with_a_wrong_shift_behind_more_than_2048_terms_is_mismatch():
    report = verify_models(long_matmul_bn(), long_matmul_bn(fold=True, shift_error=1000.0), inputs=[{"x": X_LONG}],
                           trials=2, localize=False)
    assert report.verdict == MISMATCH


# -- a bias fused into a float16 Conv behind an If on a constant condition --------------------------------

W_1X1 = np.array([1.0, -1.5, 0.75, 2.0], np.float16).reshape(4, 1, 1, 1)
B_CONV = np.array([1.3, -2.1, 0.9, 1.7], np.float16)
B_ADD = np.array([1.2, -0.6, 1.55, 0.85], np.float16)
# each channel's w*x cancels b + c to a few float16 ulps of 1: the bias sum's rounding is large there
X_CANCEL = (-(B_CONV.astype(np.float64) + B_ADD.astype(np.float64))[None, :, None, None]
            / W_1X1.astype(np.float64).reshape(1, 4, 1, 1)
            + np.linspace(-0.01, 0.01, 16).reshape(1, 1, 4, 4)).astype(np.float16)


def if_conv_bias(fused=False, bias_error=0.0):
    """If(true){x} -> Conv(w, b) -> Add(c) -> Identity, or with c fused into the Conv's bias (rounded once)."""
    then = helper.make_graph([node("Identity", ["x"], ["t"])], "then", [], [value_info("t", H, None)])
    other = helper.make_graph([node("Abs", ["x"], ["t"])], "else", [], [value_info("t", H, None)])
    nodes = [node("If", ["cond"], ["taken"], then_branch=then, else_branch=other)]
    weights = [tensor("cond", np.array(True)), tensor("w", W_1X1)]
    if fused:
        summed = B_CONV.astype(np.float64) + B_ADD.astype(np.float64) + bias_error
        nodes.append(node("Conv", ["taken", "w", "b"], ["sum"], group=4))
        weights.append(tensor("b", summed.astype(np.float16)))
    else:
        nodes += [node("Conv", ["taken", "w", "b"], ["conv"], group=4), node("Add", ["conv", "c"], ["sum"])]
        weights += [tensor("b", B_CONV), tensor("c", B_ADD.reshape(1, 4, 1, 1))]
    nodes.append(node("Identity", ["sum"], ["y"]))
    return make_model(nodes, [value_info("x", H, [1, 4, 4, 4])], [value_info("y", H, None)], weights)


def test_an_if_over_a_graph_input_is_no_constant_in_the_bound_tracker():
    # the If's only input is its constant condition, but its branch reads x: the values after it were
    # taken for constants, with no magnitude of terms (an element was judged by its cancelled |R| alone)
    value = evaluate_float64(if_conv_bias(), {"x": X_CANCEL})["y"]
    terms = magnitude_of(value)
    assert terms is not None
    summands = np.abs(W_1X1.astype(np.float64).reshape(1, 4, 1, 1) * X_CANCEL.astype(np.float64))
    assert np.all(terms >= summands)


def test_a_bias_fused_into_a_float16_conv_behind_a_constant_if_is_rounding():
    # fuzz campaign of seed 900000, case 94123 (fuse_add_bias_into_conv): the folded bias b + c is
    # rounded once, an error of u*|b + c| where the result cancels to far below it
    report = verify_models(if_conv_bias(), if_conv_bias(fused=True), inputs=[{"x": X_CANCEL}], trials=2)
    assert report.outputs[0].differing > 0
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()


def test_a_wrong_bias_fused_into_a_float16_conv_behind_a_constant_if_is_mismatch():
    report = verify_models(if_conv_bias(), if_conv_bias(fused=True, bias_error=0.05), inputs=[{"x": X_CANCEL}],
                           trials=2)
    assert report.verdict == MISMATCH


# -- a float16 product that underflows, divided again, once no If boundary keeps its rounding -----------

K_SMALL = np.array([2.03, -0.0253, 0.3977], np.float16).reshape(1, 3, 1)
X_SUBNORMAL = np.array([1.0, 6.1e-05, 2.0 ** -24, -2.0 ** -24, 0.75, 0.0], np.float16)[None, None, :].repeat(3, 1)


def mul_div(inline=False, k=K_SMALL, by_product=False):
    """Div(If(true){x * k}, x), or with the branch inlined (fuzz campaign of seed 900000,
    eliminate_if_with_const_cond case 2387); `by_product`: Div(x, If(...)) (case 11078)."""
    if inline:
        body = [node("Mul", ["x", "k"], ["p"])]
    else:
        then = helper.make_graph([node("Mul", ["x", "k"], ["t"])], "then", [], [value_info("t", H, None)])
        other = helper.make_graph([node("Add", ["x", "k"], ["t"])], "else", [], [value_info("t", H, None)])
        body = [node("If", ["cond"], ["p"], then_branch=then, else_branch=other)]
    weights = [tensor("k", k)] + ([] if inline else [tensor("cond", np.array(True))])
    quotient = node("Div", ["x", "p"] if by_product else ["p", "x"], ["y"])
    return make_model(body + [quotient], [value_info("x", H, [1, 3, 6])], [value_info("y", H, None)], weights)


def test_an_underflowing_float16_product_computed_in_float32_is_rounding():
    # x * k underflows to 0 in float16 where x = 2^-24, so the spec's (and the original's) quotient
    # is 0; onnxruntime runs the inlined Mul and Div in float32 and gives k. The candidate's own
    # bound covers that only if a rounded 0 is not taken for an exact product by a power of two
    report = verify_models(mul_div(), mul_div(inline=True), inputs=[{"x": X_SUBNORMAL}], trials=2)
    assert report.outputs[0].differing > 0
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()


def test_an_underflowing_float16_product_with_another_constant_is_mismatch():
    other = (K_SMALL.astype(np.float32) * 1.05).astype(np.float16)
    report = verify_models(mul_div(), mul_div(inline=True, k=other), inputs=[{"x": X_SUBNORMAL}], trials=2)
    assert report.verdict == MISMATCH


K_NEAR_ONE = np.array([0.594, -1.089, 0.51], np.float16).reshape(1, 3, 1)


def test_a_quotient_by_a_float16_product_rounded_back_to_a_subnormal_is_rounding():
    # x / (x * 0.594) with x one subnormal step: the spec rounds the product back to x (quotient 1),
    # onnxruntime computes the inlined Mul and Div in float32 (1.68). The candidate's own bound there is
    # finite only with each rounding's absolute error below the normal range at half a step, and the
    # reference's own rounding of the product at what it is: a whole step reached 0 in the denominator
    report = verify_models(mul_div(k=K_NEAR_ONE, by_product=True), mul_div(inline=True, k=K_NEAR_ONE, by_product=True),
                           inputs=[{"x": X_SUBNORMAL}], trials=2)
    assert report.outputs[0].differing > 0
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()
    assert report.outputs[0].excused.get("float16-skipped-rounding", 0) > 0


def test_a_quotient_by_a_float16_product_with_another_constant_is_mismatch():
    other = (K_NEAR_ONE.astype(np.float32) * 1.05).astype(np.float16)
    report = verify_models(mul_div(k=K_NEAR_ONE, by_product=True), mul_div(inline=True, k=other, by_product=True),
                           inputs=[{"x": X_SUBNORMAL}], trials=2)
    assert report.verdict == MISMATCH


def test_an_intermediate_skipping_a_float16_rounding_raises_no_verdict():
    # case 278 in full: the inlined branch's value also reaches a second If's output, which localisation
    # judges; it raised the verdict with the outputs `rounding` (its subnormal elements one step off)
    def model(inline):
        first = exp_mul(inline)
        nodes = list(first.graph.node)
        nodes[-1].output[0] = "p"
        passed = helper.make_graph([node("Identity", ["p"], ["t"])], "else", [], [value_info("t", H, None)])
        added = helper.make_graph([node("Add", ["p", "k"], ["t"])], "then", [], [value_info("t", H, None)])
        if inline:
            nodes.append(node("Identity", ["p"], ["q"]))
        else:
            nodes.append(node("If", ["off"], ["q"], then_branch=added, else_branch=passed))
        nodes += [node("Sigmoid", ["q"], ["y"]), node("Identity", ["p"], ["z"])]
        weights = list(first.graph.initializer) + ([] if inline else [tensor("off", np.array(False))])
        return make_model(nodes, [value_info("x", H, [180])], [value_info("y", H, None), value_info("z", H, None)],
                          weights)

    report = verify_models(model(False), model(True), inputs=[{"x": X_OVERFLOW_AND_SUBNORMAL}], trials=2)
    assert report.verdict == ROUNDING
    judged = report.localisation["values"]
    assert judged and all(value["verdict"] != MISMATCH for value in judged)


# -- a float16 subnormal result one step from float64 where no bound is in force --------------------------

SUBNORMAL_STEP = 2.0 ** -24


def _judged_without_a_bound(reference, candidate):
    original = reference.astype(np.float16)
    evidence = SetEvidence(original, original.copy(), candidate.astype(np.float16), reference=reference,
                           error_bound=np.full(reference.shape, np.nan))
    return judge_output([evidence], RoundingBound.for_output(2.0 ** -11, 3, 4, amplifiers=(), jumps=()))


def test_a_float16_subnormal_one_step_off_is_rounding_where_no_bound_is_in_force():
    # fuzz campaign of seed 900000, eliminate_nop_cast case 74208: a removed Cast let onnxruntime run a
    # ConvTranspose (no bound rule) on its input unrounded; its subnormal results moved by one step,
    # beyond gamma * |R| (relative) but within the absolute floor of each rounding below the normal range
    reference = np.array([52, 20, 3, -7], np.float64) * SUBNORMAL_STEP
    judgement = _judged_without_a_bound(reference, reference + np.array([-1, 1, 1, -1]) * SUBNORMAL_STEP)
    assert judgement.verdict == ROUNDING and judgement.excused.get("within-bound") == 4


def test_the_underflow_floor_excuses_nothing_in_the_normal_range_or_many_steps_off():
    reference = np.array([0.75, -1.5, 52 * SUBNORMAL_STEP, 2.0 ** -13])
    candidate = reference + np.array([2.0 ** -6, 0.0, 0.0, 0.0])  # a normal value 32 ulps off
    assert _judged_without_a_bound(reference, candidate).verdict == MISMATCH
    candidate = reference + np.array([0.0, 0.0, 40 * SUBNORMAL_STEP, 0.0])  # a subnormal 40 steps off
    assert _judged_without_a_bound(reference, candidate).verdict == MISMATCH


# -- a float16 BatchNormalization fold whose result cancels far below its terms ----------------------------

W_SHORT = np.array([0.40893555, 0.36572266, 0.55224609, 0.91162109, -0.46850586, 0.09777832], np.float16).reshape(2, 1, 3)
BN_SHORT = [np.array(v, np.float16) for v in ([-1.22363281, -0.91601562], [-0.01020813, -0.77294922],
                                              [-1.24902344, 1.25976562], [0.55419922, 0.16418457])]
X_SHORT = np.array([0.5674, -1.5205, -2.428], np.float16).reshape(1, 1, 3)


def short_conv_bn(fold=False, mean_error=0.0):
    """Conv of three terms then BatchNormalization, or the BN folded in float64 and rounded once (fuzz
    campaign of seed 800000, fuse_bn_into_conv case 10008); `mean_error`: a relative error of the mean."""
    conv = {"pads": [0, 1], "strides": [2]}
    if not fold:
        nodes = [node("Conv", ["x", "w"], ["c"], **conv), node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
        weights = [tensor("w", W_SHORT)] + [tensor(name, value) for name, value in zip("sbmv", BN_SHORT)]
    else:
        scale, beta, mean, var = (value.astype(np.float64) for value in BN_SHORT)
        s = scale / np.sqrt(var + 1e-5)
        nodes = [node("Conv", ["x", "w", "b"], ["y"], **conv)]
        weights = [tensor("w", (W_SHORT.astype(np.float64) * s[:, None, None]).astype(np.float16)),
                   tensor("b", (beta - mean * (1 + mean_error) * s).astype(np.float16))]
    return make_model(nodes, [value_info("x", H, [1, 1, 3])], [value_info("y", H, None)], weights)


def test_a_float16_bn_fold_cancelling_below_its_terms_is_rounding():
    # the second channel's result, -0.168, cancels terms of magnitude 5.7: the folded weights' and
    # bias's roundings move it by 10 float16 ulps, beyond the accumulation cap's gamma * RMS(R)
    report = verify_models(short_conv_bn(), short_conv_bn(fold=True), inputs=[{"x": X_SHORT}], trials=2)
    assert report.outputs[0].differing > 0
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()


def test_a_float16_bn_fold_with_a_one_percent_wrong_mean_is_mismatch():
    report = verify_models(short_conv_bn(), short_conv_bn(fold=True, mean_error=0.01), inputs=[{"x": X_SHORT}],
                           trials=2)
    assert report.verdict == MISMATCH


# -- a float16 If branch's terms: a removed Split lets onnxruntime fuse the Cast before it -----------------

K_ROW = np.array([-0.4116, 1.523, -0.8604, -1.291, -1.146, -0.4287, -0.2854, 1.549, 1.014, 0.2744, -0.6826, 0.9893],
                 np.float16).reshape(1, 1, 4, 3)


def cast_split_if(split=True, k=K_ROW):
    """If(false){-t}{t + k} over t = Split(Cast(x to float16)) (a Split of one output: a no-op), or with the
    Split removed (fuzz campaign of seed 900000, eliminate_nop_split case 31817)."""
    nodes = [node("Cast", ["x"], ["c"], to=H)]
    if split:
        nodes.append(node("Split", ["c", "parts"], ["t"], axis=3))
    taken = "t" if split else "c"
    then = helper.make_graph([node("Neg", [taken], ["o"])], "then", [], [value_info("o", H, None)])
    other = helper.make_graph([node("Add", [taken, "k"], ["o"])], "else", [], [value_info("o", H, None)])
    nodes.append(node("If", ["cond"], ["y"], then_branch=then, else_branch=other))
    weights = [tensor("cond", np.array(False)), tensor("k", k)] + ([tensor("parts", np.array([3], np.int64))]
                                                                   if split else [])
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [6, 4, 4, 3])], [value_info("y", H, None)], weights)


def test_a_float16_branch_passes_on_its_terms_magnitude():
    # without the Split, onnxruntime's deployment level computes the branch's Add on the Cast's float32
    # input (the Cast's rounding skipped): where x + k cancels, the difference is many ulps of the result
    # but u |x| of its terms; the branch passed on no magnitude, so each element had its |R| alone
    x = (-np.broadcast_to(K_ROW.astype(np.float32), (6, 4, 4, 3))
         + np.random.default_rng(0).standard_normal((6, 4, 4, 3)).astype(np.float32) * 1e-3).astype(np.float32)
    report = verify_models(cast_split_if(), cast_split_if(split=False), inputs=[{"x": x}], trials=2)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.deployment]


def test_a_float16_branch_with_another_constant_is_mismatch():
    x = np.random.default_rng(0).standard_normal((6, 4, 4, 3)).astype(np.float32)
    other = (K_ROW.astype(np.float32) * 1.01).astype(np.float16)
    report = verify_models(cast_split_if(), cast_split_if(split=False, k=other), inputs=[{"x": x}], trials=2)
    assert report.verdict == MISMATCH
