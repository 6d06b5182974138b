"""The probable per-element bound (reference/bound.py, docs/verification.md): sampled soundness and
tightness against onnxruntime's float32 runs, and the verdict built on it: legitimate deep folds stay
`rounding`, and no element lends its allowance to another where no bound is derived.

The counterexamples at the end are real bugs once judged `rounding`: where no bound is in force the
allowance held whole-output terms (the output's RMS, its largest original error), so one element lent
its allowance to the others. Each element is now judged by its own error and by the magnitude of its
terms; without a reference (the fallback) by its own sensitivity. Past an op without a rule (Elu here)
the magnitude of the terms is probed (reference/magnitude_probe.py), so no output-wide term stands in.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify import MISMATCH, ROUNDING, verify_models
from onnxrefine.verify.judge import RoundingBound, SetEvidence, judge_output
from onnxrefine.verify.reference import bound_of, evaluate_float64, magnitude_of, probable_lambda, probable_scale_of

F = TensorProto.FLOAT


def _run(model, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].astype(np.float64)


def _observed_against_probable(model, feeds):
    """(max |run - R| / (lambda * sigma), min of lambda * sigma / |run - R| over the worst tenth)."""
    value = evaluate_float64(model, feeds)["y"]
    error = np.abs(_run(model, feeds) - np.asarray(value, np.float64))
    scale, worst = probable_scale_of(value), bound_of(value)
    assert scale is not None and np.all(np.isfinite(scale)) and np.all(scale <= worst)
    probable = probable_lambda(error.size) * scale
    return float(np.max(error / probable)), float(np.max(error) / np.max(probable))


def _chain_model(depth, width, rng, ins=None):
    nodes, inits, last = [], [], "x"
    for index in range(depth):
        out = "y" if index == depth - 1 else f"t{index}"
        nodes.append(helper.make_node("MatMul", [last, f"W{index}"], [out]))
        inits.append(tensor(f"W{index}", (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)))
        last = out
    return make_model(nodes, ins or [value_info("x", F, [4096, width])], [value_info("y", F, None)], inits)


def test_probable_bound_of_a_deep_matmul_chain_is_sound_and_within_a_stated_factor():
    # 4096 rows x 64 columns of a 6-deep chain of 64-term dot products: 262144 sampled elements
    rng = np.random.default_rng(0)
    model = _chain_model(6, 64, rng)
    x = rng.standard_normal((4096, 64)).astype(np.float32)
    ratio, tightness = _observed_against_probable(model, {"x": x})
    assert ratio <= 1.0
    # the largest observed error reaches at least 1/400 of the largest probable bound (the worst case
    # B is looser still: sum |w| b per layer instead of sqrt(sum w^2 b^2))
    assert tightness >= 1.0 / 400


def test_probable_bound_of_layer_norm_and_reduce_mean_is_sound():
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("ReduceMean", ["n"], ["y"], axes=[1], keepdims=0)]
    model = make_model(nodes, [value_info("x", F, [2048, 256])], [value_info("y", F, None)],
                       [tensor("g", rng.uniform(0.5, 2, 256).astype(np.float32)),
                        tensor("b", (0.1 * rng.standard_normal(256)).astype(np.float32))], opset=17)
    x = (3.0 + rng.standard_normal((2048, 256))).astype(np.float32)
    ratio, _ = _observed_against_probable(model, {"x": x})
    assert ratio <= 1.0


def _fold(depth, width, rng, scale=1.0):
    """The chain and its folded product (optionally off by `scale`)."""
    chain = _chain_model(depth, width, rng, [value_info("x", F, [64, width])])
    product = np.eye(width)
    for init in chain.graph.initializer:
        product = product @ numpy_helper.to_array(init).astype(np.float64)
    folded = make_model([helper.make_node("MatMul", ["x", "P"], ["y"])], [value_info("x", F, [64, width])],
                        [value_info("y", F, None)], [tensor("P", (product * scale).astype(np.float32))])
    return chain, folded


def test_deep_matmul_chain_fold_is_rounding_by_the_probable_bound():
    rng = np.random.default_rng(2)
    chain, folded = _fold(8, 64, rng)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    report = verify_models(chain, folded, inputs=[{"x": x}], trials=2, localize=False)
    out = report.outputs[0]
    assert report.verdict == ROUNDING, out.to_dict()
    assert out.excused == {"within-derived-bound": out.differing}


def test_one_percent_error_in_a_deep_matmul_chain_is_mismatch():
    rng = np.random.default_rng(2)
    chain, folded = _fold(8, 64, rng, scale=1.001)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    report = verify_models(chain, folded, inputs=[{"x": x}], trials=2, localize=False)
    assert report.verdict == MISMATCH, report.outputs[0].to_dict()


def _elu_of(nodes, inits, shape=(4, 8), signs=None):
    """`nodes` ending in t, then Elu (an op without a bound rule: no bound is derived past it)."""
    nodes = list(nodes) + [helper.make_node("Elu", ["t"], ["e" if signs is not None else "y"])]
    if signs is not None:
        nodes.append(helper.make_node("Mul", ["e", "signs"], ["y"]))
        inits = list(inits) + [tensor("signs", signs)]
    return make_model(nodes, [value_info("x", F, list(shape))], [value_info("y", F, None)], inits)


def _reference(mode) -> dict:
    """"fallback": the float64 reference declines every model, the original stands in for it."""
    from onnxrefine.verify.session import DECLINING_REFERENCE

    return {"reference": DECLINING_REFERENCE} if mode == "fallback" else {}


def _positive(seed, shape=(4, 8)):
    return (0.5 + np.abs(np.random.default_rng(seed).standard_normal(shape))).astype(np.float32)


@pytest.mark.parametrize("mode", ["float64", "fallback"])
def test_one_large_column_lends_no_allowance_where_no_bound_is_derived(mode):
    weight = np.ones((1, 8), np.float32)
    weight[0, 0] = 2.0 ** 27
    negated = weight.copy()
    negated[0, 1:] = -1.0
    original = _elu_of([helper.make_node("Mul", ["x", "w"], ["t"])], [tensor("w", weight)])
    candidate = _elu_of([helper.make_node("Mul", ["x", "w"], ["t"])], [tensor("w", negated)])
    report = verify_models(original, candidate, inputs=[{"x": _positive(3)}], trials=2, localize=False,
                           **_reference(mode))
    assert report.verdict == MISMATCH, report.outputs[0].to_dict()
    assert report.outputs[0].unexplained == 28


def test_one_ill_computed_column_lends_no_allowance_where_no_bound_is_derived():
    shift = np.zeros((1, 8), np.float32)
    shift[0, 0] = 3.0e5
    scaled = np.full((1, 8), 1.01, np.float32)
    scaled[0, 0] = 1.0

    def model(scale):
        nodes = [helper.make_node("Add", ["x", "c"], ["p"]), helper.make_node("Sub", ["p", "c"], ["d"]),
                 helper.make_node("Mul", ["d", "s"], ["t"])]
        return _elu_of(nodes, [tensor("c", shift), tensor("s", scale)])

    report = verify_models(model(np.ones((1, 8), np.float32)), model(scaled), inputs=[{"x": _positive(4)}],
                           trials=2, localize=False)
    out = report.outputs[0]
    assert report.verdict == MISMATCH, out.to_dict()
    assert out.unexplained == 28
    assert out.orig_err_max > 1e-3  # the cancelling column's error is large


def test_one_large_column_lends_no_allowance_behind_an_amplifier():
    weight = np.ones((1, 8), np.float32)
    weight[0, 0] = 2.0 ** 50
    signs = np.ones((1, 8), np.float32)
    signs[0, 1:] = -1.0
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Sqrt", ["m"], ["t"])]
    original = _elu_of(nodes, [tensor("w", weight)], signs=np.ones((1, 8), np.float32))
    candidate = _elu_of(nodes, [tensor("w", weight)], signs=signs)
    report = verify_models(original, candidate, inputs=[{"x": _positive(5)}], trials=2, localize=False)
    assert report.verdict == MISMATCH, report.outputs[0].to_dict()
    assert report.outputs[0].unexplained == 28


@pytest.mark.parametrize("mode", ["float64", "fallback"])
def test_one_sensitive_column_lends_no_allowance(mode):
    # column 0 takes the root of a cancelled difference (2^-20 of 1: a few-ulp input move changes it by
    # half), the others the root of small values; scaling those by 1% is no rounding, whatever
    # column 0's sensitivity
    x = np.full((4, 8), 1e-6, np.float32)
    x[:, 0] = 1.0
    shift = np.zeros((1, 8), np.float32)
    shift[0, 0] = 1.0 - 2.0 ** -20
    scaled = np.full((1, 8), 1.01, np.float32)
    scaled[0, 0] = 1.0

    def model(scale):
        nodes = [helper.make_node("Sub", ["x", "c"], ["d"]), helper.make_node("Sqrt", ["d"], ["r"]),
                 helper.make_node("Mul", ["r", "s"], ["t"])]
        return _elu_of(nodes, [tensor("c", shift), tensor("s", scale)])

    report = verify_models(model(np.ones((1, 8), np.float32)), model(scaled), inputs=[{"x": x}], trials=2,
                           localize=False, **_reference(mode))
    assert report.verdict == MISMATCH, report.outputs[0].to_dict()
    assert report.outputs[0].unexplained == 28


def test_hard_sigmoid_and_hard_swish_bounds_cover_onnxruntime():
    # a sweep over [-8, 8] (both clamps and the ramp) and a second one near the breakpoints -3, 3
    sweep = np.concatenate([np.linspace(-8, 8, 200001), 3.0 + np.linspace(-1e-3, 1e-3, 2001),
                            -3.0 + np.linspace(-1e-3, 1e-3, 2001)]).astype(np.float32)
    for op, attrs in (("HardSigmoid", {"alpha": 0.2, "beta": 0.5}), ("HardSigmoid", {"alpha": 1 / 6}),
                      ("HardSwish", {})):
        model = make_model([helper.make_node("Mul", ["x", "one"], ["t"]), helper.make_node(op, ["t"], ["y"], **attrs)],
                           [value_info("x", F, [sweep.size])], [value_info("y", F, None)],
                           [tensor("one", np.ones(1, np.float32))], opset=17)
        value = evaluate_float64(model, {"x": sweep})["y"]
        error = np.abs(_run(model, {"x": sweep}) - np.asarray(value, np.float64))
        worst = bound_of(value)
        assert np.all(np.isfinite(worst)) and np.all(error <= worst), op
        # tight: the bound is within 8 ulps of the largest value
        assert np.max(worst) <= 8 * float(np.spacing(np.float32(np.max(np.abs(value))))), op


# -- where no bound is in force, a cancelling element is judged by its summands' magnitude ------------

U32 = 2.0 ** -24
CANCELLED = np.array([1e-3, -2e-3, 5e-4, 1.5e-3])  # results of 768-term sums whose terms total 30
SUMMANDS = 30.0  # their magnitude M (the root-sum-square of the terms)


def _cancelled(candidate_error, magnitude=SUMMANDS):
    """One set: the original errs by 20 u of the summands (no bound in force: B = inf), the candidate by
    `candidate_error` (alternating in sign); `magnitude`: the reference's magnitude of the terms, or None."""
    signs = np.array([1.0, -1.0, 1.0, -1.0])
    original = (CANCELLED + 20 * U32 * SUMMANDS).astype(np.float32)
    candidate = (CANCELLED + signs * candidate_error).astype(np.float32)
    evidence = SetEvidence(original, original.copy(), candidate, reference=CANCELLED,
                           error_bound=np.full(4, np.inf), coherent_bound=np.zeros(4),
                           magnitude=None if magnitude is None else np.full(4, magnitude))
    return judge_output([evidence], RoundingBound.for_output(U32, 1, 768, amplifiers=(), jumps=()))


