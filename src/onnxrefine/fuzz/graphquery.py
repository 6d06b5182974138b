"""Questions about a model's graph that the generator's tests and the campaign ask: which ops it
has, whether a chain of ops is connected, and the structural patterns cleanup passes look for."""

from __future__ import annotations

from collections import Counter

import onnx


def graphs(graph: onnx.GraphProto):
    """The graph and every branch graph nested in it."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graphs(attr.g)


def all_op_types(graph: onnx.GraphProto) -> list[str]:
    return [node.op_type for g in graphs(graph) for node in g.node]


def has_chain(model: onnx.ModelProto, chain: tuple[str, ...]) -> bool:
    """Whether nodes with these op types exist, each feeding the next."""
    if not chain:
        return True
    for graph in graphs(model.graph):
        consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                consumers.setdefault(name, []).append(node)

        def extends(node: onnx.NodeProto, rest: tuple[str, ...]) -> bool:
            if not rest:
                return True
            return any(nxt.op_type == rest[0] and extends(nxt, rest[1:])
                       for out in node.output for nxt in consumers.get(out, []))
        if any(node.op_type == chain[0] and extends(node, chain[1:]) for node in graph.node):
            return True
    return False


def _used_names(model: onnx.ModelProto) -> set[str]:
    used = {o.name for o in model.graph.output}
    for graph in graphs(model.graph):
        used.update(o.name for o in graph.output)
        for node in graph.node:
            used.update(node.input)
    return used


def has_unused_initializer(model: onnx.ModelProto) -> bool:
    used = _used_names(model)
    return any(t.name not in used for g in graphs(model.graph) for t in g.initializer)


def has_duplicate_initializers(model: onnx.ModelProto) -> bool:
    keys = Counter((t.data_type, tuple(t.dims), onnx.numpy_helper.to_array(t).tobytes())
                   for t in model.graph.initializer)
    return any(count > 1 for count in keys.values())


def has_common_subexpression(model: onnx.ModelProto) -> bool:
    keys = Counter(
        (n.op_type, tuple(n.input), tuple(a.SerializeToString() for a in n.attribute))
        for n in model.graph.node if n.op_type != "Constant")
    return any(count > 1 for count in keys.values())


def has_dead_node(model: onnx.ModelProto) -> bool:
    used = _used_names(model)
    return any(all(out not in used for out in node.output) for node in model.graph.node)


def has_shared_matmul_input(model: onnx.ModelProto, count: int = 3) -> bool:
    inputs = Counter(n.input[0] for n in model.graph.node if n.op_type == "MatMul")
    return any(c >= count for c in inputs.values())


def has_constant_condition_if(model: onnx.ModelProto) -> bool:
    constants = {t.name for t in model.graph.initializer}
    constants.update(n.output[0] for n in model.graph.node if n.op_type == "Constant")
    return any(n.op_type == "If" and n.input[0] in constants for n in model.graph.node)
