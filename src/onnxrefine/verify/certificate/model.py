"""Building a certificate's two-sided model: its boundary, canonical names and cache key.

Split from `certifier.py` (which runs and judges the model): `boundary` finds the values both
sides read from outside (constants, activations with a concrete shape, and the producers pulled in
to compute integer ones), `cache_key` digests everything the outcome depends on, `build` writes the
ONNX model with canonical names so that certificates of the same structure share one session.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.facts import Sym
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.rewrite.rule import EXACT, CertificateRequest
from onnxrefine.verify.certificate.bound import CertificateSkip as _Skip
from onnxrefine.verify.certificate.inputs import NARROW_FLOATS, SUPPORTED_DTYPES

# Constants are fed at run time rather than embedded (no copy, and certificates of the same
# structure share one onnxruntime session); other dtypes are embedded.
EMBED_BYTES = 0
SYM_DIM = 3  # what a dimension nobody can tell us counts as
MAX_CONTEXT = 16  # producer nodes pulled in to compute integer boundary values
CACHE_CONSTANT_BYTES = 1 << 16  # certificates whose constants are this small are cached by content
# Domains a certificate model may hold: the standard ones, and onnxruntime's own contrib operators
# (its CPU provider registers kernels for them; an operator it has none for fails to load, and the
# certificate is skipped).
RUNTIME_DOMAINS = (*STANDARD_DOMAINS, "com.microsoft")


@dataclass
class Side:
    """One boundary value: a constant (array) or an activation (dtype and concrete shape)."""

    value: ir.Value
    name: str
    array: np.ndarray | None = None
    dtype: np.dtype | None = None
    shape: tuple | None = None


def boundary(request: CertificateRequest, oracle=None) -> tuple[list[Side], list[ir.Node]]:
    """The boundary values, and the context nodes pulled in to compute integer ones; their types
    and shapes from `oracle` (default: the rewrite's trusted facts).

    An integer value the matched subgraph reads (a shape, a dim) must agree with the data it
    describes: where nothing vouches for its value, its producers (shape arithmetic back to
    the activations, at most MAX_CONTEXT nodes) join the certificate model, so it is computed
    from the same adversarial data instead of being made up.
    """
    oracle = oracle or request.context.facts
    body = list(request.matched) + list(request.replacement)
    context: list[ir.Node] = []
    known: dict[int, Side] = {}  # each value's side, once: the loop revisits them as context grows
    while True:
        produced = {id(v) for n in body + context for v in n.outputs}
        produced |= {id(v) for v in request.new_constants}
        values: dict[int, ir.Value] = {}
        for node in body + context:
            for value in node.inputs:
                if value is not None and id(value) not in produced:
                    values.setdefault(id(value), value)
        for _, new in request.outputs:  # a value forwarded as it is (no replacement node)
            if id(new) not in produced:
                values.setdefault(id(new), new)
        sides, grow = [], []
        for value in values.values():
            side = known.get(id(value))
            if side is None:
                side = known[id(value)] = boundary_side(value, oracle)
            producer = value.producer()
            if (side.array is None and side.dtype is not None and side.dtype.kind in "iu" and producer is not None
                    and producer.domain in STANDARD_DOMAINS and len(context) < MAX_CONTEXT
                    and not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                                for a in producer.attributes.values())):
                grow.append(producer)
            sides.append(side)
        if not grow:
            return sides, context
        context = list(dict.fromkeys(grow + context))


def boundary_side(value: ir.Value, oracle) -> Side:
    if not value.name:
        raise _Skip("a boundary value has no name")
    array = constant_array(value)
    if array is None:
        elements = oracle.elements(value)
        if elements is not None and elements.known():
            array = elements.array()  # a trusted fact about a computed shape value
    if array is not None:
        return Side(value, value.name, array=np.asarray(array))
    dtype = oracle.dtype(value) or value.dtype
    if dtype is None:
        return Side(value, value.name)  # the certifier gives it a run's element type and shape, or skips
    np_dtype = np.dtype(dtype.numpy())
    if np_dtype not in SUPPORTED_DTYPES:
        raise _Skip(f"'{value.name}' is {np_dtype}, which the certificate does not generate")
    shape = oracle.symbolic_shape(value)
    if shape is None and value.shape is not None:
        shape = tuple(d if isinstance(d, int) else Sym() for d in value.shape)
    if shape is None:
        # An integer is computed from context, if any; the certifier gives the rest the shapes
        # of a run of the model, or skips.
        return Side(value, value.name, dtype=np_dtype)
    concrete = tuple(d if isinstance(d, int) and d >= 0 else SYM_DIM for d in shape)
    return Side(value, value.name, dtype=np_dtype, shape=concrete)


def _dtype_key(dtype: np.dtype) -> str:
    """A dtype's identity, 10x cheaper than str(dtype) (~40 us, numpy builds the name in
    Python); the type number tells apart ml_dtypes' types that share a typestr (float8s: |V1)."""
    return f"{dtype.str}{dtype.num}"


