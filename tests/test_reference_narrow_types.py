"""The float64 reference rounds where the ONNX spec makes a narrow type observable: a Cast to
float16/bfloat16/float8 and every float16 node output; float32 stays ideal."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import make_model, run, tensor, value_info
from onnxrefine.verify import verify_models
from onnxrefine.verify.reference.evaluator import evaluate_float64
from onnxrefine.verify.reference.kernels.dtype import round_ieee

F, H, D = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE


def _cast_chain_model():
    """y = Cast(Cast(x, float16), float) + 0 * x: the float16 Cast rounds and overflows."""
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=H),
        helper.make_node("Cast", ["h"], ["y"], to=F),
    ]
    return make_model(nodes, [value_info("x", F, [6])], [value_info("y", F, [6])])


def test_cast_to_float16_rounds_and_overflows_like_the_spec():
    model = _cast_chain_model()
    x = np.array([70000.0, 65520.0, 65519.0, 1.0001, 2049.0, -1e-8], np.float32)
    ref = evaluate_float64(model, {"x": x})["y"]
    expected = np.array([np.inf, np.inf, 65504.0, 1.0, 2048.0, -0.0])
    np.testing.assert_array_equal(ref, expected)
    assert np.signbit(ref[-1])  # -1e-8 underflows to -0.0, sign kept
    np.testing.assert_array_equal(ref, run(model, {"x": x})[0].astype(np.float64))  # and ORT agrees


def test_removing_a_lossy_float16_cast_chain_is_a_mismatch():
    """Old reference: no rounding at the Cast, so it sided with the candidate that dropped the
    float16 round trip (70000 -> 70000 instead of inf) and the original's inf looked like the bug."""
    original = _cast_chain_model()
    candidate = make_model([helper.make_node("Identity", ["x"], ["y"])],
                           [value_info("x", F, [6])], [value_info("y", F, [6])])
    x = np.array([70000.0, 1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    report = verify_models(original, candidate, inputs=[{"x": x}])
    assert report.verdict == "mismatch"


def test_double_to_float16_follows_the_spec_not_double_rounding():
    """onnxruntime's double->float16 Cast rounds through float32 (2049.0000001 -> 2049 -> 2048 by
    ties-to-even; 65519.9999999 -> 65520 -> inf). The spec's single rounding gives 2050 and 65504;
    a candidate holding those (a folded constant) is right, and the reference says so."""
    c = np.array([2049.0000001, 65519.9999999], np.float64)
    original = make_model(
        [helper.make_node("Cast", ["c"], ["h"], to=H), helper.make_node("Cast", ["h"], ["hf"], to=F),
         helper.make_node("Add", ["hf", "x"], ["y"])],
        [value_info("x", F, [2])], [value_info("y", F, [2])], initializers=[tensor("c", c)])
    folded = make_model(
        [helper.make_node("Add", ["k", "x"], ["y"])],
        [value_info("x", F, [2])], [value_info("y", F, [2])],
        initializers=[tensor("k", np.array([2050.0, 65504.0], np.float32))])
    x = np.zeros(2, np.float32)
    assert list(run(original, {"x": x})[0]) == [2048.0, np.inf]  # the onnxruntime artefact
    ref = evaluate_float64(original, {"x": x})["y"]
    np.testing.assert_array_equal(ref, [2050.0, 65504.0])
    report = verify_models(original, folded, inputs=[{"x": x}])
    (output,) = report.outputs
    assert output.cand_err_max == 0.0


def test_float16_arithmetic_overflows_at_the_node_that_overflows():
    """x*x/1000 on float16 x=300: the spec's Mul result is float16, 90000 -> inf; float64 throughout
    would say 90. The reference now agrees with the spec (and onnxruntime)."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Div", ["sq", "k"], ["y"])]
    model = make_model(nodes, [value_info("x", H, [3])], [value_info("y", H, [3])],
                       initializers=[tensor("k", np.array(1000.0, np.float16))])
    x = np.array([300.0, 10.0, 0.1], np.float16)
    ref = evaluate_float64(model, {"x": x})["y"]
    assert ref[0] == np.inf
    # every node output is a float16 value: the 0.1*0.1 product rounds before the division
    with np.errstate(over="ignore"):
        sq = (x.astype(np.float64) ** 2).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(ref, (sq / 1000).astype(np.float16).astype(np.float64))
    # onnxruntime's CPU runs this float16 chain in float32 without rounding in between: 90, not inf
    assert run(model, {"x": x})[0][0] == 90.0


def _const_square_model(square: np.ndarray | None):
    """y = c*c / 1000 + x in float16 (c = 300, a constant); with `square`, c*c comes pre-folded."""
    k = tensor("k", np.array(1000.0, np.float16))
    if square is None:
        nodes = [helper.make_node("Mul", ["c", "c"], ["sq"])]
        inits = [tensor("c", np.array([300.0, 3.0], np.float16)), k]
    else:
        nodes = []
        inits = [tensor("sq", square), k]
    nodes += [helper.make_node("Div", ["sq", "k"], ["q"]), helper.make_node("Add", ["q", "x"], ["y"])]
    return make_model(nodes, [value_info("x", H, [2])], [value_info("y", H, [2])], initializers=inits)


def test_a_spec_correct_fold_of_an_overflowing_float16_product_is_not_blamed():
    """The folded constant 300*300 is inf in float16 (the spec, and onnxruntime on that one node);
    onnxruntime runs the unfolded original in float32 and gives 90. The old float64-throughout
    reference said 90 too, so it blamed the candidate; the reference now says inf."""
    original = _const_square_model(None)
    with np.errstate(over="ignore"):
        folded_square = np.array([300.0, 3.0], np.float16) * np.array([300.0, 3.0], np.float16)
    assert folded_square[0] == np.inf
    candidate = _const_square_model(folded_square)
    x = np.array([1.0, 2.0], np.float16)
    assert run(original, {"x": x})[0][0] == 91.0 and run(candidate, {"x": x})[0][0] == np.inf
    ref = evaluate_float64(original, {"x": x})["y"]
    assert ref[0] == np.inf
    report = verify_models(original, candidate, inputs=[{"x": x}])
    assert report.verdict != "mismatch"


def test_float32_is_still_ideal():
    """Cast to float and float32 node outputs are not rounded: float32 stays real arithmetic."""
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=F), helper.make_node("Mul", ["f", "f"], ["y"])]
    model = make_model(nodes, [value_info("x", D, [2])], [value_info("y", F, [2])])
    x = np.array([1 + 2**-40, 1e30], np.float64)
    ref = evaluate_float64(model, {"x": x})["y"]
    np.testing.assert_array_equal(ref, x * x)  # no float32 rounding, no overflow at 1e60


def test_declared_value_info_does_not_decide_the_type():
    """A value_info claiming a float32 Mul output is float16 must not make the reference round it."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Identity", ["sq"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [1])], [value_info("y", F, [1])])
    model.graph.value_info.append(value_info("sq", H, [1]))
    ref = evaluate_float64(model, {"x": np.array([300.0], np.float32)})["y"]
    assert ref[0] == 90000.0