def test_cancelling_elements_without_a_bound_in_force_are_judged_by_their_summands():
    # beyond 2 e_o + gamma |R_i| (the result's own scale), within gamma * M_i = gamma * sum |terms|
    bound = RoundingBound.for_output(U32, 1, 768)
    error = 2 * 20 * U32 * SUMMANDS + 0.5 * bound.gamma * SUMMANDS
    judgement = _cancelled(error)
    assert judgement.verdict == ROUNDING and judgement.excused == {"within-bound": 4}


def test_a_cancelling_element_beyond_its_summands_magnitude_is_mismatch():
    assert _cancelled(1e-3).verdict == MISMATCH  # a third of the result, 33 u of the summands


def test_without_the_summands_magnitude_a_cancelling_element_is_judged_by_its_own_value():
    bound = RoundingBound.for_output(U32, 1, 768)
    error = 2 * 20 * U32 * SUMMANDS + 0.5 * bound.gamma * SUMMANDS
    assert _cancelled(error, magnitude=None).verdict == MISMATCH
    assert _cancelled(error, magnitude=np.nan).verdict == MISMATCH  # not derived there


def _cancelling_product(after_elu):
    """x @ w then a Mul by 2 (x = 1: column 0's terms +-1 cancel to 0.5, column 1's share a sign);
    after_elu: x passes an Elu first, an op without a rule, so no bound is derived behind it."""
    w = np.zeros((64, 2), np.float32)
    w[:, 0] = np.where(np.arange(64) % 2 == 0, 1.0, -1.0)
    w[0, 0] = 1.5
    w[:, 1] = 1.0
    head = [helper.make_node("Elu", ["x"], ["e"])] if after_elu else [helper.make_node("Identity", ["x"], ["e"])]
    model = make_model(head + [helper.make_node("MatMul", ["e", "w"], ["t"]), helper.make_node("Mul", ["t", "two"], ["y"])],
                       [value_info("x", F, [1, 64])], [value_info("y", F, None)],
                       [tensor("w", w), tensor("two", np.float32(2.0))])
    return evaluate_float64(model, {"x": np.ones((1, 64), np.float32)})["y"]


