"""Known onnxruntime departures from the spec, explained by named rules (verify/judge/rules.py), each
with the real bugs it must not excuse."""

from __future__ import annotations

import numpy as np
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.verify import MISMATCH, ROUNDING, verify_models
from onnxrefine.verify.judge.verdict import RoundingBound, SetEvidence, judge_output

F = TensorProto.FLOAT
LOWEST = -float(np.finfo(np.float32).max)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def build(nodes, inits=()):
    return make_model(nodes, [value_info("x", F, [1, 1, 6])], [value_info("y", F, None)],
                      [tensor(k, np.asarray(v)) for k, v in inits])


POOL = {"kernel_shape": [2], "strides": [2]}
X = np.array([[[-np.inf, -np.inf, 1.5, -np.inf, -2.0, 3.0]]], np.float32)


def test_maxpool_window_of_only_minus_inf_is_onnxruntimes_lowest():
    # MaxPool(x) * 2 -> MaxPool(x * 2): exact for a positive power of two; onnxruntime's MaxPool
    # gives -FLT_MAX for the window of only -inf, which the original's *2 takes to -inf (as the
    # spec does) while the candidate's MaxPool output stays -FLT_MAX
    two = [("two", np.float32(2))]
    original = build([node("MaxPool", ["x"], ["p"], **POOL), node("Mul", ["p", "two"], ["y"])], two)
    candidate = build([node("Mul", ["x", "two"], ["m"]), node("MaxPool", ["m"], ["y"], **POOL)], two)
    report = verify_models(original, candidate, inputs=[{"x": X}], trials=2)
    assert report.verdict == ROUNDING


def test_maxpool_lowest_through_a_log_softmax_fusion_is_onnxruntimes_lowest():
    # fuzz campaign of seed 900000, case 7664: MaxPool then Log(Softmax) fused into LogSoftmax; the
    # MaxPool's -FLT_MAX (where the spec says -inf) is kept by LogSoftmax (minus the row's finite
    # log-sum-exp) while the original's Softmax takes it to 0 and its Log to -inf
    pool = {"kernel_shape": [1]}
    original = build([node("MaxPool", ["x"], ["p"], **pool), node("Softmax", ["p"], ["s"], axis=-1),
                      node("Log", ["s"], ["y"])])
    candidate = build([node("MaxPool", ["x"], ["p"], **pool), node("LogSoftmax", ["p"], ["y"], axis=-1)])
    report = verify_models(original, candidate, inputs=[{"x": X}], trials=2)
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()
    assert report.outputs[0].excused.get("maxpool-lowest", 0) > 0


def test_clip_to_lowest_before_a_log_softmax_is_still_mismatch():
    original = build([node("Softmax", ["x"], ["s"], axis=-1), node("Log", ["s"], ["y"])])
    lowest = [("low", np.float32(LOWEST))]
    candidate = build([node("Clip", ["x", "low"], ["p"]), node("LogSoftmax", ["p"], ["y"], axis=-1)], lowest)
    assert verify_models(original, candidate, inputs=[{"x": X}], trials=2).verdict == MISMATCH


def test_clip_turning_minus_inf_into_lowest_is_still_mismatch():
    # the same pair of values, made by a Clip instead of a MaxPool: a change, not onnxruntime's MaxPool
    original = build([node("Identity", ["x"], ["y"])])
    candidate = build([node("Clip", ["x"], ["y"])])
    assert verify_models(original, candidate, inputs=[{"x": X}], trials=2).verdict == MISMATCH


def test_maxpool_lowest_where_the_true_value_is_finite_is_mismatch():
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=())
    original = np.array([-np.inf, 1.0], np.float32)
    candidate = np.array([LOWEST, 1.0], np.float32)
    for reference, expected in ((np.array([-np.inf, 1.0]), ROUNDING), (np.array([-3.0, 1.0]), MISMATCH)):
        evidence = SetEvidence(original, original.copy(), candidate, reference=reference, maxpool_made=(False, True))
        assert judge_output([evidence], bound).verdict == expected
    evidence = SetEvidence(original, original.copy(), candidate, reference=np.array([-np.inf, 1.0]),
                           maxpool_made=(True, False))  # the -FLT_MAX side is not the MaxPool's
    assert judge_output([evidence], bound).verdict == MISMATCH


