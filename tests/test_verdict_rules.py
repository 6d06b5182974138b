"""The named verdict rules (verify/judge/verdict.py RULES): each exemption's legitimate case, and the
counterexamples it must not excuse (each of these passed as `rounding` or
`unstable` before the rules were narrowed).

Models are built by hand, two per test (original and candidate); nothing here runs a pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, ROUNDING, UNSTABLE, run_settings, verify_models
from onnxrefine.verify import graphinfo
from onnxrefine.verify.judge.verdict import CONTROLS, RULES, RoundingBound, SetEvidence, judge_output

F = TensorProto.FLOAT
inf, nan = np.inf, np.nan


@pytest.fixture
def no_reference():
    """The float64 reference declines every model (injected, see session.py): the documented fallback."""
    from onnxrefine.verify.session import DECLINING_REFERENCE

    with run_settings(reference=DECLINING_REFERENCE):
        yield


def one_input(nodes, inits=(), shape=(4,), out_type=F, inputs=("x",)):
    return make_model(nodes, [value_info(name, F, list(shape)) for name in inputs],
                      [value_info("y", out_type, None)], [tensor(k, np.asarray(v)) for k, v in inits])


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def verdict(original, candidate, *sets, **kwargs):
    return verify_models(original, candidate, inputs=list(sets), trials=2, **kwargs).verdict


# ------------------------------------------------------------------------------ the rule list

def test_every_rule_is_documented_and_names_existing_tests():
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.excuses and rule.why
        assert rule.legitimate or rule.veto, rule.name
        assert rule.counterexamples, rule.name
        for test in rule.legitimate + rule.counterexamples:
            path, name = test.split("::")
            assert f"def {name}(" in (root / path).read_text(), test


def test_every_control_is_documented_and_names_existing_tests():
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    names = [control.name for control in CONTROLS]
    assert len(names) == len(set(names)) and not set(names) & {rule.name for rule in RULES}
    for control in CONTROLS:
        assert control.marks and control.why and control.legitimate and control.counterexamples, control.name
        for test in control.legitimate + control.counterexamples:
            path, name = test.split("::")
            assert f"def {name}(" in (root / path).read_text(), test


# ------------------------------------------------------------------------------ the controls
# judge_output on hand-made evidence without a float64 reference: a candidate far from the original
# is unexplained, so it is `unstable` exactly where a control marks the original unstable.

def _judge(original, candidate, perturbed, jumps=None):
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=jumps)  # not ill-conditioned
    evidence = SetEvidence(original, original.copy(), candidate, perturbed=perturbed)
    return judge_output([evidence], bound).verdict


def test_control_perturbed_shape_marks_every_element():
    original = np.array([0, 2], np.int64)  # NonZero-like: indices whose count depends on the inputs
    candidate = np.array([0, 3], np.int64)
    assert _judge(original, candidate, [np.array([0, 2, 3], np.int64)]) == UNSTABLE
    assert _judge(original, candidate, [np.array([0, 2], np.int64)]) == MISMATCH  # same shape, stable


def test_control_perturbed_class_change_is_unstable_only_there():
    original = np.array([1.0, 2.0], np.float32)
    moved = np.array([1.0, np.nan], np.float32)  # a 0/0 at the edge of the domain, under an ulp
    assert _judge(original, np.array([1.0, 7.0], np.float32), [moved]) == UNSTABLE
    assert _judge(original, np.array([1.5, 2.0], np.float32), [moved]) == MISMATCH


def test_control_perturbed_jump_only_behind_a_discontinuous_op():
    original = np.array([2.0, 5.0], np.float32)
    moved = np.array([1.0, 5.0], np.float32)  # Floor(x) with x a few ulps from 2
    candidate = np.array([1.0, 5.0], np.float32)
    assert _judge(original, candidate, [moved], jumps=("Floor",)) == UNSTABLE
    # the same move of a continuous value (a cancellation) is sensitivity, not instability
    assert _judge(original, candidate, [moved], jumps=()) == MISMATCH
    # behind the Floor, an element the perturbed runs leave in place is still judged
    assert _judge(original, np.array([2.0, 4.0], np.float32), [moved], jumps=("Floor",)) == MISMATCH


def test_control_perturbed_discrete_change_is_unstable_only_there():
    original = np.array([1, 2, 3], np.int32)  # a Cast to int without decision evidence
    moved = np.array([1, 1, 3], np.int32)
    assert _judge(original, np.array([1, 1, 3], np.int32), [moved]) == UNSTABLE
    assert _judge(original, np.array([0, 2, 3], np.int32), [moved]) == MISMATCH


# ------------------------------------------------------------------------------ sign of infinity

def _reciprocal_pair():
    one = [("one", np.float32(1.0)), ("zero", np.float32(0.0))]
    original = one_input([node("Add", ["x", "zero"], ["s"]), node("Div", ["one", "s"], ["y"])], one)
    candidate = one_input([node("Div", ["one", "x"], ["y"])], one)
    return original, candidate


@pytest.mark.parametrize("mode", ["float64", "fallback"])
def test_sign_flip_of_infinity_is_mismatch(mode, request):
    # removing `x + 0.0` before 1/x: x = -0.0 gives +inf in the original, -inf without the add.
    # The inf elsewhere in the set made the old inf/NaN order rule excuse the flip.
    if mode == "fallback":
        request.getfixturevalue("no_reference")
    original, candidate = _reciprocal_pair()
    x = np.array([-0.0, inf, 2.0, -3.0], np.float32)
    assert verdict(original, candidate, {"x": x}) == MISMATCH
    assert verify_models(original, candidate, trials=2).verdict == MISMATCH  # generated stress sets


# ------------------------------------------------------------------------------ inf <-> NaN

def test_max_rewritten_as_relu_of_difference_is_mismatch():
    # Max(a, b) -> Relu(a - b) + b: inf - inf is NaN where Max gives inf, and float64 agrees with
    # the original, so the original is no artefact there.
    inputs = ("a", "b")
    original = one_input([node("Max", ["a", "b"], ["y"])], inputs=inputs)
    candidate = one_input([node("Sub", ["a", "b"], ["d"]), node("Relu", ["d"], ["r"]),
                           node("Add", ["r", "b"], ["y"])], inputs=inputs)
    a = np.array([inf, 1.0, -2.0, 0.5], np.float32)
    b = np.array([inf, 2.0, 3.0, -1.0], np.float32)
    assert verdict(original, candidate, {"a": a, "b": b}) == MISMATCH


def _cube_overflow_models():
    """y: Max(x^3, x^3) rewritten as Relu(x^3 - x^3) + x^3 (NaN once x^3 overflows); w: Relu(z)."""
    cube = [node("Mul", ["x", "x"], ["xx"]), node("Mul", ["xx", "x"], ["p"]), node("Relu", ["z"], ["w"])]
    ins = [value_info("x", F, [3]), value_info("z", F, [3])]
    outs = [value_info("y", F, None), value_info("w", F, None)]
    original = make_model(cube + [node("Max", ["p", "p"], ["y"])], ins, outs)
    candidate = make_model(cube + [node("Sub", ["p", "p"], ["d"]), node("Relu", ["d"], ["r"]),
                                   node("Add", ["r", "p"], ["y"])], ins, outs)
    feeds = {"x": np.array([1e13, 1.0, -2.0], np.float32), "z": np.array([inf, 1.0, nan], np.float32)}
    return original, candidate, feeds


@pytest.mark.parametrize("mode", ["float64", "fallback"])
def test_inf_in_an_unrelated_input_excuses_nothing(mode, request):
    # y's inf -> NaN comes from finite x (x^3 overflows); the inf is in z, which y does not read.
    if mode == "fallback":
        request.getfixturevalue("no_reference")
    original, candidate, feeds = _cube_overflow_models()
    report = verify_models(original, candidate, inputs=[feeds], trials=2)
    assert {out.name: out.verdict for out in report.outputs} == {"y": MISMATCH, "w": "exact"}


def test_nonfinite_order_excuses_an_artefact_in_the_cone():
    # Legitimate: without float64, an inf <-> NaN change on an element that reads the inf inputs
    # (whether an inf meets an inf of the other sign depends on the order); not elsewhere.
    original = np.array([inf, 1.0, inf], np.float32)
    candidate = np.array([nan, 1.0, nan], np.float32)
    bound = RoundingBound.for_output(2.0 ** -24, 2, 1)

    def judged(cone, reference=None):
        evidence = SetEvidence(original, original.copy(), candidate, reference=reference,
                               nonfinite_inputs=True, nonfinite_cone=np.array(cone))
        return judge_output([evidence], bound)

    assert judged([True, False, True]).verdict == ROUNDING
    assert judged([True, False, True]).excused == {"nonfinite-order": 2}
    assert judged([True, False, False]).verdict == MISMATCH
    # with float64 available, only where the original's class is an artefact (differs from R's)
    assert judged([True, False, True], reference=np.array([nan, 1.0, nan])).verdict == ROUNDING
    assert judged([True, False, True], reference=np.array([nan, 1.0, inf])).verdict == MISMATCH


def test_matmul_chain_fold_on_inf_inputs_is_rounding():
    # Legitimate: x @ B @ C -> x @ (B @ C). With one inf in a row of x, the original meets
    # inf - inf (NaN, float64 too: undefined) where the folded product meets a single inf.
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal((2, 4, 4)).astype(np.float32)
    ins, outs = [value_info("x", F, [2, 4])], [value_info("y", F, None)]
    original = make_model([node("MatMul", ["x", "B"], ["t"]), node("MatMul", ["t", "C"], ["y"])], ins, outs,
                          [tensor("B", b), tensor("C", c)])
    candidate = make_model([node("MatMul", ["x", "BC"], ["y"])], ins, outs, [tensor("BC", (b @ c).astype(np.float32))])
    x = rng.standard_normal((2, 4)).astype(np.float32)
    x[0, 1] = inf
    report = verify_models(original, candidate, inputs=[{"x": x}], trials=2)
    assert report.verdict == ROUNDING, report.to_dict()["outputs"][0]
    assert report.outputs[0].comparison["pattern_changes"] > 0


def test_nonfinite_cone_is_measured_per_element():
    from onnxrefine.verify.evidence import add_nonfinite_cones as _add_nonfinite_cones
    from onnxrefine.verify.ort import ModelRunner

    original, _, feeds = _cube_overflow_models()
    runner = ModelRunner(original, "original")
    first = runner.run(feeds)
    items = {name: SetEvidence(first[name], first[name], first[name]) for name in ("y", "w")}
    _add_nonfinite_cones(runner, feeds, items)
    assert not items["y"].nonfinite_cone.any()
    assert items["w"].nonfinite_cone.tolist() == [True, False, True]


# ------------------------------------------------------------------------------ saturation

def test_relu_rewritten_as_clip_saturating_inf_is_mismatch():
    # Clip(x, 0) with no max saturates +inf to FLT_MAX; Relu and float64 keep +inf.
    original = one_input([node("Relu", ["x"], ["y"])])
    candidate = one_input([node("Clip", ["x", "lo"], ["y"])], [("lo", np.float32(0.0))])
    x = np.array([inf, 1.0, -2.0, nan], np.float32)
    assert verdict(original, candidate, {"x": x}) == MISMATCH


# ------------------------------------------------------------------------------ the original broke

def _naive_softmax():
    return one_input([node("Exp", ["x"], ["e"]), node("ReduceSum", ["e", "ax"], ["s"], keepdims=1),
                      node("Div", ["e", "s"], ["y"])], [("ax", np.array([1], np.int64))], shape=(2, 2))


def test_clipped_softmax_where_the_original_overflows_is_mismatch():
    # exp(100) overflows float32: the original gives NaN; the candidate clips the logits to 80 and
    # answers 0.5 where float64 says 0.731. A broken original does not make any value acceptable.
    candidate = one_input([node("Clip", ["x", "lo", "hi"], ["k"]), node("Softmax", ["k"], ["y"], axis=1)],
                          [("lo", np.float32(-80)), ("hi", np.float32(80))], shape=(2, 2))
    x = np.array([[100.0, 99.0], [1.0, 2.0]], np.float32)
    assert verdict(_naive_softmax(), candidate, {"x": x}) == MISMATCH
    # a candidate that computes the right value where the original broke is fine
    stable = one_input([node("Softmax", ["x"], ["y"], axis=1)], shape=(2, 2))
    assert verdict(_naive_softmax(), stable, {"x": x}) == ROUNDING


def test_a_finite_candidate_where_the_original_broke_is_judged_by_the_worst_case_bound():
    # fuzz campaign of seed 900000, case 38669 (regenerated by the campaign's generator, as its bundle
    # says): on the stress set of large inputs the original's Softmax underflows and its Log is -inf
    # where float64 is -2e18; the fused candidate is finite, 29 ulps off float64 (the LogSoftmax
    # before it rounds x - max alike in both models), beyond gamma * |R| but within the element's B
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    original = generate_model(938669, max_nodes=20, opset=18, target="fuse_consecutive_log_softmax").model
    candidate = onnxrefine.optimize(original, ["fuse_consecutive_log_softmax"])
    report = verify_models(original, candidate, seed=938669, trials=2, localize=False)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs if o.verdict != "exact"]
    assert sum(o.excused.get("original-broke", 0) for o in report.outputs) > 0


# ------------------------------------------------------------------------------ sensitivity

def test_constant_off_by_half_in_a_well_conditioned_sub_is_mismatch():
    # x - 1e6 -> x - 999999.5 on x near 1e6: the subtraction is exact (Sterbenz), the candidate
    # is biased by 8 ulps of x. Moving x by 4 ulps moves the output by 4 ulps, so the old
    # sensitivity term (2 * 0.25) covered the bias though no ill-conditioned op follows.
    def model(value):
        return one_input([node("Sub", ["x", "c"], ["y"])], [("c", np.float32(value))], shape=(64,))

    x = (1e6 + 8 * np.random.default_rng(0).standard_normal(64)).astype(np.float32)
    assert verdict(model(1e6), model(999999.5), {"x": x}) == MISMATCH
    assert verdict(model(1e6), model(1e6), {"x": x}) == "exact"


def test_sensitivity_term_only_behind_ill_conditioned_ops():
    model = one_input([node("Sub", ["x", "c"], ["a"]), node("Sqrt", ["a"], ["b"]), node("Div", ["b", "c"], ["y"])],
                      [("c", np.float32(2.0))])
    info = graphinfo.accumulation_profile(model, names=["a", "b", "y"])
    assert info["a"].amplifiers == () and info["b"].amplifiers == ("Sqrt",)
    assert info["y"].amplifiers == ("Sqrt",)   # Div by a constant is not ill-conditioned
    assert RoundingBound.for_value(2.0 ** -24, info["a"]).ill_conditioned is False


# ------------------------------------------------------------------------------ overflow territory

def test_reassociation_that_overflows_a_moderate_value_is_mismatch():
    # x * (1e10 * 1e-30) -> (x * 1e10) * 1e-30: on x = 1e30 the candidate overflows to inf where
    # the original and float64 say 1e10, well inside float32's range.
    consts = [("a", np.float32(1e10)), ("b", np.float32(1e-30))]
    original = one_input([node("Mul", ["a", "b"], ["ab"]), node("Mul", ["x", "ab"], ["y"])], consts)
    candidate = one_input([node("Mul", ["x", "a"], ["xa"]), node("Mul", ["xa", "b"], ["y"])], consts)
    x = np.array([1e30, 1.0, -2e30, 3.0], np.float32)
    assert verdict(original, candidate, {"x": x}) == MISMATCH


def test_overflow_territory_excuses_order_of_overflow():
    # Legitimate: x * (x / x) -> (x * x) / x; on x = 1e25 the candidate's x*x overflows. The true
    # value (1e25) is beyond sqrt(FLT_MAX), where which intermediate overflows depends on order.
    original = one_input([node("Div", ["x", "x"], ["q"]), node("Mul", ["x", "q"], ["y"])])
    candidate = one_input([node("Mul", ["x", "x"], ["p"]), node("Div", ["p", "x"], ["y"])])
    x = np.array([1e25, 2.0, -3e24, 0.5], np.float32)
    report = verify_models(original, candidate, inputs=[{"x": x}], trials=2)
    assert report.verdict == ROUNDING, report.to_dict()["outputs"][0]
    assert any("overflow territory" in note for note in report.outputs[0].notes)


def _reordered_sum(order, scale=1.0):
    """y = MatMul(x * z, ones) with the sum's terms in `order` (a Gather where it is not the identity)."""
    if list(order) == sorted(order):
        nodes = [node("Mul", ["x", "z"], ["p"]), node("MatMul", ["p", "w"], ["y"])]
    else:
        nodes = [node("Mul", ["x", "z"], ["p"]), node("Gather", ["p", "order"], ["g"], axis=1),
                 node("MatMul", ["g", "w"], ["y"])]
    return make_model(nodes, [value_info("x", F, [1, 4]), value_info("z", F, [1, 4])], [value_info("y", F, None)],
                      [tensor("order", np.array(order, np.int64)), tensor("w", np.full((4, 1), scale, np.float32))])


