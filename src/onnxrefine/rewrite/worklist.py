"""The rule driver's bookkeeping of what to offer again (rewrite/driver.py): per-graph worklists,
the nodes around an edit, and what changed between two looks at a model."""

from __future__ import annotations

from collections import deque

import onnx_ir as ir

from onnxrefine.ir import traversal
from onnxrefine.rewrite.pattern import Op, Opt


class Worklist:
    """The nodes of one graph waiting to be offered to the rules, each once, in the order queued."""

    def __init__(self, graph: ir.Graph, nodes):
        self.graph = graph
        self.queue: deque[ir.Node] = deque(nodes)
        self.queued = {id(node) for node in self.queue}

    def add(self, node: ir.Node) -> None:
        if id(node) not in self.queued:
            self.queue.append(node)
            self.queued.add(id(node))

    def pop(self) -> ir.Node:
        node = self.queue.popleft()
        self.queued.discard(id(node))
        return node


def around(touched: list[ir.Node], edited: list[ir.Value | None], reach: int) -> list[ir.Node]:
    """`touched`, then the producer of each edited value and the readers below it out to `reach`
    steps (in any graph: a subgraph's capture is a reader), each node once."""
    found: dict[int, ir.Node] = {id(node): node for node in touched}
    frontier: list[ir.Value] = []
    seen_values: set[int] = set()
    for value in edited:
        if value is None or id(value) in seen_values:
            continue
        seen_values.add(id(value))
        frontier.append(value)
        producer = value.producer()
        if producer is not None:
            found.setdefault(id(producer), producer)
    expanded: set[int] = set()
    for _ in range(reach):
        below: list[ir.Value] = []
        for value in frontier:
            for use in value.uses():
                reader = use.node
                if id(reader) not in expanded:
                    expanded.add(id(reader))
                    found.setdefault(id(reader), reader)
                    below.extend(reader.outputs)
        frontier = below
    return list(found.values())


def snapshot(model: ir.Model) -> dict[int, tuple]:
    """id(node) -> (node, its inputs, what a match reads of the node itself: where it is, its
    operator, the identity of its inputs, of their constants and of its attributes, which outputs
    are graph outputs)."""
    seen: dict[int, tuple] = {}
    for site in traversal.graphs(model):
        for node in site.graph:
            inputs = tuple(node.inputs)
            seen[id(node)] = (node, inputs, (
                id(site.graph), node.op_type, node.domain, tuple(map(id, inputs)),
                tuple(0 if v is None else id(v.const_value) for v in inputs),
                tuple(map(id, node.attributes.values())), tuple(v.is_graph_output() for v in node.outputs)))
    return seen


def changes(before: dict[int, tuple], after: dict[int, tuple]) -> tuple[list[ir.Node], list[ir.Value | None]]:
    """The nodes new or changed between two snapshots, and the values edited: those such nodes
    read and make, and those removed nodes read."""
    changed: list[ir.Node] = []
    edited: list[ir.Value | None] = []
    for key, (node, inputs, signature) in after.items():
        old = before.get(key)
        if old is None or old[0] is not node or old[2] != signature:
            changed.append(node)
            edited.extend(inputs)
            edited.extend(node.outputs)
    for key, (node, inputs, _) in before.items():
        new = after.get(key)
        if new is None or new[0] is not node:
            edited.extend(inputs)
    return changed, edited


def depth(pattern) -> int:
    """How many operator levels a pattern spans (its root counts one)."""
    if isinstance(pattern, Opt):
        return depth(pattern.inner)
    if isinstance(pattern, Op):
        return 1 + max((depth(p) for p in pattern.inputs), default=0)
    return 0
