"""Facts for a certificate inside a control-flow body: the body's inputs as the node holding it feeds them.

The shape facts (ir/facts/) know nothing of a body's inputs: nothing checks what a Loop carries
from one iteration to the next, so rules never trust a size there. A certificate only needs sizes
to be judged at, and takes those of the body's first iteration:

- Loop: the iteration number an int64 scalar, the condition a bool scalar, each carried value the
  element type and shape of its initial value;
- Scan (opset 9 on): each state its initial value's, each scanned input the input's with its scan
  axis taken out;
- If: no inputs (its branches read the enclosing scope's values, whose facts they have already).

A model-local function's body is given each call's arguments the same way (`call_sides`), one
certificate per call site.

Nested bodies get their enclosing bodies' inputs too (a Loop in a Loop, an If in a Loop); an
initial value no fact gives a shape for takes the shape of a run of the model (concrete.RunShapes).
A body inside a model-local function, or held by another operator, gets nothing (its certificate
is skipped as before). Like a run's shapes, these only choose the sizes: a wrong choice can make a
certificate impossible, never make a wrong rewrite pass.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir import traversal
from onnxrefine.ir.attrs import attr
from onnxrefine.ir.facts import Sym
from onnxrefine.ir.opsets import STANDARD_DOMAINS, opset_version
from onnxrefine.verify.certificate.bound import CertificateSkip as _Skip
from onnxrefine.verify.certificate.concrete import unresolved
from onnxrefine.verify.certificate.model import boundary

_SCALAR = ()
MAX_CALLS = 8  # call sites of a function a rewrite in its body is certified at, one by one


def enclosing(request) -> list[traversal.GraphSite] | None:
    """The sites from the outermost body down to the graph `request` rewrites in (empty for the
    main graph); None inside a function."""
    owner = request.owner
    if owner is request.model.graph or isinstance(owner, ir.Function):
        return []
    sites = {id(site.graph): site for site in traversal.graphs(request.model)}
    chain, site = [], sites.get(id(owner))
    while site is not None and site.parent is not None:
        if site.function is not None:
            return None
        chain.append(site)
        site = sites.get(id(site.parent))
    if site is None or site.graph is not request.model.graph:
        return None
    return chain[::-1]


def body_facts(request, runs):
    """The oracle of `request.context.facts` plus the inputs of every body enclosing the rewrite
    (see the module's docstring); None where there is none to give (the main graph, a function,
    an operator other than If/Loop/Scan)."""
    chain = enclosing(request)
    if not chain:
        return None
    oracle, given = request.context.facts, {}
    for site in chain:
        node = site.node
        if node.domain not in STANDARD_DOMAINS or node.op_type not in ("If", "Loop", "Scan"):
            return None
        found = _signature(request, node, site.graph, oracle, runs)
        if found is None:
            return None
        given.update(found)
        oracle = request.context.facts.given(given)
    return oracle


def _signature(request, node: ir.Node, body: ir.Graph, oracle, runs) -> dict | None:
    """id(body input) -> (value, dtype, symbolic shape) at the first iteration; None when the
    node's inputs do not fit its body's."""
    formal = list(body.inputs)
    if node.op_type == "If":
        return {}
    if node.op_type == "Loop":
        carried = list(node.inputs[2:])
        if len(formal) != 2 + len(carried):
            return None
        given = {id(formal[0]): (formal[0], ir.DataType.INT64, _SCALAR),
                 id(formal[1]): (formal[1], ir.DataType.BOOL, _SCALAR)}
        pairs = [(f, a, None) for f, a in zip(formal[2:], carried)]
    else:
        if opset_version(None, request.model.opset_imports, "") < 9:
            return None  # Scan 8 has a batch axis and sequence lengths
        scanned = attr(node, "num_scan_inputs")
        if not isinstance(scanned, int):
            return None  # a malformed Scan: no signature to read
        states = len(node.inputs) - scanned
        axes = list(attr(node, "scan_input_axes", None) or [0] * scanned)
        if len(formal) != len(node.inputs) or len(axes) != scanned or states < 0:
            return None
        given = {}
        pairs = [(f, a, None if i < states else axes[i - states])
                 for i, (f, a) in enumerate(zip(formal, node.inputs))]
    found = _given(request, pairs, oracle, runs)
    return None if found is None else {**given, **found}


def call_sides(request, runs) -> list[tuple[list, list[ir.Node]]]:
    """For a rewrite in a model-local function's body: its boundary (sides, context nodes) at each
    call site (`request.calls`, else every call of the function), the body's formal inputs taking
    the call's arguments' types and shapes; _Skip where a value stays unknown at a call."""
    function = request.owner
    identifier = function.identifier()
    calls = list(request.calls) if request.calls is not None else [
        node for site in traversal.graphs(request.model) for node in site.graph if node.op_identifier() == identifier]
    if not calls or len(calls) > MAX_CALLS:
        raise _Skip(f"the function {function.name} has {len(calls)} call sites (at most {MAX_CALLS} are certified)")
    found = []
    for call in calls:
        sides, context = boundary(request, call_facts(request, call, runs))
        left = unresolved(sides)
        if left:
            what = "element type" if left[0].dtype is None else "shape"
            raise _Skip(f"the {what} of '{left[0].name}' is not known at a call of {function.name}")
        found.append((sides, context))
    return found


def call_facts(request, call: ir.Node, runs):
    """The oracle of `request.context.facts` plus the function body's formal inputs as `call`
    passes them (each its argument's element type and shape), for a rewrite in that body."""
    function = request.owner
    pairs = [(formal, call.inputs[i] if i < len(call.inputs) else None, None)
             for i, formal in enumerate(function.inputs)]
    given = _given(request, [pair for pair in pairs if pair[1] is not None], request.context.facts, runs)
    return request.context.facts.given(given or {})


def _given(request, pairs, oracle, runs) -> dict | None:
    """id(formal) -> (formal, dtype, symbolic shape) of its actual value (with `axis` taken out)
    for each (formal, actual, axis) of `pairs`, from the facts or else a run; None where a pair
    does not fit."""
    given = {}
    outer = [a for _, a, _ in pairs if a is not None]
    unknown = [a for a in outer if oracle.symbolic_shape(a) is None or (oracle.dtype(a) or a.dtype) is None]
    observed = runs.observed(request, [a for a in unknown if a.graph is request.model.graph]) if unknown else {}
    for value, actual, axis in pairs:
        if actual is None:
            return None
        dtype, shape = oracle.dtype(actual) or actual.dtype, oracle.symbolic_shape(actual)
        if id(actual) in observed:
            seen_shape, seen_dtype = observed[id(actual)]
            shape = shape if shape is not None else tuple(seen_shape)
            dtype = dtype or ir.DataType.from_numpy(seen_dtype)
        if dtype is None or shape is None:
            continue  # left unknown: the certificate says which value it lacks
        if axis is not None:
            if not -len(shape) <= axis < len(shape):
                return None
            shape = tuple(d for i, d in enumerate(shape) if i != axis % len(shape))
        given[id(value)] = (value, dtype, tuple(d if isinstance(d, int) and d >= 0 else
                                                (d if isinstance(d, Sym) else Sym()) for d in shape))
    return given
