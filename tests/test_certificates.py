"""Per-rewrite certificates: planted wrong rules are refused by their certificate with the reason,
correct ones pass, and the default API and CLI paths certify."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from guardutil import expect_guard
from helpers import make_model, op_types, plant_pass, plant_rules, run, tensor, value_info
from onnx import helper

import onnxrefine
from onnxrefine.cli.main import main
from onnxrefine.errors import RewriteRefused
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Const, Op, Var
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING, Replacement, Rule
from onnxrefine.verify.certificate.inputs import adversarial_sets, reduced_shapes


def _sub_from_zero_to_neg(m, ctx):
    """Wrong on purpose, declared exact: 0 - x is +0.0 for x = +0.0, Neg gives -0.0."""
    if np.any(m.array("zero") != 0):
        raise RewriteRefused("test.not_zero", "not a zero")
    node = ctx.node("Neg", [m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def _double_to_add(m, ctx):
    """Right: x * 2 is x + x bit for bit (signed zeros, infinities, NaN and overflow alike)."""
    if np.any(m.array("two") != 2):
        raise RewriteRefused("test.not_two", "not two")
    node = ctx.node("Add", [m["x"], m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def _double_to_plus_two(m, ctx):
    """Wrong on purpose: x * 2 -> x + 2."""
    node = ctx.node("Add", [m["x"], m["two"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def _fold_scales(error: float):
    """Mul(Mul(x, a), b) -> Mul(x, a*b), reassociating; `error` plants a relative error in a*b."""

    def fold(m, ctx):
        product = (m.array("a").astype(np.float64) * m.array("b")) * (1.0 + error)
        scale = ctx.constant(product.astype(np.float32), "scale", [m["a"], m["b"]])
        node = ctx.node("Mul", [m["x"], scale])
        return Replacement([node], {m.root.outputs[0]: node.outputs[0]})

    return fold


def _identity_to_other(m, ctx):
    """Wrong on purpose: removes Identity(t) but forwards the Identity's own input's input."""
    producer = m["t"].producer()
    return Replacement([], {m.root.outputs[0]: producer.inputs[0]})


_SCALES = Op("Mul", Op("Mul", Var("x"), Const("a")), Const("b"))
PLANTED = {
    "sub_zero_to_neg": Rule("sub_zero_to_neg", Op("Sub", Const("zero"), Var("x")), _sub_from_zero_to_neg, kind=EXACT),
    "double_to_add": Rule("double_to_add", Op("Mul", Var("x"), Const("two")), _double_to_add, kind=EXACT),
    "double_to_plus_two": Rule("double_to_plus_two", Op("Mul", Var("x"), Const("two")), _double_to_plus_two,
                               kind=EXACT),
    "identity_to_other": Rule("identity_to_other", Op("Identity", Var("t")), _identity_to_other, kind=EXACT),
    "fold_scales": Rule("fold_scales", _SCALES, _fold_scales(0.0), kind=REASSOCIATING),
    "fold_scales_wrong": Rule("fold_scales_wrong", _SCALES, _fold_scales(1e-4), kind=REASSOCIATING),
}


@pytest.fixture
def planted(monkeypatch):
    return plant_rules(monkeypatch, PLANTED)


def _unary_model(op: str, constant: np.ndarray, constant_first: bool = False) -> onnx.ModelProto:
    inputs = ["c", "x"] if constant_first else ["x", "c"]
    nodes = [helper.make_node(op, inputs, ["y"]), helper.make_node("Reciprocal", ["y"], ["r"])]
    return make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("r", shape=[2, 3])],
                      [tensor("c", constant)])


def _scales_model(a: float, b: float) -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "a"], ["t"]), helper.make_node("Mul", ["t", "b"], ["y"])]
    return make_model(nodes, [value_info("x", shape=[2, 4])], [value_info("y", shape=[2, 4])],
                      [tensor("a", np.array(a, np.float32)), tensor("b", np.array(b, np.float32))])


def _refusals(report) -> dict[str, str]:
    return {r.rule: r.reason for r in report.log.refused.values()}


def test_exact_rule_that_flips_a_zero_is_refused_by_its_certificate(planted):
    model = _unary_model("Sub", np.zeros((), np.float32), constant_first=True)
    optimized, report = onnxrefine.optimize_with_report(model, [planted("sub_zero_to_neg")])
    assert op_types(optimized) == ["Sub", "Reciprocal"]
    reason = _refusals(report)["sub_zero_to_neg"]
    assert reason.startswith("certificate failed: exact rewrite differs on the ")
    assert "original np.float32(0.0), replacement np.float32(-0.0)" in reason
    assert report.certificates["refused"] == 1
    # Random inputs never reach the difference end to end; the certificate's +0 set does.
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    unchecked = onnxrefine.optimize(model, [planted("sub_zero_to_neg")], certify=False)
    assert op_types(unchecked) == ["Neg", "Reciprocal"]
    np.testing.assert_array_equal(run(unchecked, {"x": x})[0], run(model, {"x": x})[0])
    zero = np.zeros((2, 3), np.float32)
    assert run(model, {"x": zero})[0][0, 0] == np.inf and run(unchecked, {"x": zero})[0][0, 0] == -np.inf


def test_correct_exact_rule_is_certified_bit_identical(planted):
    model = _unary_model("Mul", np.array(2, np.float32))
    optimized, report = onnxrefine.optimize_with_report(model, [planted("double_to_add")])
    assert op_types(optimized) == ["Add", "Reciprocal"]
    (applied,) = report.log.applied
    assert applied.certificate.startswith("certified: bit-identical on 6 input sets")
    assert report.certificates == {**report.certificates, "certified": 1, "refused": 0, "skipped": 0}


def test_identity_removal_is_certified_by_definition_and_only_when_it_forwards_the_copied_value(planted):
    nodes = [helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Identity", ["t"], ["i"]),
             helper.make_node("Reciprocal", ["i"], ["r"])]
    model = make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("r", shape=[2, 3])])
    optimized, report = onnxrefine.optimize_with_report(model, ["eliminate_identity"])
    assert op_types(optimized) == ["Neg", "Reciprocal"]
    assert report.log.applied[0].certificate == "certified: bit-identical: forwards a value through Identity"
    # Forwarding any other value than the one the Identity copies gets an ordinary certificate.
    kept, report = onnxrefine.optimize_with_report(model, [planted("identity_to_other")])
    assert op_types(kept) == ["Neg", "Identity", "Reciprocal"]
    assert _refusals(report)["identity_to_other"].startswith("certificate failed: exact rewrite differs")
    unchecked = onnxrefine.optimize(model, [planted("identity_to_other")], certify=False)
    assert op_types(unchecked) == ["Neg", "Reciprocal"]


def _transpose_pair_to_identity(m, ctx):
    """Right only where the two permutations compose to the identity; declared exact regardless."""
    node = ctx.node("Identity", [m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


@pytest.mark.parametrize("perm", [[1, 0, 2], [1, 2, 0]])
def test_data_movement_is_certified_on_one_set_of_distinct_values(monkeypatch, perm):
    # Transpose(Transpose(x, p), p) -> x: only moves elements, so one set whose elements are all
    # distinct decides it. [1, 2, 0] twice is [2, 0, 1]: same shape (3, 3, 3), other order.
    rule = Rule("transpose_pair", Op("Transpose", Op("Transpose", Var("x"))), _transpose_pair_to_identity, kind=EXACT)
    spec = PassSpec("planted_transpose_pair", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm),
             helper.make_node("Transpose", ["t"], ["u"], perm=perm), helper.make_node("Reciprocal", ["u"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[3, 3, 3])], [value_info("y", shape=[3, 3, 3])])
    optimized, report = onnxrefine.optimize_with_report(model, [spec.name])
    if perm == [1, 0, 2]:
        assert op_types(optimized) == ["Identity", "Reciprocal"]
        assert report.log.applied[0].certificate == (
            "certified: bit-identical on 1 input sets (data movement only: distinct values fix every "
            "element's source)")
    else:
        assert op_types(optimized) == ["Transpose", "Transpose", "Reciprocal"]
        assert "exact rewrite differs on the 'distinct' inputs" in _refusals(report)["transpose_pair"]
        assert op_types(onnxrefine.optimize(model, [spec.name], certify=False)) == ["Identity", "Reciprocal"]


def test_reassociating_rule_within_the_bound_passes(planted):
    model = _scales_model(3.0, 0.7)
    optimized, report = onnxrefine.optimize_with_report(model, [planted("fold_scales")])
    assert op_types(optimized) == ["Mul"]
    assert report.log.applied[0].certificate.startswith("certified: within the float64 bound")


def test_a_certificates_float64_reference_derives_no_per_element_bounds(planted, monkeypatch):
    """The certificate judges by its own bound (certificate/bound.py): the reference's per-element
    bounds, 40-60% of its cost, are never read there and never computed."""
    from onnxrefine.verify.reference import bound

    def refuse(*args, **kwargs):
        raise AssertionError("a certificate's reference built a BoundTracker")

    monkeypatch.setattr(bound, "BoundTracker", refuse)
    model = _scales_model(3.0, 0.7)
    optimized, report = onnxrefine.optimize_with_report(model, [planted("fold_scales")])
    assert report.log.applied[0].certificate.startswith("certified: within the float64 bound")


def test_reassociating_rule_outside_the_bound_is_refused(planted):
    model = _scales_model(3.0, 0.7)
    optimized, report = onnxrefine.optimize_with_report(model, [planted("fold_scales_wrong")])
    assert op_types(optimized) == ["Mul", "Mul"]
    reason = _refusals(report)["fold_scales_wrong"]
    assert reason.startswith("certificate failed:")
    assert "float64" in reason
    assert op_types(onnxrefine.optimize(model, [planted("fold_scales_wrong")], certify=False)) == ["Mul"]


def _scale_conv(error: float, pad: int = 1):
    """Mul(Conv(x, W), k) -> Conv(x, W*k*(1+error)), reassociating."""

    def fold(m, ctx):
        folded = m.array("w").astype(np.float64) * m.array("k").reshape(-1, 1, 1, 1) * (1.0 + error)
        weight = ctx.constant(folded.astype(np.float32), "w_scaled", [m["w"]])
        node = ctx.node("Conv", [m["x"], weight], {"pads": [pad] * 4})
        return Replacement([node], {m.root.outputs[0]: node.outputs[0]})

    return Rule("scale_conv", Op("Mul", Op("Conv", Var("x"), Const("w")), Const("k")), fold, kind=REASSOCIATING)


@pytest.mark.parametrize("kernel", [3, 1])  # 1: a pointwise Conv, its sets side by side in one image
@pytest.mark.parametrize("error", [0.0, 1e-5])
def test_a_dropped_epsilon_sized_error_is_refused_by_the_float64_meaning_check(monkeypatch, error, kernel):
    # 1e-5 relative (an epsilon of 1e-5 dropped against a variance of 0.5) is within the a priori
    # bound of 16*9 float32 roundings, so float32 runs alone cannot tell it from reassociation;
    # the replacement evaluated in float64 can.
    from onnxrefine.verify.certificate import certifier as certificate

    from onnxrefine.verify.certificate import proofs

    # the run is under test, not the proof
    monkeypatch.setattr(proofs, "PROOFS", tuple(p for p in proofs.PROOFS if p.family != "affine_fold"))
    pad = kernel // 2
    spec = PassSpec("planted_scale_conv", "test only", rules=(_scale_conv(error, pad),), default=False)
    plant_pass(monkeypatch, spec)
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[pad] * 4), helper.make_node("Mul", ["c", "k"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[1, 16, 6, 6])], [value_info("y", shape=None)],
                       [tensor("w", rng.standard_normal((8, 16, kernel, kernel)).astype(np.float32)),
                        tensor("k", rng.uniform(0.5, 2, (8, 1, 1)).astype(np.float32))])
    optimized, report = onnxrefine.optimize_with_report(model, [spec.name])
    if error == 0.0:
        assert op_types(optimized) == ["Conv"]
        assert report.log.applied[0].certificate.startswith("certified: within the float64 bound")
    else:
        assert op_types(optimized) == ["Conv", "Mul"]
        # (16 terms a 1x1 window sums: the bound of the float32 runs already tells)
        reason = _refusals(report)["scale_conv"]
        assert "beyond the rounding of its folded constants" in reason or (
            kernel == 1 and "outside the float64 bound on the 'finite' inputs" in reason)


def test_reassociation_that_flips_the_sign_of_a_zero_is_refused():
    # The case: Conv(x, W) -> Mul(-2) -> Reciprocal. Where a window lies in the padding
    # the Conv gives +0.0 and the Mul -0.0 (so -inf after Reciprocal); folded into W, the Conv
    # gives +0.0 (+inf after Reciprocal).
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[3, 3, 3, 3]),
        helper.make_node("Mul", ["c", "k"], ["m"]),
        helper.make_node("Reciprocal", ["m"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", shape=[1, 2, 2, 2])], [value_info("y", shape=None)],
                       [tensor("w", rng.standard_normal((2, 2, 3, 3)).astype(np.float32)),
                        tensor("k", np.full((2, 1, 1), -2.0, np.float32))])
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_mul_into_conv"])
    assert op_types(optimized) == ["Conv", "Mul", "Reciprocal"]
    x = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    assert np.array_equal(run(optimized, {"x": x})[0], run(model, {"x": x})[0])
    reason = _refusals(report)["conv_mul"]
    # The pass may come to refuse it by its own guard (a sign-sensitive use of the zero); if not, the certificate does.
    if reason.startswith("certificate"):
        assert "flips the sign of an exact zero" in reason
        unchecked = onnxrefine.optimize(model, ["fuse_mul_into_conv"], certify=False)
        assert op_types(unchecked) == ["Conv", "Reciprocal"]
        assert (run(model, {"x": x})[0] == -np.inf).any()
        assert not np.array_equal(run(unchecked, {"x": x})[0], run(model, {"x": x})[0])


def test_sets_side_by_side_in_one_image_still_catch_a_zero_sign_flip(monkeypatch):
    # Conv 1x1 (no padding: the sets go side by side along the width, one column each) -> Mul(-2)
    # -> Reciprocal, folded into W by a rule without a sign guard: on a zero set the products of
    # mixed-sign weights sum to +0, times -2 is -0; the folded weights give +0.
    spec = PassSpec("planted_scale_conv", "test only", rules=(_scale_conv(0.0, 0),), default=False)
    plant_pass(monkeypatch, spec)
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "k"], ["m"]),
             helper.make_node("Reciprocal", ["m"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[2, 16, 5, 7])], [value_info("y", shape=None)],
                       [tensor("w", rng.standard_normal((8, 16, 1, 1)).astype(np.float32)),
                        tensor("k", np.full((8, 1, 1), -2.0, np.float32))])
    optimized, report = onnxrefine.optimize_with_report(model, [spec.name])
    assert op_types(optimized) == ["Conv", "Mul", "Reciprocal"]
    assert "flips the sign of an exact zero" in _refusals(report)["scale_conv"]
    unchecked = onnxrefine.optimize(model, [spec.name], certify=False)
    assert op_types(unchecked) == ["Conv", "Reciprocal"]
    zero = np.zeros((2, 16, 5, 7), np.float32)
    assert not np.array_equal(run(unchecked, {"x": zero})[0], run(model, {"x": zero})[0])


def test_width_stacking_only_where_each_column_is_computed_alone():
    import onnx_ir as ir

    from onnxrefine.verify.certificate.inputs import width_stackable

    class Side:
        def __init__(self, name, array):
            self.name, self.array = name, array

    x, w = ir.Value(name="x"), ir.Value(name="w")
    one = [Side("w", np.zeros((8, 3, 1, 1), np.float32))]
    three = [Side("w", np.zeros((8, 3, 3, 3), np.float32))]
    column = {"x": (1, 3, 1, 1)}
    assert width_stackable([[ir.Node("", "Conv", [x, w]), ir.Node("", "Relu", [x])]], column, one)
    assert not width_stackable([[ir.Node("", "Conv", [x, w], [ir.AttrInt64s("pads", [0, 1, 0, 1])])]], column, one)
    assert not width_stackable([[ir.Node("", "Conv", [x, w], [ir.AttrInt64s("strides", [1, 2])])]], column, one)
    assert not width_stackable([[ir.Node("", "Conv", [x, w])]], column, three)  # a window 3 wide
    assert not width_stackable([[ir.Node("", "GlobalAveragePool", [x])]], column, one)  # mixes columns
    assert not width_stackable([[ir.Node("", "Relu", [x])]], {"x": (1, 3, 1, 2)}, one)  # not one column
    assert not width_stackable([[ir.Node("", "MatMul", [x, w])]], column, one)


@pytest.mark.parametrize("declared", [False, True])
def test_a_rule_may_declare_outputs_whose_zero_sign_nobody_reads(monkeypatch, declared):
    # At x = -0.0, x + 0.0 is +0.0 but x is -0.0: refused, unless the rule proved (and declared)
    # that no reader of the output can tell the two zeros apart.
    def drop(m, ctx):
        old, new = m.root.outputs[0], m["x"]
        node = ctx.node("Identity", [new])
        return Replacement([node], {old: node.outputs[0]}, sign_insensitive=[old] if declared else [])

    rule = Rule("drop_add_zero", Op("Add", Var("x"), Const("zero")), drop, kind=REASSOCIATING)
    spec = PassSpec("planted_drop_add_zero", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    model = make_model([helper.make_node("Add", ["x", "z"], ["y"]), helper.make_node("Relu", ["y"], ["r"])],
                       [value_info("x", shape=[2, 3])], [value_info("r", shape=[2, 3])],
                       [tensor("z", np.zeros((), np.float32))])
    optimized, report = onnxrefine.optimize_with_report(model, [spec.name])
    if declared:
        assert "Add" not in op_types(optimized)
    else:
        assert "flips the sign of an exact zero" in _refusals(report)["drop_add_zero"]


def test_report_and_explain_show_the_refusal(planted, tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_unary_model("Sub", np.zeros((), np.float32), constant_first=True), path)
    report_path = tmp_path / "r.json"
    code = main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--passes", planted("sub_zero_to_neg"),
                 "--no-verify", "--explain", "--report", str(report_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "certificate failed" in out
    report = json.loads(report_path.read_text())
    assert report["certificates"]["refused"] == 1
    assert report["refused"][0]["reason"].startswith("certificate failed")
    assert op_types(onnx.load(tmp_path / "o.onnx")) == ["Sub", "Reciprocal"]
    code = main(["optimize", str(path), "-o", str(tmp_path / "o2.onnx"), "--passes", planted("sub_zero_to_neg"),
                 "--no-verify", "--no-certify", "--report", str(report_path)])
    assert code == 0 and op_types(onnx.load(tmp_path / "o2.onnx")) == ["Neg", "Reciprocal"]
    assert json.loads(report_path.read_text())["certificates"] is None


def _mul_by_two_in_a_function() -> onnx.ModelProto:
    # The Mul reads n, computed in the body: its shape is each call's, and the function has more
    # call sites (9) than a rewrite in its body is certified at (8), so no certificate is made.
    body = [helper.make_node("Constant", [], ["two"], value=tensor("v", np.array(2, np.float32))),
            helper.make_node("Neg", ["a"], ["n"]),
            helper.make_node("Mul", ["n", "two"], ["t"]), helper.make_node("Relu", ["t"], ["b"])]
    function = helper.make_function("local", "f", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    calls = range(9)
    model = make_model([helper.make_node("f", ["x"], [f"y{i}"], domain="local") for i in calls],
                       [value_info("x", shape=[2])], [value_info(f"y{i}", shape=[2]) for i in calls],
                       functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def test_a_rewrite_no_certificate_can_be_made_for_is_refused_without_verification(planted):
    # A function called from more places than are certified: no certificate, and no end-to-end
    # verdict to judge the rewrite either, so it is refused with the reason.
    optimized, report = expect_guard(_mul_by_two_in_a_function(), [planted("double_to_add")],
                                     "certificate.uncertifiable", rule="double_to_add")
    assert not report.log.applied and report.certificates["skipped"] == 1
    (refusal,) = report.log.refused.values()
    assert refusal.reason.startswith("no certificate: the ")  # element type or shape of the body input
    assert report.certificates["coverage"]["refused"] == 1
    assert [n.op_type for n in optimized.functions[0].node if n.op_type != "Constant"] == ["Neg", "Mul", "Relu"]


def test_a_rewrite_no_certificate_can_be_made_for_is_left_to_end_to_end_verification(planted):
    optimized, report = onnxrefine.optimize_with_report(_mul_by_two_in_a_function(), [planted("double_to_add")],
                                                        verify=True)
    (applied,) = report.log.applied
    assert applied.evidence == "deferred" and applied.certificate.startswith("deferred: the ")
    assert report.certificates["coverage"]["deferred"] == 1
    assert report.verification["status"] == "verified" and report.verification["verdict"] == "exact"
    assert [n.op_type for n in optimized.functions[0].node if n.op_type != "Constant"] == ["Neg", "Add", "Relu"]


def test_a_wrong_rewrite_left_to_end_to_end_verification_is_bisected_and_rolled_back(planted):
    model = _mul_by_two_in_a_function()
    optimized, report = onnxrefine.optimize_with_report(model, [planted("double_to_plus_two")], verify=True)
    assert [r["rule"] for r in report.rolled_back] == ["double_to_plus_two"] and not report.log.applied
    assert report.verification["verdict"] == "exact"
    x = np.array([-1.5, 3.0], np.float32)
    np.testing.assert_array_equal(run(optimized, {"x": x})[0], run(model, {"x": x})[0])


def test_rewrites_left_to_a_verification_that_then_does_not_run_are_refused(planted):
    # Auto mode decides after the schedule; a budget no input set fits skips verification, so the
    # rewrite that was left to it is refused after all.
    optimized, report = onnxrefine.optimize_with_report(
        _mul_by_two_in_a_function(), [planted("double_to_add")], verify=onnxrefine.VerifySettings(budget_s=1e-9))
    assert report.verification["status"] == "skipped", report.verification
    assert not report.log.applied and "certificate.uncertifiable" in report.log.refusal_guards("double_to_add")
    assert "were refused" in report.verification["notes"][0]
    assert [n.op_type for n in optimized.functions[0].node if n.op_type != "Constant"] == ["Neg", "Mul", "Relu"]


def test_coverage_in_the_summary_and_every_applied_entry_names_its_evidence(tmp_path, capsys):
    source, out, report = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    nodes = [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Mul", ["t", "two"], ["y"])]
    onnx.save(make_model(nodes, [value_info("x", shape=[2])], [value_info("y", shape=[2])],
                         [tensor("two", np.array(2, np.float32))]), source)
    assert main(["optimize", str(source), "-o", str(out), "--no-verify", "--passes", "eliminate_identity",
                 "--report", str(report)]) == 0
    written = json.loads(report.read_text())
    assert written["certificates"]["coverage"] == {"certified": 0, "proved": 1, "deferred": 0, "unchecked": 0,
                                                   "refused": 0}
    assert [entry["evidence"] for entry in written["applied"]] == ["proved"]
    assert "certificates: 0 certified, 1 proved, 0 refused" in capsys.readouterr().out  # the summary's line


def test_shape_values_are_computed_from_the_data_they_describe():
    # Reshape(x, Concat(Shape(x)[0], [-1])) -> Reshape(x, [0, -1]) holds only because the dim comes
    # from x: the certificate pulls the Shape arithmetic in instead of inventing the dim.
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "b"], ["s"], axis=0),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", shape=["N", 3, 4])], [value_info("y", shape=None)],
                       [tensor("i0", np.array(0, np.int64)), tensor("ax", np.array([0], np.int64)),
                        tensor("b", np.array([-1], np.int64))])
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_concat_into_reshape"])
    assert "Concat" not in op_types(optimized)
    assert report.log.applied[-1].certificate.startswith("certified: bit-identical on 1 input sets (data movement")


def test_adversarial_sets_hold_the_edge_values():
    sets = dict(adversarial_sets({"x": (np.dtype(np.float32), (4, 8))}))
    finite, zeros, negative, special = (sets[k]["x"] for k in ("finite", "+0", "-0", "inf/nan"))
    assert not np.signbit(zeros).any() and np.signbit(negative).all() and not negative.any()
    assert np.isfinite(finite).all() and (np.signbit(finite) & (finite == 0)).any()
    assert (np.abs(finite) < np.finfo(np.float32).tiny).any()  # subnormals
    assert np.isnan(special).any() and np.isposinf(special).any() and np.isneginf(special).any()
    assert (np.abs(sets["huge"]["x"]) == np.finfo(np.float32).max).any()


def test_reduced_sizes_keep_every_window_pattern():
    import onnx_ir as ir

    x = ir.Value(name="x")
    w = ir.Value(name="w")
    conv = ir.Node("", "Conv", [x, w], [ir.AttrInt64s("strides", [2, 2]), ir.AttrInt64s("pads", [3, 3, 3, 3])])

    class Side:
        def __init__(self, name, array):
            self.name, self.array = name, array

    def patterns(size, taps, dilation, stride, pad):  # which taps read data, per output position
        outputs = (size + 2 * pad - (taps - 1) * dilation - 1) // stride + 1
        return {frozenset(t for t in range(taps) if 0 <= stride * o - pad + t * dilation < size)
                for o in range(outputs)}

    shapes = reduced_shapes([[conv]], {"x": (4, 3, 224, 223)}, [Side("w", np.zeros((8, 3, 7, 7), np.float32))])
    batch, channels, height, width = shapes["x"]
    assert (batch, channels) == (1, 3) and max(height, width) <= 9
    # every window of the full size (interior, each border, the last one's padding) occurs
    assert patterns(height, 7, 1, 2, 3) == patterns(224, 7, 1, 2, 3)
    assert patterns(width, 7, 1, 2, 3) == patterns(223, 7, 1, 2, 3)
    assert patterns(height, 7, 1, 2, 3) != patterns(height - 1, 7, 1, 2, 3)  # and no smaller one does
    # A dilated window wider than the input: taps that only ever read padding need no data.
    dilated = ir.Node("", "Conv", [x, w], [ir.AttrInt64s("dilations", [36, 36]), ir.AttrInt64s("pads", [36] * 4)])
    shapes = reduced_shapes([[dilated]], {"x": (1, 8, 14, 14)}, [Side("w", np.zeros((4, 8, 3, 3), np.float32))])
    assert shapes["x"] == (1, 8, 1, 1) and patterns(1, 3, 36, 1, 36) == patterns(14, 3, 36, 1, 36)
    shapes = reduced_shapes([[dilated]], {"x": (1, 8, 40, 40)}, [Side("w", np.zeros((4, 8, 3, 3), np.float32))])
    assert patterns(shapes["x"][2], 3, 36, 1, 36) == patterns(40, 3, 36, 1, 36)
    # Axes along which a constant varies keep their size; one varying along the batch: no reduction.
    add = ir.Node("", "Add", [x, w])
    assert reduced_shapes([[add]], {"x": (2, 3, 8, 9)}, [Side("w", np.zeros((8, 1), np.float32))]) == {"x": (1, 3, 8, 4)}
    assert reduced_shapes([[add]], {"x": (2, 3, 8, 8)}, [Side("w", np.zeros((2, 1, 1, 1), np.float32))]) is None


def test_a_cached_certificate_is_not_reused_where_the_zero_sign_becomes_observable(monkeypatch):
    # Two identical x + 0.0 windows: one read by Relu (the rule declares the zero sign unread),
    # one by Reciprocal (a wrong rule that removes it anyway, undeclared). Cached by structure and
    # constants alone, the second would inherit the first's certificate; it must be judged again.
    from onnxrefine.ir.signed_zero import for_context

    def drop(m, ctx):
        old = m.root.outputs[0]
        unread = not for_context(ctx).observable(old)
        return Replacement([], {old: m["x"]}, sign_insensitive=[old] if unread else [])

    rule = Rule("drop_add_zero", Op("Add", Var("x"), Const("zero")), drop, kind=REASSOCIATING)
    spec = PassSpec("planted_drop_add_zero", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    nodes = [helper.make_node("Add", ["x1", "z"], ["y1"]), helper.make_node("Relu", ["y1"], ["r1"]),
             helper.make_node("Add", ["x2", "z"], ["y2"]), helper.make_node("Reciprocal", ["y2"], ["r2"])]
    model = make_model(nodes, [value_info("x1", shape=[2, 3]), value_info("x2", shape=[2, 3])],
                       [value_info("r1", shape=[2, 3]), value_info("r2", shape=[2, 3])],
                       [tensor("z", np.zeros((), np.float32))])
    optimized, report = onnxrefine.optimize_with_report(model, [spec.name])
    assert [n.input[0] for n in optimized.graph.node if n.op_type == "Add"] == ["x2"]
    assert "flips the sign of an exact zero" in _refusals(report)["drop_add_zero"]
