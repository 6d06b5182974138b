"""Decisions judged by their own margin, and perturbation controls with a distance (verify/decisions.py,
the controls of verify/rules.py).

Each decision element is `unstable` only where its own float64 feed lies within its own bound of the
boundary: no scale taken from the whole tensor, and a feed computed exactly (an input, a Floor of
one) has a margin of 0. A perturbation control marks an element only where rounding reaches the
decision behind it and the candidate lies within what the perturbed originals span.
"""

from __future__ import annotations

import numpy as np
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, UNSTABLE, verify_models
from onnxrefine.verify.judge.verdict import RoundingBound, SetEvidence, judge_output

F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def build(nodes, inits=(), shape=(4,), outputs=(("y", F),)):
    return make_model(nodes, [value_info("x", F, list(shape))], [value_info(n, t, None) for n, t in outputs],
                      [tensor(k, np.asarray(v)) for k, v in inits])


def report(original, candidate, x):
    return verify_models(original, candidate, inputs=[{"x": x}], trials=2, localize=False)


THIRDS = [("three", np.float32(3.0)), ("third", np.float32(1) / np.float32(3))]


def thirds(final, source="x"):
    """final(x * 3 * (1/3)): x in real arithmetic, rounded in float32 (a feed with a margin)."""
    return [node("Mul", [source, "three"], ["a"]), node("Mul", ["a", "third"], ["b"])] + final


# ------------------------------------------------------------------------------ decisions

def test_cast_of_floor_dropped_far_from_integers_is_mismatch():
    # Floor of an input is an exact integer: the Cast after it has one answer, no boundary to sit on
    original = build([node("Floor", ["x"], ["f"]), node("Cast", ["f"], ["y"], to=I32)], shape=(4,),
                     outputs=(("y", I32),))
    candidate = build([node("Cast", ["x"], ["y"], to=I32)], shape=(4,), outputs=(("y", I32),))
    x = np.array([-0.5, -1.5, 3.5, -7.25], np.float32)
    assert report(original, candidate, x).verdict == MISMATCH


def test_argmax_beside_one_large_constant_element_is_judged_per_row():
    # one element of 1e9 in the tensor made every other row's decision "near" under the RMS scale
    c = np.zeros((3, 4), np.float32)
    c[0, 0] = 1e9
    sign = np.array([[1], [-1], [-1]], np.float32)
    outputs = (("y", I64),)
    original = build([node("Add", ["x", "c"], ["a"]), node("ArgMax", ["a"], ["y"], axis=1)], [("c", c)],
                     shape=(3, 4), outputs=outputs)
    negated = build([node("Mul", ["x", "s"], ["n"]), node("Add", ["n", "c"], ["a"]),
                     node("ArgMax", ["a"], ["y"], axis=1)], [("c", c), ("s", sign)], shape=(3, 4), outputs=outputs)
    x = np.array([[0.1, 0.5, -0.3, 0.2], [1.0, -2.0, 0.5, 0.0], [0.3, 0.2, -1.0, 2.0]], np.float32)
    assert report(original, negated, x).verdict == MISMATCH


def test_argmax_over_a_rounded_near_tie_is_unstable():
    # the same decision where the feed rounds and the two largest are one rounding apart
    outputs = (("y", I64),)
    original = build(thirds([node("ArgMax", ["b"], ["y"], axis=1, keepdims=0)]), THIRDS, shape=(1, 3),
                     outputs=outputs)
    candidate = build([node("ArgMax", ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)], shape=(1, 3),
                      outputs=outputs)
    x = np.array([[2.0, 2.0, -1.0]], np.float32)
    result = report(original, candidate, x)
    assert result.verdict == UNSTABLE
    assert any(note.startswith("unstable by control: decision-boundary") for note in result.outputs[0].notes)


def test_select_last_index_dropped_on_exact_ties_is_mismatch():
    outputs = (("y", I64),)
    original = build([node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1)], shape=(2, 4), outputs=outputs)
    candidate = build([node("ArgMax", ["x"], ["y"], axis=1)], shape=(2, 4), outputs=outputs)
    x = np.array([[1, 2, 2, 0], [5, 5, 1, 5]], np.float32)
    assert report(original, candidate, x).verdict == MISMATCH


