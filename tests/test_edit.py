"""ir/edit.py: the one graph-edit API the rule driver and the graph-level passes share."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from helpers import make_model, run, tensor, value_info
from nested_models import feeds, nested_model
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.names import NameAllocator
from onnxrefine.rewrite.driver import RewriteDriver
from onnxrefine.rewrite.pattern import Const, Op, Var
from onnxrefine.rewrite.rule import Replacement, Rule


def _add_to_sub(m, ctx):
    """x + c -> x - (-c): bit-identical in IEEE arithmetic, and it makes a new constant."""
    add = m["add"]
    negated = ctx.constant(-constant_array(m["c"]), "negated", derived_from=[m["c"]])
    sub = ctx.node("Sub", [m["x"], negated])
    return Replacement([sub], {add.outputs[0]: sub.outputs[0]})


ADD_TO_SUB = Rule("add_to_sub", Op("Add", Var("x"), Const("c"), name="add"), _add_to_sub)


def _site(model: ir.Model, name: str) -> traversal.GraphSite:
    return next(s for s in traversal.graphs(model) if s.graph.name == name)


def test_rule_constants_take_the_form_of_their_graph_even_in_a_subgraph_of_a_function():
    """The driver used to register an initializer in a subgraph nested in a function (it looked
    only at whether the owner was the function body), unlike the graph-level passes, which give
    everything inside a function Constant nodes: now both follow ir/edit.place_constant."""
    original = nested_model()
    model = ir.from_proto(original)
    log = RewriteDriver(model, [ADD_TO_SUB]).run()
    assert log.counts().get("add_to_sub") == 2
    then_fn, then_main = _site(model, "then_fn").graph, _site(model, "then_main").graph
    assert not then_fn.initializers, "a graph inside a function got an initializer"
    assert [n.op_type for n in then_fn] == ["Constant", "Sub", "g"]  # k_fn's Constant released
    assert constant_array(next(iter(then_fn)).outputs[0]).tolist() == [-1.5]
    assert [n.op_type for n in then_main] == ["Sub"] and list(then_main.initializers) == ["negated"]
    optimized = ir.to_proto(model)
    onnx.checker.check_model(optimized, full_check=True)
    for feed in feeds():
        assert_bit_identical(run(original, feed), run(optimized, feed))


def test_a_replaced_value_never_lends_its_declared_shape_to_a_graph_input():
    """eliminate_identity replaced Y (declared [2, 3], wrongly) by the shapeless input X and copied
    the declaration onto X: the optimized model then rejected the [4] feed the original runs."""
    original = make_model(
        [helper.make_node("Identity", ["X"], ["Y"]), helper.make_node("Relu", ["Y"], ["Z"])],
        [onnx.ValueInfoProto(name="X", type=helper.make_tensor_type_proto(TensorProto.FLOAT, None))],
        [value_info("Z")],
    )
    original.graph.value_info.append(value_info("Y", shape=[2, 3]))
    optimized = onnxrefine.optimize(original, ["eliminate_identity"])
    assert [n.op_type for n in optimized.graph.node] == ["Relu"]
    assert not optimized.graph.input[0].type.tensor_type.HasField("shape")
    feed = {"X": np.array([-1.0, 0.5, 2.0, -0.0], np.float32)}
    assert_bit_identical(run(original, feed), run(optimized, feed))


def test_a_replacement_computed_by_a_node_takes_the_declared_type_and_shape():
    model = ir.from_proto(make_model([helper.make_node("Relu", ["X"], ["Y"])], [value_info("X", shape=[2])],
                                     [value_info("Y", shape=[2])]))
    old = model.graph.outputs[0]
    new_node = ir.Node("", "Abs", [model.graph.inputs[0]], name="abs")
    model.graph.append(new_node)
    new = new_node.outputs[0]
    edit.replace_value(NameAllocator(model), model.graph, old, new)
    assert model.graph.outputs[0] is new and new.name == "Y" and old.name != "Y"
    assert new.shape == ir.Shape([2]) and new.dtype == ir.DataType.FLOAT


def _graph_with_initializers():
    return ir.from_proto(make_model(
        [helper.make_node("Add", ["X", "only"], ["a"], name="n1"),
         helper.make_node("Mul", ["a", "shared"], ["b"], name="n2"),
         helper.make_node("Mul", ["b", "shared"], ["Y"], name="n3")],
        [value_info("X", shape=[4])], [value_info("Y", shape=[4])],
        [tensor("only", np.ones(4, np.float32)), tensor("shared", np.ones(4, np.float32))],
    ))


def test_freed_bytes_counts_only_initializers_read_by_the_nodes_alone():
    model = _graph_with_initializers()
    n1, n2, n3 = list(model.graph)
    assert edit.freed_bytes([n1]) == 16
    assert edit.freed_bytes([n2]) == 0  # n3 still reads `shared`
    assert edit.freed_bytes([n1, n2, n3]) == 32


def test_remove_unread_releases_the_constants_only_it_read():
    model = _graph_with_initializers()
    n1, n2, n3 = list(model.graph)
    edit.replace_value(NameAllocator(model), model.graph, n2.outputs[0], n1.outputs[0])
    removed, revisit = edit.remove_unread(model.graph, [n2, n1])
    assert removed == [n2]  # n1 is read again (by n3, through the replacement)
    assert set(model.graph.initializers) == {"only", "shared"}  # `shared` still read by n3
    assert revisit == []
    n3.replace_input_with(0, model.graph.inputs[0])
    removed, revisit = edit.remove_unread(model.graph, [n1])
    assert removed == [n1] and set(model.graph.initializers) == {"shared"}


def test_release_drops_an_unread_constant_node_and_returns_a_computing_producer():
    model = ir.from_proto(make_model(
        [helper.make_node("Constant", [], ["k"], value=tensor("k", np.ones(2, np.float32)), name="c"),
         helper.make_node("Relu", ["X"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "k"], ["Y"], name="add")],
        [value_info("X", shape=[2])], [value_info("Y", shape=[2])]))
    constant, relu, add = list(model.graph)
    add.replace_input_with(0, None)
    add.replace_input_with(1, None)
    assert list(edit.release(constant.outputs[0])) == [] and constant.graph is None
    assert list(edit.release(relu.outputs[0])) == [relu] and relu.graph is model.graph


@pytest.mark.parametrize("in_function", [False, True])
def test_place_constant_makes_an_initializer_or_a_constant_node(in_function):
    model = ir.from_proto(make_model([helper.make_node("Relu", ["X"], ["Y"], name="relu")],
                                     [value_info("X", shape=[2])], [value_info("Y", shape=[2])]))
    relu = next(iter(model.graph))
    value = edit.new_constant(NameAllocator(model), model.graph, in_function, np.float32(3.0), "three", before=relu)
    assert value.shape == ir.Shape([]) and constant_array(value).tolist() == 3.0  # a scalar stays a scalar
    if in_function:
        assert [n.op_type for n in model.graph] == ["Constant", "Relu"] and not model.graph.initializers
    else:
        assert [n.op_type for n in model.graph] == ["Relu"] and model.graph.initializers["three"] is value


def test_a_graph_output_never_becomes_an_alias():
    model = ir.from_proto(make_model(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu")],
        [value_info("X", shape=[2])], [value_info("Y", shape=[2])], [tensor("w", np.ones(2, np.float32))]))
    graph = model.graph
    output = graph.outputs[0]
    for alias in (graph.inputs[0], graph.initializers["w"]):
        with pytest.raises(RewriteRefused, match="would become an alias"):
            edit.refuse_output_alias(output, alias, graph, fresh=False)
    loose = ir.Value(name="loose", const_value=ir.tensor(np.ones(2, np.float32)))
    with pytest.raises(RewriteRefused, match="would become an alias"):
        edit.refuse_output_alias(output, loose, graph, fresh=False)
    edit.refuse_output_alias(output, loose, graph, fresh=True)  # a constant made for this edit may
    edit.refuse_output_alias(graph.inputs[0], loose, graph, fresh=False)  # not an output: nothing to keep


def test_a_subgraph_output_never_becomes_an_outer_scope_value():
    model = ir.from_proto(nested_model())
    then_main = _site(model, "then_main").graph
    call_f = next(n for n in model.graph if n.op_type == "f")
    with pytest.raises(RewriteRefused, match="outer-scope value"):
        edit.refuse_output_alias(then_main.outputs[0], call_f.outputs[0], then_main, fresh=False)


def test_the_budget_refuses_over_the_tensor_cap_and_the_growth_allowance():
    budget = ConstantBudget(initial_bytes=2000, per_tensor_bytes=100, growth_ratio=1.1, slack_bytes=0)
    assert edit.over_budget(budget, [100], freed=0, source_bytes=0) is None
    assert "per-tensor cap of 100" in edit.over_budget(budget, [101], freed=0, source_bytes=0)
    assert edit.over_budget(budget, [101], freed=0) is None  # the rule checked the cap already
    assert edit.over_budget(budget, [200], freed=0, source_bytes=200) is None  # derived from a 200-byte constant
    assert "total constant growth of 201 bytes" in edit.over_budget(budget, [201], freed=0, source_bytes=201)
    assert edit.over_budget(budget, [201], freed=1, source_bytes=201) is None  # freeing a byte makes room
    budget.charge([150], freed=0)
    assert "total constant growth of 201 bytes" in edit.over_budget(budget, [51], freed=0)  # what was charged counts


def test_extract_constant_to_initializer_keeps_a_graph_outputs_name():
    original = make_model(
        [helper.make_node("Constant", [], ["Y"], value=tensor("v", np.arange(3, dtype=np.float32)), name="c"),
         helper.make_node("Relu", ["X"], ["Z"], name="relu")],
        [value_info("X", shape=[3])], [value_info("Y", shape=[3]), value_info("Z", shape=[3])])
    optimized = onnxrefine.optimize(original, ["extract_constant_to_initializer"])
    assert [o.name for o in optimized.graph.output] == ["Y", "Z"]
    assert [i.name for i in optimized.graph.initializer] == ["Y"]
    feed = {"X": np.array([1.0, -1.0, 0.0], np.float32)}
    assert_bit_identical(run(original, feed), run(optimized, feed))
