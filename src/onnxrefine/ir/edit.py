"""The one graph-edit API: every rewrite, rule or graph-level pass, edits a graph through these, so
each of the README's promises is kept in one place:
- a new constant takes the form its graph allows: an initializer, or a Constant node anywhere
  inside a function (`place_constant`; ONNX functions hold no initializers, and a subgraph nested
  in a function follows its function so the whole body stays in one form);
- a replaced graph output keeps its name (`replace_value`), and never becomes an alias of an input,
  another output, an initializer or an outer-scope value (`refuse_output_alias`);
- a value replaced by another passes on its declared type and shape to it, but never a shape to a
  graph input (an input's declared shape is what onnxruntime checks the caller's feed against);
- nodes left unread are removed with the constants only they read (`remove_unread`, `release`);
- new constants are checked against the constant budget, crediting the bytes the edit frees
  (`freed_bytes`, `over_budget`).
Names always come from the model's NameAllocator (ir/names.py). The structural verbs at the end
(`insert_nodes`, `remove_nodes`, `add_initializer`, `drop_initializer`, the graph's ports) are the
only way code under passes/ and rewrite/ changes a graph's node list, initializers, inputs or
outputs: tests/test_layers.py holds that no module there calls onnx-ir's graph mutators itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator

# --- constants ----------------------------------------------------------------------------------


def constant_value(names: NameAllocator, array: np.ndarray, hint: str) -> ir.Value:
    """A fresh value holding `array` exactly, not yet in any graph (see `place_constant`)."""
    name = names.fresh(hint)
    array = np.require(array, requirements="C")  # ascontiguousarray would turn a scalar into [1]
    tensor = ir.Tensor(array, name=name)
    return ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape), const_value=tensor)


def place_constant(names: NameAllocator, graph: ir.Graph, in_function: bool, value: ir.Value,
                   before: ir.Node | None = None) -> ir.Node | None:
    """Put the constant `value` (no producer, in no graph) into `graph`: as an initializer, or
    inside a function as a Constant node inserted before `before` (appended when None), which is
    returned."""
    if not in_function:
        add_initializer(graph, value)
        return None
    node = ir.Node("", "Constant", [], [ir.AttrTensor("value", value.const_value)], outputs=[value],
                   name=names.fresh(f"{value.name}_constant"))
    insert_nodes(graph, [node], before)
    return node


def new_constant(names: NameAllocator, graph: ir.Graph, in_function: bool, array: np.ndarray, hint: str,
                 before: ir.Node | None = None) -> ir.Value:
    """A constant holding `array` exactly, placed in `graph` (`constant_value` + `place_constant`)."""
    value = constant_value(names, array, hint)
    place_constant(names, graph, in_function, value, before)
    return value


# --- replacing values ---------------------------------------------------------------------------


def refuse_output_alias(old: ir.Value, new: ir.Value, graph: ir.Graph, fresh: bool) -> None:
    """Raise RewriteRefused when `new` cannot take over the graph output `old`'s name: it is a
    graph input, output or initializer, an outer-scope value, or (unless `fresh`, a constant made
    for this edit) a value nothing in the graph computes."""
    if not old.is_graph_output():
        return
    aliasing = new.is_graph_input() or new.is_graph_output() or new.is_initializer()
    if aliasing or (new.producer() is None and not fresh):
        raise RewriteRefused("driver.output_alias",
                             f"graph output '{old.name}' would become an alias of '{new.name}'")
    producer = new.producer()
    if producer is not None and producer.graph is not None and producer.graph is not graph:
        # Renaming it to the output's name would rename a value of the enclosing graph.
        raise RewriteRefused("driver.output_outer_scope",
                             f"graph output '{old.name}' would become the outer-scope value '{new.name}'")


def refuse_capture_beside_shape(old: ir.Value, new: ir.Value) -> None:
    """Raise RewriteRefused when the edit would make a subgraph capture a value that a Shape in the
    value's own graph reads (either side read so before, the two together only after it).
    onnxruntime (1.32, at every optimization level above none) folds such a Shape to a constant and
    drops the node making the value although a branch of a constant-condition If still reads it:
    the model then fails to load ("Node input ... is not a graph input, initializer, or output of a
    previous node")."""
    producer = new.producer()
    if producer is None or producer.graph is None:
        return
    home = producer.graph

    def captured(value: ir.Value) -> bool:
        return any(use.node.graph is not home for use in value.uses())

    def shaped(value: ir.Value) -> bool:
        return any(use.node.op_type == "Shape" and use.node.graph is home for use in value.uses())

    if captured(new) and shaped(new):
        return  # so already: the edit makes nothing new
    if (captured(old) or captured(new)) and (shaped(old) or shaped(new)):
        raise RewriteRefused("driver.capture_beside_shape",
                             f"a subgraph would capture '{new.name}', which a Shape reads: onnxruntime then "
                             "drops the node making it and cannot load the model")


def replace_value(names: NameAllocator, graph: ir.Graph, old: ir.Value, new: ir.Value) -> list[ir.Node]:
    """Point every reader of `old` (subgraph captures included) at `new`; returns those readers.

    A graph output of `graph` keeps its name, which `new` takes over (the caller has checked that
    it may: `refuse_output_alias`). The replacement computes the same tensor, so what was declared
    about `old` still holds for `new`: its type always, its shape where `new` has none, unless `new`
    is a graph input, whose declaration is a contract of its own (an untrusted value_info shape
    copied onto a shapeless input made onnxruntime reject feeds the original accepted).
    """
    if new.type is None:
        new.type = old.type
    if new.shape is None and old.shape is not None and not new.is_graph_input():
        new.shape = old.shape
    if old.is_graph_output():
        output_name = old.name
        old.name = names.fresh(f"{output_name}_replaced")
        new.name = output_name  # onnx-ir re-keys an initializer under its new name
        for index, output in enumerate(graph.outputs):
            if output is old:
                set_output(graph, index, new)
    readers = [use.node for use in old.uses()]
    old.replace_all_uses_with(new)
    return readers


def pass_on_name(old: ir.Value, new: ir.Value) -> None:
    """`new`, made by this edit to stand for `old` (whose producer the edit removed), takes `old`'s
    name, so the optimized model still calls that value what the original did (calibration tables
    and name-keyed comparisons read it by name). Graph outputs are handled by `replace_value`."""
    if old.name and not old.is_graph_output() and not new.is_graph_output() and not new.is_graph_input():
        new.name = old.name  # onnx-ir re-keys an initializer under its new name


# --- removing what is left unread ---------------------------------------------------------------


def use_count(value: ir.Value) -> int:
    """len(value.uses()) without the copy. The one read of an onnx-ir private attribute, for want
    of a public one: onnx-ir (0.1.12 to 1.1 at least) has no use count, and its public uses() and
    consumers() copy a value's whole use list on every call, so asking about a constant read by
    every node of a long chain made each rewrite O(nodes) and the run quadratic
    (bench/engine_scaling.py --big-chain). Feature-checked: where `_uses` is not the dict it is
    today, the public uses() answers."""
    uses = getattr(value, "_uses", None)
    return len(uses) if isinstance(uses, dict) else len(value.uses())


def is_unread(node: ir.Node) -> bool:
    """No node reads any output of `node` and none is a graph output."""
    return not any(use_count(out) or out.is_graph_output() for out in node.outputs)


def release(value: ir.Value) -> Iterable[ir.Node]:
    """Drop an initializer or Constant that lost its last reader; return nodes worth revisiting
    (the producer of a computed value that lost its last reader)."""
    if use_count(value) or value.is_graph_output() or value.is_graph_input():
        return ()
    producer = value.producer()
    if producer is None:
        if value.is_initializer() and value.graph is not None:
            drop_initializer(value.graph, value.name)
        return ()
    if producer.op_type == "Constant" and producer.graph is not None:
        remove_nodes(producer.graph, [producer])
        return ()
    return (producer,)


def remove_unread(graph: ir.Graph, nodes: Iterable[ir.Node]) -> tuple[list[ir.Node], list[ir.Node]]:
    """Remove each of `nodes` (in the order given: readers before producers) that nothing reads
    any more, releasing the constants only it read. Returns (removed nodes, nodes worth revisiting)."""
    removed: list[ir.Node] = []
    revisit: list[ir.Node] = []
    for node in nodes:
        if not is_unread(node):
            continue
        inputs = list(dict.fromkeys(v for v in node.inputs if v is not None))
        remove_nodes(graph, [node])
        removed.append(node)
        for value in inputs:
            revisit.extend(release(value))
    return removed, revisit


# --- the constant budget ------------------------------------------------------------------------


def freed_bytes(nodes: Sequence[ir.Node]) -> int:
    """Bytes of initializers that only `nodes` read (gone once they are removed)."""
    inside = {id(n) for n in nodes}
    slots = sum(len(n.inputs) for n in nodes)
    seen: set[int] = set()
    freed = 0
    for node in nodes:
        for value in node.inputs:
            if value is None or id(value) in seen or not value.is_initializer() or value.const_value is None:
                continue
            seen.add(id(value))
            if value.is_graph_input() or value.is_graph_output():
                continue
            if use_count(value) <= slots and all(id(use.node) in inside for use in value.uses()):
                freed += value.const_value.nbytes
    return freed


def over_budget(budget: ConstantBudget, new_sizes: Sequence[int], freed: int,
                source_bytes: int | None = None) -> str | None:
    """Why new constants of `new_sizes` bytes do not fit the budget while the edit frees `freed`
    bytes (None: they fit); with `source_bytes` (the largest constant they derive from) each is
    also held to the per-tensor cap (rules check that when they make the constant: RewriteContext).
    The caller raises, under its own guard id."""
    reason = None
    if source_bytes is not None:
        reason = next((r for r in (budget.tensor_refusal(n, source_bytes) for n in new_sizes) if r), None)
    if reason is None:
        reason = budget.growth_refusal(list(new_sizes), freed)
    return reason


# --- structural verbs: nodes, initializers, the graph's ports ------------------------------------


def insert_nodes(graph: ir.Graph, nodes: Sequence[ir.Node], before: ir.Node | None = None) -> None:
    """Put `nodes` (in their order) into `graph` before `before`, or at its end when None."""
    if before is not None:
        graph.insert_before(before, nodes)
    else:
        graph.extend(nodes)


def remove_nodes(graph: ir.Graph, nodes: Sequence[ir.Node], *, safe: bool = True) -> None:
    """Take `nodes` out of `graph`. `safe`: onnx-ir checks that nothing outside them still reads
    their outputs and detaches their inputs; unsafe keeps their connections, for nodes that move to
    another graph or that go with everything reading them."""
    graph.remove(nodes, safe=safe)


def add_initializer(graph: ir.Graph, value: ir.Value) -> None:
    """Make `value` (holding its const_value, in no graph) an initializer of `graph`."""
    graph.register_initializer(value)


def drop_initializer(graph: ir.Graph, name: str) -> ir.Value | None:
    """Take the initializer `name` out of `graph` (None where there is none); its readers, if any,
    keep reading the value."""
    return graph.initializers.pop(name, None)


def set_outputs(graph: ir.Graph, values: Iterable[ir.Value]) -> None:
    """`values`, in order, become the outputs of `graph`."""
    values = list(values)  # may be computed from the outputs being replaced
    graph.outputs.clear()
    graph.outputs.extend(values)


def set_output(graph: ir.Graph, index: int, value: ir.Value) -> None:
    graph.outputs[index] = value


def add_input(graph: ir.Graph, value: ir.Value) -> None:
    """`value` (computed by no node) becomes the last input of `graph`."""
    graph.inputs.append(value)


def set_input(graph: ir.Graph, index: int, value: ir.Value) -> None:
    graph.inputs[index] = value


def remove_input(graph: ir.Graph, index: int) -> ir.Value:
    return graph.inputs.pop(index)
