"""Attribute references bound per call site (rewrite/bindings.py): a rewrite in a model-local
function's body whose nodes refer to the caller's attributes (`Transpose(perm=@perm)`) is made at
each call site with that call's values, certified there, and applied only when every call site
gives the same rewrite; otherwise the function is kept."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from guardutil import expect_guard
from helpers import run
from onnx import AttributeProto, helper
from onnx import TensorProto as T
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.ir.attrs import attr
from onnxrefine.passes import registry
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule

SHAPE = [4, 2, 3]


def _body(reference: bool = True) -> list:
    # Transpose(perm=[1, 2, 0]) then Transpose(perm=@perm): the composed perm is each caller's.
    reshape_to = helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", T.INT64, [3], SHAPE))
    second = helper.make_node("Transpose", ["t"], ["y"])
    second.attribute.append(helper.make_attribute_ref("perm", AttributeProto.INTS))
    return [reshape_to, helper.make_node("Reshape", ["x", "s"], ["r"]),
            helper.make_node("Transpose", ["r"], ["t"], perm=[1, 2, 0]), second]


def _model(perms, default=None, caller_in_function: bool = False) -> onnx.ModelProto:
    """One call of local.F per entry of `perms` (None: the call passes no perm)."""
    defaults = [helper.make_attribute("perm", default)] if default is not None else None
    function = helper.make_function("local", "F", ["x"], ["y"], _body(), [helper.make_opsetid("", 17)],
                                    attributes=[] if defaults else ["perm"], attribute_protos=defaults)
    functions = [function]
    calls = [helper.make_node("F", [f"X{i}"], [f"Y{i}"], domain="local", **({"perm": p} if p else {}))
             for i, p in enumerate(perms)]
    if caller_in_function:  # G(perm) calls F(perm=@perm): no call site gives F's perm a value
        inner = helper.make_node("F", ["x"], ["y"], domain="local")
        inner.attribute.append(helper.make_attribute_ref("perm", AttributeProto.INTS))
        functions.append(helper.make_function("local", "G", ["x"], ["y"], [inner],
                                              [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                                              attributes=["perm"]))
        calls = [helper.make_node("G", [f"X{i}"], [f"Y{i}"], domain="local", perm=p) for i, p in enumerate(perms)]
    graph = helper.make_graph(calls, "g", [helper.make_tensor_value_info(f"X{i}", T.FLOAT, SHAPE)
                                           for i in range(len(perms))],
                              [helper.make_tensor_value_info(f"Y{i}", T.FLOAT, None) for i in range(len(perms))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=functions)
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal(SHAPE).astype(np.float32) for i in model.graph.input}


def _fused(perms, **options):
    model = _model(perms, **options)
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_consecutive_transposes"])
    assert_bit_identical(run(model, _feeds(model)), run(optimized, _feeds(model)))
    return optimized, report


@pytest.mark.parametrize("perms, shapes", [
    ([[0, 1, 2], [0, 1, 2]], [(2, 3, 4)] * 2),  # the same perm at both call sites
    ([[2, 1, 0], None], [(4, 3, 2)] * 2),  # an absent perm is Transpose's default, reversed axes
])
def test_a_rewrite_valid_at_every_call_site_is_applied_and_certified_at_each(perms, shapes):
    optimized, report = _fused(perms)
    [entry] = report.log.applied
    assert entry.evidence == "certified"
    assert entry.certificate.endswith("(attribute references bound at each of its 2 call sites)")
    assert [o.shape for o in run(optimized, _feeds(optimized))] == shapes
    assert not any(a.ref_attr_name for n in optimized.functions[0].node for a in n.attribute)


def test_the_function_s_default_binds_an_absent_attribute():
    optimized, report = _fused([None], default=[0, 2, 1])
    assert [a.rule for a in report.log.applied] == ["fuse_consecutive_transposes"]
    assert run(optimized, _feeds(optimized))[0].shape == (2, 4, 3)


def test_two_call_sites_with_different_perms_keep_the_function():
    model = _model([[0, 1, 2], [2, 0, 1]])
    optimized, report = expect_guard(model, ["fuse_consecutive_transposes"], "driver.reference_differs",
                                     _feeds(model), rule="fuse_consecutive_transposes")
    assert not report.log.applied
    assert [o.shape for o in run(optimized, _feeds(model))] == [(2, 3, 4), (4, 2, 3)]


def test_a_reference_no_call_site_binds_is_refused():
    model = _model([[0, 1, 2]], caller_in_function=True)
    _, report = expect_guard(model, ["fuse_consecutive_transposes"], "driver.attribute_reference", _feeds(model),
                             rule="fuse_consecutive_transposes")
    assert not report.log.applied


def _compose_in_the_wrong_order(m, ctx):
    """Wrong on purpose: Transpose(Transpose(x, p), q) is Transpose(x, [p[i] for i in q])."""
    inner, outer = m.root.inputs[0].producer(), m.root
    first, second = list(attr(inner, "perm")), list(attr(outer, "perm"))
    node = ctx.node("Transpose", [m["x"]], {"perm": [second[i] for i in first]})
    return Replacement([node], {outer.outputs[0]: node.outputs[0]})


def test_a_wrong_rewrite_is_caught_by_a_call_site_s_certificate(monkeypatch):
    registry._load_pass_modules()
    rule = Rule("wrong_transposes", Op("Transpose", Op("Transpose", Var("x"))), _compose_in_the_wrong_order,
                kind=EXACT)
    monkeypatch.setitem(registry._REGISTRY, "planted_wrong_transposes",
                        PassSpec("planted_wrong_transposes", "test only", rules=(rule,), default=False))
    model = _model([[0, 2, 1], [0, 2, 1]])  # composed right: [1, 0, 2]; in the wrong order: [2, 1, 0]
    optimized, _ = expect_guard(model, ["planted_wrong_transposes"], "certificate.failed", _feeds(model),
                                rule="wrong_transposes")
    assert [n.op_type for n in optimized.functions[0].node].count("Transpose") == 2


def test_a_rule_that_resolves_references_itself_is_not_bound(monkeypatch):
    registry._load_pass_modules()
    rules = tuple(dataclasses.replace(r, resolves_references=True)
                  for r in registry.get_pass("fuse_consecutive_transposes").rules)
    monkeypatch.setitem(registry._REGISTRY, "resolving", PassSpec("resolving", "test only", rules=rules,
                                                                  default=False))
    expect_guard(_model([[0, 1, 2]]), ["resolving"], "attr.reference", rule="fuse_consecutive_transposes")


def test_facts_read_at_one_call_site_are_not_taken_to_the_next():
    # Reshape(Transpose(r, @perm), [4, 2, 3], allowzero=@allowzero) is a no-op where perm is
    # [2, 0, 1] (the first call), not where it is [0, 1, 2] (the second): the rule itself must see
    # that at the second call (the facts read under the first call's binding are forgotten), not
    # leave it to a failing certificate.
    def constant(name, dims):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, T.INT64, [3], dims))

    transpose = helper.make_node("Transpose", ["r"], ["t"])
    transpose.attribute.append(helper.make_attribute_ref("perm", AttributeProto.INTS))
    reshape = helper.make_node("Reshape", ["t", "target"], ["y"])
    reshape.attribute.append(helper.make_attribute_ref("allowzero", AttributeProto.INT))
    body = [constant("s", [2, 3, 4]), constant("target", SHAPE), helper.make_node("Reshape", ["x", "s"], ["r"]),
            transpose, reshape]
    function = helper.make_function("local", "F", ["x"], ["y"], body, [helper.make_opsetid("", 17)],
                                    attributes=["perm", "allowzero"])
    calls = [helper.make_node("F", [f"X{i}"], [f"Y{i}"], domain="local", perm=perm, allowzero=0)
             for i, perm in enumerate([[2, 0, 1], [0, 1, 2]])]
    graph = helper.make_graph(calls, "g", [helper.make_tensor_value_info(f"X{i}", T.FLOAT, [2, 3, 4]) for i in range(2)],
                              [helper.make_tensor_value_info(f"Y{i}", T.FLOAT, None) for i in range(2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[function])
    model.ir_version = 8
    optimized, report = onnxrefine.optimize_with_report(model, ["eliminate_nop_reshape"])
    assert not report.log.applied
    assert report.log.refusal_guards("eliminate_nop_reshape")
    assert not [r for r in report.log.refused.values() if r.guard.startswith("certificate")]
    feeds = {f"X{i}": np.arange(24, dtype=np.float32).reshape(2, 3, 4) for i in range(2)}
    assert_bit_identical(run(model, feeds), run(optimized, feeds))


def test_a_graph_reference_is_not_bound():
    import onnx_ir as ir

    from onnxrefine.rewrite import bindings

    branch = helper.make_node("If", ["c"], ["y"])
    branch.attribute.append(helper.make_attribute_ref("then_branch", AttributeProto.GRAPH))
    branch.attribute.append(helper.make_attribute_ref("else_branch", AttributeProto.GRAPH))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "g", [], [helper.make_tensor_value_info(
        "o", T.FLOAT, None)])
    function = helper.make_function("local", "F", ["c", "x"], ["y"], [branch], [helper.make_opsetid("", 17)],
                                    attributes=["then_branch", "else_branch"])
    call = helper.make_node("F", ["C", "X"], ["Y"], domain="local", then_branch=graph, else_branch=graph)
    main = helper.make_graph([call], "main", [helper.make_tensor_value_info("C", T.BOOL, []),
                                              helper.make_tensor_value_info("X", T.FLOAT, [2])],
                             [helper.make_tensor_value_info("Y", T.FLOAT, None)])
    model = ir.serde.deserialize_model(helper.make_model(
        main, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[function]))
    assert bindings.call_bindings(model, next(iter(model.functions.values()))) == "a graph attribute is not bound"
