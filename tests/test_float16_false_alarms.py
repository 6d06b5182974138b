"""Float16 false alarms of earlier fuzz campaigns, kept as tests with the real bugs beside them.

- An inlined If branch: onnxruntime's CPU computes Exp and Log (no float16 kernels) in float32 and
  drops the Casts between them once no If boundary separates them, so the candidate skips the
  float16 rounding of Exp's result that the spec (and the original) make. Rule float16-skipped-rounding.
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
from onnxrefine.verify.reference import evaluate_float64, probable_scale_of

H = TensorProto.FLOAT16


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def exp_log(inline=False, factor=None):
    """Log(If(true){Exp(x)}), or with the branch inlined; `factor`: a Mul after the Log (a real change)."""
    tail = [node("Log", ["e2"], ["y"])] if factor is None else \
        [node("Log", ["e2"], ["l"]), node("Mul", ["l", "k"], ["y"])]
    if inline:
        body = [node("Exp", ["x"], ["e"]), node("Identity", ["e"], ["e2"])]
    else:
        then = helper.make_graph([node("Exp", ["x"], ["e"])], "then", [], [value_info("e", H, None)])
        other = helper.make_graph([node("Neg", ["x"], ["e"])], "else", [], [value_info("e", H, None)])
        body = [node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
                node("If", ["c"], ["e2"], then_branch=then, else_branch=other)]
    weights = [] if factor is None else [tensor("k", np.array(factor, np.float16))]
    return make_model(body + tail, [value_info("x", H, [64])], [value_info("y", H, None)], weights)


X_NEAR_ZERO = np.linspace(-0.05, 0.05, 64).astype(np.float16)  # Log(Exp(x)) small: the skipped rounding shows


def test_inlined_if_branch_skipping_a_float16_rounding_is_rounding():
    report = verify_models(exp_log(), exp_log(inline=True), inputs=[{"x": X_NEAR_ZERO}], trials=2)
    assert report.verdict == ROUNDING
    assert report.outputs[0].excused.get("float16-skipped-rounding", 0) > 0


def test_inlined_if_branch_with_a_changed_constant_is_mismatch():
    # the reference gives the two models other values: the rule does not apply
    report = verify_models(exp_log(), exp_log(inline=True, factor=1.01), inputs=[{"x": X_NEAR_ZERO}], trials=2)
    assert report.verdict == MISMATCH
    assert "float16-skipped-rounding" not in report.outputs[0].excused


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
