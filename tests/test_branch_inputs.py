"""Generated input sets that reach the graph's branches (verify/branches.py): both sides of constant
thresholds, If conditions found by search, integers whose products overflow int32. Each bug below is
wrong only there, and was judged `exact` on the random and stress sets alone."""

from __future__ import annotations

import numpy as np
from helpers import make_model, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxrefine.verify import EXACT, MISMATCH, verify_models
from onnxrefine.verify.branches import near_threshold_arrays, thresholds
from onnxrefine.verify.inputs import generate_labelled_inputs

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def build(nodes, inits=(), shape=(64,)):
    return make_model(nodes, [value_info("x", F, list(shape))], [value_info("y", F, None)],
                      [tensor(k, np.asarray(v)) for k, v in inits])


def where_above(threshold):
    return build([node("Greater", ["x", "t"], ["c"]), node("Where", ["c", "x", "zero"], ["y"])],
                 [("t", np.float32(threshold)), ("zero", np.float32(0))])


def test_thresholds_are_read_from_the_constants_a_breakpoint_compares_with():
    model = build([node("Identity", ["x"], ["i"]), node("Clip", ["i", "lo", "hi"], ["c"]), node("Relu", ["x"], ["r"]),
                   node("Less", ["t", "x"], ["l"]), node("Where", ["l", "c", "r"], ["y"])],
                  [("lo", np.float32(-2)), ("hi", np.float32(6)), ("t", np.float32(3.7))])
    assert thresholds(model) == {"x": [-2.0, 0.0, float(np.float32(3.7)), 6.0]}


@settings(max_examples=60, deadline=None)
@given(points=st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=6), size=st.integers(1, 40))
def test_threshold_sets_hold_values_on_both_sides_of_each_threshold(points, size):
    arrays = near_threshold_arrays(np.zeros(size), points, np.float32)
    values = np.concatenate([array.ravel() for array in arrays]).astype(np.float64)
    assert all(array.dtype == np.float32 and array.shape == (size,) for array in arrays)
    covered = min(len(points), 4 * size // 5)  # five values per threshold, at most four sets
    for point in points[:covered]:
        assert (values < point).any() and (values > point).any() and (values == np.float32(point)).any()


def test_moved_where_threshold_is_mismatch_on_generated_inputs():
    assert verify_models(where_above(3.7), where_above(3.9), trials=2).verdict == MISMATCH
    assert verify_models(where_above(3.7), where_above(3.7), trials=2).verdict == EXACT


def test_moved_clip_breakpoint_is_mismatch_and_a_correct_rewrite_exact():
    bounds = [("lo", np.float32(0)), ("hi", np.float32(6))]
    clip = build([node("Clip", ["x", "lo", "hi"], ["y"])], bounds)
    moved = build([node("Relu", ["x"], ["r"]), node("Greater", ["x", "t"], ["c"]), node("Where", ["c", "hi", "r"], ["y"])],
                  bounds + [("t", np.float32(6.25))])
    assert verify_models(clip, moved, trials=2).verdict == MISMATCH
    rewritten = build([node("Relu", ["x"], ["r"]), node("Min", ["r", "hi"], ["y"])], bounds)
    assert verify_models(clip, rewritten, trials=2).verdict == EXACT


def _branch(name, factor):
    return helper.make_graph([node("Mul", ["x", f"{name}_k"], [f"{name}_y"])], name, [],
                             [helper.make_tensor_value_info(f"{name}_y", F, None)],
                             [helper.make_tensor(f"{name}_k", F, [], [factor])])


def _if_model(then_factor):
    cond = [node("ReduceMean", ["x"], ["m"], keepdims=0), node("Sub", ["m", "three"], ["d"]), node("Abs", ["d"], ["a"]),
            node("Less", ["a", "one"], ["c"])]
    return build(cond + [node("If", ["c"], ["y"], then_branch=_branch("then", then_factor),
                              else_branch=_branch("else", 3.0))], [("three", np.float32(3)), ("one", np.float32(1))],
                 shape=(16,))


def test_if_branch_the_random_sets_never_take_is_searched_for():
    labels = [label for label, _ in generate_labelled_inputs(_if_model(2.0), trials=2)]
    assert "branch:if-c-true" in labels
    assert verify_models(_if_model(2.0), _if_model(2.5), trials=2).verdict == MISMATCH
    assert verify_models(_if_model(2.0), _if_model(2.0), trials=2).verdict == EXACT


def _product(in_int64):
    ins = [value_info("a", I32, [8]), value_info("b", I32, [8])]
    nodes = ([node("Cast", ["a"], ["a64"], to=I64), node("Cast", ["b"], ["b64"], to=I64), node("Mul", ["a64", "b64"], ["y"])]
             if in_int64 else [node("Mul", ["a", "b"], ["p"]), node("Cast", ["p"], ["y"], to=I64)])
    return make_model(nodes, ins, [value_info("y", I64, None)])


def test_int32_overflowing_product_is_reached_by_the_integer_range_set():
    assert verify_models(_product(True), _product(False), trials=2).verdict == MISMATCH
    assert verify_models(_product(True), _product(True), trials=2).verdict == EXACT


def test_a_branch_set_the_original_cannot_run_is_left_out_with_a_note():
    # the integer becomes an index only after arithmetic: the large-integer set leaves Gather's range
    model = make_model([node("Add", ["i", "zero"], ["j"]), node("Gather", ["data", "j"], ["y"])],
                       [value_info("i", I64, [2])], [value_info("y", F, None)],
                       [tensor("zero", np.array(0, np.int64)), tensor("data", np.arange(4, dtype=np.float32))])
    report = verify_models(model, model, trials=2)
    assert report.verdict == EXACT and "branch:int-range" not in report.input_sets
    assert any("branch:int-range not used" in note for note in report.notes)
