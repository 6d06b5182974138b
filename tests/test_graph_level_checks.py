"""Graph-level rewrites checked: shape folds cross-checked against onnxruntime, and every other
graph-level pass's applied rewrite naming the reason it is exact (PassSpec.exactness)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from guardutil import expect_guard
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.cli.optimize_cmd import RULE_EVIDENCE, exactness_table
from onnxrefine.ir.facts import oracle as facts_oracle
from onnxrefine.passes import registry, shapes
from onnxrefine.passes.registry import GRAPH, PassSpec
from onnxrefine.rewrite.rule import EXACT
from onnxrefine.verify.ort import observed as observed_module

INT64 = TensorProto.INT64


def _shape_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"])]
    return make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("s", INT64, [2])])


def _optimized(model, passes, **options):
    """The optimized model and its report as the JSON report writes it."""
    result, report = onnxrefine.optimize_with_report(model, passes, **options)
    return result, report.to_dict()


def _applied(report, rule):
    return [entry for entry in report["applied"] if entry["rule"] == rule]


def test_a_fold_onnxruntime_agrees_with_is_certified():
    result, report = _optimized(_shape_model(), ["fold_shapes"])
    [entry] = _applied(report, "fold_shapes")
    assert entry["evidence"] == "certified"
    assert "onnxruntime computes the same value" in entry["certificate"]
    assert [n.op_type for n in result.graph.node] == ["Relu"]


def _reversed_shapes(monkeypatch):
    """A planted wrong shape fact: every Shape's value read in reverse."""
    elements = facts_oracle.StaticShapes.elements

    def planted(self, value, _depth=0):
        found = elements(self, value, _depth)
        producer = value.producer() if value is not None else None
        if found is not None and producer is not None and producer.op_type == "Shape" and found.known():
            return dataclasses.replace(found, items=tuple(reversed(found.items)))
        return found

    monkeypatch.setattr(facts_oracle.StaticShapes, "elements", planted)


def test_a_planted_wrong_shape_fold_is_caught_by_the_runtime_check(monkeypatch):
    _reversed_shapes(monkeypatch)
    _, report = expect_guard(_shape_model(), ["fold_shapes"], "static_shape.runtime_disagrees",
                             {"x": np.ones((2, 3), np.float32)}, rule="fold_shapes")
    report = report.to_dict()
    assert not _applied(report, "fold_shapes")
    [refusal] = [r for r in report["refused"] if r["rule"] == "fold_shapes"]
    assert "folded [3, 2] where onnxruntime computes [2, 3]" in refusal["reason"]


def test_without_certificates_the_planted_fold_goes_unchecked(monkeypatch):
    # The check is the certificates' (certify=False turns both off): this is what it catches.
    _reversed_shapes(monkeypatch)
    result, report = _optimized(_shape_model(), ["fold_shapes"], certify=False)
    [entry] = _applied(report, "fold_shapes")
    assert entry["evidence"] == "unchecked"
    assert run(result, {"x": np.ones((2, 3), np.float32)})[0].tolist() == [3, 2]


def _reshape_model() -> onnx.ModelProto:
    # Reshape(x, Concat(Shape(x)[1:2], [-1])): the target's unknown-to-folding part is x's dim 1.
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Slice", ["s", "one", "two"], ["d"]),
        helper.make_node("Concat", ["d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    inits = [tensor("one", np.array([1], np.int64)), tensor("two", np.array([2], np.int64)),
             tensor("minus_one", np.array([-1], np.int64))]
    return make_model(nodes, [value_info("x", shape=["n", 3, 4])], [value_info("y", shape=None)], inits)


def test_a_planted_wrong_reshape_target_is_caught(monkeypatch):
    # The planted target copies dim 0 (n) where the model reads dim 1 (3).
    monkeypatch.setattr(shapes, "_reshape_target", lambda node, oracle: np.array([0, -1], np.int64))
    model = _reshape_model()
    result, report = _optimized(model, ["fold_shapes"])
    refusals = [r for r in report["refused"] if r["rule"] == "fold_shapes" and "Reshape" in r["node"]]
    assert [r["guard"] for r in refusals] == ["static_shape.runtime_disagrees"]
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}
    assert_bit_identical(run(model, feeds), run(result, feeds))