def cache_key(request, activations, constants, context) -> bytes | None:
    if sum(c.array.nbytes for c in constants) > CACHE_CONSTANT_BYTES:
        return None
    digest = hashlib.sha1(request.rule.encode())
    renames = {}
    for side in activations:
        renames[side.name] = f"a{len(renames)}"
        digest.update(f"{renames[side.name]}:{_dtype_key(side.dtype)}:{side.shape};".encode())
    for side in constants:
        renames[side.name] = f"k{len(renames)}"
        digest.update(f"{renames[side.name]}:{_dtype_key(side.array.dtype)}:{side.array.shape};".encode())
        digest.update(np.ascontiguousarray(side.array).tobytes())
    produced = {}
    for node in list(context) + ["|"] + list(request.matched) + ["|"] + list(request.replacement):
        if node == "|":
            digest.update(b"|")
            continue
        for out in node.outputs:
            produced[id(out)] = f"v{len(produced)}"
        ins = [renames.get(v.name) if v is not None and id(v) not in produced else
               (produced.get(id(v)) if v is not None else "") for v in node.inputs]
        attrs = sorted((k, repr(attr(node, k))) for k in node.attributes)  # a reference: no key, no certificate
        digest.update(repr((node.op_type, node.domain, ins, [produced[id(o)] for o in node.outputs], attrs)).encode())
    # Which outputs may change a zero's sign is part of the question: the same structure with
    # the sign observable must be judged again, not answered from a sign-insensitive sibling.
    digest.update(repr([(produced.get(id(o)), produced.get(id(n)) or renames.get(n.name),
                         any(o is v for v in request.sign_insensitive))
                        for o, n in request.outputs]).encode())
    opsets = dict(request.model.opset_imports)
    digest.update(repr(sorted(opsets.items())).encode())
    return digest.digest()



def canonical_node(node: ir.Node, rename: dict) -> onnx.NodeProto:
    """`node` as a NodeProto without its name, every value named through `rename` (a value not in
    it yet gets the next v<i>), so that the same structure always gives the same bytes."""
    proto = ir.serde.serialize_node(node)
    proto.name = ""
    for index, name in enumerate(proto.input):
        if name:
            proto.input[index] = rename.setdefault(name, f"v{len(rename)}")
    for index, name in enumerate(proto.output):
        if name:
            proto.output[index] = rename.setdefault(name, f"v{len(rename)}")
    return proto