# inputs below sqrt(FLT_MAX) (no stress set): their products, the sum's terms, reach 2.25e38 with both signs
_X_BELOW_HUGE = {"x": np.array([[1.5e19, 1.5e19, 1.5e19, 1.0]], np.float32),
                 "z": np.array([[1.5e19, -1.5e19, 1.5e19, 1.0]], np.float32)}


def test_a_sum_whose_terms_reach_the_largest_value_may_overflow_in_another_order():
    # fuzz campaign of seed 900000, case 15255 (a BatchNormalization folded into a ConvTranspose whose
    # products of two inputs of 1.6e19 reach 3e38): the candidate's order adds two such terms first
    # (localisation would pair the permuted terms with the original's by role: another value)
    report = verify_models(_reordered_sum([0, 1, 2, 3]), _reordered_sum([0, 2, 1, 3]), inputs=[_X_BELOW_HUGE], trials=2,
                           localize=False)
    assert not np.isfinite(report.outputs[0].worst_elements[0]["candidate"])
    assert report.verdict == ROUNDING, report.to_dict()["outputs"][0]
    assert report.outputs[0].excused.get("terms-overflow") == 1


def test_terms_near_the_largest_value_excuse_no_finite_difference():
    report = verify_models(_reordered_sum([0, 1, 2, 3]), _reordered_sum([0, 1, 2, 3], scale=1.001),
                           inputs=[_X_BELOW_HUGE], trials=2)
    assert report.verdict == MISMATCH