def _pool_average_log_softmax(fused: bool, lowest_by=("MaxPool", {"kernel_shape": [1]})):
    # fuzz campaign of seed 900000, case 88383: MaxPool -> AveragePool -> Log(Softmax), the Log(Softmax)
    # fused. onnxruntime's MaxPool makes -FLT_MAX of a -inf, the AveragePool halves it beside a finite
    # element, and LogSoftmax keeps the -FLT_MAX/2 where the original's Softmax takes it to 0, its Log to -inf
    op, attrs = lowest_by
    head = [node(op, ["x"] + (["low"] if op == "Clip" else []), ["p"], **attrs),
            node("AveragePool", ["p"], ["a"], kernel_shape=[2], strides=[2])]
    tail = [node("LogSoftmax", ["a"], ["y"], axis=-1)] if fused else \
        [node("Softmax", ["a"], ["s"], axis=-1), node("Log", ["s"], ["y"])]
    return build(head + tail, [("low", np.float32(LOWEST))] if op == "Clip" else ())


AVERAGED = np.array([[[-np.inf, 2.0, 1.5, 0.5, -2.0, 3.0]]], np.float32)


def test_maxpool_lowest_averaged_by_an_average_pool_is_onnxruntimes_lowest():
    report = verify_models(_pool_average_log_softmax(False), _pool_average_log_softmax(True),
                           inputs=[{"x": AVERAGED}], trials=2)
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()
    assert report.outputs[0].excused.get("maxpool-lowest", 0) > 0


def test_clip_to_lowest_before_an_average_pool_is_still_mismatch():
    # the same values made by a Clip: not onnxruntime's MaxPool
    clip = ("Clip", {})
    original = _pool_average_log_softmax(False, ("Identity", {}))
    report = verify_models(original, _pool_average_log_softmax(True, clip), inputs=[{"x": AVERAGED}], trials=2)
    assert report.verdict == MISMATCH


def test_maxpool_lowest_beyond_the_average_pools_reach_is_mismatch():
    # a window of -FLT_MAX averaged over k = 2 elements lies in [-FLT_MAX, -FLT_MAX/2]: -FLT_MAX/4 is
    # no MaxPool's lowest behind one such pool, nor -FLT_MAX/2 behind none
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=())
    original = np.array([-np.inf, 1.0], np.float32)
    reference = np.array([-np.inf, 1.0])
    for candidate_value, made, expected in ((LOWEST / 2, 2, ROUNDING), (LOWEST, 2, ROUNDING),
                                            (LOWEST / 4, 2, MISMATCH), (LOWEST / 2, 1, MISMATCH)):
        candidate = np.array([candidate_value, 1.0], np.float32)
        evidence = SetEvidence(original, original.copy(), candidate, reference=reference, maxpool_made=(0, made))
        assert judge_output([evidence], bound).verdict == expected, (candidate_value, made)


def test_a_reduce_min_over_a_nan_after_fused_transposes_is_undefined():
    # fuzz campaign of seed 1100000, case 13870: four Transposes fused into two change the layout a
    # ReduceMin reads; on the inf/NaN set the deployment settings' kernel keeps a -inf in the candidate
    # where it skipped it in the original (a NaN read in between drops what came before), and float64 says NaN
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1113870, max_nodes=20, opset=18, target="fuse_consecutive_transposes")
    candidate = onnxrefine.optimize(case.model, ["fuse_consecutive_transposes"])
    report = verify_models(case.model, candidate, seed=1113870, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict != MISMATCH, report.to_dict()["deployment"]
    excused = sum(o.excused.get("undefined-pick", 0) for o in report.outputs + report.deployment)
    assert excused > 0


def _nan_pick(picker_made=(True, True), reference=np.nan, nonfinite_inputs=True):
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=())
    original = np.array([-1.5, 2.0], np.float32)
    candidate = np.array([-np.inf, 2.0], np.float32)
    evidence = SetEvidence(original, original.copy(), candidate, reference=np.array([reference, 2.0]),
                           nonfinite_inputs=nonfinite_inputs, picker_made=picker_made)
    return judge_output([evidence], bound).verdict


