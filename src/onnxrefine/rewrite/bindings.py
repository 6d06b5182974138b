"""Attribute references bound per call site, for a rewrite inside a model-local function's body.

A body node may refer to the calling node's attribute (`Transpose(perm=@perm)`): its value is
each caller's. The driver (driver.py) does not guess it: for a match whose nodes carry references,
it rewrites the match once per call site with every reference of the body bound to that call's
value (`bound`), as ONNX defines it: the call's attribute, else the function's default, else the
attribute is absent. The rewrite is applied only when every call site gives the same replacement
(`structure`), each certified at its own call; otherwise the function is not rewritten. A call
whose attribute is itself a reference (a call inside another function) cannot be bound: the match
is refused as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import onnx_ir as ir

from onnxrefine.ir import traversal

MAX_CALLS = 8  # call sites a match is rewritten at, one by one


def call_bindings(model: ir.Model, function: ir.Function) -> list[tuple[ir.Node, dict]] | str:
    """(call, {reference name: ir.Attr or None for absent}) for each call of `function`; a reason
    (str) where they cannot be bound."""
    identifier = function.identifier()
    calls = [node for site in traversal.graphs(model) for node in site.graph if node.op_identifier() == identifier]
    if not calls:
        return "no call of the function binds them"
    if len(calls) > MAX_CALLS:
        return f"the function has {len(calls)} call sites, more than {MAX_CALLS} to bind them at"
    references = [found for node in function.graph for found in node.attributes.values() if found.is_ref()]
    if any(found.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for found in references):
        # a caller's graph would then sit in two nodes at once
        return "a graph attribute is not bound"
    wanted = {found.ref_attr_name for found in references}
    found = []
    for call in calls:
        binding = {}
        for name in sorted(wanted):
            given = call.attributes.get(name)
            if given is None:
                default = function.attributes.get(name)
                given = default if default is not None and default.type != ir.AttributeType.UNDEFINED else None
            if given is not None and given.is_ref():
                return f"a call passes '{name}' on from its own caller"
            binding[name] = given
        found.append((call, binding))
    return found


@contextmanager
def bound(function: ir.Function, binding: dict) -> Iterator[None]:
    """Every reference of the function body's nodes replaced by its value in `binding` (absent:
    removed) for the duration; the references are put back after."""
    saved = []
    for node in function.graph:
        for name, found in list(node.attributes.items()):
            if not found.is_ref():
                continue
            saved.append((node, name, found))
            value = binding.get(found.ref_attr_name)
            if value is None:
                del node.attributes[name]
            else:
                node.attributes[name] = ir.Attr(name, value.type, value.value)
    try:
        yield
    finally:
        for node, name, found in saved:
            node.attributes[name] = found


def structure(replacement, pending_constants) -> tuple:
    """What a replacement is, independent of its fresh names: each new node's operator, its
    attributes, where its inputs come from (an outside value, a new constant's bytes or an earlier
    new node's output), and which value replaces each matched output. Two call sites giving equal
    structures give the same rewrite."""
    made: dict[int, tuple] = {}
    for index, pending in enumerate(pending_constants):
        array = pending.array
        made[id(pending.value)] = ("constant", array.dtype.str, array.shape, array.tobytes())
    nodes = []
    for position, node in enumerate(replacement.nodes):
        inputs = tuple(None if v is None else made.get(id(v), ("value", id(v))) for v in node.inputs)
        attributes = tuple(sorted((name, found.type.value, _plain(found.value)) for name, found in node.attributes.items()))
        nodes.append((node.domain, node.op_type, node.overload, inputs, attributes, len(node.outputs)))
        for index, out in enumerate(node.outputs):
            made[id(out)] = ("output", position, index)
    outputs = tuple((id(old), made.get(id(new), ("value", id(new)))) for old, new in replacement.outputs.items())
    return tuple(nodes), outputs, tuple(id(n) for n in replacement.also_removed)


def _plain(value):
    """An attribute's value in a comparable form (a tensor by its bytes; a graph by identity)."""
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, ir.TensorProtocol):
        return ("tensor", value.dtype.value, tuple(value.shape), value.tobytes())
    if isinstance(value, (int, float, str, bytes)) or value is None:
        return value
    return ("object", id(value))