# ------------------------------------------------------------------------------ reductions

def _conv_bn_pool(mode, seed=0, cin=16, cout=32, hw=16, eps=1e-5):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cout)).astype(np.float32)
    scale = rng.uniform(0.5, 2, cout).astype(np.float32)
    shift = (0.1 * rng.standard_normal(cout)).astype(np.float32)
    mean = (0.1 * rng.standard_normal(cout)).astype(np.float32)
    var = rng.uniform(0.5, 2, cout).astype(np.float32)
    ins = [value_info("x", F, [1, cin, hw, hw])]
    outs = [value_info("y", F, None)]
    if mode == "original":
        nodes = [node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
                 node("BatchNormalization", ["c", "s", "t", "m", "v"], ["bn"], epsilon=eps),
                 node("GlobalAveragePool", ["bn"], ["y"])]
        inits = [("W", w), ("B", b), ("s", scale), ("t", shift), ("m", mean), ("v", var)]
    else:
        factor = (scale / np.sqrt(var if mode == "drop_epsilon" else var + np.float32(eps))).astype(np.float32)
        nodes = [node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), node("GlobalAveragePool", ["c"], ["y"])]
        inits = [("W", (w * factor[:, None, None, None]).astype(np.float32)),
                 ("B", ((b - mean) * factor + shift).astype(np.float32))]
    return make_model(nodes, ins, outs, [tensor(k, v) for k, v in inits])


