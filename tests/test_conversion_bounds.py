"""A narrower conversion (float32 -> float16) judged with the bound of its own precision: the
candidate's graph evaluated in float64 gives its per-element bound at u of float16, plus the
rounding of its converted constants; each element is judged by it, not by an allowance scaled by
the whole output (where one large channel lends every element an allowance of about 1 and a
real bug in a small channel passes)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, ROUNDING, UNSTABLE, verify_models

F, H = TensorProto.FLOAT, TensorProto.FLOAT16
rng = np.random.default_rng(0)
W1 = (rng.standard_normal((8, 3, 3, 3)) / 4).astype(np.float32)
B1 = (rng.standard_normal(8) / 4).astype(np.float32)
W2 = (rng.standard_normal((4, 8, 3, 3)) / 6).astype(np.float32)
W2[0] *= 2000  # one large output channel
B2 = (rng.standard_normal(4) / 8).astype(np.float32)
X = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
WM = (rng.standard_normal((16, 32)) / 4).astype(np.float32)
BM = (rng.standard_normal(32) / 4).astype(np.float32)
G = (1 + rng.standard_normal(32) / 8).astype(np.float32)
G[0] = 3000  # one large column
BE = (rng.standard_normal(32) / 8).astype(np.float32)
BE[5] = 1.0
B3 = (rng.standard_normal(32) / 8).astype(np.float32)
XM = rng.standard_normal((4, 16)).astype(np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def _wrapped(body, weights, dtype, float32_io, shape):
    """The graph in `dtype`; with float32_io, a float16 graph between Casts from and to float32."""
    io = F if dtype == F or float32_io else H
    numpy_type = np.float32 if dtype == F else np.float16
    pre = node("Cast", ["x"], ["xi"], to=dtype) if io != dtype else node("Identity", ["x"], ["xi"])
    post = node("Cast", ["yi"], ["y"], to=io) if io != dtype else node("Identity", ["yi"], ["y"])
    return make_model([pre, *body, post], [value_info("x", io, shape)], [value_info("y", io, None)],
                      [tensor(name, value.astype(numpy_type)) for name, value in weights.items()])


def conv_net(dtype=F, float32_io=False, bug=None):
    w2, b2 = W2.copy(), B2.copy()
    if bug == "constant":
        b2[3] += 0.25
    if bug == "sign":
        w2[2] = -w2[2]
    body = [node("Conv", ["xi", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
            node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1])]
    body += [node("Relu", ["c2"], ["yi"])] if bug == "drop" else \
        [node("Add", ["c2", "B2"], ["a2"]), node("Relu", ["a2"], ["yi"])]
    weights = {"W1": W1, "B1": B1, "W2": w2, "B2": b2.reshape(4, 1, 1)}
    return _wrapped(body, weights, dtype, float32_io, [2, 3, 8, 8])


def layernorm_block(dtype=F, float32_io=False, bug=None):
    g, be = G.copy(), BE.copy()
    if bug == "constant":
        g[7] *= 2.0
    if bug == "sign":
        be[5] = -be[5]
    body = [node("MatMul", ["xi", "WM"], ["m"]), node("Add", ["m", "BM"], ["a"]),
            node("LayerNormalization", ["a", "G", "BE"], ["l"], axis=-1, epsilon=1e-5)]
    body += [node("Relu", ["l"], ["yi"])] if bug == "drop" else \
        [node("Add", ["l", "B3"], ["l3"]), node("Relu", ["l3"], ["yi"])]
    return _wrapped(body, {"WM": WM, "BM": BM, "G": g, "BE": be, "B3": B3}, dtype, float32_io, [4, 16])


BLOCKS = {"conv": (conv_net, X), "layernorm": (layernorm_block, XM)}


@pytest.mark.parametrize("block", sorted(BLOCKS))
@pytest.mark.parametrize("float32_io", [False, True])
def test_correct_float16_conversion_is_rounding_by_its_own_bound(block, float32_io):
    build, x = BLOCKS[block]
    report = verify_models(build(), build(H, float32_io), inputs=[{"x": x}], trials=2)
    assert report.verdict == ROUNDING
    assert set(report.outputs[0].excused) == {"within-derived-bound"}


def test_correct_float16_conversion_on_generated_inputs_is_rounding():
    # the conversion rounds every weight of a channel alike: a mean error per channel that the
    # original's coherent bound (float32 weights) called systematic; the candidate's own (float16) covers it
    assert verify_models(conv_net(), conv_net(H, True), trials=2).verdict == ROUNDING


@pytest.mark.parametrize("block,bug,float32_io", [
    ("conv", "sign", False), ("conv", "constant", True), ("conv", "drop", False),
    ("layernorm", "sign", True), ("layernorm", "constant", False), ("layernorm", "drop", True)])
def test_float16_conversion_with_a_real_change_is_mismatch(block, bug, float32_io):
    # a wrong constant, a dropped op or a flipped sign in a small channel beside a large one: within
    # the whole-output allowance at float16 (rounding before), beyond each element's own bound
    build, x = BLOCKS[block]
    report = verify_models(build(), build(H, float32_io, bug), inputs=[{"x": x}], trials=2)
    assert report.verdict == MISMATCH


# -- a decision of a narrower candidate, judged by each model's own margin ---------------------------

I64 = TensorProto.INT64
WA = (rng.standard_normal((64, 8)) / 8).astype(np.float32)
WA[:, 1] = WA[:, 0] * (1 + 2e-4)  # columns 0 and 1 apart by 2e-4: beyond float32's rounding, within float16's
XA = (1 + np.abs(rng.standard_normal((32, 64)))).astype(np.float32)


def argmax_net(dtype=F, swap=False):
    """ArgMax over x @ WA, the product in `dtype` (float32 inputs and outputs); swap: columns 0 and 2 swapped."""
    w = WA.copy()
    if swap:
        w[:, [0, 2]] = w[:, [2, 0]]
    body = [node("MatMul", ["xi", "w"], ["s"]), node("ArgMax", ["s"], ["y"], axis=1, keepdims=0)]
    pre = node("Cast", ["x"], ["xi"], to=dtype) if dtype != F else node("Identity", ["x"], ["xi"])
    return make_model([pre, *body], [value_info("x", F, [32, 64])], [value_info("y", I64, None)],
                      [tensor("w", w.astype(np.float32 if dtype == F else np.float16))])


def test_float16_argmax_flipping_a_near_tie_is_unstable_by_its_own_margin():
    # the flips lie within float16's bound of the tie, beyond twice the float32 original's
    report = verify_models(argmax_net(), argmax_net(H), inputs=[{"x": XA}], trials=2, localize=False)
    out = report.outputs[0]
    assert report.verdict == UNSTABLE, out.to_dict()
    assert out.differing > 0 and f"unstable by control: decision-boundary {out.differing}" in out.notes


def test_float16_argmax_with_swapped_columns_is_mismatch():
    report = verify_models(argmax_net(), argmax_net(H, swap=True), inputs=[{"x": XA}], trials=2, localize=False)
    assert report.verdict == MISMATCH


# -- without a float64 reference (the fallback rule: each element's own sensitivity measures its terms) ----

def _without_reference():
    from onnxrefine.verify.session import DECLINING_REFERENCE

    return {"reference": DECLINING_REFERENCE}


@pytest.mark.parametrize("float32_io", [False, True])
def test_correct_float16_conversion_without_a_reference_is_rounding(float32_io):
    # the original's inputs moved by float32 ulps: its sensitivity is divided by that step, not by
    # float16's 2^13 times larger one (its terms came out 2^13 times too small, a false alarm)
    report = verify_models(conv_net(), conv_net(H, float32_io), inputs=[{"x": X}], trials=2, **_without_reference())
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()


@pytest.mark.parametrize("bug,float32_io", [("sign", False), ("constant", True), ("drop", False)])
def test_float16_conversion_with_a_real_change_without_a_reference_is_mismatch(bug, float32_io):
    report = verify_models(conv_net(), conv_net(H, float32_io, bug), inputs=[{"x": X}], trials=2,
                           **_without_reference())
    assert report.verdict == MISMATCH