def test_magnitude_of_a_cancelling_dot_product_is_the_root_sum_square_of_its_terms():
    # behind the Elu no bound is in force, so the magnitude is computed: the product starts afresh from
    # its input's |x|, M = sqrt(sum x_k^2 w_k^2), carried by |2| (the constants carry no terms of their own)
    value = _cancelling_product(after_elu=True)
    assert not np.any(np.isfinite(probable_scale_of(value)))
    terms = magnitude_of(value)
    assert np.asarray(value, np.float64).tolist() == [[1.0, 128.0]]
    assert terms[0, 0] == pytest.approx(2 * np.sqrt(1.5 ** 2 + 63), rel=1e-4)  # a float32 product, made an upper bound
    assert terms[0, 1] == pytest.approx(2 * 8.0, rel=1e-4)  # below |R| where the terms share a sign


def test_magnitude_is_derived_where_the_probable_bound_is_finite_too():
    # the verdict reads M wherever no bound is in force, also where the probable bound is finite but the
    # original lies beyond it (deployed with fused kernels: llama's KV projections behind a fused RMS norm
    # were a false alarm while M was computed only where the probable bound was not finite)
    value = _cancelling_product(after_elu=False)
    assert np.all(np.isfinite(probable_scale_of(value)))
    assert magnitude_of(value)[0, 0] == pytest.approx(2 * np.sqrt(1.5 ** 2 + 63), rel=1e-4)