def test_bn_fold_dropping_epsilon_before_global_average_pool_is_mismatch():
    # the pooled value is the only output; epsilon 1e-5 on variances ~1 is ~8e-6 relative, which
    # the old capped depth x width bound (n = 2048 at most, here 3 x 256) swallowed.
    report = verify_models(_conv_bn_pool("original"), _conv_bn_pool("drop_epsilon"), trials=2, seed=0)
    assert report.verdict == MISMATCH, report.to_dict()["outputs"][0]["bound"]


def test_correct_bn_fold_before_global_average_pool_is_rounding():
    report = verify_models(_conv_bn_pool("original"), _conv_bn_pool("fold"), trials=2, seed=0)
    assert report.verdict == ROUNDING, report.to_dict()["outputs"][0]
    bound = report.outputs[0].bound
    assert bound["path_sum"] == 16 * 9 + 1 + 256


# ------------------------------------------------------------------------------ reference-inexact

def test_reference_inexact_does_not_excuse_a_far_candidate():
    bound = RoundingBound.for_output(2.0 ** -24, 2, 1)
    original = np.array([1.0, 2.0, 3.0], np.float32)
    reference = np.array([1.0, inf, 3.0])
    near = SetEvidence(original, original.copy(), np.array([1.0, 2.0000002, 3.0], np.float32), reference=reference)
    far = SetEvidence(original, original.copy(), np.array([1.0, 2.5, 3.0], np.float32), reference=reference)
    assert judge_output([near], bound).verdict == ROUNDING
    assert judge_output([far], bound).verdict == MISMATCH


