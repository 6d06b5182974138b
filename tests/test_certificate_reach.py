"""Certificates where they used to be skipped: each one a planted wrong rewrite of that kind that
the new certificate catches, next to the right rewrite it certifies."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, plant_pass, plant_rules, run, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.passes import registry
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule


def _relu_to_abs(m, ctx):
    """Wrong on purpose: Abs(x) is Relu(x) only where x >= 0."""
    node = ctx.node("Abs", [m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


PLANTED = {
    "relu_to_abs": Rule("relu_to_abs", Op("Relu", Var("x")), _relu_to_abs, kind=EXACT),
}


@pytest.fixture
def planted(monkeypatch):
    return plant_rules(monkeypatch, PLANTED)


def _unknown_shape_model(twice: bool = False) -> onnx.ModelProto:
    # Expand's target is chosen at run time (Where over a graph input): no fact gives e's shape,
    # the certificate used to skip the Relu behind it ("the shape of 'e' is not known").
    nodes = [
        helper.make_node("Where", ["pick", "wide", "narrow"], ["target"]),
        helper.make_node("Expand", ["x", "target"], ["e"]),
        helper.make_node("Relu", ["e"], ["y"]),
    ] if not twice else [
        helper.make_node("Where", ["pick", "wide", "narrow"], ["target"]),
        helper.make_node("Expand", ["x", "target"], ["e"]),
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [helper.make_tensor("wide", TensorProto.INT64, [2], [4, 3]),
             helper.make_tensor("narrow", TensorProto.INT64, [2], [1, 3])]
    return make_model(nodes, [value_info("x", shape=[1, 3]), value_info("pick", TensorProto.BOOL, [2])],
                      [value_info("y")], inits)


def _certificates(report, rule):
    return [entry.certificate for entry in report.log.applied if entry.rule == rule]


def _refusals(report, rule):
    return [(r.guard, r.reason) for r in report.log.refused.values() if r.rule == rule]


def test_a_wrong_rewrite_on_a_value_of_unknown_shape_is_caught_at_the_shapes_of_a_run(planted):
    model = _unknown_shape_model()
    optimized, report = onnxrefine.optimize_with_report(model, [planted("relu_to_abs")])
    [(guard, reason)] = _refusals(report, "relu_to_abs")
    assert guard == "certificate.failed"
    assert "exact rewrite differs" in reason
    feeds = {"x": np.array([[-1.0, 0.5, -0.0]], np.float32), "pick": np.array([True, False])}
    assert_bit_identical(run(model, feeds), run(optimized, feeds))


def test_a_right_rewrite_on_a_value_of_unknown_shape_is_certified_at_the_shapes_of_a_run():
    # Relu(Relu(e)) -> Relu(e), the real rule
    _, report = onnxrefine.optimize_with_report(_unknown_shape_model(twice=True),
                                                ["eliminate_consecutive_idempotent_ops"])
    [note] = _certificates(report, "idempotent_relu_chain")
    assert note.startswith("certified: bit-identical") and "at the shapes of a run of the model" in note


def _shape_folding_gives_the_shape_model() -> onnx.ModelProto:
    # Reshape's target is sliced out of Shape(x) at a start computed by Mod: the facts do not
    # evaluate Mod, so e's shape is unknown to them until fold_constants and fold_shapes run.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Mod", ["zero", "three"], ["start"]),
        helper.make_node("Slice", ["s", "start", "one"], ["dims"]),
        helper.make_node("Concat", ["dims", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["e"]),
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [helper.make_tensor(name, TensorProto.INT64, [1], [v])
             for name, v in (("zero", 0), ("three", 3), ("one", 1), ("minus_one", -1))]
    return make_model(nodes, [value_info("x", shape=[2, 3, 4])], [value_info("y")], inits)


def test_a_certificate_waits_for_shape_folding_instead_of_running_the_model():
    """In the first round the rules run before the graph-level passes: a certificate that needs a
    run of the whole model only for a shape (vit_b_16, bert-base: their Reshapes' computed shapes)
    is postponed to the next round, where shape folding has given it."""
    model = _shape_folding_gives_the_shape_model()
    optimized, report = onnxrefine.optimize_with_report(model)
    [note] = _certificates(report, "idempotent_relu_chain")
    assert note.startswith("certified: bit-identical") and "a run of the model" not in note
    assert [n.op_type for n in optimized.graph.node] == ["Reshape", "Relu"]
    assert not [r for r in report.log.refused.values() if r.rule == "idempotent_relu_chain"]
    # Without the graph-level passes nothing could give the shape: the run is made at once.
    _, alone = onnxrefine.optimize_with_report(model, ["eliminate_consecutive_idempotent_ops"])
    [note] = _certificates(alone, "idempotent_relu_chain")
    assert "at the shapes of a run of the model" in note


def test_a_postponed_certificate_no_folding_helps_is_made_with_a_run_in_the_next_round(planted):
    # Expand's target comes from a graph input: no pass gives e's shape, so the postponed
    # certificates run the model in round two, and catch the wrong rewrite as before.
    model = _unknown_shape_model(twice=True)
    _, report = onnxrefine.optimize_with_report(model)
    [note] = _certificates(report, "idempotent_relu_chain")
    assert "at the shapes of a run of the model" in note
    _, planted_report = onnxrefine.optimize_with_report(_unknown_shape_model(), [planted("relu_to_abs"), "fold_shapes"])
    [(guard, reason)] = _refusals(planted_report, "relu_to_abs")
    assert guard == "certificate.failed" and "exact rewrite differs" in reason


def test_what_waits_does_not_depend_on_earlier_runs_of_a_shared_certifier():
    """Verification replays prefixes of the schedule with the run's own certifier: whether a
    certificate waits must not change once earlier runs used up its observations (a replay of k
    steps is the prefix of the full schedule, which bisection blames steps by)."""
    from onnxrefine.api import resolve_passes
    from onnxrefine.ir import io
    from onnxrefine.ir.budget import ConstantBudget
    from onnxrefine.passes.pipeline import run_passes
    from onnxrefine.verify.certificate import Certifier

    nodes = [
        helper.make_node("Where", ["pick", "wide", "narrow"], ["target"]),
        helper.make_node("Expand", ["x", "target"], ["e"]),
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Relu", ["r"], ["r2"]),
        helper.make_node("Add", ["c1", "c2"], ["c"]),  # folded by fold_constants in round one
        helper.make_node("Add", ["r2", "c"], ["y"]),
    ]
    inits = [helper.make_tensor("wide", TensorProto.INT64, [2], [4, 3]),
             helper.make_tensor("narrow", TensorProto.INT64, [2], [1, 3]),
             helper.make_tensor("c1", TensorProto.FLOAT, [3], [1, 2, 3]),
             helper.make_tensor("c2", TensorProto.FLOAT, [3], [1, 2, 3])]
    proto = make_model(nodes, [value_info("x", shape=[1, 3]), value_info("pick", TensorProto.BOOL, [2])],
                       [value_info("y")], inits)
    certifier, names, kept = Certifier(defer_uncertified=True), resolve_passes(None), []
    orders = []
    for _ in range(6):  # more runs than the certifier makes observations for
        model = io.proto_to_ir(proto)
        kept.append(model)  # alive: no value of a later model takes an id an earlier one had
        steps = []
        run_passes(model, names, budget=ConstantBudget(io.tensor_bytes(model)), certifier=certifier,
                   on_event=lambda kind, **info: steps.append(info["step"]) if kind == "step" else None)
        orders.append([(step.round, step.rule or step.pass_name) for step in steps])
    assert orders[0][:2] == [(1, "fold_constants"), (2, "idempotent_relu_chain")]
    assert all(order == orders[0] for order in orders)
    model = io.proto_to_ir(proto)
    kept.append(model)
    replay = run_passes(model, names, budget=ConstantBudget(io.tensor_bytes(model)), certifier=certifier, max_steps=1)
    assert [entry.rule for entry in replay.applied] == ["fold_constants"]


def test_a_run_for_shapes_asks_only_the_element_types_nothing_else_gives(monkeypatch):
    """observe(shapes=True): each value's Shape, and one element only of a value whose element
    type neither the model nor the facts give (here: Expand's output, undeclared, facts=None)."""
    import onnx_ir as ir

    from onnxrefine.verify.ort import files, observe

    model = ir.serde.deserialize_model(_unknown_shape_model())
    expanded, output = model.graph.node(1).outputs[0], model.graph.outputs[0]
    assert expanded.dtype is None and output.dtype is not None
    run_models = []
    original = files.ModelFile.__init__
    monkeypatch.setattr(files.ModelFile, "__init__",
                        lambda self, proto, *rest: run_models.append(proto) or original(self, proto, *rest))
    seen = observe(model, [expanded, output], shapes=True)
    assert set(seen) == {id(expanded), id(output)} and seen[id(expanded)] == seen[id(output)]
    assert seen[id(expanded)][0] in ((4, 3), (1, 3)) and seen[id(expanded)][1] == np.dtype(np.float32)
    [proto] = run_models
    assert [n.op_type for n in proto.graph.node].count("Shape") == 2
    assert [n.op_type for n in proto.graph.node].count("Slice") == 1


def test_a_model_onnxruntime_cannot_run_still_skips_as_before(planted, monkeypatch):
    from onnxrefine.verify import ort

    monkeypatch.setattr(ort.RunnableDims, "observe", lambda *args, **options: "no run")
    _, report = onnxrefine.optimize_with_report(_unknown_shape_model(), [planted("relu_to_abs")])
    notes = _certificates(report, "relu_to_abs") + [reason for _, reason in _refusals(report, "relu_to_abs")]
    assert notes and all("the shape of 'e' is not known" in note for note in notes)


def test_every_proof_family_names_tests_that_exist():
    import ast
    from pathlib import Path

    from onnxrefine.verify.certificate.proofs import PROOFS

    root = Path(__file__).resolve().parent.parent
    defined = {}
    for proof in PROOFS:
        assert proof.why and proof.legitimate and proof.counterexamples, proof.family
        for test in proof.legitimate + proof.counterexamples:
            path, name = test.split("::")
            if path not in defined:
                tree = ast.parse((root / path).read_text())
                defined[path] = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            assert name in defined[path], f"{proof.family}: {test} does not exist"


def test_each_proof_has_its_reading_check_beside_it_in_the_module_that_declares_its_record():
    import importlib

    from onnxrefine.verify.certificate.proofs import PROOFS

    assert [proof.family for proof in PROOFS] == ["same_type_cast", "zero_addition", "affine_fold", "merged_matmul",
                                                  "gemm_from_matmul_add"]  # the order the certifier tries
    for proof in PROOFS:
        module = importlib.import_module(proof.prove.__module__)
        assert proof in module.PROOFS, proof.family
        if proof.reading is not None:
            assert proof.reading.__module__ == proof.prove.__module__, proof.family


def test_a_proof_family_is_one_record_the_certifier_walks(monkeypatch):
    # A planted family that "proves" Relu -> Abs by fiat: the certifier uses it as soon as it is a
    # record (no other place names it), and its reading check, run first, is what stops it.
    from onnxrefine.rewrite.rule import CertificateRequest
    from onnxrefine.verify.certificate import proofs

    asked = []

    def by_fiat(request: CertificateRequest):
        return "proved: by fiat" if request.rule == "relu_to_abs" else None

    def reading(request, runtime):
        asked.append(request.rule)
        return None  # onnxruntime does not read it so: the first rewrite is run whole

    planted_family = proofs.Proof("fiat", "test only", by_fiat, reading, ("t",), ("t",), exact=True)
    monkeypatch.setattr(proofs, "PROOFS", (planted_family, *proofs.PROOFS))
    model = _unknown_shape_model()
    spec = PassSpec("planted_relu_to_abs", "test only", rules=(PLANTED["relu_to_abs"],), default=False)
    plant_pass(monkeypatch, spec)
    _, report = onnxrefine.optimize_with_report(model, ["planted_relu_to_abs"])
    assert asked == ["relu_to_abs"]
    assert [guard for guard, _ in _refusals(report, "relu_to_abs")] == ["certificate.failed"]


def test_a_wrong_rewrite_on_a_value_of_unknown_element_type_is_caught_with_a_run_s_type(planted):
    # No fact gives Det's element type: the certificate used to skip ("the element type of 'd' is
    # not known"); the run's says float32.
    nodes = [helper.make_node("Det", ["x"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    model = make_model(nodes, [value_info("x", shape=[2, 2])], [value_info("y")])
    optimized, report = onnxrefine.optimize_with_report(model, [planted("relu_to_abs")])
    [(guard, reason)] = _refusals(report, "relu_to_abs")
    assert guard == "certificate.failed" and "exact rewrite differs" in reason
    feeds = {"x": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)}  # det = -2
    assert_bit_identical(run(model, feeds), run(optimized, feeds))


def _relu_to_contrib_gelu(m, ctx):
    """Wrong on purpose: onnxruntime's com.microsoft Gelu is not Relu."""
    node = ctx.node("Gelu", [m["x"]], domain="com.microsoft")
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def _relu_to_custom(m, ctx):
    node = ctx.node("Mystery", [m["x"]], domain="com.example")
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


@pytest.mark.parametrize("rule, guard, reason", [
    # onnxruntime has a kernel for its own contrib operator: the certificate runs it and refuses
    (Rule("relu_to_contrib_gelu", Op("Relu", Var("x")), _relu_to_contrib_gelu), "certificate.failed",
     "exact rewrite differs"),
    # a domain onnxruntime knows nothing of still cannot be certified
    (Rule("relu_to_custom", Op("Relu", Var("x")), _relu_to_custom), "certificate.uncertifiable",
     "custom domain 'com.example'"),
])
def test_a_wrong_rewrite_to_a_contrib_operator_is_run_in_onnxruntime(monkeypatch, rule, guard, reason):
    spec = PassSpec("planted_contrib", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [value_info("x", shape=[2, 3])],
                       [value_info("y", shape=[2, 3])])
    _, report = onnxrefine.optimize_with_report(model, ["planted_contrib"])
    [(found, why)] = _refusals(report, rule.name)
    assert found == guard and reason in why


def _transpose_to_identity(m, ctx):
    """Wrong on purpose: a Transpose [1, 0] of a square matrix is not the matrix."""
    node = ctx.node("Identity", [m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def _transposes(elem, count: int) -> onnx.ModelProto:
    names = ["x"] + [f"t{i}" for i in range(count - 1)] + ["y"]
    nodes = [helper.make_node("Transpose", [names[i]], [names[i + 1]], perm=[1, 0]) for i in range(count)]
    model = make_model(nodes, [value_info("x", elem, [2, 2])], [value_info("y", elem, [2, 2])], opset=21)
    model.ir_version = 10
    return model


@pytest.mark.parametrize("elem", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
def test_bfloat16_and_float8_rewrites_are_certified_and_a_wrong_one_caught(monkeypatch, elem):
    # The certificate used to skip ("'x' is bfloat16, which the certificate does not generate").
    rule = Rule("transpose_to_identity", Op("Transpose", Var("x")), _transpose_to_identity)
    registry._load_pass_modules()
    monkeypatch.setitem(registry._REGISTRY, "planted_narrow", PassSpec("planted_narrow", "test only", rules=(rule,),
                                                                         default=False))
    _, report = onnxrefine.optimize_with_report(_transposes(elem, 1), ["planted_narrow"])
    [(guard, reason)] = _refusals(report, "transpose_to_identity")
    assert guard == "certificate.failed" and "exact rewrite differs" in reason
    _, report = onnxrefine.optimize_with_report(_transposes(elem, 2), ["fuse_consecutive_transposes"])
    assert _certificates(report, "fuse_consecutive_transposes") == ["certified: bit-identical on 6 input sets"]


def _function_model(body_nodes, calls=((2, 3), (4, 5))) -> onnx.ModelProto:
    # A model-local function whose input has no declared shape: its shapes are each caller's.
    function = helper.make_function("local", "body", ["a"], ["b"], body_nodes,
                                    [helper.make_opsetid("", 17)])
    nodes, inputs, outputs = [], [], []
    for index, shape in enumerate(calls):
        nodes.append(helper.make_node("body", [f"x{index}"], [f"y{index}"], domain="local"))
        inputs.append(value_info(f"x{index}", shape=list(shape)))
        outputs.append(value_info(f"y{index}"))
    model = make_model(nodes, inputs, outputs, functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def test_a_wrong_rewrite_in_a_function_body_is_caught_at_a_call_site(planted):
    model = _function_model([helper.make_node("Relu", ["a"], ["b"])])
    optimized, report = onnxrefine.optimize_with_report(model, [planted("relu_to_abs")])
    [(guard, reason)] = _refusals(report, "relu_to_abs")
    assert guard == "certificate.failed" and "exact rewrite differs" in reason
    feeds = {"x0": -np.ones((2, 3), np.float32), "x1": -np.ones((4, 5), np.float32)}
    assert_bit_identical(run(model, feeds), run(optimized, feeds))


def test_a_right_rewrite_in_a_function_body_is_certified_at_each_call_site():
    model = _function_model([helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Relu", ["r"], ["b"])])
    _, report = onnxrefine.optimize_with_report(model, ["eliminate_consecutive_idempotent_ops"])
    [note] = _certificates(report, "idempotent_relu_chain")
    assert note.startswith("certified: bit-identical") and note.endswith("at each of its 2 call sites")
