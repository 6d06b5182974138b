"""Which opset a graph's nodes run under: one reading (ir/opsets.opset_version) for the rule
context and the graph-level passes. They used to differ on a function that declares version 0:
the rule context replaced the 0 by the model's version (`or`), graphpass.opset_of kept it."""

from __future__ import annotations

from types import SimpleNamespace

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxrefine.ir.opsets import STANDARD_DOMAINS, opset_version
from onnxrefine.passes.graphpass import opset_of
from onnxrefine.rewrite.rule import RewriteContext


@pytest.mark.parametrize(("own", "model", "domain", "expected"), [
    ({"": 0}, {"": 18}, "", 0),              # declared 0 is what runs (onnxruntime then refuses it)
    ({}, {"": 18}, "", 18),                  # nothing declared by the function: the model's
    (None, {"": 18}, "", 18),                # no owner
    ({"ai.onnx": 13}, {"": 18}, "", 13),     # the function's own import, under the alias
    ({}, {"ai.onnx": 17}, "", 17),           # the model's, under the alias
    ({"": 11, "ai.onnx": 13}, {}, "", 11),   # "" first
    ({}, {"com.x": 1}, "", 0),               # nobody declares it: older than every opset
    ({"com.x": 0}, {"com.x": 2}, "com.x", 0),
    ({}, {"com.x": 2}, "com.x", 2),
    ({}, {"": 18}, "com.x", 0),              # the standard version never stands in for another domain
])
def test_opset_version(own, model, domain, expected):
    assert opset_version(own, model, domain) == expected


def _model(function_opsets: list[tuple[str, int]]) -> ir.Model:
    function = helper.make_function(
        "local", "f", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
        opset_imports=[helper.make_opsetid(d, v) for d, v in function_opsets])
    graph = helper.make_graph(
        [helper.make_node("f", ["x"], ["y"], domain="local")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
                              functions=[function])
    proto.ir_version = 8
    return ir.serde.deserialize_model(proto)


@pytest.mark.parametrize(("function_opsets", "expected"), [
    ([("", 0)], 0),          # declared 0: read as 0 by both (the rule context used to say 18)
    ([], 18),                # not declared: the model's, for both
    ([("ai.onnx", 13)], 13),
    ([("", 15)], 15),
])
def test_rule_context_and_graph_passes_read_the_same_opset(function_opsets, expected):
    model = _model(function_opsets)
    function = next(iter(model.functions.values()))
    rule_reading = RewriteContext.opset(SimpleNamespace(owner=function, model=model))
    assert rule_reading == opset_of(model, function) == expected
    main = RewriteContext.opset(SimpleNamespace(owner=model.graph, model=model))
    assert main == opset_of(model, model.graph) == 18


def test_standard_domains():
    assert STANDARD_DOMAINS == ("", "ai.onnx")
    assert onnx.defs.ONNX_DOMAIN in STANDARD_DOMAINS