def test_a_reduction_replaced_by_another_at_a_nan_is_still_mismatch():
    # the candidate's output is no min or max (a ReduceMin made a ReduceMean): its value at a NaN is no pick
    assert _nan_pick() == ROUNDING
    assert _nan_pick(picker_made=(True, False)) == MISMATCH


def test_a_pick_where_the_minimum_is_defined_is_still_mismatch():
    assert _nan_pick(reference=-1.5) == MISMATCH


def test_a_nan_pick_without_non_finite_inputs_is_still_mismatch():
    assert _nan_pick(nonfinite_inputs=False) == MISMATCH


def _lowest_then_conv(first_weight: float):
    # both channels' first window hold only -inf: onnxruntime's MaxPool gives -FLT_MAX in each, and the
    # 1x1 Conv's two terms of about 1e38 cancel to -FLT_MAX/100 where float64 has inf - inf = NaN
    weights = np.array([[[first_weight], [-0.29]]], np.float32)
    nodes = [node("MaxPool", ["x"], ["p"], **POOL), node("Conv", ["p", "w"], ["y"], kernel_shape=[1])]
    return make_model(nodes, [value_info("x", F, [1, 2, 4])], [value_info("y", F, None)], [tensor("w", weights)])


X_LOWEST = np.array([[[-np.inf, -np.inf, 1.0, 2.0], [-np.inf, -np.inf, -1.5, 0.5]]], np.float32)


def test_maxpool_lowest_carried_through_a_cancelling_conv_is_judged_by_its_terms():
    # fuzz campaign of seed 1100000, case 49758 (a BatchNormalization folded into the Conv after such a
    # MaxPool): no float64 value there, and no sensitivity (an input -inf does not move); the run's
    # terms, of magnitude FLT_MAX, are the magnitude the reference carries for onnxruntime's lowest
    one_ulp = float(np.nextafter(np.float32(0.3), np.float32(1.0)))
    report = verify_models(_lowest_then_conv(0.3), _lowest_then_conv(one_ulp), inputs=[{"x": X_LOWEST}])
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs]
    assert report.outputs[0].excused.get("reference-inexact") == 1


def test_maxpool_lowest_through_a_conv_whose_weight_is_off_is_still_mismatch():
    report = verify_models(_lowest_then_conv(0.3), _lowest_then_conv(0.3 * (1 + 1e-4)), inputs=[{"x": X_LOWEST}])
    assert report.verdict == MISMATCH


def test_a_bn_fold_after_a_maxpool_lowest_is_rounding():
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1149758, max_nodes=20, opset=18, target=None)
    candidate = onnxrefine.optimize(case.model, ["fuse_bn_into_conv"])
    report = verify_models(case.model, candidate, seed=1149758, dims=case.input_dims, trials=2, localize=False)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs if o.verdict != "exact"]


# The run's -FLT_MAX counts among the terms only through the sums of products after the MaxPool
# (Conv, MatMul, Gemm, BatchNormalization): each case below lent a wrong candidate the magnitude FLT_MAX.

def _after_lowest(tail, extra, dtype=F, width=2):
    nodes = [node("MaxPool", ["x"], ["p"], kernel_shape=[1])] + tail(extra)
    return make_model(nodes, [value_info("x", dtype, [1, 1, width]), value_info("z", dtype, [1, 1, width])],
                      [value_info("y", dtype, None)],
                      [tensor("half", np.float32(0.5)), tensor("d", np.asarray(0.25, TYPES[dtype]))])


TYPES = {F: np.float32, TensorProto.FLOAT16: np.float16}


def _softmax_tail(extra):  # the row's other elements, not the -FLT_MAX logit whose exp is 0 in the run
    return [node("Concat", ["p", "z"], ["j"], axis=2), node("LogSoftmax", ["j"], ["s"], axis=-1),
            node("Add", ["s", "d"], ["y"]) if extra else node("Identity", ["s"], ["y"])]


