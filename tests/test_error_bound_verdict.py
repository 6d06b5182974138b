"""The verdict with the per-element derived bound (verify/reference/bound.py): real bugs that a bound shared
across elements excused, the systematic test, and legitimate rewrites that stay `rounding`.

Each of the three bug pairs below was judged `rounding` before the bound was per element: one large
column lent every element its allowance, one cancelling column lent every element its error, and a
bias below every element's bound passed on every element.
"""

from __future__ import annotations

import numpy as np
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, ROUNDING, verify_models

F = TensorProto.FLOAT


def _judge(original, candidate, feeds, **kwargs):
    kwargs.setdefault("trials", 2)
    return verify_models(original, candidate, inputs=[feeds], **kwargs)


def _mul_by(weight):
    return make_model([helper.make_node("Mul", ["x", "w"], ["y"])], [value_info("x", F, [4, 8])],
                      [value_info("y", F, None)], [tensor("w", weight)])


def test_negated_columns_beside_a_large_column_are_mismatch():
    weight = np.ones((1, 8), np.float32)
    weight[0, 0] = 2.0 ** 27
    negated = weight.copy()
    negated[0, 1:] = -1.0
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    report = _judge(_mul_by(weight), _mul_by(negated), {"x": x})
    assert report.verdict == MISMATCH, report.to_dict()["outputs"][0]
    assert report.outputs[0].unexplained == 28


def _cancel_then_scale(scale):
    """y = ((x + c) - c) * s: column 0 cancels a large c (its float32 error is large), the others are exact."""
    shift = np.zeros((1, 8), np.float32)
    shift[0, 0] = 3.0e5
    nodes = [helper.make_node("Add", ["x", "c"], ["t"]), helper.make_node("Sub", ["t", "c"], ["d"]),
             helper.make_node("Mul", ["d", "s"], ["y"])]
    return make_model(nodes, [value_info("x", F, [4, 8])], [value_info("y", F, None)],
                      [tensor("c", shift), tensor("s", scale)])


def test_scaled_columns_beside_a_cancelling_column_are_mismatch():
    ones = np.ones((1, 8), np.float32)
    scaled = np.full((1, 8), 1.01, np.float32)
    scaled[0, 0] = 1.0
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    report = _judge(_cancel_then_scale(ones), _cancel_then_scale(scaled), {"x": x})
    assert report.verdict == MISMATCH, report.to_dict()["outputs"][0]
    assert report.outputs[0].unexplained == 28
    assert report.outputs[0].orig_err_max > 1e-3  # the cancelling column's error is large


def _matmul_bias(times: int, bias):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"])]
    last = "m"
    for index in range(times):
        out = "y" if index == times - 1 else f"b{index}"
        nodes.append(helper.make_node("Add", [last, "bias"], [out]))
        last = out
    rng = np.random.default_rng(2)
    return make_model(nodes, [value_info("x", F, [512, 256])], [value_info("y", F, None)],
                      [tensor("W", rng.standard_normal((256, 64)).astype(np.float32)), tensor("bias", bias)])


def test_bias_added_twice_is_systematic_mismatch():
    bias = np.full((64,), 3e-5, np.float32)
    x = np.random.default_rng(3).standard_normal((512, 256)).astype(np.float32)
    report = _judge(_matmul_bias(1, bias), _matmul_bias(2, bias), {"x": x}, localize=False)
    out = report.outputs[0]
    assert report.verdict == MISMATCH, out.to_dict()
    assert out.unexplained == 0  # every element lies within its own bound ...
    assert any(note.startswith("systematic: mean error") and "over 32768 elements" in note for note in out.notes)


def test_bias_added_once_more_by_an_exact_zero_is_rounding():
    # the same pair with a zero second bias: identical values, no systematic error to find
    bias = np.full((64,), 3e-5, np.float32)
    x = np.random.default_rng(3).standard_normal((512, 256)).astype(np.float32)
    report = _judge(_matmul_bias(1, bias), _matmul_bias(1, bias), {"x": x}, localize=False)
    assert report.verdict == "exact"