def test_cast_to_bfloat16_rounds_once_from_double():
    model = make_model([helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
                        helper.make_node("Cast", ["b"], ["y"], to=D)],
                       [value_info("x", D, [3])], [value_info("y", D, [3])])
    x = np.array([1 + 2**-8 + 2**-30, 3.39e38, 3.4e38], np.float64)
    ref = evaluate_float64(model, {"x": x})["y"]
    # halfway + a bit rounds up (ml_dtypes rounds float64 twice, via float32, and gives 1.0); past
    # max + half an ulp (3.396e38) overflows to inf
    bf_max = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert ref[0] == 1 + 2**-7
    assert ref[1] == bf_max and ref[2] == np.inf


@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8_saturates_as_the_attribute_says(saturate):
    e4m3, e5m2 = TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2
    nodes = [
        helper.make_node("Cast", ["x"], ["a8"], to=e4m3, saturate=saturate),
        helper.make_node("Cast", ["a8"], ["a"], to=F),
        helper.make_node("Cast", ["x"], ["b8"], to=e5m2, saturate=saturate),
        helper.make_node("Cast", ["b8"], ["b"], to=F),
    ]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("a", F, [4]), value_info("b", F, [4])],
                       opset=19)
    x = np.array([1e6, -np.inf, 1.3, -0.0], np.float32)
    ref = evaluate_float64(model, {"x": x})
    ort_a, ort_b = run(model, {"x": x})
    if saturate:
        np.testing.assert_array_equal(ref["a"], [448.0, -448.0, 1.25, -0.0])
        np.testing.assert_array_equal(ref["b"], [57344.0, -57344.0, 1.25, -0.0])
    else:
        np.testing.assert_array_equal(ref["a"], [np.nan, np.nan, 1.25, -0.0])
        np.testing.assert_array_equal(ref["b"], [np.inf, -np.inf, 1.25, -0.0])
    np.testing.assert_array_equal(ref["a"], ort_a.astype(np.float64))
    np.testing.assert_array_equal(ref["b"], ort_b.astype(np.float64))


def test_generic_rounder_matches_numpy_float16_on_every_class():
    """round_ieee (used for bfloat16, where ml_dtypes rounds float64 twice) against numpy's direct
    float64 -> float16 conversion, with float16's parameters."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000),
                        [65504, 65519.99, 65520, -65520, 2.98e-8, 2.99e-8, -0.0, np.inf, np.nan]])
    with np.errstate(all="ignore"):
        expected = x.astype(np.float16).astype(np.float64)
    got = round_ieee(x, 10, -14, 65504.0)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_float16_outputs_inside_an_if_branch_are_rounded_too():
    """The overflowing product lives inside the branch; only the branch's own typing rounds it."""
    then_graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t1"]),
                                    helper.make_node("Div", ["t1", "k"], ["t"])], "then", [],
                                   [value_info("t", H, [1])])
    else_graph = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                   [value_info("e", H, [1])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)]
    model = make_model(nodes, [value_info("x", H, [1]), value_info("c", TensorProto.BOOL, [])],
                       [value_info("y", H, [1])], initializers=[tensor("k", np.array(1000.0, np.float16))])
    ref = evaluate_float64(model, {"x": np.array([300.0], np.float16), "c": np.array(True)})["y"]
    assert ref[0] == np.inf


def test_cast_like_to_float16_rounds_by_the_inferred_type():
    """CastLike's target type is the second input's (carried as float64 in the reference): the
    inferred float16 type of its output is what makes the reference round it."""
    nodes = [helper.make_node("CastLike", ["x", "like"], ["h"]), helper.make_node("Cast", ["h"], ["y"], to=F)]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, [2])],
                       initializers=[tensor("like", np.array([1.0], np.float16))])
    x = np.array([70000.0, 1.0001], np.float32)
    ref = evaluate_float64(model, {"x": x})["y"]
    np.testing.assert_array_equal(ref, [np.inf, 1.0])
    np.testing.assert_array_equal(ref, run(model, {"x": x})[0].astype(np.float64))