def test_reference_inexact_judges_a_cancelling_element_by_its_sensitivity():
    # A fuzz case (fuse_bn_into_conv, the inf/NaN set): float64 overflows a Conv to inf where the float32
    # runs make inf - inf = NaN, which onnxruntime's MaxPool skips; both runs pick a finite 0.086 whose
    # terms are about 1, the BN fold 1.2e-7 off the original's. |O_i| alone allows 8e-8; the element's
    # sensitivity (inputs moved by 4 ulps move it by 2.4e-7) says its terms are 1.
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(990250, max_nodes=20, opset=18, target="fuse_bn_into_conv")
    candidate = onnxrefine.optimize(case.model, ["fuse_bn_into_conv"])
    report = verify_models(case.model, candidate, seed=990250, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs if o.verdict != "exact"]
    assert sum(o.excused.get("reference-inexact", 0) for o in report.outputs) > 0
    # the same element at the unit level: without a perturbation run no terms are measured
    bound = RoundingBound.for_output(2.0 ** -24, 4, 2, amplifiers=())   # the case's: 8 roundings, no amplifier
    original = np.array([0.08576259, 1.0], np.float32)
    candidate = np.array([np.float32(0.08576259) - np.float32(1.2e-7), 1.0], np.float32)
    moved = original + np.array([2.4e-7, 0.0], np.float32)
    reference = np.array([inf, 1.0])
    sensed = SetEvidence(original, original.copy(), candidate, [moved], 2.0 ** -24, reference=reference)
    blind = SetEvidence(original, original.copy(), candidate, reference=reference)
    assert judge_output([sensed], bound).verdict == ROUNDING
    assert judge_output([blind], bound).verdict == MISMATCH


