"""The one attribute reader: passes, fact rules, certificates and the verification plan read a
node's attributes here, never through `node.attributes` directly.

Inside a model-local function an attribute may be a reference to the calling node's attribute
(`Transpose(perm=@perm)`): its value differs per call site and is unknown in the body. Reading it
as absent would substitute the operator's default (Transpose: reversed axes) for the caller's
value, so a reference is never read as absent or as a default: `attr` raises RewriteRefused
(guard `attr.reference`). A rule that reads one therefore refuses; the fact oracle turns the
refusal into "unknown" (ir/facts/oracle.py); a certificate is not made (verify/certificate.py).
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused


def attr(node: ir.Node, name: str, default=None):
    """The value of attribute `name` of `node` (onnx-ir's typed value: int, float, str, tuple of
    ints, tensor, graph, ...), `default` when the node does not carry it; RewriteRefused
    (`attr.reference`) when it is a reference to an enclosing function's attribute."""
    found = node.attributes.get(name)
    if found is None:
        return default
    return _value(found, node.op_type)


def text_attr(node: ir.Node, name: str, default: str) -> str:
    """A string attribute as text (onnx-ir gives str; a hand-built attribute may hold bytes)."""
    value = attr(node, name, default)
    return value.decode() if isinstance(value, bytes) else value


def references(node: ir.Node) -> list[str]:
    """The names of `node`'s attributes that are references (empty outside function bodies)."""
    return [name for name, found in node.attributes.items() if found.is_ref()]


def proto_attr(node: onnx.NodeProto, name: str, default=None):
    """`attr` for a NodeProto (the verification plan reads the original's graph as protobuf):
    the attribute deserialized by onnx-ir, read by the same rule."""
    for found in node.attribute:
        if found.name == name:
            return _value(ir.serde.deserialize_attribute(found), node.op_type)
    return default


def _value(found: ir.Attr, op_type: str):
    if found.is_ref():
        raise RewriteRefused("attr.reference", f"{op_type} attribute '{found.name}' refers to the calling node's "
                             f"'{found.ref_attr_name}': its value is not known inside the function body")
    return found.value
