"""Structural checks on a ModelProto before it enters the IR.

onnx-ir accepts some invalid models with only a log warning (an undefined input becomes a
dangling value; a cycle becomes a forward reference), and silently drops sparse initializers.
These checks turn each of those into a clear error, or a lossless fix.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from onnxrefine.errors import BadInputError


def subgraphs_of(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _all_graph_protos(proto: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    stack = [proto.graph]
    for function in proto.functions:
        for node in function.node:
            stack.extend(subgraphs_of(node))
    while stack:
        graph = stack.pop()
        yield graph
        for node in graph.node:
            stack.extend(subgraphs_of(node))


def _all_tensor_protos(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    def from_nodes(nodes):
        for node in nodes:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors

    for graph in _all_graph_protos(proto):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        yield from from_nodes(graph.node)
    for function in proto.functions:
        yield from from_nodes(function.node)


def external_locations(proto: onnx.ModelProto) -> list[str]:
    locations = []
    for tensor in _all_tensor_protos(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in tensor.external_data}
            locations.append(entries.get("location", ""))
    return locations


def has_nested_sparse_initializers(proto: onnx.ModelProto) -> bool:
    return any(graph.sparse_initializer for graph in _all_graph_protos(proto))


def sparse_to_dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """The dense array a SparseTensorProto stands for (linear or per-dimension indices)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def densify_sparse_initializers(proto: onnx.ModelProto) -> None:
    """Replace sparse initializers by equal dense ones, in place (onnx-ir would drop them)."""
    for graph in _all_graph_protos(proto):
        for sparse in graph.sparse_initializer:
            graph.initializer.append(numpy_helper.from_array(sparse_to_dense(sparse), sparse.values.name))
        del graph.sparse_initializer[:]


def check_graph_structure(proto: onnx.ModelProto) -> None:
    """Refuse undefined inputs and cycles, in the main graph, every subgraph and every function."""
    _check_scope(proto.graph, frozenset(), "graph")
    for function in proto.functions:
        names = frozenset(function.input)
        _check_nodes(function.node, names, f"function '{function.name}'", list(function.output), names)


def _check_scope(graph: onnx.GraphProto, outer: frozenset[str], where: str) -> None:
    local = {i.name for i in graph.input}
    local.update(t.name for t in graph.initializer)
    local.update(s.values.name for s in graph.sparse_initializer)
    _check_nodes(graph.node, frozenset(outer | local), f"{where} '{graph.name}'", [o.name for o in graph.output],
                 frozenset(local))


def _label(node: onnx.NodeProto) -> str:
    return node.name or node.op_type


def _check_nodes(nodes, defined: frozenset[str], where: str, outputs: list[str],
                 local: frozenset[str] = frozenset()) -> None:
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if not name:
                continue
            # One writer per name (SSA): a second one would make every reader ambiguous.
            if name in producer:
                first = nodes[producer[name]]
                raise BadInputError(f"{where}: tensor '{name}' is written by two nodes "
                                    f"('{_label(first)}' and '{_label(node)}')")
            if name in local:
                raise BadInputError(f"{where}: node '{_label(node)}' ({node.op_type}) writes '{name}', "
                                    "which is already a graph input or initializer")
            producer[name] = index
    visible = defined | frozenset(producer)
    indegree = [0] * len(nodes)
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(nodes):
        for name in _reads(node):
            if name not in visible:
                label = node.name or node.op_type
                raise BadInputError(f"{where}: node '{label}' ({node.op_type}) reads '{name}', which is never defined")
            source = producer.get(name)
            if source is not None and name not in defined:
                indegree[index] += 1
                readers.setdefault(source, []).append(index)
        for subgraph in subgraphs_of(node):
            _check_scope(subgraph, visible, "subgraph")
    for name in outputs:
        if name not in visible:
            raise BadInputError(f"{where}: output '{name}' is never defined")
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    seen = 0
    while queue:
        current = queue.popleft()
        seen += 1
        for reader in readers.get(current, ()):
            indegree[reader] -= 1
            if indegree[reader] == 0:
                queue.append(reader)
    if seen != len(nodes):
        stuck = next(nodes[i] for i, d in enumerate(indegree) if d > 0)
        raise BadInputError(f"{where}: the graph has a cycle (through node '{stuck.name or stuck.op_type}')")


def captured_names(node: onnx.NodeProto) -> set[str]:
    """The enclosing scopes' names a node's subgraphs read (none for a node without subgraphs)."""
    captured: set[str] = set()
    for subgraph in subgraphs_of(node):
        captured |= _captures(subgraph)
    return captured


def _reads(node: onnx.NodeProto) -> Iterator[str]:
    """Names a node reads: its inputs and the outer-scope names its subgraphs capture."""
    yield from (name for name in node.input if name)
    for subgraph in subgraphs_of(node):
        yield from _captures(subgraph)


def _captures(graph: onnx.GraphProto) -> set[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local |= {s.values.name for s in graph.sparse_initializer}
    captured: set[str] = set()
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                captured.add(name)
        for subgraph in subgraphs_of(node):
            captured |= {n for n in _captures(subgraph) if n not in local}
        local.update(node.output)
    for output in graph.output:
        if output.name not in local:
            captured.add(output.name)
    return captured