def test_the_true_reshape_target_is_certified():
    model = _reshape_model()
    model.graph.input[0].CopyFrom(value_info("x", shape=["n", 3, 4]))
    nodes = list(model.graph.node)
    nodes[2].CopyFrom(helper.make_node("Slice", ["s", "zero", "one"], ["d"]))
    model.graph.initializer.append(tensor("zero", np.array([0], np.int64)))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    result, report = _optimized(model, ["fold_shapes"])
    [entry] = [e for e in _applied(report, "fold_shapes") if "Reshape" in e["root"]]
    assert entry["evidence"] == "certified"
    feeds = {"x": np.arange(48, dtype=np.float32).reshape(4, 3, 4)}
    assert_bit_identical(run(model, feeds), run(result, feeds))


def test_a_fold_no_run_can_check_is_refused_without_end_to_end_verification(monkeypatch):
    from onnxrefine.verify import ort

    monkeypatch.setattr(ort.RunnableDims, "observe",
                        lambda self, model, values, **options: "onnxruntime has no kernel for it")
    result, report = expect_guard(_shape_model(), ["fold_shapes"], "certificate.graph_uncertifiable",
                                  {"x": np.ones((2, 3), np.float32)}, rule="fold_shapes")
    [refusal] = [r for r in report.to_dict()["refused"] if r["rule"] == "fold_shapes"]
    assert refusal["reason"].endswith("onnxruntime has no kernel for it")
    assert [n.op_type for n in result.graph.node] == ["Relu", "Shape"]


def test_a_fold_no_run_can_check_is_deferred_where_the_run_verifies_end_to_end(monkeypatch):
    import onnx_ir as ir

    from onnxrefine.ir.budget import ConstantBudget
    from onnxrefine.passes.pipeline import run_passes
    from onnxrefine.verify import ort

    class Deferring:  # a certifier whose run is judged end to end afterwards
        defer_uncertified = True

        def __call__(self, request):
            raise AssertionError("no rule runs here")

    monkeypatch.setattr(ort.RunnableDims, "observe",
                        lambda self, model, values, **options: "onnxruntime has no kernel for it")
    log = run_passes(ir.serde.deserialize_model(_shape_model()), ["fold_shapes"], budget=ConstantBudget(),
                     certifier=Deferring())
    [entry] = log.applied
    assert (entry.evidence, entry.certificate) == ("deferred", "deferred: the model does not run in onnxruntime "
                                                   "to check it: onnxruntime has no kernel for it")


def test_a_fold_of_a_captured_outer_value_is_checked_by_a_copy_of_its_nodes(monkeypatch):
    # The Shape inside the If branch reads x of the main graph: a copy of it runs there. The
    # planted reversed fact is caught, inside the branch too.
    _reversed_shapes(monkeypatch)
    then_graph = helper.make_graph([helper.make_node("Shape", ["x"], ["t"])], "then", [],
                                   [value_info("t", INT64, [2])])
    else_graph = helper.make_graph([helper.make_node("Shape", ["x"], ["e"])], "else", [],
                                   [value_info("e", INT64, [2])])
    nodes = [helper.make_node("If", ["cond"], ["o"], then_branch=then_graph, else_branch=else_graph)]
    model = make_model(nodes, [value_info("x", shape=[2, 3]), value_info("cond", TensorProto.BOOL, [])],
                       [value_info("o", INT64, [2])])
    result, report = _optimized(model, ["fold_shapes"])
    assert not _applied(report, "fold_shapes")
    assert {r["guard"] for r in report["refused"] if r["rule"] == "fold_shapes"} == {"static_shape.runtime_disagrees"}
    for cond in (True, False):
        feeds = {"x": np.zeros((2, 3), np.float32), "cond": np.array(cond)}
        assert_bit_identical(run(model, feeds), run(result, feeds))


def test_graph_level_rewrites_name_their_pass_reason_as_a_proof():
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["dead"])]
    model = make_model(nodes, [value_info("x", shape=[2])], [value_info("y", shape=[2])],
                       [tensor("unused", np.zeros(3, np.float32))])
    _, report = _optimized(model, ["eliminate_deadend", "eliminate_unused_initializer"])
    entries = {entry["rule"]: entry for entry in report["applied"]}
    assert set(entries) == {"eliminate_deadend", "eliminate_unused_initializer"}
    for name, entry in entries.items():
        assert entry["evidence"] == "proved"
        assert entry["certificate"] == f"proof: {registry.get_pass(name).exactness}"


