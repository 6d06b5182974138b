"""The per-element bound where the incoming bounds are large (verify/reference/bound*.py): ops whose
output range is known cap the bound (LayerNormalization's normalised value lies in a ball of radius
sqrt(n), Softmax and Sigmoid in [0, 1], Tanh and Erf in [-1, 1]), ReLU is exact where no run can reach
its kink, InstanceNormalization has a rule of its own, and the probable pass takes a nonlinear op's
slope over the input's whole reach, not at the reference alone.

Each family: sound on sampled inputs (the float32 run never leaves the bound) and tight within a
stated factor. The large bounds come from `(x + 2^k) - 2^k`, which rounds x to a multiple of 2^(k-23):
its bound is about u * 2^k per element, far above the spread of x.
"""

from __future__ import annotations

import numpy as np
from helpers import error_and_bound, make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify.reference import bound_of, coherent_of, evaluate_float64, probable_lambda, probable_scale_of
from onnxrefine.verify.reference.bound_ops import REACH_LAMBDA

F = TensorProto.FLOAT
RNG = np.random.default_rng(2020)


def _coarse(op, shape, shift, inits=(), opset=17, **attrs):
    """y = op((x + shift) - shift, ...): the op's input carries a bound of about u * shift."""
    nodes = [helper.make_node("Add", ["x", "shift"], ["up"]), helper.make_node("Sub", ["up", "shift"], ["t"]),
             helper.make_node(op, ["t"] + [name for name, _ in inits], ["y"], **attrs)]
    return make_model(nodes, [value_info("x", F, list(shape))], [value_info("y", F, None)],
                      [tensor("shift", np.float32(shift))] + [tensor(name, value) for name, value in inits],
                      opset=opset)


def test_layer_norm_behind_a_bound_larger_than_the_spread_is_capped_by_its_ball():
    # rows of spread ~1 whose elements each err by up to 4 (x rounded to multiples of 8): the variance
    # bound exceeds the variance, which left B = +inf; the normalised value lies within sqrt(16) anyway
    x = RNG.standard_normal((20_000, 16)).astype(np.float32)
    model = _coarse("LayerNormalization", x.shape, 2.0 ** 26, [("g", np.ones(16, np.float32)),
                                                              ("b", np.zeros(16, np.float32))], axis=-1)
    error, bound, reference = error_and_bound(model, {"x": x})
    assert np.all(np.isfinite(bound))
    assert np.all(error <= bound)
    assert np.all(bound <= np.abs(reference) + 4.0 * 1.001)  # |x^| + sqrt(n), n = 16
    assert float(np.max(error / bound)) >= 0.3  # tight within a factor 3.3: a run can hit the ball's edge


def test_softmax_sigmoid_tanh_and_erf_behind_large_bounds_stay_within_their_ranges():
    x = RNG.standard_normal((4096, 8)).astype(np.float32)
    for op, attrs, cap in [("Softmax", {"axis": -1}, lambda y: np.maximum(y, 1.0 - y)),
                           ("Sigmoid", {}, lambda y: np.maximum(y, 1.0 - y)),
                           ("Tanh", {}, lambda y: 1.0 + np.abs(y)), ("Erf", {}, lambda y: 1.0 + np.abs(y))]:
        error, bound, reference = error_and_bound(_coarse(op, x.shape, 2.0 ** 26, **attrs), {"x": x})
        assert np.all(error <= bound), op
        # the range caps, plus the op's own rounding (a few u of the capped value)
        assert np.all(bound <= cap(reference) * (1.0 + 1e-5) + 1e-6), op
        assert float(np.max(error / bound)) >= 0.2, op  # tight within a factor 5 where the input is coarse


def test_smooth_ops_carrying_bounds_are_sound_and_tight():
    # f(a * b + c) with bounds carried in: the slope over the interval (Tanh, Sigmoid), the interval's
    # image (Exp, Log, Sqrt, Softplus): one rounding of the product and sum, one of f
    a, b, c = (RNG.uniform(-3, 3, 200_000).astype(np.float32) for _ in range(3))
    for op, pre in [("Exp", None), ("Tanh", None), ("Sigmoid", None), ("Softplus", None), ("Log", "Abs"),
                    ("Sqrt", "Abs")]:
        nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Add", ["p", "c"], ["s"])]
        last = "s"
        if pre:
            nodes.append(helper.make_node(pre, ["s"], ["q"]))
            last = "q"
        nodes.append(helper.make_node(op, [last], ["y"]))
        model = make_model(nodes, [value_info(name, F, [a.size]) for name in "abc"], [value_info("y", F, None)])
        error, bound, _ = error_and_bound(model, {"a": a, "b": b, "c": c})
        ratio = float(np.max(np.where(bound > 0, error / np.where(bound > 0, bound, 1.0), 0.0)))
        assert ratio <= 1.0, op
        assert ratio >= 0.15, (op, ratio)  # three roundings (and the kernel's) rarely all align


def test_relu_is_exact_where_no_run_reaches_its_kink():
    # Relu(a * b): where a*b + its bound < 0 every run gives 0 exactly, so B = 0 there (it was B of a*b)
    a, b = RNG.standard_normal(100_000).astype(np.float32), RNG.standard_normal(100_000).astype(np.float32)
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Relu", ["p"], ["y"])]
    model = make_model(nodes, [value_info("a", F, [a.size]), value_info("b", F, [b.size])], [value_info("y", F, None)])
    error, bound, _ = error_and_bound(model, {"a": a, "b": b})
    product = a.astype(np.float64) * b
    negative = product < -1e-6 * np.abs(product).max()
    assert np.all(error <= bound)
    assert not bound[negative].any() and not error[negative].any()
    assert bound[product > 0].all()


