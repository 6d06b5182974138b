"""Verdict and localisation false alarms from the fuzz campaigns (bench/FUZZ_FINDINGS.md), each with
the real bug its fix must still catch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from onnx import TensorProto

import onnxrefine
from onnxrefine.verify import verify_models
from onnxrefine.verify.localize.layerwise import localize
from onnxrefine.verify.reference.evaluator import evaluate_float64

NAN, INF = np.nan, np.inf


# -- MaxPool over NaN (case 487 of seed 1000000, onnxrefine pipeline) ---------------------------------

def _pool_model(**attrs) -> onnx.ModelProto:
    nodes = [onnx.helper.make_node("MaxPool", ["x"], ["y"], **attrs)]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [1, 1, 9])],
                      [value_info("y", TensorProto.FLOAT, None)], opset=13)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[2], strides=[2]),
                                   dict(kernel_shape=[2], strides=[2], ceil_mode=1),
                                   dict(kernel_shape=[3], strides=[2], pads=[1, 1])])
def test_reference_max_pool_skips_nan_as_onnxruntime_does(attrs):
    # windows: NaN with numbers (the numbers' maximum), NaN only, NaN and padding only (no maximum:
    # onnxruntime's float32 kernel gives the lowest float32, and so does the reference)
    x = np.array([-3, 2, NAN, NAN, NAN, 1, 1, NAN, NAN], np.float32).reshape(1, 1, 9)
    model = _pool_model(**attrs)
    expected = run(model, {"x": x})[0]
    got = evaluate_float64(model, {"x": x})["y"]
    np.testing.assert_array_equal(got, expected.astype(np.float64))


def _pool_conv_bn(scale_into_weight: float | None = None) -> onnx.ModelProto:
    """MaxPool (ceil_mode: the last window holds one element) -> Conv (weight 2) -> BN (scale 1/4).
    With `scale_into_weight`, the Conv+BN pair is replaced by one Conv of that weight (a fold)."""
    pool = onnx.helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2], ceil_mode=1)
    inits = [tensor("w", np.full((1, 1, 1), 2.0, np.float32)), tensor("b", np.zeros(1, np.float32))]
    if scale_into_weight is None:
        nodes = [pool, onnx.helper.make_node("Conv", ["p", "w", "b"], ["c"]),
                 onnx.helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"], epsilon=0.0)]
        inits += [tensor("s", np.array([0.25], np.float32)), tensor("bb", np.zeros(1, np.float32)),
                  tensor("m", np.zeros(1, np.float32)), tensor("v", np.ones(1, np.float32))]
    else:
        inits[0] = tensor("w", np.full((1, 1, 1), scale_into_weight, np.float32))
        nodes = [pool, onnx.helper.make_node("Conv", ["p", "w", "b"], ["y"])]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [1, 1, 5])],
                      [value_info("y", TensorProto.FLOAT, [1, 1, 3])], inits, opset=13)


def _nan_window_inputs():
    # the last window holds NaN alone: onnxruntime's MaxPool gives -FLT_MAX there, which the
    # original's Conv overflows to -inf before BN scales it; the folded Conv stays finite
    return [{"x": np.array([0.5, -1.0, 3.0, 0.25, NAN], np.float32).reshape(1, 1, 5)}]


def test_bn_fold_behind_a_nan_only_max_pool_window_is_not_a_mismatch():
    original = _pool_conv_bn()
    candidate = onnxrefine.optimize(original, ["fuse_bn_into_conv"])
    assert "BatchNormalization" not in op_types(candidate)
    feeds = _nan_window_inputs()
    o, c = run(original, feeds[0])[0], run(candidate, feeds[0])[0]
    assert o[0, 0, 2] == -np.inf and np.isfinite(c[0, 0, 2])  # the case: the original overflows
    report = verify_models(original, candidate, inputs=feeds)
    assert report.verdict in ("rounding", "exact"), report.to_dict()


def test_wrong_fold_behind_a_nan_only_max_pool_window_is_still_a_mismatch():
    # the fold with a 20% wrong scale: on the window the reference now evaluates, it is off
    report = verify_models(_pool_conv_bn(), _pool_conv_bn(scale_into_weight=0.6), inputs=_nan_window_inputs())
    assert report.verdict == "mismatch"
    assert report.localisation["first_bad"]["name"] == "y"


# -- onnxruntime float16 Softmax on a row with both infinities (case 282 of seed 500000) ----------------

def _softmax_chain(with_concats: bool, *, c_scale: float = 1.0, w_scale: float = 1.0) -> onnx.ModelProto:
    """Div(c, x) -> [Concat -> Concat] -> Softmax(axis 0) -> MatMul(w) -> ArgMax, float16: the case's
    graph, before (one-input Concats) and after onnxoptimizer's eliminate_nop_concat."""
    src, nodes = "d", [onnx.helper.make_node("Div", ["c", "x"], ["d"])]
    if with_concats:
        nodes += [onnx.helper.make_node("Concat", ["d"], ["k1"], axis=0),
                  onnx.helper.make_node("Concat", ["k1"], ["k2"], axis=-3)]
        src = "k2"
    nodes += [onnx.helper.make_node("Softmax", [src], ["s"], axis=0),
              onnx.helper.make_node("MatMul", ["s", "w"], ["m"]),
              onnx.helper.make_node("ArgMax", ["m"], ["y"], axis=-2, keepdims=0)]
    w = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float16) * np.float16(w_scale)
    c = np.array([[0.275, 0.5454, 0.06476, 0.856]], np.float16) * np.float16(c_scale)
    return make_model(nodes, [value_info("x", TensorProto.FLOAT16, [4, 6, 4])],
                      [value_info("y", TensorProto.INT64, [4, 4])], [tensor("w", w), tensor("c", c)], opset=17)