def _relu_tail(extra):  # p - p/2 is NaN in float64: its sign, and Relu's 0 in the run, unknown there
    return [node("Mul", ["p", "half"], ["h"]), node("Sub", ["p", "h"], ["q"]), node("Relu", ["q"], ["r"]),
            node("Add", ["z", "d"], ["e"]), node("Add", ["r", "e" if extra else "z"], ["y"])]


def _max_tail(extra):  # Max picks z: its terms, not the MaxPool's
    return [node("CumSum", ["z", "axis"], ["s"]), node("Add", ["s", "d"], ["t"]),
            node("Max", ["p", "t" if extra else "s"], ["y"])]


def _check_still_mismatch(tail, dtype=F, width=2, fill=-np.inf):
    x = np.full((1, 1, width), fill, TYPES[dtype])
    z = np.arange(1, width + 1, dtype=TYPES[dtype]).reshape(1, 1, width)
    original, candidate = _after_lowest(tail, False, dtype, width), _after_lowest(tail, True, dtype, width)
    for model in (original, candidate):
        model.graph.initializer.append(tensor("axis", np.array(2, np.int64)))
    report = verify_models(original, candidate, inputs=[{"x": x, "z": z}])
    assert report.verdict == MISMATCH, [o.to_dict().get("excused") for o in report.outputs]


def test_a_log_softmax_after_the_lowest_shifted_is_still_mismatch():
    _check_still_mismatch(_softmax_tail)


def test_a_relu_of_a_nan_after_the_lowest_lends_nothing():
    _check_still_mismatch(_relu_tail)


def test_a_max_after_the_lowest_carries_the_terms_of_what_it_picks():
    _check_still_mismatch(_max_tail)


def test_a_float16_maxpool_keeps_minus_inf_and_lends_nothing():
    # onnxruntime's float16 (and float64) MaxPool gives -inf for a window of only -inf: no run value
    _check_still_mismatch(_max_tail, dtype=TensorProto.FLOAT16)


def test_a_max_beside_a_huge_finite_operand_carries_the_terms_of_what_it_picks():
    # Max's magnitude of terms was the wider of its operands' everywhere: -3e38 lent the picked z's element 3e38
    _check_still_mismatch(_max_tail, fill=-3e38)


def _cancel_tail(extra):  # a Conv of two lowest channels by 0.5 and -0.5: 0 in the run, NaN in float64
    return [node("Conv", ["p", "w"], ["c"], kernel_shape=[1]), node("Relu", ["c"], ["r"]),
            node("Add", ["z", "d"], ["e"]), node("Add", ["r", "e" if extra else "z"], ["y"])]


def test_a_relu_after_a_conv_that_cancels_the_lowest_lends_nothing():
    x = np.full((1, 2, 1), -np.inf, np.float32)
    z = np.array([[[1.0]]], np.float32)
    models = []
    for extra in (False, True):
        nodes = [node("MaxPool", ["x"], ["p"], kernel_shape=[1])] + _cancel_tail(extra)
        models.append(make_model(nodes, [value_info("x", F, [1, 2, 1]), value_info("z", F, [1, 1, 1])],
                                 [value_info("y", F, None)],
                                 [tensor("w", np.array([[[0.5], [-0.5]]], np.float32)), tensor("d", np.float32(0.25))]))
    report = verify_models(models[0], models[1], inputs=[{"x": x, "z": z}])
    assert report.verdict == MISMATCH, [o.to_dict().get("excused") for o in report.outputs]


def _pool_concat(tail: str, constant=(0.5, -1.0, 2.0, 0.25, 1.0, -3.0)):
    # MaxPool(x) joined to a constant along the channels, then Log(Softmax) ("split"), LogSoftmax
    # ("fused") over them or nothing ("moved")
    pool = {"kernel_shape": [1]}
    nodes = [node("MaxPool", ["x"], ["p"], **pool), node("Concat", ["p", "c"], ["j"], axis=1)]
    nodes += {"split": [node("Softmax", ["j"], ["s"], axis=1), node("Log", ["s"], ["y"])],
              "fused": [node("LogSoftmax", ["j"], ["y"], axis=1)],
              "moved": [node("Identity", ["j"], ["y"])]}[tail]
    return build(nodes, [("c", np.array(constant, np.float32).reshape(1, 1, 6))])