def build(request: CertificateRequest, activations, constants, context, batch_free: bool):
    """The two-sided model, the constants fed at run time, and (original, candidate) output names.

    Values get canonical names (a<i> activations, k<i> constants, v<i> the rest, no node
    names), so that certificates of the same structure have the same bytes and share a session.
    """
    rename = {side.name: f"a{i}" for i, side in enumerate(activations)}
    rename.update({side.name: f"k{i}" for i, side in enumerate(constants)})
    inputs, initializers, fed = [], [], {}
    narrowed = []  # Cast nodes from the float32 an input is fed as, to its own narrow type
    for side in activations:
        elem = helper.np_dtype_to_tensor_dtype(side.dtype)
        # Symbolic dims (the rank is kept): certificates of the same structure over other
        # sizes (channel counts) share one session; the kernels and bits are the same.
        dims = ["batch" if batch_free and axis == 0 else f"{rename[side.name]}_{axis}"
                for axis in range(len(side.shape))]
        name = rename[side.name]
        if side.dtype in NARROW_FLOATS:
            narrowed.append(helper.make_node("Cast", [f"{name}_float32"], [name], to=elem))
            name, elem = f"{name}_float32", onnx.TensorProto.FLOAT
        inputs.append(helper.make_tensor_value_info(name, elem, dims))
    for side in constants:
        array = np.require(side.array, requirements="C")  # ascontiguousarray makes a scalar 1-D
        name = rename[side.name]
        if array.nbytes > EMBED_BYTES and array.dtype in SUPPORTED_DTYPES - NARROW_FLOATS:
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), [f"{name}_{axis}" for axis in range(array.ndim)]))
            fed[name] = array
        else:
            initializers.append(numpy_helper.from_array(array, name))
    nodes = narrowed + [canonical_node(node, rename) for node in
                        topological(context) + topological(request.matched) + topological(request.replacement)]
    outputs, graph_outputs = [], []
    for index, (old, new) in enumerate(request.outputs):
        pair = []
        narrow = _dtype_of(old, request) in NARROW_FLOATS
        for side, value in (("original", old), ("candidate", new)):
            name = f"__certificate_{side}_{index}"
            nodes.append(helper.make_node("Cast", [rename[value.name]], [name], to=onnx.TensorProto.FLOAT) if narrow
                         else helper.make_node("Identity", [rename[value.name]], [name]))
            graph_outputs.append(onnx.ValueInfoProto(name=name))
            pair.append(name)
        outputs.append(tuple(pair))
    graph = helper.make_graph(nodes, "certificate", inputs, graph_outputs, initializers)
    opsets = dict(request.model.opset_imports)
    owner_opsets = getattr(request.owner, "opset_imports", None) or {}
    opsets.update(owner_opsets)
    if "" not in opsets:
        opsets[""] = opsets.pop("ai.onnx", 13)
    if any(node.domain == "com.microsoft" for node in nodes):
        opsets.setdefault("com.microsoft", 1)  # a rule's contrib node in a model that imports none
    opset_ids = [helper.make_opsetid(domain, int(version)) for domain, version in opsets.items()
                 if domain in RUNTIME_DOMAINS and domain != "ai.onnx"]
    proto = helper.make_model(graph, opset_imports=opset_ids)
    proto.ir_version = min(int(request.model.ir_version or 8), onnx.IR_VERSION)
    return proto, fed, outputs


def _dtype_of(value: ir.Value, request: CertificateRequest) -> np.dtype | None:
    dtype = request.context.facts.dtype(value) or value.dtype
    try:
        return None if dtype is None else np.dtype(dtype.numpy())
    except Exception:  # noqa: BLE001 - strings and other types numpy has no dtype for
        return None


def forwards_through_identity(request: CertificateRequest) -> bool:
    """An exact rewrite that removes Identity nodes only, each exposed output replaced by the
    value the Identity chain copies. Identity's output is its input by definition (ONNX: "Identity
    operator", same type and element bits), so the certificate is that definition; running it
    would only measure onnxruntime's copy. Anything else (a new node, another op, an output
    replaced by some other value) is certified the ordinary way."""
    if request.kind != EXACT or request.replacement or not request.matched:
        return False
    if any(n.op_type != "Identity" or n.domain not in STANDARD_DOMAINS or len(n.inputs) != 1
           for n in request.matched):
        return False
    matched = {id(n) for n in request.matched}
    for old, new in request.outputs:
        value = old
        for _ in range(len(request.matched)):
            producer = value.producer()
            if producer is None or id(producer) not in matched:
                break
            value = producer.inputs[0]
            if value is new:
                break
        if value is not new or value is None:
            return False
    return True


def topological(nodes) -> list[ir.Node]:
    nodes = list(dict.fromkeys(nodes))
    produced = {id(v): n for n in nodes for v in n.outputs}
    order, done = [], set()

    def visit(node, depth=0):
        if id(node) in done or depth > len(nodes):
            return
        done.add(id(node))
        for value in node.inputs:
            if value is not None and id(value) in produced:
                visit(produced[id(value)], depth + 1)
        order.append(node)

    for node in nodes:
        visit(node)
    return order