def test_reference_inexact_lends_a_jump_no_allowance():
    # A jump within the perturbation (a Floor, a picker switching elements) moves the element by far
    # more than its terms' rounding would (0.3 for 4 ulps: "terms" of 1e6): the RMS of the output caps
    # what the sensitivity may claim, so candidates outside the span the perturbed originals reach (the
    # perturbation control's) stay mismatches, 0.5 off or 1e-3 off alike.
    bound = RoundingBound.for_output(2.0 ** -24, 4, 2, amplifiers=())   # no amplifier behind it
    original = np.array([1.0, 2.0, 3.0], np.float32)
    reference = np.array([1.0, inf, 3.0])
    jump = original + np.array([0.0, 0.3, 0.0], np.float32)
    for candidate in (np.array([1.0, 2.5, 3.0], np.float32), np.array([1.0, 1.999, 3.0], np.float32)):
        evidence = SetEvidence(original, original.copy(), candidate, [jump], 2.0 ** -24, reference=reference)
        assert judge_output([evidence], bound).verdict == MISMATCH


# ------------------------------------------------------------------------------ discrete outputs

def _third_times_three(final):
    """y = final(x * 3 * (1/3)): exactly x in real arithmetic, rounded in float32."""
    return [node("Mul", ["x", "three"], ["a"]), node("Mul", ["a", "third"], ["b"])] + final


_THIRDS = [("three", np.float32(3.0)), ("third", np.float32(1) / np.float32(3))]


def test_cast_to_int_flipped_beyond_the_boundary_is_mismatch():
    # x = 2.0: x*3*(1/3) is 2.0000000596 in float64, right at the truncation boundary, so the
    # original's Cast wavers between 1 and 2 under few-ulp input moves; a candidate answering -2
    # is still no rounding flip (the old perturbation control called it unstable).
    original = one_input(_third_times_three([node("Cast", ["b"], ["y"], to=TensorProto.INT32)]), _THIRDS,
                         shape=(1,), out_type=TensorProto.INT32)
    wrong = one_input([node("Neg", ["x"], ["n"]), node("Cast", ["n"], ["y"], to=TensorProto.INT32)],
                      shape=(1,), out_type=TensorProto.INT32)
    x = {"x": np.array([2.0], np.float32)}
    assert verdict(original, wrong, x) == MISMATCH
    # a one-step flip at that boundary is what rounding does
    floor_side = one_input([node("Sub", ["x", "tiny"], ["n"]), node("Cast", ["n"], ["y"], to=TensorProto.INT32)],
                           [("tiny", np.float32(1e-6))], shape=(1,), out_type=TensorProto.INT32)
    assert verdict(original, floor_side, x) == UNSTABLE


def test_cast_to_int_following_the_reference_is_rounding():
    # The same cancellation past an op without a bound rule (Sum), where no per-element bound is
    # derived: the decision's margin is the stand-in gamma*|v| of that element, 5.5 is far from any
    # integer by it, and the candidate Cast(x) makes float64's decision where the original's float32
    # value (0 or 8) does not.
    original = one_input([node("Add", ["x", "big"], ["p"]), node("Sum", ["p", "minus_big"], ["q"]),
                          node("Cast", ["q"], ["y"], to=TensorProto.INT32)],
                         [("big", np.float32(1e8)), ("minus_big", np.float32(-1e8))], shape=(2,),
                         out_type=TensorProto.INT32)
    candidate = one_input([node("Cast", ["x"], ["y"], to=TensorProto.INT32)], shape=(2,),
                          out_type=TensorProto.INT32)
    x = {"x": np.array([5.5, 2.5], np.float32)}
    assert verdict(original, candidate, x) == ROUNDING