def test_instance_norm_has_a_derived_bound_that_is_sound():
    x = (RNG.standard_normal((16, 6, 12, 12)) * np.exp2(RNG.integers(-4, 5, (16, 6, 1, 1)))).astype(np.float32)
    model = make_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)],
                       [value_info("x", F, list(x.shape))], [value_info("y", F, None)],
                       [tensor("s", RNG.uniform(0.5, 2.0, 6).astype(np.float32)),
                        tensor("b", RNG.standard_normal(6).astype(np.float32))])
    error, bound, _ = error_and_bound(model, {"x": x})
    ratio = float(np.max(error / bound))
    assert ratio <= 1.0
    assert ratio >= 0.002, ratio  # the same worst case as LayerNormalization: gamma(144) on the mean and variance


def _probable_in_and_out(model, feeds, into="t"):
    values = evaluate_float64(model, feeds, outputs=[into, "y"])
    return (np.asarray(values[into], np.float64), probable_scale_of(values[into]), bound_of(values[into]),
            np.asarray(values["y"], np.float64), probable_scale_of(values["y"]))


def _cancelling_sum(op, rows, shift):
    """y = op(t), t = ReduceSum(X) over 64 columns of +-2^16 that cancel in pairs plus a column x:
    t = x exactly, but the sum of |terms| is large, so t's worst case B and its scale sigma are large,
    sigma ~ B / 8 (the sum's own rounding: sqrt(n) u against gamma(n))."""
    x = RNG.uniform(-1, 1, rows) + shift
    big = np.float32(2.0 ** 16) * np.where(RNG.random((rows, 32)) < 0.5, 1.0, -1.0)
    columns = np.concatenate([big, -big, x[:, None]], axis=1)
    columns = np.take_along_axis(columns, RNG.random(columns.shape).argsort(axis=1), axis=1).astype(np.float32)
    nodes = [helper.make_node("ReduceSum", ["X", "axes"], ["t"], keepdims=0), helper.make_node(op, ["t"], ["y"])]
    model = make_model(nodes, [value_info("X", F, list(columns.shape))], [value_info("y", F, None)],
                       [tensor("axes", np.array([1], np.int64))])
    return model, {"X": columns}


def test_probable_scale_of_exp_and_reciprocal_covers_every_lambda_over_the_input_reach():
    # an input error of scale sigma reaches lambda * sigma (never beyond its worst-case bound B); the
    # output's lambda * sigma_out must cover f there. Taken at the slope near x alone, it does not:
    # exp(x + lambda s) - exp(x) exceeds lambda * (exp(x + s) - exp(x)).
    for op, f, shift in [("Exp", np.exp, 0.0), ("Reciprocal", lambda t: 1.0 / t, 8.0)]:
        t, sigma, worst, y, sigma_out = _probable_in_and_out(*_cancelling_sum(op, 4096, shift))
        assert np.all(sigma < worst) and np.median(REACH_LAMBDA * sigma) > 0.5  # far from small
        for lam in (probable_lambda(1), probable_lambda(10 ** 6), REACH_LAMBDA):
            reach = np.minimum(lam * sigma, worst)
            moved = np.maximum(np.abs(f(t + reach) - y), np.abs(f(t - reach) - y))
            assert np.all(lam * sigma_out >= moved * (1.0 - 1e-9)), (op, lam)


def test_a_candidate_within_bound_and_coherent_bound_at_a_relu_input_stays_within_them_after_it():
    # x = p - q, with p = a*b rounded (B) and q a weight a candidate may hold rounded (K): a candidate
    # off by T + K before the Relu is off by at most T + K after it, where x + B < 0 but x + B + K > 0 too
    a = RNG.standard_normal(50_000).astype(np.float32)
    # q lies within a few bounds of a*b: x is near the kink, where the two reaches differ
    q = (a.astype(np.float64) * 1e3 + RNG.uniform(-3e-4, 3e-4, a.size)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Sub", ["p", "q"], ["x"]),
             helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [value_info("a", F, [a.size])], [value_info("y", F, None), value_info("x", F, None)],
                       [tensor("b", np.float32(1e3) * np.ones(a.size, np.float32)), tensor("q", q)])
    values = evaluate_float64(model, {"a": a}, outputs=["x", "y"])
    x, y = np.asarray(values["x"], np.float64), values["y"]
    width = bound_of(values["x"]) + coherent_of(values["x"])
    reached = np.where(x >= 0, width, np.maximum(x + width, 0.0))  # the candidate's largest Relu change
    assert np.all((bound_of(y) + coherent_of(y)) * (1.0 + 1e-12) >= reached)
    assert np.any((x + bound_of(values["x"]) < 0) & (x + width > 0))  # the case the coherent reach covers


def test_zero_dimensional_values_get_a_derived_bound():
    # a 0-d value's arithmetic returns numpy scalars, which the in-place rounding must not trip on:
    # every op here gets a derived (not NaN) bound that holds the run
    ops = ["Sigmoid", "Tanh", "Erf", "Exp"]
    nodes = [helper.make_node("Div", ["c", "d"], ["q"]), helper.make_node("Add", ["x", "q"], ["t"])]
    nodes += [helper.make_node(op, ["t"], [op.lower()]) for op in ops]
    model = make_model(nodes, [value_info("x", F, [])], [value_info(op.lower(), F, []) for op in ops] +
                       [value_info("q", F, [])],
                       [tensor("c", np.float32(0.7)), tensor("d", np.float32(3.0))])
    for output in [op.lower() for op in ops] + ["q"]:
        error, bound, _ = error_and_bound(model, {"x": np.array(0.3, np.float32)}, output)
        assert bound.shape == () and np.all(error <= bound), output
