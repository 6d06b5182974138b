"""The rule driver across the rounds of the schedule: a later run offers again only what changed since
the last (nodes a graph-level pass edited and what is around them, readers of values whose facts
came out different), never every node."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from helpers import make_model, value_info
from onnx import TensorProto, helper

from onnxrefine.ir import edit
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.passes.pipeline import run_passes
from onnxrefine.passes.registry import GRAPH, PassSpec
from onnxrefine.rewrite.driver import RewriteDriver
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule
from tests.helpers import plant_pass


def _offers(seen, name, op, rewrite=lambda m, ctx: None):
    def offered(m, ctx):
        seen.append(name)
        return rewrite(m, ctx)

    return Rule(name, Op(op, Var("x")), offered, kind=EXACT)


def _replace_input(model: ir.Model, node: ir.Node, index: int, array: np.ndarray) -> None:
    """What a graph-level pass does: the node's input becomes a new constant."""
    value = edit.new_constant(NameAllocator(model), model.graph, False, array, "folded")
    node.replace_input_with(index, value)


def _reshape_chain(relus: int) -> ir.Model:
    """x -> Reshape(x, t) -> Relu ... -> Sin -> y, with t a graph input (so the shape is unknown),
    and a Cos on input z beside it."""
    nodes = [helper.make_node("Reshape", ["x", "t"], ["r0"])]
    nodes += [helper.make_node("Relu", [f"r{i}"], [f"r{i + 1}"]) for i in range(relus)]
    nodes += [helper.make_node("Sin", [f"r{relus}"], ["s"]), helper.make_node("Identity", ["s"], ["y"]),
              helper.make_node("Cos", ["z"], ["c"])]
    return ir.from_proto(make_model(nodes, [value_info("x", shape=[2, 3]), value_info("t", TensorProto.INT64, [2]),
                                            value_info("z", shape=[2])], [value_info("y"), value_info("c")]))


def test_a_later_run_offers_the_readers_of_values_whose_facts_changed_far_below_an_edit():
    """Between two runs the Reshape's target becomes a constant: the shape of every value below it
    is now known, six Relus down to the Sin, beyond what the edit's neighbourhood reaches. The Sin
    rule (it wants a static input shape) is offered again because the facts of its input came out
    different, and applies; the Cos on another input is not offered again."""
    offers = []

    def when_static(m, ctx):
        shape = ctx.facts.static_shape(m["x"])
        if shape is None:
            return None
        return Replacement([], {m.root.outputs[0]: ctx.constant(np.zeros(shape, np.float32), "zero")})

    model = _reshape_chain(6)
    driver = RewriteDriver(model, [_offers(offers, "sin", "Sin", when_static), _offers(offers, "cos", "Cos")])
    driver.run()
    assert driver.rewrites == 0 and offers == ["sin", "cos"]
    reshape = next(node for node in model.graph if node.op_type == "Reshape")
    _replace_input(model, reshape, 1, np.array([3, 2], np.int64))
    log = driver.run()
    assert [entry.rule for entry in log.applied] == ["sin"]
    assert driver.settled and offers == ["sin", "cos", "sin"]


def test_a_later_run_offers_nothing_when_the_model_did_not_change():
    offers = []
    model = _reshape_chain(2)
    driver = RewriteDriver(model, [_offers(offers, "sin", "Sin"), _offers(offers, "cos", "Cos")])
    driver.run()
    driver.run()
    assert driver.settled and offers == ["sin", "cos"]


def test_the_schedule_offers_the_rules_again_only_around_what_a_graph_pass_changed(monkeypatch):
    """A planted graph-level pass makes the Reshape target constant in the first round; the second
    round's rule run offers the Sin again (the facts it read of its input changed), not the Cos."""
    offers = []

    def fold_target(pctx):
        reshape = next((node for node in pctx.model.graph if node.op_type == "Reshape"), None)
        if reshape is None or reshape.inputs[1].const_value is not None:
            return 0
        _replace_input(pctx.model, reshape, 1, np.array([3, 2], np.int64))
        return 1

    rules = (_offers(offers, "sin", "Sin", lambda m, ctx: ctx.facts.static_shape(m["x"]) and None),
             _offers(offers, "cos", "Cos"))
    plant_pass(monkeypatch, PassSpec("test_rules", "planted rules", rules=rules, not_fuzzed="planted"))
    plant_pass(monkeypatch, PassSpec("test_fold_target", "planted fold", run=fold_target, kind=EXACT, phase=GRAPH,
                                     order=1, exactness="planted", not_fuzzed="planted"))
    model = _reshape_chain(6)
    run_passes(model, ["test_rules", "test_fold_target"], budget=ConstantBudget(0))
    assert offers == ["sin", "cos", "sin"]


def test_facts_derived_again_as_they_were_send_nothing_back():
    """The Neg reading the dynamic input x is replaced between two runs by an equal new Neg: the
    facts of its output are derived again and come out as before (x's own are kept, so its
    symbolic batch dim is the same token), and the Sin six Relus down, which read its input's
    shape, is not offered again. Derived again, x's dims would be new tokens, every shape below
    would differ and the Sin would be offered again."""
    offers = []
    nodes = [helper.make_node("Neg", ["x"], ["r0"])]
    nodes += [helper.make_node("Relu", [f"r{i}"], [f"r{i + 1}"]) for i in range(6)]
    nodes += [helper.make_node("Sin", ["r6"], ["y"])]
    model = ir.from_proto(make_model(nodes, [value_info("x", shape=["N", 3])], [value_info("y")]))
    reads_shape = _offers(offers, "sin", "Sin", lambda m, ctx: ctx.facts.symbolic_shape(m["x"]) and None)
    driver = RewriteDriver(model, [reads_shape])
    driver.run()
    old = next(node for node in model.graph if node.op_type == "Neg")
    new = ir.node("Neg", [old.inputs[0]])
    edit.insert_nodes(model.graph, [new], before=old)
    edit.replace_value(NameAllocator(model), model.graph, old.outputs[0], new.outputs[0])
    edit.remove_nodes(model.graph, [old])
    driver.run()
    assert driver.settled and offers == ["sin"]