def test_a_model_local_functions_body_gets_the_bound_its_inlined_graph_gets():
    # the cancellation inside a function: its body is tracked as the main graph is, so the Cast's
    # feed has the derived bound of the inlined graph (next test) and the verdict is the same
    body = [node("Add", ["a", "big"], ["p"]), node("Sub", ["p", "big"], ["q"])]
    big = helper.make_node("Constant", [], ["big"], value=helper.make_tensor("v", F, [], [1e8]))
    function = helper.make_function("local", "Cancel", ["a"], ["q"], [big] + body,
                                    [helper.make_opsetid("", 17)])
    original = one_input([helper.make_node("Cancel", ["x"], ["q"], domain="local"),
                          node("Cast", ["q"], ["y"], to=TensorProto.INT32)], shape=(2,), out_type=TensorProto.INT32)
    original.functions.append(function)
    original.opset_import.append(helper.make_opsetid("local", 1))
    candidate = one_input([node("Cast", ["x"], ["y"], to=TensorProto.INT32)], shape=(2,),
                          out_type=TensorProto.INT32)
    x = {"x": np.array([5.5, 2.5], np.float32)}
    assert verdict(original, candidate, x) == UNSTABLE


def test_cast_to_int_where_the_original_cancels_is_unstable_not_mismatch():
    # the original cancels catastrophically ((x + 1e8) - 1e8 gives 0 or 8 in float32): its derived
    # per-element bound (the rounding of x + 1e8, about 6) puts the float64 feed 5.5 within reach of
    # several integers, so the original's own decision is not fixed there: `unstable` (never
    # accepted), not a mismatch for the candidate Cast(x), which decides as float64 does.
    original = one_input([node("Add", ["x", "big"], ["p"]), node("Sub", ["p", "big"], ["q"]),
                          node("Cast", ["q"], ["y"], to=TensorProto.INT32)], [("big", np.float32(1e8))],
                         shape=(2,), out_type=TensorProto.INT32)
    candidate = one_input([node("Cast", ["x"], ["y"], to=TensorProto.INT32)], shape=(2,),
                          out_type=TensorProto.INT32)
    x = {"x": np.array([5.5, 2.5], np.float32)}
    assert verdict(original, candidate, x) == UNSTABLE


def test_comparison_flip_near_the_boundary_is_unstable_and_far_is_mismatch():
    two = [("two", np.float32(2.0))]
    original = one_input(_third_times_three([node("Less", ["b", "two"], ["y"])]), _THIRDS + two,
                         shape=(2,), out_type=TensorProto.BOOL)
    near = one_input([node("LessOrEqual", ["x", "two"], ["y"])], two, shape=(2,), out_type=TensorProto.BOOL)
    x = {"x": np.array([2.0, 7.0], np.float32)}
    assert verdict(original, near, x) == UNSTABLE
    far = one_input([node("Greater", ["x", "two"], ["y"])], two, shape=(2,), out_type=TensorProto.BOOL)
    assert verdict(original, far, {"x": np.array([2.5, 7.0], np.float32)}) == MISMATCH


def test_argmax_flip_far_from_a_tie_is_mismatch():
    original = one_input(_third_times_three([node("ArgMax", ["b"], ["y"], axis=1, keepdims=0)]), _THIRDS,
                         shape=(1, 4), out_type=TensorProto.INT64)
    argmin = one_input([node("ArgMin", ["x"], ["y"], axis=1, keepdims=0)], shape=(1, 4),
                       out_type=TensorProto.INT64)
    x = {"x": np.array([[0.5, 0.9, -0.3, 0.1]], np.float32)}
    assert verdict(original, argmin, x) == MISMATCH


