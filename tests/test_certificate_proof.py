"""Certificates by proof for Conv -> affine-tail folds (verify/certificate/proofs/affine.py): correct folds
are proved without a run once a run agreed, wrong constants are never proved (the run then refuses
them), and the proof steps aside where a zero's sign can be read."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, op_types, plant_pass, run, tensor, value_info
import onnx_ir as ir
from onnx import helper

import onnxrefine
from onnxrefine.passes import batchnorm
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Const, Op, Var
from onnxrefine.rewrite.rule import REASSOCIATING, Replacement, Rule
from onnxrefine.verify.certificate.proofs.affine import _bias_agrees, _weights_agree

C = 4


def _conv_bn_chain(layers: int, tail: str = "Relu", seed: int = 0):
    """x -> (Conv -> BatchNormalization -> Relu) * layers -> tail."""
    rng = np.random.default_rng(seed)
    nodes, inits, previous = [], [], "x"
    for i in range(layers):
        nodes += [helper.make_node("Conv", [previous, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", f"g{i}", f"be{i}", f"m{i}", f"v{i}"], [f"n{i}"],
                                   epsilon=1e-3),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"])]
        inits += [tensor(f"w{i}", rng.standard_normal((C, C, 3, 3)).astype(np.float32)),
                  tensor(f"b{i}", rng.standard_normal(C).astype(np.float32)),
                  tensor(f"g{i}", rng.uniform(-2, 2, C).astype(np.float32)),
                  tensor(f"be{i}", rng.standard_normal(C).astype(np.float32)),
                  tensor(f"m{i}", rng.standard_normal(C).astype(np.float32)),
                  tensor(f"v{i}", rng.uniform(1e-3, 2, C).astype(np.float32))]
        previous = f"r{i}"
    if tail == "Reciprocal":  # a zero's sign is read: 1/(+0) = +inf, 1/(-0) = -inf
        nodes[-1] = helper.make_node("Reciprocal", [f"n{layers - 1}"], [f"r{layers - 1}"])
    return make_model(nodes, [value_info("x", shape=[1, C, 6, 6])], [value_info(previous, shape=None)], inits)


def _certificates(report) -> list[str]:
    return [entry.certificate for entry in report.log.applied if entry.rule == "conv_bn"]


def test_every_fold_is_proved_the_first_once_onnxruntime_agrees_with_its_tail_reading():
    model = _conv_bn_chain(3)
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_bn_into_conv"])
    assert op_types(optimized).count("BatchNormalization") == 0
    notes = _certificates(report)
    assert len(notes) == 3 and all(note.startswith("certified: proved: Conv->BatchNormalization") for note in notes)
    assert notes[0].endswith("its reading of the tail agrees with onnxruntime on this model's constants")
    assert report.certificates["proved"] == 3  # no rewrite was run
    x = np.random.default_rng(1).standard_normal((1, C, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_a_wrong_constant_in_a_later_fold_is_not_proved_and_its_run_refuses_it(monkeypatch):
    # The first folds are right; the last drops epsilon, an error of 1e-3/var relative: the
    # proof must not cover it, and its run refuses it.
    original = batchnorm.bn_affine

    def sometimes_wrong(m, ctx, channels, dtype):
        scale, shift = original(m, ctx, channels, dtype)
        if m["bn"].inputs[0].name == "c2":
            var = m.array("var").astype(np.float64)
            scale = scale * np.sqrt((var + 1e-3) / var)  # epsilon dropped
        return scale, shift

    monkeypatch.setattr(batchnorm, "bn_affine", sometimes_wrong)
    model = _conv_bn_chain(3)
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_bn_into_conv"])
    assert op_types(optimized).count("BatchNormalization") == 1
    refused = [r.reason for r in report.log.refused.values() if r.rule == "conv_bn"]
    assert refused and refused[0].startswith("certificate failed")
    assert sum(note.startswith("certified: proved") for note in _certificates(report)) == 2
    assert [node.input[0] for node in optimized.graph.node if node.op_type == "BatchNormalization"] == ["c2"]


def test_a_misreading_the_proof_shares_with_the_rule_is_caught_by_onnxruntime(monkeypatch):
    # Rule and proof both read BatchNormalization without its epsilon: every fold is wrong and
    # the proof agrees with each. onnxruntime's reading of the tail differs, so nothing rests on
    # the proof: every fold is run, and every run refuses.
    from onnxrefine.ir.foldmath import constant_array
    from onnxrefine.verify.certificate.proofs import affine

    real_affine, real_step = batchnorm.bn_affine, affine._tail_step

    def rule_without_epsilon(m, ctx, channels, dtype):
        scale, shift = real_affine(m, ctx, channels, dtype)
        var = m.array("var").astype(np.float64)
        factor = np.sqrt((var + 1e-3) / var)
        mean = m.array("mean").astype(np.float64)
        return scale * factor, shift - mean * scale * (factor - 1)

    def proof_without_epsilon(node, previous, a, d, mag, *rest):
        step = real_step(node, previous, a, d, mag, *rest)
        if step is None or node.op_type != "BatchNormalization":
            return step
        gamma, beta, mean, var = (constant_array(v).astype(np.float64) for v in node.inputs[1:])
        s = gamma / np.sqrt(var)
        return a * s, (d - mean) * s + beta, (mag + np.abs(mean)) * np.abs(s) + np.abs(beta)

    monkeypatch.setattr(batchnorm, "bn_affine", rule_without_epsilon)
    monkeypatch.setattr(affine, "_tail_step", proof_without_epsilon)
    optimized, report = onnxrefine.optimize_with_report(_conv_bn_chain(3), ["fuse_bn_into_conv"])
    assert op_types(optimized).count("BatchNormalization") == 3
    refused = [r.reason for r in report.log.refused.values() if r.rule == "conv_bn"]
    assert refused and all(reason.startswith("certificate failed") for reason in refused)
    assert report.certificates["refused"] >= 3 and report.certificates["proved"] == 0


def test_no_proof_where_a_reader_sees_the_sign_of_a_zero():
    model = _conv_bn_chain(2, tail="Reciprocal")
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_bn_into_conv"])
    notes = _certificates(report)
    assert notes and not any("proved" in note for note in notes[1:])


def test_the_tail_reading_check_is_tight_enough_for_a_dropped_default_epsilon():
    # epsilon 1e-5 against variances near 0.5: the proof's a off by ~1e-5 relative, 40x the
    # check's tolerance for one node; the true reading passes.
    from onnxrefine.verify.certificate import certifier as certificate
    from onnxrefine.verify.certificate.proofs.affine import _tail_step, tail_reading_agrees

    rng = np.random.default_rng(3)
    params = {"g": rng.uniform(-2, 2, C), "be": rng.standard_normal(C), "m": rng.standard_normal(C) * 3,
              "v": rng.uniform(0.4, 0.6, C)}
    bn = helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"], epsilon=1e-5)
    proto = make_model([bn], [value_info("c", shape=[1, C, 2, 2])], [value_info("n", shape=None)],
                       [tensor(k, v.astype(np.float32)) for k, v in params.items()])
    model = ir.serde.deserialize_model(proto)
    node = model.graph.node(0)
    a, d, mag = _tail_step(node, node.inputs[0], np.ones(C), np.zeros(C), np.zeros(C), 4, C, np.dtype(np.float32), 17)
    opsets = dict(model.opset_imports)

    def check(a_read, d_read):
        tail = ([node], node.inputs[0], 4, C, np.dtype(np.float32), a_read, d_read, mag, opsets)
        return tail_reading_agrees(tail, certificate._make_session, certificate._run)

    assert check(a, d) is not None
    var = params["v"].astype(np.float32).astype(np.float64)
    dropped = np.sqrt((var + 1e-5) / var)  # epsilon ignored: a and the mean's share of d scaled
    assert check(a * dropped, d) is None
    assert check(a, d + 1e-4 * mag) is None
    assert check(-a, d) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_weights_agree_only_with_one_rounding_of_the_ideal_product(dtype):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((C, 3, 3, 3)).astype(dtype)
    a = rng.uniform(-3, 3, C)
    ideal = weight.astype(np.float64) * a[:, None, None, None]
    folded = ideal.astype(dtype)
    assert _weights_agree(folded, weight, a)
    wrong = folded.copy()
    flat = wrong.reshape(-1)
    flat[5] = np.nextafter(np.nextafter(flat[5], dtype(np.inf)), dtype(np.inf))  # two ulps, one element
    flat[5] = flat[5] * dtype(1.001)
    assert not _weights_agree(wrong, weight, a)
    flipped = folded.copy()
    flipped.reshape(-1)[7] *= -1
    assert not _weights_agree(flipped, weight, a)
    holed = folded.copy()
    holed.reshape(-1)[3] = np.inf
    assert not _weights_agree(holed, weight, a)
    assert not _weights_agree(folded, weight, a[::-1])  # scales applied to the wrong channels


def _rounded_fold(shape=(C, 5, 3, 3), seed=0):
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal(shape).astype(np.float32)
    a = rng.uniform(0.2, 3, shape[0]) * rng.choice([-1.0, 1.0], shape[0])
    folded = (weight.astype(np.float64) * a.reshape((-1,) + (1,) * (len(shape) - 1))).astype(np.float32)
    return folded, weight, a


@pytest.mark.parametrize("shape", [(C, 5, 3, 3), (64, 1, 3, 3), (3, 4000, 1, 1)])  # blocks of many or one row
def test_the_ratio_check_alone_accepts_one_rounding_and_nothing_a_few_ulps_further(monkeypatch, shape):
    # The product check disabled: what passes, the float32 ratio check passed on its own.
    from onnxrefine.verify.certificate.proofs import affine

    monkeypatch.setattr(affine, "_products_agree", lambda *args: False)
    folded, weight, a = _rounded_fold(shape)
    assert _weights_agree(folded, weight, a)
    for ulps in (-12, 12):  # one element 12 float32 ulps off: outside the 5.5-ulp implication
        wrong = folded.copy()
        flat = wrong.reshape(-1)
        for _ in range(abs(ulps)):
            flat[-1] = np.nextafter(flat[-1], np.float32(np.inf if ulps > 0 else -np.inf))
        assert not _weights_agree(wrong, weight, a)
    zeroed = folded.copy()
    zeroed.reshape(-1)[2] = 0.0  # W != 0: a zero here turns x = inf into NaN where W a gives inf
    assert not _weights_agree(zeroed, weight, a)
    nan = folded.copy()
    nan.reshape(-1)[1] = np.nan
    assert not _weights_agree(nan, weight, a)


def test_zero_weights_and_overflowing_products_go_to_the_product_check():
    folded, weight, a = _rounded_fold()
    weight.reshape(-1)[4] = 0.0
    folded.reshape(-1)[4] = 0.0
    assert _weights_agree(folded, weight, a)  # 0/0 in the ratio: the product check accepts the block
    folded.reshape(-1)[4] = np.float32(1e-30)  # W = 0 but W' != 0: x = inf gives inf, not NaN
    assert not _weights_agree(folded, weight, a)
    # W a overflows float32 (a correct fold is refused by the rule); a finite W' is not W a.
    big = np.full((1, 1, 1, 1), 2.0 ** 120, np.float32)
    assert not _weights_agree(np.full_like(big, np.finfo(np.float32).max), big, np.array([2.0 ** 10]))


def test_bias_agrees_within_one_rounding_and_the_float64_error_of_its_terms():
    expected = np.array([1.0, -2.5, 3e-8, 0.0])
    folded = expected.astype(np.float32)
    magnitude = np.abs(expected) + 1.0
    assert _bias_agrees(folded, expected, magnitude, np.float32)
    assert not _bias_agrees(folded * np.float32(1.0001), expected, magnitude, np.float32)
    assert not _bias_agrees(np.array([1.0, -2.5, 3e-8, np.nan], np.float32), expected, magnitude, np.float32)


# --- merged sibling MatMuls (fuse_qkv) ------------------------------------------------------------


def _qkv_layers(layers: int = 2, seed: int = 0):
    """h0 -> (MatMul by q, k, v -> Add, Add -> next h) * layers: sibling MatMuls of one input."""
    rng = np.random.default_rng(seed)
    nodes, inits, previous = [], [], "h0"
    for i in range(layers):
        for name in "qkv":
            nodes.append(helper.make_node("MatMul", [previous, f"{name}{i}"], [f"{name}o{i}"]))
            inits.append(tensor(f"{name}{i}", rng.standard_normal((8, 8)).astype(np.float32)))
        nodes += [helper.make_node("Add", [f"qo{i}", f"ko{i}"], [f"s{i}"]),
                  helper.make_node("Add", [f"s{i}", f"vo{i}"], [f"h{i + 1}"])]
        previous = f"h{i + 1}"
    return make_model(nodes, [value_info("h0", shape=[2, 5, 8])], [value_info(previous, shape=None)], inits)


def _qkv_notes(report) -> list[str]:
    return [entry.certificate for entry in report.log.applied if entry.rule == "fuse_qkv"]


def test_merged_matmuls_are_proved_the_first_once_onnxruntime_agrees_with_its_split_reading():
    model = _qkv_layers(3)
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_qkv"])
    notes = _qkv_notes(report)
    assert len(notes) == 3 and notes[0].endswith("onnxruntime hands each product back where the proof reads it")
    assert all(note.startswith("certified: proved: 3 MatMuls of one input") for note in notes)
    assert report.certificates["proved"] == 3
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, {"h0": x})[0], run(model, {"h0": x})[0], rtol=1e-5, atol=1e-5)


def test_a_merged_weight_that_is_not_the_concatenation_is_not_proved(monkeypatch):
    # The last group's merged weight gets two columns swapped: the proof must decline it and the
    # run-based certificate refuses it.
    from onnxrefine.passes import fusion

    real = fusion.fuse_sibling_matmuls

    def corrupting(m, ctx):
        replacement = real(m, ctx)
        if replacement is not None and m["x"].name == "h2":
            merged = replacement.nodes[0].inputs[1]
            array = merged.const_value.numpy().copy()
            array[:, [0, 1]] = array[:, [1, 0]]
            merged.const_value = ir.tensor(array, name=merged.name)
        return replacement

    rule = Rule("fuse_qkv", fusion.QKV.pattern, corrupting, kind=REASSOCIATING)
    spec = PassSpec("planted_qkv", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    optimized, report = onnxrefine.optimize_with_report(_qkv_layers(3), ["planted_qkv"])
    notes = _qkv_notes(report)
    assert sum(note.startswith("certified: proved") for note in notes) == 2
    refused = [r.reason for r in report.log.refused.values() if r.rule == "fuse_qkv"]
    assert refused and refused[0].startswith("certificate failed")
    assert op_types(optimized).count("MatMul") == 2 + 3  # two groups merged, the last kept


def test_a_split_order_the_proof_misreads_with_the_rule_is_caught_by_onnxruntime(monkeypatch):
    # The rule hands the products back in reverse (q's output replaced by v's chunk), and the proof
    # is made to read the Split's outputs in reverse too, so it agrees with the rule. onnxruntime's
    # Split does not: every merge is run, and every run refuses.
    from onnxrefine.passes import fusion
    from onnxrefine.verify.certificate.proofs import matmul

    real, real_order = fusion.fuse_sibling_matmuls, matmul._split_order

    def reversing(m, ctx):
        replacement = real(m, ctx)
        if replacement is not None:
            olds = list(replacement.outputs)
            news = [replacement.outputs[old] for old in olds]
            replacement.outputs.clear()
            replacement.outputs.update(zip(olds, reversed(news)))
        return replacement

    def misread(split, matmuls, replaced):
        order = real_order(split, matmuls, replaced)
        return None if order is None else order[::-1]

    monkeypatch.setattr(matmul, "_split_order", misread)
    rule = Rule("fuse_qkv", fusion.QKV.pattern, reversing, kind=REASSOCIATING)
    spec = PassSpec("planted_qkv", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    optimized, report = onnxrefine.optimize_with_report(_qkv_layers(2), ["planted_qkv"])
    assert report.certificates["proved"] == 0 and report.certificates["refused"] >= 2
    assert op_types(optimized).count("MatMul") == 6


# --- MatMul + Add -> Gemm -------------------------------------------------------------------------


def _linear_layers(layers: int = 3, seed: int = 0, bias_shape=(8,)):
    rng = np.random.default_rng(seed)
    nodes, inits, previous = [], [], "x"
    for i in range(layers):
        nodes += [helper.make_node("MatMul", [previous, f"w{i}"], [f"p{i}"]),
                  helper.make_node("Add", [f"p{i}", f"c{i}"], [f"y{i}"]),
                  helper.make_node("Relu", [f"y{i}"], [f"r{i}"])]
        inits += [tensor(f"w{i}", rng.standard_normal((8, 8)).astype(np.float32)),
                  tensor(f"c{i}", rng.standard_normal(bias_shape).astype(np.float32))]
        previous = f"r{i}"
    return make_model(nodes, [value_info("x", shape=[4, 8])], [value_info(previous, shape=None)], inits)


def _gemm_notes(report) -> list[str]:
    return [e.certificate for e in report.log.applied if e.rule == "fuse_matmul_add_bias_into_gemm"]


def test_matmul_add_to_gemm_after_the_first_is_proved_and_the_outputs_agree():
    model = _linear_layers()
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_matmul_add_bias_into_gemm"])
    notes = _gemm_notes(report)
    assert op_types(optimized).count("Gemm") == 3 and len(notes) == 3
    # The first is proved too: the proof's reading of Gemm is asked of onnxruntime on a miniature
    # with the rewrite's own nodes instead of running the rewrite over its real weight.
    assert notes[0].endswith("its reading of Gemm agrees with onnxruntime on a miniature with the rewrite's own nodes")
    assert all(note.startswith("certified: proved: Gemm(a, b, c)") for note in notes)
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_gemm_with_a_transposed_weight_is_not_proved_and_its_run_refuses_it(monkeypatch):
    from onnxrefine.passes import fusion

    real = fusion.fuse_matmul_add

    def transposing(m, ctx):
        replacement = real(m, ctx)
        if m["matmul"].inputs[0].name == "r1":  # the last layer: transB=1 reads W as W^T
            gemm = replacement.nodes[0]
            gemm.attributes["transB"] = ir.AttrInt64("transB", 1)
        return replacement

    rule = Rule("fuse_matmul_add_bias_into_gemm", fusion.MATMUL_ADD.pattern, transposing, kind=REASSOCIATING)
    spec = PassSpec("planted_gemm", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    optimized, report = onnxrefine.optimize_with_report(_linear_layers(), ["planted_gemm"])
    # the two untransposed layers are proved (the first with the miniature's check), the last is not
    assert sum(note.startswith("certified: proved") for note in _gemm_notes(report)) == 2
    refused = [r.reason for r in report.log.refused.values() if r.rule == "fuse_matmul_add_bias_into_gemm"]
    assert refused and refused[0].startswith("certificate failed")
    assert op_types(optimized).count("Gemm") == 2


def test_a_proof_that_misreads_beta_is_caught_by_the_miniature_and_the_run_refuses(monkeypatch):
    # A proof that reads beta as 1 whatever the node says (the planted misreading) would certify
    # Gemm(beta=2); the miniature runs the real node, disagrees, and the run refuses each rewrite.
    from onnxrefine.passes import fusion
    from onnxrefine.verify.certificate.proofs import matmul

    real_rule, real_attribute = fusion.fuse_matmul_add, matmul.attr

    def doubling(m, ctx):
        replacement = real_rule(m, ctx)
        replacement.nodes[0].attributes["beta"] = ir.AttrFloat32("beta", 2.0)
        return replacement

    monkeypatch.setattr(matmul, "attr",
                        lambda node, name, default=None: default if name == "beta" else real_attribute(node, name, default))
    rule = Rule("fuse_matmul_add_bias_into_gemm", fusion.MATMUL_ADD.pattern, doubling, kind=REASSOCIATING)
    spec = PassSpec("planted_gemm_beta", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    optimized, report = onnxrefine.optimize_with_report(_linear_layers(), ["planted_gemm_beta"])
    refused = [r.reason for r in report.log.refused.values() if r.rule == "fuse_matmul_add_bias_into_gemm"]
    assert refused and all(reason.startswith("certificate failed") for reason in refused)
    assert "Gemm" not in op_types(optimized)


def test_no_gemm_proof_where_a_zero_sign_is_read():
    model = _linear_layers(2)
    model.graph.node[-1].op_type = "Reciprocal"  # the last Add's zeros reach a divisor
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_matmul_add_bias_into_gemm"])
    notes = _gemm_notes(report)
    assert notes and not any(note.startswith("certified: proved") for note in notes)


# --- x + 0 -> x by definition ---------------------------------------------------------------------


def _add_zero_model(op: str, zero: np.ndarray, reader: str = "Relu", constant_first: bool = False, x_shape=(2, 3)):
    inputs = ["z", "x"] if constant_first else ["x", "z"]
    nodes = [helper.make_node(op, inputs, ["y"]), helper.make_node(reader, ["y"], ["r"])]
    return make_model(nodes, [value_info("x", shape=list(x_shape))], [value_info("r", shape=None)], [tensor("z", zero)])


def _planted_drop(monkeypatch, op: str, constant_first: bool = False, declare: bool = True):
    """Removes op(x, zero) (or op(zero, x)) whatever the zero holds or broadcasts; declares the
    zero sign unread where the signed-zero analysis says so (`declare`), never refuses."""
    from onnxrefine.ir.signed_zero import for_context

    def drop(m, ctx):
        old = m.root.outputs[0]
        unread = declare and not for_context(ctx).observable(old)
        return Replacement([], {old: m["x"]}, sign_insensitive=[old] if unread else [])

    pattern = Op(op, Const("c"), Var("x")) if constant_first else Op(op, Var("x"), Const("c"))
    rule = Rule("drop_zero", pattern, drop, kind=REASSOCIATING)
    spec = PassSpec("planted_drop_zero", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    return spec.name


def test_float_add_zero_is_proved_by_definition_and_the_outputs_agree():
    model = _add_zero_model("Add", np.zeros((1, 3), np.float32))
    optimized, report = onnxrefine.optimize_with_report(model, ["eliminate_float_add_zero"])
    assert op_types(optimized) == ["Relu"]
    (entry,) = report.log.applied
    assert entry.certificate.startswith("certified: proved: x + 0 is x by IEEE 754")
    x = np.array([[-0.0, 1e-45, -np.inf], [np.nan, 3.0, -2.0]], np.float32)
    np.testing.assert_array_equal(run(optimized, {"x": x})[0], run(model, {"x": x})[0])


@pytest.mark.parametrize("case", ["sub_from_zero", "nonzero", "broadcast_rank", "broadcast_dim", "sign_read"])
def test_a_wrong_zero_removal_is_not_proved_and_its_run_refuses_it(monkeypatch, case):
    # Each model's rule is wrong for one reason the proof must see: 0 - x is -x; one element of
    # the "zero" is 0.5; the zeros broadcast x up, from [2, 3] to [1, 2, 3] or from [2, 1] to
    # [2, 3]; x + 0.0 turns -0 into +0 and a Reciprocal reads it (the planted rule does not say so).
    zero = np.zeros((), np.float32)
    if case == "sub_from_zero":
        name = _planted_drop(monkeypatch, "Sub", constant_first=True)
        model = _add_zero_model("Sub", zero, constant_first=True)
    elif case == "nonzero":
        name = _planted_drop(monkeypatch, "Add")
        model = _add_zero_model("Add", np.array([0.0, 0.0, 0.5], np.float32))
    elif case == "broadcast_rank":
        name = _planted_drop(monkeypatch, "Add")
        model = _add_zero_model("Add", np.zeros((1, 2, 3), np.float32))
    elif case == "broadcast_dim":
        name = _planted_drop(monkeypatch, "Add")
        model = _add_zero_model("Add", np.zeros((1, 3), np.float32), x_shape=(2, 1))
    else:
        name = _planted_drop(monkeypatch, "Add", declare=False)
        model = _add_zero_model("Add", zero, reader="Reciprocal")
    optimized, report = onnxrefine.optimize_with_report(model, [name])
    assert not any(e.certificate.startswith("certified: proved") for e in report.log.applied)
    refused = [r.reason for r in report.log.refused.values() if r.rule == "drop_zero"]
    assert refused and refused[0].startswith("certificate failed"), report.log.applied
    assert op_types(optimized)[0] in ("Add", "Sub")


def test_a_declared_zero_sign_lets_the_proof_accept_x_plus_zero(monkeypatch):
    name = _planted_drop(monkeypatch, "Add")
    optimized, report = onnxrefine.optimize_with_report(_add_zero_model("Add", np.zeros((), np.float32)), [name])
    (entry,) = report.log.applied
    assert entry.certificate.startswith("certified: proved") and "declared unread" in entry.certificate


def _cast_model(to: int, reader: str = "Relu", like: bool = False):
    """x (float32) -> Cast(to) or CastLike(like of that type) -> reader."""
    from onnx import TensorProto

    if like:
        dtype = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}[to]
        nodes = [helper.make_node("CastLike", ["x", "like"], ["y"]), helper.make_node(reader, ["y"], ["r"])]
        inits = [tensor("like", np.zeros((), dtype))]
    else:
        nodes = [helper.make_node("Cast", ["x"], ["y"], to=to), helper.make_node(reader, ["y"], ["r"])]
        inits = []
    return make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("r", to, shape=None)], inits)


@pytest.mark.parametrize("like", [False, True])
def test_a_cast_to_its_own_type_is_proved_by_definition_and_the_outputs_agree(like):
    from onnx import TensorProto

    model = _cast_model(TensorProto.FLOAT, like=like)
    optimized, report = onnxrefine.optimize_with_report(model, ["eliminate_nop_cast"])
    assert op_types(optimized) == ["Relu"]
    (entry,) = report.log.applied
    assert entry.certificate.startswith("certified: proved: a ") and "FLOAT to FLOAT" in entry.certificate
    x = np.array([[-0.0, 1e-45, -np.inf], [np.nan, 3.0, -2.0]], np.float32)
    np.testing.assert_array_equal(run(optimized, {"x": x})[0], run(model, {"x": x})[0])


@pytest.mark.parametrize("like", [False, True])
def test_a_wrong_cast_removal_is_not_proved_and_its_run_refuses_it(monkeypatch, like):
    """A planted rule drops every Cast and CastLike: to float16 it changes the values (3.1 rounds,
    1e5 overflows), so the proof must see the types differ and the run refuse it."""
    from onnx import TensorProto

    def drop(m, ctx):
        return Replacement([], {m.root.outputs[0]: m["x"]})

    pattern = Op("CastLike", Var("x"), Var("like")) if like else Op("Cast", Var("x"))
    spec = PassSpec("planted_drop_cast", "test only", rules=(Rule("drop_cast", pattern, drop),), default=False)
    plant_pass(monkeypatch, spec)
    model = _cast_model(TensorProto.FLOAT16, like=like)
    optimized, report = onnxrefine.optimize_with_report(model, [spec.name])
    assert not any(e.certificate.startswith("certified: proved") for e in report.log.applied)
    refused = [r.reason for r in report.log.refused.values() if r.rule == "drop_cast"]
    assert refused and refused[0].startswith("certificate failed"), report.log.applied
    assert op_types(optimized)[0] in ("Cast", "CastLike")