def test_without_certificates_graph_level_rewrites_stay_unchecked():
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["dead"])]
    model = make_model(nodes, [value_info("x", shape=[2])], [value_info("y", shape=[2])])
    _, report = _optimized(model, ["eliminate_deadend"], certify=False)
    assert [entry["evidence"] for entry in report["applied"]] == ["unchecked"]


def test_every_graph_level_pass_declares_why_it_is_exact(monkeypatch):
    for spec in registry.declared_passes():
        assert bool(spec.exactness) == (spec.run is not None), spec.name
    silent = PassSpec("silent_graph_pass", "test only", run=lambda pctx: 0, kind=EXACT, phase=GRAPH,
                      not_fuzzed="test only")

    class Module:
        PASSES = (silent,)

    monkeypatch.setattr(registry, "PASS_MODULES", (*registry.PASS_MODULES, Module))
    with pytest.raises(ValueError, match="says why it is exact"):
        registry.declared_passes()


def test_a_rule_pass_gives_no_exactness_of_its_own():
    rule = registry.get_pass("eliminate_identity").rules[0]
    with pytest.raises(ValueError, match="certified one by one"):
        PassSpec("p", "s", rules=(rule,), exactness="trust me")


def test_list_passes_shows_why_each_pass_is_exact(capsys):
    from onnxrefine.cli.main import main

    assert main(["optimize", "--list-passes"]) == 0
    out = capsys.readouterr().out
    assert "why each pass is exact" in out and "eliminate_deadend" in out
    from onnxrefine.cli.output import stdout_console

    table = exactness_table(stdout_console())  # the pipe's table: its cells as given
    rows = {str(name): str(reason) for name, reason in table.rows}
    assert set(rows) == {spec.name for spec in registry.all_passes() if spec.run is not None}
    assert rows["eliminate_deadend"] == registry.get_pass("eliminate_deadend").exactness


def _reshape_region_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Reshape", ["x", "wide"], ["w"]),
        helper.make_node("Mul", ["w", "half"], ["m"]),
        helper.make_node("Tanh", ["m"], ["t"]),
        helper.make_node("Reshape", ["t", "back"], ["y"]),
    ]
    inits = [tensor("wide", np.array([1, 4, 3], np.int64)), tensor("back", np.array([-1, 3], np.int64)),
             tensor("half", np.array(0.5, np.float32))]
    return make_model(nodes, [value_info("x", shape=[4, 3])], [value_info("y", shape=[4, 3])], inits)


def test_a_reshape_region_rewrite_is_certified_on_its_own_region():
    model = _reshape_region_model()
    result, report = _optimized(model, ["eliminate_reshape_around_elementwise"])
    [entry] = _applied(report, "eliminate_reshape_around_elementwise")
    assert entry["evidence"] == "certified" and entry["certificate"].startswith("certified: bit-identical")
    assert [n.op_type for n in result.graph.node] == ["Mul", "Tanh"]
    feeds = {"x": np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3)}
    assert_bit_identical(run(model, feeds), run(result, feeds))


def test_a_planted_wrong_reshape_region_rewrite_is_caught_by_its_certificate(monkeypatch):
    # The planted guard lets a non-elementwise operator in: Softmax(axis=1) normalises over the 4
    # rows of the [1, 4, 3] the region ran on, but over the 3 columns of x's [4, 3].
    from onnxrefine.passes import reshapes

    monkeypatch.setattr(reshapes, "UNARY", reshapes.UNARY | {"Softmax"})
    model = _reshape_region_model()
    nodes = list(model.graph.node)
    nodes[2].CopyFrom(helper.make_node("Softmax", ["m"], ["t"], axis=1))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    _, report = expect_guard(model, ["eliminate_reshape_around_elementwise"], "certificate.graph_failed",
                             {"x": np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3)},
                             rule="eliminate_reshape_around_elementwise")
    assert not report.log.applied


