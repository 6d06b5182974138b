"""The one walk over the graphs of a model: the main graph, the subgraphs of If/Loop/Scan (and any
other graph attribute, nested to any depth) and the bodies of model-local functions.

Order (fixed; callers and tests rely on it):
1. the main graph, then its subgraphs depth first: nodes in graph order, a node's graph attributes
   in declaration order, the graphs of a GRAPHS attribute in list order, each subgraph before the
   subgraphs nested in it (pre-order);
2. then each function in `model.functions` order: its body, then the body's subgraphs the same way.
So a graph always comes after the graph enclosing it. Reference attributes (`is_ref()`) hold no
graph of their own and are skipped.

Each graph comes as a `GraphSite` saying where it lives, which is what an edit needs to keep the
model valid: a graph anywhere inside a function (its body or a subgraph nested in it) gets new
constants as Constant nodes, not initializers (`ir/edit.py`).

The walk reads the model as it is when each graph is reached: a caller that edits graphs while
walking takes `list(graphs(model))` first (every caller does).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import onnx_ir as ir


@dataclass(frozen=True, eq=False)
class GraphSite:
    """One graph of the model and where it lives."""

    graph: ir.Graph
    # The main graph, a function (for its body: what the rule driver scopes a rewrite to, and
    # whose opset imports apply) or the subgraph itself.
    owner: ir.Graph | ir.Function
    # The function this graph lies in, body or nested subgraph; None in the main graph's tree.
    function: ir.Function | None = None
    # The graph that encloses this one and the node holding it (None for the main graph and
    # function bodies).
    parent: ir.Graph | None = None
    node: ir.Node | None = None

    @property
    def in_function(self) -> bool:
        """True anywhere inside a function: new constants there are Constant nodes."""
        return self.function is not None

    @property
    def is_body(self) -> bool:
        """The main graph or a function body (a graph no node encloses)."""
        return self.parent is None


_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def subgraphs_of(node: ir.Node) -> list[ir.Graph]:
    """The graphs `node` holds directly (GRAPH and GRAPHS attributes, in declaration order)."""
    found = []
    for attr in node.attributes.values():
        kind = attr.type  # checked before is_ref(): this runs for every node of every walk
        if kind is _GRAPH:
            if not attr.is_ref():
                found.append(attr.value)
        elif kind is _GRAPHS and not attr.is_ref():
            found.extend(attr.value)
    return found


def bodies(model: ir.Model) -> Iterator[GraphSite]:
    """The main graph, then each function body: the graphs no node encloses, for passes that
    recurse into subgraphs themselves because they carry scope downwards (dead code, CSE, If
    inlining)."""
    yield GraphSite(model.graph, model.graph)
    for function in model.functions.values():
        yield GraphSite(function.graph, function, function)


def nested(site: GraphSite) -> Iterator[GraphSite]:
    """The subgraphs inside `site.graph`, depth first (pre-order), not `site` itself."""
    for node in site.graph:
        for sub in subgraphs_of(node):
            inner = GraphSite(sub, sub, site.function, site.graph, node)
            yield inner
            yield from nested(inner)


def graphs(model: ir.Model) -> Iterator[GraphSite]:
    """Every graph of the model in the order documented above."""
    for body in bodies(model):
        yield body
        yield from nested(body)