def test_argmax_of_an_overflowing_exp_rewritten_to_argmax_is_mismatch():
    # onnxoptimizer's eliminate_nop_monotone_argmax (fuzz case 2542 of seed 500000, onnxoptimizer
    # 0.4.2): Exp overflows in float32 and in float64 alike, so the ties at +inf are decided by
    # ArgMax's first-index rule; the rewrite answers the true maximum instead. An infinite tie is
    # not a near-tie, so this is no `unstable`.
    original = one_input([node("Exp", ["x"], ["e"]), node("ArgMax", ["e"], ["y"], axis=1, keepdims=0)],
                         shape=(2, 3), out_type=TensorProto.INT64)
    rewritten = one_input([node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], shape=(2, 3),
                          out_type=TensorProto.INT64)
    x = {"x": np.array([[1000.0, 2000.0, 3000.0], [0.1, 0.5, 0.2]], np.float32)}
    assert verdict(original, rewritten, x) == MISMATCH


def test_near_boundary_reads_argmax_layouts_and_bool_casts():
    from onnxrefine.verify.judge.decisions import DecisionEvidence, near_boundary, reference_decision

    data = np.array([[1.0, 1.0 + 1e-9, 0.0], [0.0, 5.0, 1.0]])
    for keepdims in (0, 1):
        decision = DecisionEvidence("ArgMax", [data], {"axis": 1, "keepdims": keepdims})
        shape = (2, 1) if keepdims else (2,)
        original = np.array([0, 1], np.int64).reshape(shape)
        candidate = np.array([1, 2], np.int64).reshape(shape)
        assert decision.usable(shape) and not decision.usable((3,))
        assert near_boundary(decision, original, candidate, 1e-6, 2.0).ravel().tolist() == [True, False]
        expected, defined = reference_decision(decision, original)
        assert expected.ravel().tolist() == [1, 1] and defined.all()
    last = DecisionEvidence("ArgMax", [np.array([[2.0, 2.0, 1.0]])], {"axis": 1, "keepdims": 0,
                                                                        "select_last_index": 1})
    assert reference_decision(last, np.array([0], np.int64))[0].tolist() == [1]
    # each element's own margin: 1e-9 is near 0 only where its bound reaches 0 (a cancellation),
    # not because the tensor holds a 0.5 (the old RMS scale made every small value "near")
    to_bool = DecisionEvidence("Cast", [np.array([1e-9, 1e-9, 0.5, nan])])
    flags = np.array([True, True, True, False])
    assert near_boundary(to_bool, flags, ~flags, 1e-6, 2.0).tolist() == [False, False, False, True]
    to_bool.bounds = [np.array([1e-9, 0.0, 0.0, np.nan])]
    assert near_boundary(to_bool, flags, ~flags, 1e-6, 2.0).tolist() == [True, False, False, True]


def test_every_runtime_explanation_is_documented_and_names_existing_tests():
    import pathlib

    from onnxrefine.verify.judge.controls import RUNTIME_EXPLANATIONS

    root = pathlib.Path(__file__).resolve().parent.parent
    names = [item.name for item in RUNTIME_EXPLANATIONS]
    assert len(names) == len(set(names))
    for item in RUNTIME_EXPLANATIONS:
        assert item.excuses and item.why and item.legitimate and item.counterexamples, item.name
        assert (root / "src" / "onnxrefine" / item.where).is_file()
        for test in item.legitimate + item.counterexamples:
            path, name = test.split("::")
            assert f"def {name}(" in (root / path).read_text(), test


def test_rules_after_every_difference_is_explained_are_not_applied(monkeypatch):
    """Once every differing element is explained, a later rule could explain none anew: it is not
    applied (the judgement is the same; a million-element output's later rules cost a pass each),
    but the veto still is: a sign flip stays a mismatch after the others."""
    from dataclasses import replace

    from onnxrefine.verify.judge import verdict as judging

    applied = []

    def counted(rule):
        return replace(rule, apply=lambda facts, rule=rule: applied.append(rule.name) or rule.apply(facts))

    monkeypatch.setattr(judging, "RULES", tuple(counted(rule) for rule in RULES))
    bound = RoundingBound.for_output(2.0 ** -24, 2, 1)
    original = np.array([1.0, 2.0, 3.0], np.float32)
    within = SetEvidence(original, original.copy(), np.array([1.0, 2.0000002, 3.0], np.float32),
                         reference=original.astype(np.float64))
    judgement = judge_output([within], bound)
    assert judgement.verdict == ROUNDING and judgement.excused == {"within-bound": 1}
    assert applied == ["within-derived-bound", "within-bound", "sign-flip"]
    flipped = SetEvidence(np.array([inf, 2.0], np.float32), np.array([inf, 2.0], np.float32),
                          np.array([-inf, 2.0000002], np.float32), reference=np.array([inf, 2.0]))
    assert judge_output([flipped], bound).verdict == MISMATCH