def test_topk_tie_order_reversed_is_mismatch():
    # the spec: among equal values the lower index comes first; reversing tied indices is a change
    outputs = (("v", F), ("i", I64))
    k = [("k", np.array([3], np.int64))]
    original = build([node("TopK", ["x", "k"], ["v", "i"], axis=1)], k, shape=(1, 6), outputs=outputs)
    reverse = [("st", np.array([-1], np.int64)), ("en", np.array([-(2 ** 62)], np.int64)),
               ("ax", np.array([1], np.int64)), ("step", np.array([-1], np.int64)), ("last", np.array(5, np.int64))]
    candidate = build([node("Slice", ["x", "st", "en", "ax", "step"], ["r"]),
                       node("TopK", ["r", "k"], ["v", "j"], axis=1), node("Sub", ["last", "j"], ["i"])],
                      k + reverse, shape=(1, 6), outputs=outputs)
    x = np.array([[1, 3, 3, 2, 3, 0]], np.float32)
    result = report(original, candidate, x)
    assert result.verdict == MISMATCH and [out.verdict for out in result.outputs] == ["exact", "mismatch"]


def test_where_condition_flip_near_its_threshold_is_unstable_and_far_is_mismatch():
    two = [("two", np.float32(2.0)), ("zero", np.float32(0.0))]
    original = build(thirds([node("Less", ["b", "two"], ["c"]), node("Where", ["c", "x", "zero"], ["y"])]),
                     THIRDS + two, shape=(2,))
    near = build([node("LessOrEqual", ["x", "two"], ["c"]), node("Where", ["c", "x", "zero"], ["y"])], two,
                 shape=(2,))
    assert report(original, near, np.array([2.0, 7.0], np.float32)).verdict == UNSTABLE
    far = build([node("Greater", ["x", "two"], ["c"]), node("Where", ["c", "x", "zero"], ["y"])], two, shape=(2,))
    assert report(original, far, np.array([2.5, 7.0], np.float32)).verdict == MISMATCH


def test_round_of_an_exact_half_is_decided():
    # Round(2.5) is 2 (half to even) whatever the run: Floor(x + 0.5) answering 3 is a change
    original = build([node("Round", ["x"], ["y"])], shape=(3,))
    candidate = build([node("Add", ["x", "half"], ["h"]), node("Floor", ["h"], ["y"])], [("half", np.float32(0.5))],
                      shape=(3,))
    assert report(original, candidate, np.array([2.5, 1.2, -3.7], np.float32)).verdict == MISMATCH


# ------------------------------------------------------------------------------ controls with a distance

def _judge(original, candidate, perturbed, jumps=("Floor",), exact_decisions=False):
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=jumps)
    evidence = SetEvidence(original, original.copy(), candidate, perturbed=perturbed,
                           exact_decisions=exact_decisions)
    return judge_output([evidence], bound)


def test_control_marks_only_a_candidate_within_the_span_of_the_perturbed_originals():
    original = np.array([2.0, 5.0], np.float32)
    moved = [np.array([1.0, 5.0], np.float32)]  # Floor(x) with x a few ulps from 2
    assert _judge(original, np.array([1.0, 5.0], np.float32), moved).verdict == UNSTABLE
    judged = _judge(original, np.array([1002.0, 5.0], np.float32), moved)
    assert judged.verdict == MISMATCH and judged.unstable_by == {}
    ints = np.array([1, 2, 3], np.int32)
    moved_ints = [np.array([1, 1, 3], np.int32)]
    assert _judge(ints, np.array([1, 1, 3], np.int32), moved_ints).unstable_by == {"perturbed-discrete": 1}
    assert _judge(ints, np.array([1, 7, 3], np.int32), moved_ints).verdict == MISMATCH


def test_control_marks_nothing_where_no_rounding_reaches_the_decision():
    original = np.array([2.0, 5.0], np.float32)
    moved = [np.array([1.0, 5.0], np.float32)]
    candidate = np.array([1.0, 5.0], np.float32)
    assert _judge(original, candidate, moved, exact_decisions=True).verdict == MISMATCH
    ints = np.array([1, 2], np.int32)
    assert _judge(ints, np.array([1, 1], np.int32), [np.array([1, 1], np.int32)],
                  exact_decisions=True).verdict == MISMATCH


def test_floor_of_an_input_off_by_a_thousand_is_mismatch():
    original = build([node("Floor", ["x"], ["y"])], shape=(4,))
    candidate = build([node("Floor", ["x"], ["f"]), node("Add", ["f", "k"], ["y"])], [("k", np.float32(1000))],
                      shape=(4,))
    assert report(original, candidate, np.array([1, 2, -3, 4], np.float32)).verdict == MISMATCH