def test_observed_runs_zero_only_weights_no_integer_depends_on():
    # A float weight cast to an integer decides a Reshape's target: it is serialized as it is.
    # One only multiplied into activations becomes zeros made at run time.
    import onnx_ir as ir

    from onnxrefine.verify.ort import observed

    weight = np.arange(2048, dtype=np.float32).reshape(2, 1024)
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Shape", ["m"], ["s"]),
             helper.make_node("ReduceMax", ["w"], ["top"], keepdims=0),
             helper.make_node("Cast", ["top"], ["k"], to=TensorProto.INT64)]
    model = ir.serde.deserialize_model(make_model(
        nodes, [value_info("x", shape=[2, 1024])], [value_info("s", INT64, [2]), value_info("k", INT64, [])],
        [tensor("w", weight)], opset=17))
    shape_value, cast_value = (node.outputs[0] for node in list(model.graph)[1::2])
    proto, _ = observed._cut(model, [shape_value], lambda v: v.dtype or ir.DataType.FLOAT)
    assert [n.op_type for n in proto.graph.node][0] == "ConstantOfShape" and not proto.graph.initializer[1:]
    proto, _ = observed._cut(model, [cast_value], lambda v: v.dtype or ir.DataType.FLOAT)
    assert "ConstantOfShape" not in [n.op_type for n in proto.graph.node]
    assert observed.observe(model, [cast_value])[id(cast_value)] == 2047


def test_observed_runs_zero_weights_a_resize_only_scales_the_values_of():
    # Resize(Mul(x, w), scales): its output size comes of its input's shape and the scales, so w is
    # zeros made at run time; where the scales themselves come of a float weight, that one is kept.
    import onnx_ir as ir

    from onnxrefine.verify.ort import observed

    weight = np.linspace(-1, 1, 2048, dtype=np.float32).reshape(1, 2, 32, 32)
    scales = np.array([1, 1, 2, 2], np.float32)

    def cut(scaled_by_weight: bool):
        nodes = [helper.make_node("Mul", ["x", "w"], ["m"]),
                 helper.make_node("Mul", ["sc", "one"] if not scaled_by_weight else ["sc", "w_first"], ["scales"]),
                 helper.make_node("Resize", ["m", "", "scales"], ["r"], mode="nearest"),
                 helper.make_node("Shape", ["r"], ["s"])]
        inits = [tensor("w", weight), tensor("sc", scales), tensor("one", np.ones(4, np.float32)),
                 tensor("w_first", np.full(4, 1.0, np.float32))]
        if scaled_by_weight:  # the scales read a large float weight too
            nodes[1:1] = [helper.make_node("ReduceMax", ["w"], ["w_top"], keepdims=0),
                          helper.make_node("Add", ["w_top", "one"], ["w_first"])]
            inits = inits[:3]
        model = ir.serde.deserialize_model(make_model(
            nodes, [value_info("x", shape=[1, 2, 32, 32])], [value_info("s", INT64, [4])], inits, opset=17))
        shape_value = next(n for n in model.graph if n.op_type == "Shape").outputs[0]
        proto, _ = observed._cut(model, [shape_value], lambda v: v.dtype or ir.DataType.FLOAT)
        return model, shape_value, proto

    model, shape_value, proto = cut(False)
    assert "ConstantOfShape" in [n.op_type for n in proto.graph.node]
    assert "w" not in [init.name for init in proto.graph.initializer]
    assert tuple(observed.observe(model, [shape_value])[id(shape_value)]) == (1, 2, 64, 64)
    _, _, proto = cut(True)
    assert "w" in [init.name for init in proto.graph.initializer]


def test_an_observed_run_falls_back_to_zero_integers_where_generated_ones_are_out_of_range():
    # Gather(table, idx + 1): the generated indices fit the 2 rows before the + 1, not after it
    # (idx = [2, 1, 0] reads row 3); zeros read row 1.
    import onnx_ir as ir

    from onnxrefine.verify.ort import observe

    nodes = [helper.make_node("Add", ["idx", "one"], ["shifted"]),
             helper.make_node("Gather", ["table", "shifted"], ["g"], axis=0), helper.make_node("Shape", ["g"], ["s"])]
    model = ir.serde.deserialize_model(make_model(
        nodes, [value_info("idx", INT64, [3])], [value_info("s", INT64, [2])],
        [tensor("table", np.zeros((2, 5), np.float32)), tensor("one", np.array(1, np.int64))]))
    shape_value = list(model.graph)[2].outputs[0]
    assert observe(model, [shape_value])[id(shape_value)].tolist() == [3, 5]


