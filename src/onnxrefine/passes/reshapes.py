"""Reshape pairs around position-independent elementwise work.

    x [128, 3072] -> Reshape [1, 128, 3072] -> GELU (Mul/Pow/Add/Tanh with scalars) -> Reshape [-1, 3072]
    becomes x -> GELU, when the second Reshape's output has x's own shape (GPT-2's Conv1D layers:
    2 Reshapes per layer; onnxsim removes them too).

Elementwise operators whose other operands are single-element constants compute each element from
the element at the same position only, so they give the same values in the same row-major order
whatever the shape they run on; a Reshape keeps row-major order; so the region computed on x and
left unreshaped equals the original end to end. EXACT.

Guards: the region between the two Reshapes is elementwise (the list below) with only
single-element constants (rank at most x's rank, so no broadcast adds axes) besides its own values;
it reads the first Reshape's output and nothing else that varies; no value of the region (first
Reshape's output included) is read outside it or is a graph output, and the last value is read only
by the second Reshape; both shapes (x's and the second Reshape's output) are static from trusted
facts and equal. Each rewrite is then certified like a rule's (both Reshapes and the region against
a copy of the region reading x), before the region is rewired in place.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.facts import StaticShapes
from onnxrefine.passes import graphpass
from onnxrefine.passes.registry import GRAPH, NO_PATTERN_YET, PassContext, PassSpec
from onnxrefine.rewrite.log import CERTIFIED, PROVED, UNCHECKED
from onnxrefine.rewrite.rule import EXACT, CertificateRequest, RewriteContext

RULE = "eliminate_reshape_around_elementwise"
UNARY = frozenset("""Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf Exp Floor Identity IsInf IsNaN Log
Neg Not Reciprocal Relu Round Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Tan Tanh Gelu Elu Selu
LeakyRelu HardSigmoid HardSwish Mish ThresholdedRelu Celu Cast""".split())
BINARY = frozenset("Add Sub Mul Div Pow Max Min Mod And Or Xor Equal Less LessOrEqual Greater GreaterOrEqual".split())
MAX_REGION = 64  # a GELU or SiLU is a handful of nodes; larger regions are not what this is for


def _region(outer: ir.Node, rank: int) -> tuple[list[ir.Node], ir.Value]:
    """(region nodes, the value they read from the first Reshape); RewriteRefused if not a region."""
    exit_value = outer.inputs[0]
    region: dict[int, ir.Node] = {}
    entry = None
    stack = [exit_value.producer()]
    while stack:
        node = stack.pop()
        if node is None:
            raise RewriteRefused("reshape_region.graph_input", "the Reshape reads a graph input, not an elementwise region")
        if id(node) in region:
            continue
        if node.op_type == "Reshape" and node.domain in STANDARD_DOMAINS and node is not outer:
            if entry is not None and entry is not node.outputs[0]:
                raise RewriteRefused("reshape_region.two_reshapes", "the region reads more than one Reshape")
            entry = node.outputs[0]
            continue
        if node.domain not in STANDARD_DOMAINS or len(node.outputs) != 1 or not (
                node.op_type in UNARY and len(node.inputs) == 1 or node.op_type in BINARY and len(node.inputs) == 2):
            raise RewriteRefused("reshape_region.not_elementwise", f"{node.op_type} {node.name!r} is not an elementwise operator this rewrite knows")
        region[id(node)] = node
        if len(region) > MAX_REGION:
            raise RewriteRefused("reshape_region.too_large", f"the region has more than {MAX_REGION} nodes")
        for value in node.inputs:
            array = constant_array(value) if value is not None else None
            if array is not None:
                if array.size != 1 or array.ndim > rank:
                    raise RewriteRefused("reshape_region.constant_not_scalar", f"constant {value.name!r} has shape {list(array.shape)}, not one element")
                continue
            if value is None:
                raise RewriteRefused("reshape_region.missing_input", "an optional input is missing")
            stack.append(value.producer())
    if entry is None or not region:
        raise RewriteRefused("reshape_region.empty", "no elementwise region between two Reshapes")
    return list(region.values()), entry


def _check_closed(nodes: list[ir.Node], entry: ir.Value, outer: ir.Node) -> None:
    inside = {id(n) for n in nodes}
    exit_value = outer.inputs[0]
    for value in [entry, *(n.outputs[0] for n in nodes)]:
        if value.is_graph_output():
            raise RewriteRefused("reshape_region.graph_output", f"{value.name!r} is a graph output")
        readers = [user for user, _ in value.uses()]
        if value is exit_value:
            if any(user is not outer for user in readers):
                raise RewriteRefused("reshape_region.exit_read_outside", f"{value.name!r} is also read outside the region")
        elif any(id(user) not in inside for user in readers):
            raise RewriteRefused("reshape_region.read_outside", f"{value.name!r} is read outside the region")


def _certify(pctx: PassContext, graph: ir.Graph, oracle: StaticShapes, nodes: list[ir.Node], entry: ir.Value,
             source: ir.Value, outer: ir.Node) -> tuple[str, str] | None:
    """Certify the rewrite like a rule's (verify/certificate.py): the matched side is both
    Reshapes and the region, the replacement a copy of the region reading `source`. (evidence,
    note); None where no certificate could be made and the run does not verify end to end (the
    refusal logged); RewriteRefused where the certificate refuses."""
    if pctx.certifier is None:
        return UNCHECKED, ""
    copies: dict[int, ir.Value] = {id(entry): source}
    replacement = []
    position = {id(node): index for index, node in enumerate(graph)}
    nodes = sorted(nodes, key=lambda node: position[id(node)])  # the graph's order is topological
    for node in nodes:
        copy = ir.Node(node.domain, node.op_type, [copies.get(id(v), v) for v in node.inputs],
                       [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()],
                       num_outputs=1, name=pctx.names.fresh(node.name or node.op_type))
        copy.outputs[0].name = pctx.names.fresh(node.outputs[0].name or "region")
        copies[id(node.outputs[0])] = copy.outputs[0]
        replacement.append(copy)
    exit_value = outer.inputs[0]
    request = CertificateRequest(
        rule=RULE, kind=EXACT, model=pctx.model, owner=graph, matched=[entry.producer(), *nodes, outer],
        replacement=replacement, outputs=[(outer.outputs[0], copies[id(exit_value)])], inputs=[source],
        new_constants=[], context=RewriteContext(pctx.model, pctx.names, pctx.budget, facts=oracle))
    outcome = pctx.certifier(request)
    if outcome.status == "refused":
        raise RewriteRefused("certificate.graph_failed", f"certificate failed: {outcome.detail}")
    if outcome.status in ("skipped", "deferred"):
        return graphpass.uncertified(pctx, RULE, graph, outer, outcome.detail)
    return (PROVED if getattr(outcome, "proved", False) else CERTIFIED), f"certified: {outcome.detail}"


def eliminate_in_graph(pctx: PassContext, graph: ir.Graph, oracle: StaticShapes) -> int:
    changes = 0
    for outer in list(graph):
        if outer.graph is not graph or outer.op_type != "Reshape" or outer.domain not in STANDARD_DOMAINS:
            continue
        producer = outer.inputs[0].producer() if outer.inputs and outer.inputs[0] is not None else None
        if producer is None or producer.op_type == "Reshape":
            continue
        target = oracle.static_shape(outer.outputs[0])
        if target is None:
            continue
        try:
            nodes, entry = _region(outer, len(target))
            source = entry.producer().inputs[0]
            if oracle.static_shape(source) != target:
                raise RewriteRefused("reshape_region.shape_differs", f"the Reshapes do not return to {source.name!r}'s own static shape")
            _check_closed(nodes, entry, outer)
            evidence = _certify(pctx, graph, oracle, nodes, entry, source, outer)
        except RewriteRefused as refused:
            graphpass.log_refuse(pctx, RULE, graph, outer, refused)
            continue
        if evidence is None:
            continue  # no certificate could be made, and nothing verifies the run: refused, logged
        inner = entry.producer()
        for node in nodes:
            for index, value in enumerate(node.inputs):
                if value is entry:
                    node.replace_input_with(index, source)
            node.outputs[0].shape = ir.Shape(target)  # the region now runs on x's shape
        exit_value = outer.inputs[0]
        edit.replace_value(pctx.names, graph, outer.outputs[0], exit_value)  # a graph output keeps its name
        edit.remove_nodes(graph, [outer])
        edit.remove_nodes(graph, [inner])
        graphpass.log_apply(pctx, RULE, EXACT, graph, outer, evidence=evidence[0], certificate=evidence[1])
        oracle.forget()  # the region's values changed shape: no memoised fact may outlive that
        changes += 1
    return changes


def run(pctx: PassContext) -> int:
    oracle = StaticShapes(pctx.model)
    total = 0
    for site in list(traversal.graphs(pctx.model)):
        total += eliminate_in_graph(pctx, site.graph, oracle)
    return total


PASSES = (
    PassSpec(
        RULE,
        "Reshape -> elementwise ops with single-element constants -> Reshape back to the first input's "
        "shape: the Reshapes are removed (static shapes)",
        run=run, kind=EXACT, phase=GRAPH, order=23, not_fuzzed=NO_PATTERN_YET,
        exactness="elementwise operators with single-element constants compute each element from the "
                  "element at the same row-major position, which a Reshape keeps (each rewrite also "
                  "certified on its own region)",
    ),
)
