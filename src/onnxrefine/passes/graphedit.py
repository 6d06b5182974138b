"""Graph edits shared by the graph-level passes (folding, shape folding, cleanup).

Each helper keeps the invariants the rule driver keeps: graph outputs keep their names, new names
come from the NameAllocator, new constants go through the constant budget, and function bodies
(which cannot hold initializers) get Constant nodes instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.opsets import STANDARD_DOMAINS, opset_version  # noqa: F401 - passes read graphedit.STANDARD_DOMAINS
from onnxrefine.passes.registry import PassContext
from onnxrefine.rewrite.log import node_label


def graphs(model: ir.Model) -> Iterator[tuple[ir.Graph, bool]]:
    """(graph, inside_a_function) for every graph holding nodes, outermost first."""
    yield model.graph, False
    for sub in model.graph.subgraphs():
        yield sub, False
    for function in model.functions.values():
        yield function.graph, True
        for sub in function.graph.subgraphs():
            yield sub, True


def subgraphs_of(node: ir.Node) -> list[ir.Graph]:
    found = []
    for attr in node.attributes.values():
        if attr.is_ref():
            continue
        if attr.type == ir.AttributeType.GRAPH:
            found.append(attr.value)
        elif attr.type == ir.AttributeType.GRAPHS:
            found.extend(attr.value)
    return found


def charge_constant(pctx: PassContext, nbytes: int, source_bytes: int, freed: int = 0) -> None:
    """Raise RewriteRefused when a new constant of `nbytes` does not fit the budget; else charge it."""
    reason = pctx.budget.tensor_refusal(nbytes, source_bytes)
    if reason is None:
        reason = pctx.budget.growth_refusal([nbytes], freed)
    if reason is not None:
        raise RewriteRefused("budget.graph_constant", reason)
    pctx.budget.charge([nbytes], freed)


def new_constant(pctx: PassContext, graph: ir.Graph, in_function: bool, array: np.ndarray, hint: str,
                 before: ir.Node | None) -> ir.Value:
    """A constant holding `array` exactly: an initializer of `graph`, or a Constant node in a
    function body (inserted before `before`, or appended)."""
    name = pctx.names.fresh(hint)
    array = np.require(array, requirements="C")  # ascontiguousarray would turn a scalar into [1]
    tensor = ir.Tensor(array, name=name)
    value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape), const_value=tensor)
    if in_function:
        node = ir.Node("", "Constant", [], [ir.AttrTensor("value", tensor)], outputs=[value],
                       name=pctx.names.fresh(f"{name}_constant"))
        if before is not None:
            graph.insert_before(before, node)
        else:
            graph.append(node)
    else:
        graph.register_initializer(value)
    return value


def replace_value(pctx: PassContext, graph: ir.Graph, old: ir.Value, new: ir.Value) -> None:
    """Point every reader of `old` (subgraph captures included) at `new`; a graph output keeps its
    name, which `new` takes over (new must be a fresh value of `graph`)."""
    if new.type is None:
        new.type = old.type
    if new.shape is None and old.shape is not None and old.is_graph_output():
        new.shape = old.shape  # the same tensor: the output keeps its declared shape
    if old.is_graph_output():
        output_name = old.name
        old.name = pctx.names.fresh(f"{output_name}_replaced")
        new.name = output_name  # onnx-ir re-keys an initializer under its new name
        for index, output in enumerate(graph.outputs):
            if output is old:
                graph.outputs[index] = new
    old.replace_all_uses_with(new)


def is_dead(node: ir.Node) -> bool:
    return not any(out.uses() or out.is_graph_output() for out in node.outputs)


def log_apply(pctx: PassContext, rule: str, kind: str, graph: ir.Graph, node: ir.Node, added=()) -> None:
    pctx.log.apply(rule=rule, kind=kind, graph=graph.name or "", root=node_label(node),
                   removed=[node_label(node)], added=list(added))


def log_refuse(pctx: PassContext, rule: str, graph: ir.Graph, node: ir.Node, reason: str | RewriteRefused,
               guard: str = "") -> None:
    """Log a refusal: a caught RewriteRefused (its guard id recorded), or a reason and a literal `guard`."""
    if isinstance(reason, RewriteRefused):
        reason, guard = str(reason), reason.guard
    pctx.log.refuse(rule, graph.name or "", node_label(node), reason, guard)


def opset_of(model: ir.Model, graph: ir.Graph, domain: str = "") -> int:
    return opset_version(graph.opset_imports, model.opset_imports, domain)