def _two_infinities():
    # 0.856 / -0 = -inf and 0.856 / 6e-8 = +inf (float16 overflow) in one Softmax column
    x = np.random.default_rng(1).uniform(0.5, 2.0, (4, 6, 4)).astype(np.float16)
    x[:, 2, 3] = [-0.0, 1.0, 5.96e-08, 0.507]
    return {"x": x}


def _localise(original, candidate) -> dict:
    # No perturbation runs of the original: they may or may not call the NaN positions unstable
    # (depending on which few-ulp moves a seed draws); the explanation must hold without them.
    return localize(original, candidate, [("two infinities", _two_infinities())], u=2.0 ** -11,
                    perturb_count=0, seed=0)


def test_float16_softmax_artefact_of_onnxruntime_is_not_named_as_first_bad_value():
    section = _localise(_softmax_chain(True), _softmax_chain(False))
    if section["first_differing"] is None:
        pytest.skip("this onnxruntime computes the two Softmax nodes alike (the artefact is gone)")
    assert section["first_bad"] is None, section["first_bad"]
    assert section["verdict"] == "unstable"
    explained = {v["name"]: v["runtime_artefact"] for v in section["values"] if v["runtime_artefact"]}
    assert set(explained) == {"s", "m"}, section["values"]
    assert "computed s differently" in explained["m"]


@pytest.mark.parametrize("change, first_bad", [(dict(w_scale=1.5), "m"), (dict(c_scale=1.5), "s")])
def test_a_real_change_next_to_the_float16_softmax_artefact_is_still_named(change, first_bad):
    # a changed MatMul weight (downstream) or Div constant (upstream): the nodes from the change on
    # are not the same, so nothing there is the runtime's doing
    section = _localise(_softmax_chain(True), _softmax_chain(False, **change))
    assert section["verdict"] == "mismatch"
    assert section["first_bad"]["name"] == first_bad, section["first_bad"]
    assert not section["first_bad"]["runtime_artefact"]
    report = verify_models(_softmax_chain(True), _softmax_chain(False, **change), inputs=[_two_infinities()])
    assert report.verdict == "mismatch" and report.localisation["first_bad"]["name"] == first_bad


# -- a Cast to int64 of values near 1e19 inside the graph (case 27922 of seed 1100000, fuse_bn_into_conv) --

def test_an_intermediate_cast_to_int_is_judged_by_the_margin_of_its_feed():
    # the BN fold's rounding moves a float near 8e18 by an ulp (1e12), and the Cast to int64 of it with
    # it: every such element lies within its own bound of an integer boundary (unstable, as at an
    # output), where localisation without the feed's float64 value called 130 elements a mismatch
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1127922, max_nodes=20, opset=18, target="fuse_bn_into_conv")
    candidate = onnxrefine.optimize(case.model, ["fuse_bn_into_conv"])
    report = verify_models(case.model, candidate, seed=1127922, dims=case.input_dims, trials=2)
    assert report.verdict == "rounding", report.localisation.get("first_bad")
    cast = next(v for v in report.localisation["values"] if v["op"] == "Cast" and v["dtype"] == "int64")
    assert cast["verdict"] == "unstable"


def _cast_inside(rounded: bool) -> onnx.ModelProto:
    # t = Cast(x * 1000) to int64 feeds only a comparison that is true either way: the output hides t;
    # `rounded`: the Cast of Round(s), which moves t by 1 where s's fraction is at least 0.5
    nodes = [onnx.helper.make_node("Mul", ["x", "k"], ["s"])]
    nodes += [onnx.helper.make_node("Round", ["s"], ["r"])] if rounded else []
    nodes += [onnx.helper.make_node("Cast", ["r" if rounded else "s"], ["t"], to=TensorProto.INT64),
              onnx.helper.make_node("Greater", ["t", "low"], ["y"])]
    return make_model(nodes, [value_info("x", TensorProto.FLOAT, [64])], [value_info("y", TensorProto.BOOL, None)],
                      [tensor("k", np.float32(1000.0)), tensor("low", np.int64(-10**9))])


def test_an_intermediate_cast_to_int_that_changes_far_from_its_boundaries_is_still_a_mismatch():
    x = np.random.default_rng(0).uniform(1.0, 2.0, 64).astype(np.float32)
    report = verify_models(_cast_inside(False), _cast_inside(True), inputs=[{"x": x}])
    assert report.outputs[0].verdict == "exact"
    assert report.verdict == "mismatch" and report.first_bad_value["name"] == "t"