def _chain(fold: bool, b, c):
    ins, outs = [value_info("x", F, [64, 16])], [value_info("y", F, None)]
    if fold:
        return make_model([helper.make_node("MatMul", ["x", "BC"], ["y"])], ins, outs,
                          [tensor("BC", (b.astype(np.float64) @ c).astype(np.float32))])
    return make_model([helper.make_node("MatMul", ["x", "B"], ["t"]), helper.make_node("MatMul", ["t", "C"], ["y"])],
                      ins, outs, [tensor("B", b), tensor("C", c)])


def test_matmul_chain_fold_is_rounding_by_the_bound():
    rng = np.random.default_rng(4)
    b, c = rng.standard_normal((2, 16, 16)).astype(np.float32)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    report = _judge(_chain(False, b, c), _chain(True, b, c), {"x": x})
    out = report.outputs[0]
    assert report.verdict == ROUNDING, out.to_dict()
    assert out.excused == {"within-derived-bound": out.differing}


def test_excusing_rule_is_reported_per_output_and_in_localisation():
    rng = np.random.default_rng(5)
    b, c = rng.standard_normal((2, 16, 16)).astype(np.float32)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    report = _judge(_chain(False, b, c), _chain(True, b, c), {"x": x})
    data = report.to_dict()
    assert data["outputs"][0]["excused"] == {"within-derived-bound": report.outputs[0].differing}
    assert all("excused" in value for value in data["localisation"]["values"])


# -- a BatchNormalization folded into a ConvTranspose (which had no bound rule) --------------------------

_CT_RNG = np.random.default_rng(5)
_CT_W = _CT_RNG.standard_normal((4, 3, 2, 3)).astype(np.float32)
_CT_BN = [(1 + _CT_RNG.standard_normal(6) / 4).astype(np.float32), _CT_RNG.standard_normal(6).astype(np.float32),
          _CT_RNG.standard_normal(6).astype(np.float32), (0.5 + _CT_RNG.random(6)).astype(np.float32)]
_CT_ATTRS = dict(group=2, kernel_shape=[2, 3], strides=[2, 2], pads=[0, 2, 0, 0], output_padding=[1, 0])


def _conv_transpose_bn(fold=False, mean_error=0.0):
    if not fold:
        nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], **_CT_ATTRS),
                 helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
        weights = [tensor("w", _CT_W)] + [tensor(name, value) for name, value in zip("sbmv", _CT_BN)]
    else:
        scale, beta, mean, var = (value.astype(np.float64) for value in _CT_BN)
        s = scale / np.sqrt(var + 1e-5)
        # weight [C_in, C_out / group, kh, kw]: input channel c feeds output channels (c // 2) * 3 + j
        w = _CT_W.astype(np.float64) * s.reshape(2, 3)[np.arange(4) // 2][:, :, None, None]
        nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **_CT_ATTRS)]
        weights = [tensor("w", w.astype(np.float32)), tensor("b", (beta - mean * (1 + mean_error) * s).astype(np.float32))]
    return make_model(nodes, [value_info("x", F, [2, 4, 5, 4])], [value_info("y", F, None)], weights)


def _spread_inputs(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((2, 4, 5, 4)) * 10.0 ** np.random.default_rng(seed).integers(0, 9, (2, 4, 5, 4))) \
        .astype(np.float32)


def test_bn_fold_into_a_conv_transpose_over_spread_inputs_is_rounding():
    # campaign of seed 800000, cases 11068 and 17746 (inputs up to 1e8, results cancelling to far below
    # their terms): the ConvTranspose had no bound rule, its output's magnitude was probed
    report = verify_models(_conv_transpose_bn(), _conv_transpose_bn(fold=True), inputs=[{"x": _spread_inputs(1)}],
                           trials=2, localize=False)
    assert report.outputs[0].differing > 0
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()


def test_bn_fold_into_a_conv_transpose_with_a_wrong_mean_is_mismatch():
    report = verify_models(_conv_transpose_bn(), _conv_transpose_bn(fold=True, mean_error=1e-4),
                           inputs=[{"x": _spread_inputs(1)}], trials=2, localize=False)
    assert report.verdict == MISMATCH