def test_a_planted_wrong_shape_declared_in_the_cut_is_still_caught(monkeypatch):
    # The run's cut declares the facts' shapes (for its memory estimate); onnxruntime's Shape
    # reads the tensor it computes, so a wrong fact declared there is still contradicted.
    symbolic_shape = facts_oracle.StaticShapes.symbolic_shape

    def planted(self, value, _depth=0):
        found = symbolic_shape(self, value, _depth)
        producer = value.producer() if value is not None else None
        return tuple(reversed(found)) if found and producer is not None and producer.op_type == "Relu" else found

    monkeypatch.setattr(facts_oracle.StaticShapes, "symbolic_shape", planted)
    declared = []
    cut = observed_module._cut

    def recording(*args):
        made = cut(*args)
        declared.extend((v.name, [d.dim_value for d in v.type.tensor_type.shape.dim]) for v in made[0].graph.value_info)
        return made

    monkeypatch.setattr(observed_module, "_cut", recording)
    _, report = expect_guard(_shape_model(), ["fold_shapes"], "static_shape.runtime_disagrees",
                             {"x": np.ones((2, 3), np.float32)}, rule="fold_shapes")
    assert ("r", [3, 2]) in declared  # the lie was declared to onnxruntime
    [refusal] = [r for r in report.to_dict()["refused"] if r["rule"] == "fold_shapes"]
    assert "folded [3, 2] where onnxruntime computes [2, 3]" in refusal["reason"]


def _computed_size_model() -> onnx.ModelProto:
    """Shape(Slice(x) to half its dim 1, the half computed from x's Shape): onnx's inference
    does not follow the Div, the shape facts do."""
    nodes = [helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Gather", ["sx", "one"], ["dim"], axis=0),
             helper.make_node("Div", ["dim", "two"], ["half"]),
             helper.make_node("Slice", ["x", "zero", "half", "one"], ["sliced"]),
             helper.make_node("Relu", ["sliced"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"])]
    constants = [tensor("one", np.array([1], np.int64)), tensor("two", np.array([2], np.int64)),
                 tensor("zero", np.array([0], np.int64))]
    return make_model(nodes, [value_info("x", shape=[2, 6])], [value_info("s", INT64, [2])], constants)


def test_a_cut_whose_sizes_the_facts_know_runs_in_this_process(monkeypatch):
    # Without the facts' shapes declared, the Slice's output is of unknown size to the memory
    # estimate and the run goes to a watched child process (a second interpreter's start-up).
    from onnxrefine.verify.ort import runner

    def no_child(self):
        raise AssertionError("the cut ran in a watched child")

    monkeypatch.setattr(runner.ModelRunner, "_watch", no_child)
    result, report = _optimized(_computed_size_model(), ["fold_shapes"])
    entries = _applied(report, "fold_shapes")
    assert entries and all("onnxruntime computes the same value" in e["certificate"] for e in entries)
    assert run(result, {"x": np.ones((2, 6), np.float32)})[0].tolist() == [2, 3]


def test_observed_runs_zero_each_weight_no_integer_depends_on():
    # In one cut, a weight multiplied into the activations (whose shape is asked) and another whose
    # values decide an integer (a Cast of its maximum): the first becomes zeros made at run time,
    # the second stays as it is, and the run still gives the integer its values make. (Deciding for
    # all weights at once serialized both: deeplabv3's shape check copied 40 MB of conv weights.)
    import onnx_ir as ir

    from onnxrefine.verify.ort import observed

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Shape", ["m"], ["s"]),
             helper.make_node("ReduceMax", ["v"], ["top"], keepdims=0),
             helper.make_node("Cast", ["top"], ["k"], to=TensorProto.INT64)]
    v = np.arange(2048, dtype=np.float32)
    model = ir.serde.deserialize_model(make_model(
        nodes, [value_info("x", shape=[2, 1024])], [value_info("s", INT64, [2]), value_info("k", INT64, [])],
        [tensor("w", rng.standard_normal((2, 1024)).astype(np.float32)), tensor("v", v)], opset=17))
    shape_value, cast_value = (node.outputs[0] for node in list(model.graph)[1::2])
    proto, _ = observed._cut(model, [shape_value, cast_value], lambda value: value.dtype or ir.DataType.FLOAT)
    assert [init.name for init in proto.graph.initializer if init.name in ("w", "v")] == ["v"]
    assert "w" in [out for node in proto.graph.node if node.op_type == "ConstantOfShape" for out in node.output]
    seen = observed.observe(model, [shape_value, cast_value])
    assert seen[id(cast_value)] == 2047 and tuple(seen[id(shape_value)]) == (2, 1024)
