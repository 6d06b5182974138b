"""ir/traversal.py: the one walk over every graph of a model, and the walkers built on it reaching
a subgraph nested in a function (an If inside a Loop inside a function body)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from helpers import run
from nested_models import ORDER, feeds, nested_model
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.ir import io, traversal, wire
from onnxrefine.ir.names import NameAllocator
from onnxrefine.rewrite.driver import RewriteDriver
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import Rule


def _label(site: traversal.GraphSite) -> str:
    return site.graph.name or site.owner.name  # a function body's graph is unnamed: its function's


def test_graphs_come_outermost_first_in_the_documented_order():
    model = ir.from_proto(nested_model())
    sites = list(traversal.graphs(model))
    assert [_label(s) for s in sites] == ORDER
    by_label = {_label(s): s for s in sites}
    functions = {f.name: f for f in model.functions.values()}
    # Where each graph lives: the enclosing graph, the node holding it, the function around it.
    assert by_label["test"].graph is model.graph and by_label["test"].is_body and not by_label["test"].in_function
    assert by_label["then_main"].parent is model.graph and by_label["then_main"].node.name == "if_main"
    assert not by_label["then_main"].in_function and by_label["then_main"].owner is by_label["then_main"].graph
    f_body = by_label["f"]
    assert f_body.owner is functions["f"] and f_body.graph is functions["f"].graph and f_body.is_body
    loop = by_label["loop_fn"]
    assert loop.parent is f_body.graph and loop.node.name == "loop" and loop.function is functions["f"]
    then_fn = by_label["then_fn"]
    assert then_fn.parent is loop.graph and then_fn.node.name == "if_fn"
    assert then_fn.in_function and then_fn.function is functions["f"] and then_fn.owner is then_fn.graph
    assert not then_fn.is_body
    # Each graph after the graph enclosing it.
    position = {id(s.graph): i for i, s in enumerate(sites)}
    assert all(position[id(s.parent)] < position[id(s.graph)] for s in sites if s.parent is not None)


def test_bodies_are_the_main_graph_and_each_function_body():
    model = ir.from_proto(nested_model())
    assert [(_label(s), s.in_function) for s in traversal.bodies(model)] == [("test", False), ("f", True), ("g", True)]


def test_subgraphs_of_keeps_declaration_order_and_skips_reference_attributes():
    graphs = [ir.Graph([], [], nodes=[], name=f"g{i}") for i in range(3)]
    node = ir.Node("", "Custom", [], [ir.AttrGraphs("branches", graphs[:2]), ir.AttrGraph("body", graphs[2]),
                                      ir.RefAttr("ref", "outer_graph", ir.AttributeType.GRAPH)])
    assert [g.name for g in traversal.subgraphs_of(node)] == ["g0", "g1", "g2"]


def test_names_are_reserved_inside_a_subgraph_of_a_function():
    names = NameAllocator(ir.from_proto(nested_model()))
    for taken in ("t_fn", "add_fn", "k_fn", "acc", "f", "g", "then_fn", "loop_fn"):
        assert names.is_taken(taken), taken
    assert names.fresh("t_fn") != "t_fn"


def test_tensor_bytes_counts_initializers_of_every_graph():
    model = ir.from_proto(nested_model(fn_subgraph_initializer=True))
    # k_main (1 float, in an If of the main graph) + init_fn (3 floats, in an If in a function's Loop)
    assert io.tensor_bytes(model) == 4 + 12


def test_external_tensors_in_a_function_subgraph_are_embedded(tmp_path):
    model = ir.from_proto(nested_model(fn_subgraph_initializer=True))
    (tmp_path / "w.bin").write_bytes(np.arange(3, dtype=np.float32).tobytes())
    then_fn = next(s.graph for s in traversal.graphs(model) if s.graph.name == "then_fn")
    value = then_fn.initializers["init_fn"]
    value.const_value = ir.ExternalTensor("w.bin", 0, 12, ir.DataType.FLOAT, shape=ir.Shape([3]), name="init_fn",
                                          base_dir=str(tmp_path))
    main_value = next(s.graph for s in traversal.graphs(model) if s.graph.name == "then_main").initializers["k_main"]
    wire.embed_external_tensors(model, main_graph=False)
    assert not isinstance(value.const_value, ir.ExternalTensor)
    assert value.const_value.numpy().tolist() == [0.0, 1.0, 2.0]
    assert not isinstance(main_value.const_value, ir.ExternalTensor)


def test_inline_functions_reaches_a_call_inside_a_function_subgraph():
    original = nested_model()
    optimized = onnxrefine.optimize(original, ["inline_functions"])
    model = ir.from_proto(optimized)
    assert not model.functions or all(
        node.domain != "local" for site in traversal.graphs(model) for node in site.graph)
    for feed in feeds():
        assert_bit_identical(run(original, feed), run(optimized, feed))


def test_the_rule_driver_offers_nodes_of_every_graph_in_traversal_order():
    seen = []

    def record(match, ctx):
        seen.append((match["id"].graph.name or ctx.owner.name, ctx.owner))
        return None

    model = ir.from_proto(nested_model())
    RewriteDriver(model, [Rule("record", Op("Identity", Var("x"), name="id"), record)]).run()
    # Identity nodes: else_main, loop_fn (the loop condition), else_fn; each offered once: nothing
    # was rewritten, so nothing goes back on a worklist.
    assert [label for label, _ in seen] == ["else_main", "loop_fn", "else_fn"]
    assert all(owner is not None and not isinstance(owner, ir.Function) for _, owner in seen)
