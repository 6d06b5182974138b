"""Conversions judged: a candidate in another precision (an fp16 conversion, with or without float32
inputs and outputs) or at another opset is verified, not called broken; so is one that drops a graph
input the original never reads. Each model is fed the inputs cast to its declared types (rounded to
the narrower one for both), and judged against float64."""

from __future__ import annotations

import numpy as np
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import EXACT, MISMATCH, ROUNDING, verify_models

F, H = TensorProto.FLOAT, TensorProto.FLOAT16
W = (np.random.default_rng(0).standard_normal((16, 8)) / 4).astype(np.float32)
X = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def original():
    return make_model([node("MatMul", ["x", "W"], ["m"]), node("Tanh", ["m"], ["y"])], [value_info("x", F, [4, 16])],
                      [value_info("y", F, None)], [tensor("W", W)])


def float16_candidate(weights=W, float32_io=False):
    body = [node("MatMul", ["x16", "W"], ["m"]), node("Tanh", ["m"], ["y16"])]
    inits = [tensor("W", weights.astype(np.float16))]
    if float32_io:
        return make_model([node("Cast", ["x"], ["x16"], to=H)] + body + [node("Cast", ["y16"], ["y"], to=F)],
                          [value_info("x", F, [4, 16])], [value_info("y", F, None)], inits)
    return make_model([node("Identity", ["x"], ["x16"])] + body + [node("Identity", ["y16"], ["y"])],
                      [value_info("x", H, [4, 16])], [value_info("y", H, None)], inits)


def check(candidate, **kwargs):
    return verify_models(original(), candidate, inputs=[{"x": X}], trials=2, **kwargs)


def test_float16_conversion_with_float16_inputs_and_outputs_is_judged_as_rounding():
    report = check(float16_candidate())
    assert report.verdict == ROUNDING
    assert any("as float16 (the original float32)" in note for note in report.notes)
    assert any("in another float type" in note for note in report.notes)


def test_float16_conversion_with_float32_inputs_and_outputs_is_rounding():
    assert check(float16_candidate(float32_io=True)).verdict == ROUNDING


def test_float16_conversion_that_changes_a_weight_is_mismatch():
    wrong = W.copy()
    wrong[:, 3] *= 1.05
    assert check(float16_candidate(wrong)).verdict == MISMATCH
    assert check(float16_candidate(wrong, float32_io=True)).verdict == MISMATCH


def test_each_model_is_given_the_values_rounded_to_the_narrower_type():
    # the float32 original sees exactly the float16 values the candidate is fed: an input that
    # float16 cannot hold (1 + 2^-12) is no difference the candidate made
    identity32 = make_model([node("Identity", ["x"], ["y"])], [value_info("x", F, [2])], [value_info("y", F, None)])
    identity16 = make_model([node("Cast", ["x"], ["y"], to=F)], [value_info("x", H, [2])], [value_info("y", F, None)])
    report = verify_models(identity32, identity16, inputs=[{"x": np.array([1 + 2 ** -12, 3], np.float32)}])
    assert report.verdict == EXACT


def test_candidate_dropping_an_input_the_original_never_reads_is_judged():
    ins = [value_info("x", F, [3]), value_info("unused", F, [2])]
    first = make_model([node("Tanh", ["x"], ["y"])], ins, [value_info("y", F, None)])
    slim = make_model([node("Tanh", ["x"], ["y"])], ins[:1], [value_info("y", F, None)])
    report = verify_models(first, slim, trials=2)
    assert report.verdict == EXACT
    assert any("drops input(s) unused, which the original never reads" in note for note in report.notes)
    wrong = make_model([node("Sigmoid", ["x"], ["y"])], ins[:1], [value_info("y", F, None)])
    assert verify_models(first, wrong, trials=2).verdict == MISMATCH


def test_candidate_dropping_an_input_the_original_reads_is_judged_on_its_outputs():
    ins = [value_info("x", F, [3]), value_info("b", F, [3])]
    first = make_model([node("Add", ["x", "b"], ["y"])], ins, [value_info("y", F, None)])
    dropped = make_model([node("Identity", ["x"], ["y"])], ins[:1], [value_info("y", F, None)])
    report = verify_models(first, dropped, trials=2)
    assert report.verdict == MISMATCH and report.outputs[0].differing > 0  # judged, not refused
    assert any("drops input(s) b, which the original reads" in note for note in report.notes)
    # the original reads b only for its static shape (onnxslim folds that Shape): nothing is lost
    shape_only = make_model([node("Shape", ["b"], ["s"]), node("Cast", ["s"], ["c"], to=F), node("Add", ["x", "c"], ["y"])],
                            ins, [value_info("y", F, None)])
    folded = make_model([node("Add", ["x", "three"], ["y"])], ins[:1], [value_info("y", F, None)],
                        [tensor("three", np.array([3], np.float32))])
    assert verify_models(shape_only, folded, trials=2).verdict == EXACT


def test_candidate_at_another_opset_is_verified():
    ins, outs = [value_info("x", F, [2, 3])], [value_info("y", F, None)]
    at18 = make_model([node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)], ins, outs,
                      [tensor("ax", np.array([1], np.int64))], opset=18)
    at11 = make_model([node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)], ins, outs, opset=11)
    assert verify_models(at18, at11, trials=2).verdict == EXACT
    wrong = make_model([node("ReduceSum", ["x"], ["y"], axes=[0], keepdims=0)], ins, outs, opset=11)
    assert verify_models(at18, wrong, trials=2).verdict == MISMATCH