def test_maxpool_lowest_joined_to_constants_by_a_concat_is_onnxruntimes_lowest():
    # fuzz campaign of seed 1500000, case 30136: MaxPool, Concat with constants, Log(Softmax) fused;
    # the -FLT_MAX onnxruntime's MaxPool makes of a window of -inf lies in the MaxPool's part of the
    # Concat, which LogSoftmax keeps and the original's Softmax and Log take to -inf
    report = verify_models(_pool_concat("split"), _pool_concat("fused"), inputs=[{"x": X}], trials=2)
    assert report.verdict == ROUNDING, report.outputs[0].to_dict()
    assert report.outputs[0].excused.get("maxpool-lowest", 0) > 0


def test_the_campaign_case_of_a_concat_after_a_maxpool_is_judged_so_inside_the_graph():
    # the same case as the campaign made it: the fused value is an intermediate, judged by localisation
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1530136, max_nodes=20, opset=18, target="fuse_consecutive_log_softmax")
    candidate = onnxrefine.optimize(case.model, ["fuse_consecutive_log_softmax"])
    report = verify_models(case.model, candidate, seed=1530136, dims=case.input_dims, trials=2)
    assert report.verdict == ROUNDING, report.localisation
    value = next(v for v in report.localisation["values"] if v["candidate_op"] == "LogSoftmax")
    assert value["excused"].get("maxpool-lowest", 0) > 0


def test_a_constant_beside_the_maxpool_changed_to_lowest_is_still_mismatch():
    # the Concat's constant part is no MaxPool's: a -inf of the constant made -FLT_MAX is a change
    original = _pool_concat("moved", constant=(0.5, -np.inf, 2.0, 0.25, 1.0, -3.0))
    candidate = _pool_concat("moved", constant=(0.5, LOWEST, 2.0, 0.25, 1.0, -3.0))
    report = verify_models(original, candidate, inputs=[{"x": X}], trials=2)
    assert report.verdict == MISMATCH, report.outputs[0].to_dict()


# After onnxruntime's -FLT_MAX the run sums finite terms the spec's -inf does not have: where the
# reference evaluated as onnxruntime's MaxPool computes moves a value, that value is judged against it
# (rule maxpool-lowest-run).

X_TWO_LOWEST = np.array([[[-np.inf, -np.inf, 1.0, 2.0], [-np.inf, -np.inf, -1.5, 0.5]]], np.float32)


def _lowest_conv_bn(weight_scale: float = 1.0, fold: bool = False, pool_type=F):
    # both channels' first window hold only -inf; the Conv sums two terms of -FLT_MAX, which overflows to
    # -inf in float32, and the BatchNormalization after it scales by 1/4: the fold's -FLT_MAX/2 is finite
    scale = np.float32(0.25)
    weights = np.ones((1, 2, 1), TYPES[pool_type])
    nodes = [node("MaxPool", ["x"], ["p"], **POOL)]
    if fold:
        nodes.append(node("Conv", ["p", "wf"], ["y"], kernel_shape=[1]))
    else:
        nodes += [node("Conv", ["p", "w"], ["c"], kernel_shape=[1]),
                  node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], epsilon=0.0)]
    inits = [tensor("w", weights), tensor("wf", (weights * scale * weight_scale).astype(weights.dtype))]
    inits += [tensor(k, np.asarray([v], TYPES[pool_type])) for k, v in (("s", scale), ("b", 0), ("m", 0), ("v", 1))]
    return make_model(nodes, [value_info("x", pool_type, [1, 2, 4])], [value_info("y", pool_type, None)], inits)


def test_a_bn_fold_after_the_lowest_overflowing_in_the_original_is_rounding():
    report = verify_models(_lowest_conv_bn(), _lowest_conv_bn(fold=True), inputs=[{"x": X_TWO_LOWEST}], trials=2)
    assert report.verdict == ROUNDING, [o.to_dict() for o in report.outputs]
    assert report.outputs[0].excused.get("maxpool-lowest-run") == 1
    # the fuzz campaign's case (seed 1700000, case 12446): an intermediate, judged so by localisation too
    import onnxrefine
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(1712446, max_nodes=20, opset=18, target="fuse_bn_into_conv")
    candidate = onnxrefine.optimize(case.model, ["fuse_bn_into_conv"])
    report = verify_models(case.model, candidate, seed=1712446, dims=case.input_dims, trials=2)
    assert report.verdict == ROUNDING, report.localisation


