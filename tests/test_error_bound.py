"""The per-element error bound (verify/reference/bound*.py), family by family: sound and tight.

Sound: on sampled inputs (about 10^6 elements over the whole file, vectorised: each onnxruntime run
evaluates a whole batch), the float32 run's distance from float64 never exceeds its element's bound.
Tight: the worst observed error reaches a stated fraction of its bound (each test states the factor
and where the looseness comes from). Exact families: the bound is 0 and the run is bit-identical.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import error_and_bound, make_model, run, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify.reference.bound import bound_of, coherent_of
from onnxrefine.verify.reference.evaluator import evaluate_float64

F = TensorProto.FLOAT
U = 2.0 ** -24


def _measure(model, feeds, output="y"):
    """(largest error / bound over elements with bound > 0, errors where the bound is 0, bound)."""
    error, bound, _ = error_and_bound(model, feeds, output)
    positive = bound > 0
    ratio = float((error[positive] / bound[positive]).max(initial=0.0))
    return ratio, error[~positive], bound


def _one(op, inputs, shape=None, inits=(), **attrs):
    names = [name for name, _ in inputs]
    nodes = [helper.make_node(op, names + [name for name, _ in inits], ["y"], **attrs)]
    return make_model(nodes, [value_info(name, F, list(value.shape)) for name, value in inputs],
                      [value_info("y", F, shape)], [tensor(name, value) for name, value in inits])


RNG = np.random.default_rng(20)


def _wide(size):
    """Float32 values of random sign over many binades (a cancelling or a large sum is likely)."""
    return (RNG.standard_normal(size) * np.exp2(RNG.integers(-8, 9, size))).astype(np.float32)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_correctly_rounded_binary_ops_are_sound_and_tight(op):
    # one rounding: the worst error approaches its bound u*(|a|+|b|) (Add/Sub: same signs) or u*|y|
    a, b = _wide(100_000), _wide(100_000)
    ratio, exact_errors, _ = _measure(_one(op, [("a", a), ("b", b)]), {"a": a, "b": b})
    assert ratio <= 1.0
    assert ratio >= 0.5, ratio  # tight within a factor 2
    assert not exact_errors.any()


def test_a_chain_of_elementwise_ops_carries_the_bounds_soundly():
    # (a*b + c) / sqrt(|d| + 1): the carried bounds compound; the first-order worst case is looser
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Add", ["p", "c"], ["s"]),
             helper.make_node("Abs", ["d"], ["ad"]), helper.make_node("Add", ["ad", "one"], ["e"]),
             helper.make_node("Sqrt", ["e"], ["r"]), helper.make_node("Div", ["s", "r"], ["y"])]
    feeds = {name: _wide(100_000) for name in "abcd"}
    model = make_model(nodes, [value_info(name, F, [100_000]) for name in "abcd"], [value_info("y", F, None)],
                       [tensor("one", np.float32(1.0))])
    ratio, _, _ = _measure(model, feeds)
    assert 0.1 <= ratio <= 1.0, ratio  # tight within a factor 10 (four roundings rarely align)


@pytest.mark.parametrize("op", ["Exp", "Log", "Tanh", "Sigmoid", "Erf", "Softplus", "Sin", "Cos"])
def test_library_accuracy_covers_onnxruntime(op):
    x = RNG.uniform(-20, 20, 60_000).astype(np.float32)
    if op == "Log":
        x = np.exp(RNG.uniform(-60, 60, 60_000)).astype(np.float32)
    ratio, _, _ = _measure(_one(op, [("x", x)]), {"x": x})
    assert ratio <= 1.0
    assert ratio >= 0.25, ratio  # the measured margin of LIBRARY_ULPS stays under 4x


@pytest.mark.parametrize("k", [2, 3, 8, 31])
def test_matmul_bound_is_sound_and_tight_on_same_sign_terms(k):
    # Same-sign terms: no cancellation, so gamma_k * sum|a b| is the whole story; random roundings
    # reach about sqrt(k)/k of the worst case that every rounding aligned would reach.
    x = np.abs(_wide(8192 * k)).reshape(8192, k)
    w = np.abs(_wide(k * 4)).reshape(k, 4)
    ratio, _, _ = _measure(_one("MatMul", [("x", x)], inits=[("w", w)]), {"x": x})
    assert ratio <= 1.0
    assert ratio >= 0.5 / math.sqrt(k), ratio


def test_matmul_of_two_activations_carries_both_bounds():
    a, c = _wide(64 * 16).reshape(64, 16), _wide(64 * 16).reshape(64, 16)
    b = RNG.uniform(-4, 4, (16, 32)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["a", "c"], ["ac"]), helper.make_node("Exp", ["b"], ["eb"]),
             helper.make_node("MatMul", ["ac", "eb"], ["y"])]
    model = make_model(nodes, [value_info("a", F, [64, 16]), value_info("b", F, [16, 32]), value_info("c", F, [64, 16])],
                       [value_info("y", F, None)])
    ratio, _, _ = _measure(model, {"a": a, "b": b, "c": c})
    assert 0.01 <= ratio <= 1.0, ratio


def test_conv_gemm_and_pools_are_sound():
    x = _wide(4 * 3 * 16 * 16).reshape(4, 3, 16, 16)
    w = _wide(8 * 3 * 3 * 3).reshape(8, 3, 3, 3)
    bias = _wide(8)
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2],
                                                                      strides=[2, 2]),
             helper.make_node("AveragePool", ["m"], ["p"], kernel_shape=[3, 3]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1)]
    model = make_model(nodes, [value_info("x", F, [4, 3, 16, 16])], [value_info("y", F, None)],
                       [tensor("w", w), tensor("bias", bias), tensor("gw", _wide(5 * 8).reshape(5, 8)),
                        tensor("gb", _wide(5))])
    for name in ("c", "p", "y"):
        model.graph.output.append(value_info(name, F, None))
        ratio, _, _ = _measure(model, {"x": x}, output=name)
        assert ratio <= 1.0, name
    ratio, _, _ = _measure(model, {"x": x}, output="c")
    assert ratio >= 0.02, ratio  # 28 mixed-sign terms: sum|a b| is ~5x |sum|, rounding ~sqrt(28)/28


def test_conv_transpose_is_sound_and_within_a_stated_factor():
    # grouped, strided, padded and output-padded: each output sums a varying number of terms
    x = _wide(2 * 4 * 9 * 7).reshape(2, 4, 9, 7)
    w = _wide(4 * 3 * 3 * 2).reshape(4, 3, 3, 2)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "bias"], ["y"], group=2, strides=[2, 2],
                              pads=[0, 1, 1, 0], output_padding=[1, 0])]
    model = make_model(nodes, [value_info("x", F, [2, 4, 9, 7])], [value_info("y", F, None)],
                       [tensor("w", w), tensor("bias", _wide(6))])
    ratio, zero_errors, _ = _measure(model, {"x": x})
    assert ratio <= 1.0 and not zero_errors.any()
    assert ratio >= 0.02, ratio


def test_reductions_softmax_and_normalizations_are_sound():
    x = _wide(256 * 64).reshape(256, 64)
    checks = [
        ("ReduceSum", {"keepdims": 1}, [("axes", np.array([1], np.int64))]),
        ("ReduceMean", {"axes": [1]}, []),
        ("Softmax", {"axis": 1}, []),
        ("LogSoftmax", {"axis": 1}, []),
        ("LayerNormalization", {"axis": -1}, [("scale", _wide(64)), ("shift", _wide(64))]),
    ]
    for op, attrs, inits in checks:
        opset = 18 if op == "ReduceMean" else 17
        node = helper.make_node(op, ["x"] + [name for name, _ in inits], ["y"], **attrs)
        model = make_model([node], [value_info("x", F, [256, 64])], [value_info("y", F, None)],
                           [tensor(name, value) for name, value in inits], opset=17 if opset == 18 else opset)
        ratio, _, _ = _measure(model, {"x": x})
        assert ratio <= 1.0, op
    x4 = _wide(8 * 6 * 5 * 5).reshape(8, 6, 5, 5)
    params = [tensor(name, value) for name, value in (("s", _wide(6)), ("b", _wide(6)), ("m", _wide(6)),
                                                      ("v", np.abs(_wide(6)) + np.float32(0.1)))]
    model = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                       [value_info("x", F, [8, 6, 5, 5])], [value_info("y", F, None)], params)
    ratio, _, _ = _measure(model, {"x": x4})
    assert 0.01 <= ratio <= 1.0, ratio


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax"])
def test_a_reduction_that_picks_takes_the_largest_bound_it_may_pick(op):
    # each row: one large product (bound ~u * 1e3) beside small ones (bound ~u * 1e-3); the min (max)
    # picks the large one, so its bound must be that element's, not the smallest of the row
    a = _wide(4096 * 8).reshape(4096, 8)
    sign = -1.0 if op == "ReduceMin" else 1.0
    b = np.full((4096, 8), 1e-3, np.float32)
    b[:, 3] = np.float32(1e3)
    a[:, 3] = np.float32(sign) * (np.abs(a[:, 3]) + np.float32(300.0))
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node(op, ["p", "axes"], ["y"], keepdims=0)]
    model = make_model(nodes, [value_info("a", F, [4096, 8])], [value_info("y", F, None)],
                       [tensor("b", b), tensor("axes", np.array([1], np.int64))], opset=18)
    ratio, zero_errors, _ = _measure(model, {"a": a})
    assert ratio <= 1.0 and not zero_errors.any()
    assert ratio >= 0.5  # one rounding, carried unchanged


def test_exact_families_have_a_zero_bound_and_are_bit_identical():
    # products by powers of two, x + 0, sums and dot products of small integers, data movement
    x = _wide(4096).reshape(64, 64)
    ints = RNG.integers(-20, 20, (64, 64)).astype(np.float32)  # every partial sum below 2^24
    nodes = [helper.make_node("Mul", ["x", "pow2"], ["a"]), helper.make_node("Add", ["a", "zero"], ["b"]),
             helper.make_node("Transpose", ["b"], ["t"]), helper.make_node("MatMul", ["n", "n"], ["nn"]),
             helper.make_node("ReduceSum", ["nn", "axes"], ["s"]), helper.make_node("Concat", ["t", "nn"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [64, 64]), value_info("n", F, [64, 64])], [value_info("y", F, None)],
                       [tensor("pow2", np.exp2(RNG.integers(-20, 20, 64)).astype(np.float32)),
                        tensor("zero", np.float32(0.0)), tensor("axes", np.array([1], np.int64))])
    model.graph.output.append(value_info("s", F, None))
    feeds = {"x": x, "n": ints}
    for index, name in enumerate(("y", "s")):
        observed = run(model, feeds)[index].astype(np.float64)
        value = evaluate_float64(model, feeds, outputs=[name])[name]
        assert not bound_of(value).any(), name
        assert np.array_equal(observed, np.asarray(value)), name


def test_a_product_exact_in_the_wide_type_but_not_in_float16_is_not_exact():
    # by a power of two that underflows (2^-24 * 0.0253 rounds to 0: a rounded 0 is no exact one), and of
    # integers beyond 2^11 (683 * 3 = 2049 rounds to 2048: within 2^11 only once rounded); a candidate
    # computing the product in float32 (onnxruntime's float16 Mul on the CPU) lies that far from float64
    H = TensorProto.FLOAT16
    x = np.array([2.0 ** -24, 2.0 ** -24, 683.0], np.float16)
    k = np.array([-0.0253, 0.3977, 3.0], np.float16)
    model = make_model([helper.make_node("Mul", ["x", "k"], ["y"])], [value_info("x", H, [3])],
                       [value_info("y", H, None)], [tensor("k", k)])
    value = evaluate_float64(model, {"x": x}, outputs=["y"])["y"]
    exact = x.astype(np.float64) * k.astype(np.float64)
    assert np.all(bound_of(value) >= np.abs(exact - np.asarray(value)))
    assert np.all(bound_of(value) > 0)


def test_float16_products_and_quotients_below_the_normal_range_are_sound_and_finite():
    # x / (x * k) over binades reaching float16's subnormals (fuzz campaign of seed 900000, case 11078: a
    # one-step subnormal x, whose product with 0.594 the spec rounds back to x). Each run's rounding errs
    # by at most half a subnormal step below the normal range; the reference rounds too, by an amount it
    # knows. Three runs: the spec's (each op rounded to float16), a run that skips the product's rounding
    # (onnxruntime's float32 kernels once the Cast between them is gone) and onnxruntime's float16 run.
    H = TensorProto.FLOAT16
    rng = np.random.default_rng(11078)
    size = 100_000
    x = (rng.standard_normal(size) * np.exp2(rng.integers(-26, 2, size))).astype(np.float16)
    k = (rng.uniform(0.3, 1.7, size) * rng.choice([-1, 1], size)).astype(np.float16)
    x[:4], k[:4] = np.float16(2.0 ** -24), np.float16([0.594, 0.51, 0.99, -1.4])
    model = make_model([helper.make_node("Mul", ["x", "k"], ["p"]), helper.make_node("Div", ["x", "p"], ["y"])],
                       [value_info("x", H, [size]), value_info("k", H, [size])], [value_info("y", H, None)])
    value = evaluate_float64(model, {"x": x, "k": k}, outputs=["y"])["y"]
    reference, bound = np.asarray(value, np.float64), bound_of(value)
    with np.errstate(all="ignore"):
        spec = (x / (x * k)).astype(np.float64)  # numpy rounds each float16 op to float16
        skipped = (x.astype(np.float32) / (x.astype(np.float32) * k.astype(np.float32))).astype(np.float16)
    known = np.isfinite(reference) & (x != 0)
    onnxruntime = run(model, {"x": x, "k": k})[0].astype(np.float64)
    for observed in (spec, skipped.astype(np.float64), onnxruntime):
        error = np.abs(observed - reference)[known]
        assert np.all(error <= bound[known]), np.flatnonzero(error > bound[known])[:5]
    # the one-step subnormal x by 0.594: 1.0 by the spec, 1.68 computed in float32, both within a finite bound
    assert reference[0] == 1.0 and np.isfinite(bound[0]) and abs(float(skipped[0]) - 1.0) <= bound[0]
    assert np.isfinite(bound[known]).mean() > 0.99
    # tight within a factor 2 where a run skips the product's rounding (first-order worst case of a quotient)
    finite = known & np.isfinite(bound) & (bound > 0)
    assert np.max(np.abs(skipped.astype(np.float64) - reference)[finite] / bound[finite]) >= 0.5


def test_a_sum_that_cancels_is_not_exact_and_a_jump_within_reach_is_bounded_by_it():
    # Floor(x * 3 * (1/3)): near an integer the run may land on either side; the bound says 1 there
    x = np.concatenate([np.arange(-50, 50, dtype=np.float32), _wide(1000)]).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "three"], ["a"]), helper.make_node("Mul", ["a", "third"], ["b"]),
             helper.make_node("Floor", ["b"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [x.size])], [value_info("y", F, None)],
                       [tensor("three", np.float32(3.0)), tensor("third", np.float32(1) / np.float32(3))])
    ratio, zero_errors, bound = _measure(model, {"x": x})
    assert ratio <= 1.0 and not zero_errors.any()
    assert set(np.unique(bound[:100])) <= {0.0, 1.0} and bound[:100].any()


def test_a_maxpool_over_bounds_not_derived_is_not_derived_there_and_never_negative():
    # the pool's kernel skips a NaN bound, and a window of one element and padding then picked the
    # padding's lowest: a negative coherent bound (fuzz campaign of seed 900000, case 27184)
    x = _wide(2 * 5).reshape(1, 2, 5)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Hardmax", ["x"], ["h"]),
             helper.make_node("Concat", ["a", "h"], ["c"], axis=2),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2], strides=[2], pads=[0, 1])]
    model = make_model(nodes, [value_info("x", F, [1, 2, 5])], [value_info("y", F, None)])
    value = evaluate_float64(model, {"x": x}, outputs=["y"])["y"]
    for bound in (bound_of(value), coherent_of(value)):
        assert not np.any(bound < 0)
        assert np.all(np.isfinite(bound[..., :2])) and np.all(np.isnan(bound[..., 3:]))  # window 2 reads both


def test_unsupported_ops_are_not_derived_and_inputs_are_exact():
    x = _wide(16)
    model = _one("Hardmax", [("x", x.reshape(4, 4))])
    value = evaluate_float64(model, {"x": x.reshape(4, 4)}, outputs=["y"])["y"]
    assert np.isnan(bound_of(value)).all()
    weight = _wide(16).reshape(4, 4)
    model = _one("MatMul", [("x", x.reshape(4, 4))], inits=[("w", weight)])
    value = evaluate_float64(model, {"x": x.reshape(4, 4)}, outputs=["y"])["y"]
    assert np.allclose(coherent_of(value), U * np.abs(x.reshape(4, 4)) @ np.abs(weight))
    assert evaluate_float64(model, {"x": x.reshape(4, 4)}, outputs=["y"], error_bounds=False)["y"].__class__ \
        is np.ndarray
