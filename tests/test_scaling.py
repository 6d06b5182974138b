"""Linear-time structure of optimize on long graphs (counted work, never timed; the timing is
bench/engine_scaling.py), and the bookkeeping that keeps it linear without a stale answer."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from helpers import make_model, run, tensor, value_info
from onnx import helper

import onnxrefine
from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import signed_zero
from onnxrefine.ir.signed_zero import refuse_if_observable
from onnxrefine.rewrite.driver import RewriteDriver
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule


def add_zero_chain(n: int):
    """x -> (+0.0 -> Relu) * n: every Add is removable (nothing downstream reads a zero's sign),
    and each removal asks whether the sign is observable."""
    nodes, x = [], "x"
    for i in range(n):
        nodes += [helper.make_node("Add", [x, "zero"], [f"a{i}"]), helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        x = f"r{i}"
    return make_model(nodes, [value_info("x", shape=[4])], [value_info(x, shape=[4])],
                      [tensor("zero", np.zeros(4, np.float32))])


def test_signed_zero_queries_do_linear_work_on_a_chain(monkeypatch):
    """Each x + 0.0 removal asks about the whole chain below it; with the "not observable" answers
    kept, the total work is linear in the chain (it was n queries of O(n) each)."""
    expanded = {}
    real = signed_zero.SignedZeroAnalysis._expand
    for n in (100, 200, 400):
        calls = [0]

        def counting(self, value, calls=calls):
            calls[0] += 1
            return real(self, value)

        monkeypatch.setattr(signed_zero.SignedZeroAnalysis, "_expand", counting)
        model = add_zero_chain(n)
        optimized, report = onnxrefine.optimize_with_report(model, ["eliminate_float_add_zero"], certify=False)
        assert report.log.counts()["eliminate_float_add_zero"] == n
        expanded[n] = calls[0]
    assert expanded[400] <= 2.2 * expanded[200] <= 4.5 * expanded[100]
    assert expanded[400] <= 4 * 2 * 400  # a few expansions per value, not one per (query, value)


def test_optimized_chain_computes_the_same():
    model = add_zero_chain(50)
    optimized = onnxrefine.optimize(model, ["eliminate_float_add_zero"], certify=False)
    x = np.array([-0.0, 0.0, 1.5, -2.0], np.float32)
    # equal values; an output's zero may change sign (it is no sink: see ir/signed_zero.py)
    np.testing.assert_array_equal(run(model, {"x": x})[0], run(optimized, {"x": x})[0])


def test_kept_not_observable_answer_is_dropped_when_a_rewrite_adds_a_sign_reader():
    """One driver run: a rule learns that m's zero sign is unobservable (Abs below it), a second
    rule removes the Abs so that m now reaches 1/x, and a third rule asks again: it must be told
    "observable" (the driver reports the new reader; without it the kept answer would be stale)."""
    asked: dict[str, bool] = {}

    def value_named(ctx, name):
        return next(v for n in ctx.model.graph for v in n.outputs if v.name == name)

    def asks(label):
        def rewrite(m, ctx):
            try:
                refuse_if_observable(ctx, value_named(ctx, "m"), label)
                asked.setdefault(label, False)  # the first answer (a node may be offered again)
            except RewriteRefused:
                asked.setdefault(label, True)
            return None

        return rewrite

    def drop_abs(m, ctx):  # planted and unsound on purpose: it gives m the reader Reciprocal
        return Replacement([], {m.root.outputs[0]: m["x"]})

    rules = [Rule("ask_first", Op("Sin", Var("x")), asks("first"), kind=EXACT),
             Rule("drop_abs", Op("Abs", Var("x")), drop_abs, kind=EXACT),
             Rule("ask_again", Op("Cos", Var("x")), asks("again"), kind=EXACT)]
    nodes = [helper.make_node("Sin", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["m"]),
             helper.make_node("Abs", ["m"], ["b"]), helper.make_node("Reciprocal", ["b"], ["y"]),
             helper.make_node("Cos", ["x"], ["t"])]
    model = ir.from_proto(make_model(nodes, [value_info("x", shape=[2])],
                                     [value_info("y"), value_info("s"), value_info("t")]))
    log = RewriteDriver(model, rules).run()
    assert [entry.rule for entry in log.applied] == ["drop_abs"]
    assert asked == {"first": False, "again": True}


def test_analysis_new_uses_drops_answers_upstream_only_through_carriers():
    """x -> Neg -> a -> Abs -> y: a is not observable; a new 1/a reader makes a and x observable
    once reported, while an answer above a stopper (Abs) is kept."""
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["a"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    model = ir.from_proto(make_model(nodes, [value_info("x", shape=[2])], [value_info("z")]))
    v = {out.name: out for n in model.graph for out in n.outputs} | {"x": model.graph.inputs[0]}
    analysis = signed_zero.SignedZeroAnalysis(model.graph)
    assert not analysis.observable(v["x"]) and not analysis.observable(v["y"])
    div = ir.Node("", "Reciprocal", [v["a"]], name="late")
    model.graph.append(div)
    model.graph.outputs.append(div.outputs[0])
    analysis.new_uses([v["a"]])
    assert analysis.observable(v["a"]) and analysis.observable(v["x"])
    assert v["y"] in analysis._unobservable  # below the Abs: still not observable, still kept


def test_fast_attribute_conversion_agrees_with_onnx_ir():
    """RewriteContext.node converts common attribute values itself (onnx-ir's converter checks
    slow typing.Protocol isinstances first); the result must be the attribute onnx-ir makes."""
    from onnxrefine.rewrite.rule import _attribute

    for value in (1, True, 2.5, "s", [1, 2], (3,), [1.0, 2.0], ["a", "b"], [True, False]):
        ours, theirs = _attribute("k", value), ir.convenience.convert_attribute("k", value)
        assert (ours.type, ours.value) == (theirs.type, theirs.value), value
        assert type(ours.value) is type(theirs.value) or list(ours.value) == list(theirs.value)