X_ALL_LOWEST = np.full((1, 2, 4), -np.inf, np.float32)  # every window only -inf: the rule's elements alone


def test_a_wrong_bn_fold_after_the_lowest_is_still_mismatch():
    for off in (1 + 1e-3, 2.0):  # 2x: the candidate's exact -FLT_MAX is no saturation of the original's -inf
        report = verify_models(_lowest_conv_bn(), _lowest_conv_bn(off, fold=True), inputs=[{"x": X_ALL_LOWEST}],
                               deployment=None)
        assert report.verdict == MISMATCH, off
    assert verify_models(_lowest_conv_bn(), _lowest_conv_bn(fold=True), inputs=[{"x": X_ALL_LOWEST}],
                         deployment=None).verdict == ROUNDING


def test_a_wrong_constant_after_a_conv_that_overflows_to_nan_in_the_original_is_mismatch():
    # the original's Conv of +-2*FLT_MAX is NaN (so is the spec's), onnxruntime's reference 0: the bound of
    # that cancellation (~u*FLT_MAX) excuses nothing; each element is judged by its own magnitude there
    def model(weight, scale, extra=None):
        nodes = [node("MaxPool", ["x"], ["p"], kernel_shape=[1]), node("Conv", ["p", "w"], ["c"], kernel_shape=[1]),
                 node("Mul", ["c", "s"], ["m"]), node("Relu", ["m"], ["r"]),
                 node("Sum", ["r", "z"] + (["d"] if extra else []), ["y"])]
        return make_model(nodes, [value_info("x", F, [1, 2, 1]), value_info("z", F, [1, 1, 1])],
                          [value_info("y", F, None)],
                          [tensor("w", np.array([[[weight], [-weight]]], np.float32)), tensor("s", np.float32(scale)),
                           tensor("d", np.float32(extra or 0))])
    feeds = {"x": np.full((1, 2, 1), -np.inf, np.float32), "z": np.ones((1, 1, 1), np.float32)}
    assert verify_models(model(2.0, 1.0), model(1.0, 2.0), inputs=[feeds]).verdict == ROUNDING
    for extra in (1000.0, 1e30):
        assert verify_models(model(2.0, 1.0), model(1.0, 2.0, extra), inputs=[feeds]).verdict == MISMATCH


def test_the_run_reference_judges_only_where_the_departure_moves_the_value():
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=())
    original, reference = np.array([-np.inf, 1.0], np.float32), np.array([-np.inf, 1.0])

    def verdict(candidate, run_reference):
        evidence = SetEvidence(original, original.copy(), np.array(candidate, np.float32), reference=reference,
                               run_reference=np.array(run_reference))
        return judge_output([evidence], bound).verdict

    assert verdict([LOWEST / 2, 1.0], [LOWEST / 2, 1.0]) == ROUNDING
    assert verdict([LOWEST / 2, 1.5], [LOWEST / 2, 1.0]) == MISMATCH  # the departure moved nothing there
    assert verdict([LOWEST / 2, 1.5], [LOWEST / 2, 1.5]) == MISMATCH  # moved, but both runs are finite there
    assert verdict([LOWEST / 2, 1.0], [LOWEST / 3, 1.0]) == MISMATCH  # not within its bound of the run's value


def test_a_float16_maxpool_gets_no_run_reference():
    # onnxruntime's float16 MaxPool gives -inf for a window of only -inf, as the spec does
    from onnxrefine.verify.reference import evaluate_float64

    for pool_type, expected in ((F, LOWEST / 2), (TensorProto.FLOAT16, -np.inf)):
        value = evaluate_float64(_lowest_conv_bn(pool_type=pool_type), {"x": X_TWO_LOWEST.astype(TYPES[pool_type])},
                                 as_onnxruntime=True)["y"]
        assert value[0, 0, 0] == expected