def test_exact_decisions_follow_exact_ops_only():
    from onnxrefine.verify.judge.decisions import exact_decisions

    model = build([node("Floor", ["x"], ["f"]), node("Relu", ["f"], ["r"]), node("Mul", ["x", "k"], ["m"]),
                   node("Floor", ["m"], ["g"]), node("Add", ["r", "g"], ["y"])], [("k", np.float32(0.1))])
    assert exact_decisions(model, ["r", "m", "g", "y"]) == {"r": True, "m": True, "g": False, "y": False}


# ------------------------------------------------------------------ a decision's integers made floats again

def test_a_cast_to_int_made_float_again_is_judged_by_its_feed():
    # fuzz campaign of seed 1800000, case 39158: a float16 BatchNormalization folded before Cast(int32) ->
    # Cast(float16); on the large-magnitude set the feed is within its own bound of a truncation boundary
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1839158, max_nodes=20, opset=18, target="fuse_bn_into_conv")
    candidate = onnxrefine.optimize(case.model, ["fuse_bn_into_conv"])
    result = verify_models(case.model, candidate, seed=1839158, dims=case.input_dims, trials=2)
    assert result.verdict == UNSTABLE, [o.to_dict() for o in result.outputs if o.verdict != "exact"]
    # the float output reads the Cast's integer type for its boundary
    from onnxrefine.verify.judge.decisions import DecisionEvidence, near_boundary

    decision = DecisionEvidence("Cast", [np.array([-47.0, -40.5])], {"to": I32}, bounds=[np.array([0.01, 0.01])])
    original = np.array([-47.0, -40.0], np.float16)
    near = near_boundary(decision, original, np.array([-46.0, -39.0], np.float16), 1e-3, 2.0)
    assert near.tolist() == [True, False]


def test_a_cast_to_int_made_float_again_flipped_far_is_mismatch():
    again = node("Cast", ["c"], ["y"], to=F)
    original = build(thirds([node("Cast", ["b"], ["c"], to=I32), again]), THIRDS, shape=(1,))
    far = build([node("Neg", ["x"], ["n"]), node("Cast", ["n"], ["c"], to=I32), again], shape=(1,))
    assert report(original, far, np.array([2.0], np.float32)).verdict == MISMATCH
    # a Cast of floats to floats is no decision: its output is judged as any float
    halved = build([node("Cast", ["x"], ["c"], to=TensorProto.FLOAT16), node("Cast", ["c"], ["y"], to=F)], shape=(1,))
    assert report(build([node("Identity", ["x"], ["y"])], shape=(1,)), halved,
                  np.array([2.0001], np.float32)).verdict == MISMATCH


def test_a_decision_made_float_again_holding_values_no_decision_gives_is_mismatch():
    # the output follows a Cast of the decision's integers or bools: near only where both models hold
    # values the decision can give (an index off by 0.5 truncates to the original's own pick; a
    # comparison's 0/1 plus 5; the Cast pair dropped, leaving the float feed itself)
    half = [("half", np.float32(0.5))]
    pick = thirds([node("ArgMax", ["b"], ["i"], axis=1), node("Cast", ["i"], ["y"], to=F)])
    moved = thirds([node("ArgMax", ["b"], ["i"], axis=1), node("Cast", ["i"], ["f"], to=F),
                    node("Add", ["f", "half"], ["y"])])
    x = np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32)
    assert report(build(pick, THIRDS, shape=(8, 5)), build(moved, THIRDS + half, shape=(8, 5)), x).verdict == MISMATCH
    near = np.array([0.1, 0.7, 1.3, 2.9], np.float32)
    threshold = [("t", near * np.float32(3) * (np.float32(1) / np.float32(3)))]  # each element at its float32 feed
    compared = build(thirds([node("Greater", ["b", "t"], ["g"]), node("Cast", ["g"], ["y"], to=F)]), THIRDS + threshold)
    plus_five = build(thirds([node("GreaterOrEqual", ["b", "t"], ["g"]), node("Cast", ["g"], ["f"], to=F),
                              node("Add", ["f", "five"], ["y"])]), THIRDS + threshold + [("five", np.float32(5))])
    assert report(compared, plus_five, near).verdict == MISMATCH
    truncated = build(thirds([node("Cast", ["b"], ["i"], to=I32), node("Cast", ["i"], ["y"], to=F)]), THIRDS)
    dropped = build(thirds([node("Identity", ["b"], ["y"])]), THIRDS)
    assert report(truncated, dropped, np.array([2.9999998, 5.9999995, 0.99999994, 11.999999], np.float32)).verdict \
        == MISMATCH
