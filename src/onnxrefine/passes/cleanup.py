"""Cleanup passes: dead code, unused and duplicate initializers, common subexpressions, If with a
constant condition, Where(Not(c), a, b). Every one of them is EXACT (no arithmetic changes) and
runs in time linear in the graph (plus sampling the bytes of same-shaped initializers, and
reading in full only those whose samples agree).

Everything applies inside If/Loop/Scan bodies and model-local functions too; functions are kept.
"""

from __future__ import annotations

import copy
import hashlib
import struct
from collections import ChainMap

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, tensordata, traversal
from onnxrefine.ir.attrs import references
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.quantization import merge_refusal
from onnxrefine.passes import graphpass
from onnxrefine.passes.folding import RANDOM_OPS
from onnxrefine.passes.registry import CLEANUP, GRAPH, PassContext, PassSpec
from onnxrefine.rewrite.pattern import Match, Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, RewriteContext, Rule

# Standard operators have no side effects; an unknown custom operator might (a print, a
# counter), so dead-code removal leaves those alone.
_PURE_DOMAINS = (*STANDARD_DOMAINS, "ai.onnx.ml")
_MAX_CHECKED_BYTES = 1 << 30


def detach(nodes) -> None:
    """Stop `nodes` (and everything in their subgraphs) from reading any value, so values they
    captured lose those readers. For nodes that are about to be dropped with their subgraphs."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        for index in range(len(node.inputs)):
            if node.inputs[index] is not None:
                node.replace_input_with(index, None)
        for sub in traversal.subgraphs_of(node):
            stack.extend(sub)


# --- eliminate_deadend ---------------------------------------------------------------------------


def _removable(node: ir.Node, functions) -> bool:
    return node.domain in _PURE_DOMAINS or (node.domain, node.op_type, node.overload) in functions


def dead_code_in_graph(pctx: PassContext, graph: ir.Graph) -> int:
    """Remove nodes whose outputs reach no output of `graph`, scanning it once from the end;
    subgraphs of live nodes are cleaned first, so a capture that only dead code read dies too."""
    functions = pctx.model.functions
    dead = []
    removed = 0
    for node in reversed(list(graph)):
        if _removable(node, functions) and edit.is_unread(node):
            detach([node])
            dead.append(node)
            continue
        for sub in traversal.subgraphs_of(node):
            removed += dead_code_in_graph(pctx, sub)
    if dead:
        edit.remove_nodes(graph, dead)
        for node in dead:
            graphpass.log_apply(pctx, "eliminate_deadend", EXACT, graph, node)
    return removed + len(dead)


def run_deadend(pctx: PassContext) -> int:
    # From each body down: a subgraph's captures die with the dead code that read them (scope).
    return sum(dead_code_in_graph(pctx, body.graph) for body in list(traversal.bodies(pctx.model)))


# --- eliminate_unused_initializer ----------------------------------------------------------------


def run_unused_initializer(pctx: PassContext) -> int:
    changes = 0
    for graph in [site.graph for site in traversal.graphs(pctx.model)]:
        for name, value in list(graph.initializers.items()):
            if value.uses() or value.is_graph_input() or value.is_graph_output():
                continue
            edit.drop_initializer(graph, name)
            pctx.log.apply(rule="eliminate_unused_initializer", kind=EXACT, graph=graph.name or "",
                           root=name, removed=[name], added=[])
            changes += 1
    return changes


# --- eliminate_duplicate_initializer -------------------------------------------------------------


def _layout(value: ir.Value):
    tensor = value.const_value
    return None if tensor is None else (tensor.dtype, tuple(tensor.shape))


def _dedup_graph(pctx: PassContext, graph: ir.Graph, outer, outer_layouts, nested_layouts) -> int:
    # Buckets of initializers by fingerprint (dtype, shape, size, sampled bytes), each bucket holding
    # tensors whose full bytes differ. A weight that shares its fingerprint with none is never read
    # beyond its samples: the 48 same-shaped weights of an LLM cost 48 x 8 KiB of reads, not 3 GiB.
    local: dict = {}
    seen = ChainMap(local, outer)
    candidates = [v for v in graph.initializers.values() if not (v.is_graph_input() or v.is_graph_output())]
    # Only tensors that share a dtype and shape with another can be duplicates: fingerprint just those.
    counts: dict = {}
    for value in candidates:
        counts[_layout(value)] = counts.get(_layout(value), 0) + 1
    layouts = ChainMap(counts, outer_layouts)
    changes = 0
    for value in candidates:
        name = value.name
        layout = _layout(value)
        if layout is None or (counts.get(layout, 0) < 2 and layout not in outer_layouts
                              and layout not in nested_layouts):
            continue
        if value.const_value.dtype == ir.DataType.STRING:
            continue
        key = tensordata.fingerprint(value.const_value)
        bucket = seen.get(key, [])
        # Full bytes only for a fingerprint collision (streamed, in 1 MiB pieces).
        kept = next((k for k in bucket if tensordata.same_bytes(k.const_value, value.const_value)), None)
        if kept is None:
            local.setdefault(key, list(outer.get(key, []))).append(value)
            continue
        value.replace_all_uses_with(kept)
        edit.drop_initializer(graph, name)
        pctx.log.apply(rule="eliminate_duplicate_initializer", kind=EXACT, graph=graph.name or "",
                       root=name, removed=[name], added=[kept.name])
        changes += 1
    for node in graph:
        for sub in traversal.subgraphs_of(node):
            # an outer initializer is visible inside
            changes += _dedup_graph(pctx, sub, seen, layouts, nested_layouts)
    return changes


def run_duplicate_initializer(pctx: PassContext) -> int:
    nested = {_layout(v) for sub in pctx.model.graph.subgraphs() for v in sub.initializers.values()}
    return _dedup_graph(pctx, pctx.model.graph, {}, {}, nested)


# --- eliminate_common_subexpression --------------------------------------------------------------


class _NotComparable(Exception):
    pass


def _attribute_key(attr: ir.Attr):
    if attr.is_ref():
        raise _NotComparable
    kind = attr.type
    value = attr.value
    if kind == ir.AttributeType.FLOAT:
        return kind, struct.pack("<f", value)  # bit patterns: 0.0 and -0.0 differ, NaN equals NaN
    if kind == ir.AttributeType.FLOATS:
        return kind, np.asarray(list(value), dtype=np.float32).tobytes()
    if kind in (ir.AttributeType.INT, ir.AttributeType.STRING):
        return kind, value
    if kind in (ir.AttributeType.INTS, ir.AttributeType.STRINGS):
        return kind, tuple(value)
    if kind == ir.AttributeType.TENSOR:
        if value.dtype == ir.DataType.STRING:
            return kind, tuple(value.numpy().reshape(-1).tolist()), tuple(value.shape)
        return kind, value.dtype, tuple(value.shape), hashlib.sha256(value.tobytes()).digest()
    raise _NotComparable  # graphs, sparse tensors, type protos: not compared


def _node_key(node: ir.Node):
    if node.domain not in _PURE_DOMAINS or node.op_type in RANDOM_OPS:
        return None
    if merge_refusal(node) is not None:  # Q/DQ twins only where node units stay (ir/quantization.py)
        return None
    try:
        attributes = tuple(sorted((name, _attribute_key(a)) for name, a in node.attributes.items()))
    except _NotComparable:
        return None
    inputs = list(node.inputs)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return (node.domain, node.op_type, node.overload, len(node.outputs),
            tuple(id(v) if v is not None else None for v in inputs), attributes)


def cse_in_graph(pctx: PassContext, graph: ir.Graph) -> int:
    table: dict = {}
    changes = 0
    keep_alive = []  # ids in keys must not be reused while the table lives
    for node in list(graph):
        for sub in traversal.subgraphs_of(node):
            changes += cse_in_graph(pctx, sub)
        key = _node_key(node)
        if key is None:
            continue
        kept = table.get(key)
        if kept is None:
            table[key] = node
            keep_alive.append(node)
            continue
        if not _merge(pctx, graph, kept, node):
            continue
        edit.remove_nodes(graph, [node])
        graphpass.log_apply(pctx, "eliminate_common_subexpression", EXACT, graph, node, [kept.name or ""])
        changes += 1
    return changes


def _merge(pctx: PassContext, graph: ir.Graph, kept: ir.Node, duplicate: ir.Node) -> bool:
    for old, new in zip(duplicate.outputs, kept.outputs):
        if old.is_graph_output() and (new.is_graph_output() or new.is_graph_input() or not new.name):
            return False  # two outputs of one value would need an Identity: not worth it
    for old, new in zip(duplicate.outputs, kept.outputs):
        edit.replace_value(pctx.names, graph, old, new)
    return True


def run_cse(pctx: PassContext) -> int:
    return sum(cse_in_graph(pctx, body.graph) for body in list(traversal.bodies(pctx.model)))


# --- eliminate_if_with_const_cond ----------------------------------------------------------------


def _constant_condition(node: ir.Node) -> bool | None:
    if node.op_type != "If" or node.domain not in STANDARD_DOMAINS or not node.inputs:
        return None
    if references(node):  # then_branch=@b in a function body: each caller's own graph
        return None
    cond = constant_array(node.inputs[0])
    if cond is None or cond.size != 1:
        return None
    return bool(cond.reshape(-1)[0])


def inline_if(pctx: PassContext, graph: ir.Graph, in_function: bool, node: ir.Node, cond: bool) -> list[ir.Node]:
    """Replace `node` by the nodes of its taken branch; returns the nodes now in `graph`."""
    taken_attr = node.attributes.get("then_branch" if cond else "else_branch")
    other_attr = node.attributes.get("else_branch" if cond else "then_branch")
    branch: ir.Graph = taken_attr.value
    branch_outputs = list(branch.outputs)
    edit.set_outputs(branch, [])
    moved = list(branch)
    edit.remove_nodes(branch, moved, safe=False)  # the nodes keep their connections: they move
    for inner in moved:
        inner.name = pctx.names.fresh(inner.name or f"{node.name or 'if'}_{inner.op_type}")
        for value in inner.outputs:
            if value.name:
                value.name = pctx.names.fresh(value.name)
    new_nodes = list(moved)
    produced_here = {id(v) for n in moved for v in n.outputs}
    for name, value in list(branch.initializers.items()):
        edit.drop_initializer(branch, name)
        value.name = pctx.names.fresh(name)
        holder = edit.place_constant(pctx.names, graph, in_function, value, before=node)
        if holder is not None:  # a Constant node: inside a function
            new_nodes.insert(0, holder)
        produced_here.add(id(value))
    if moved:
        edit.insert_nodes(graph, moved, before=node)
    claimed: set[int] = set()
    for old, new in zip(node.outputs, branch_outputs):
        if old.is_graph_output() and (id(new) not in produced_here or id(new) in claimed
                                      or new.is_graph_output() or new.is_graph_input()):
            # An outer value (or one output twice) cannot take the output's name: copy it.
            identity = ir.Node("", "Identity", [new], name=pctx.names.fresh(f"{node.name or 'if'}_output"))
            identity.outputs[0].name = pctx.names.fresh(f"{old.name}_inlined")
            edit.insert_nodes(graph, [identity], before=node)
            new_nodes.append(identity)
            new = identity.outputs[0]
        claimed.add(id(new))
        if new.type is None:
            new.type = old.type
        edit.replace_value(pctx.names, graph, old, new)
    if other_attr is not None:
        detach(other_attr.value)
    edit.remove_nodes(graph, [node])
    graphpass.log_apply(pctx, "eliminate_if_with_const_cond", EXACT, graph, node, [n.name for n in new_nodes])
    return new_nodes


def _inline_ifs(pctx: PassContext, graph: ir.Graph, in_function: bool) -> int:
    changes = 0
    queue = list(graph)
    while queue:
        node = queue.pop()
        if node.graph is not graph:
            continue
        cond = _constant_condition(node)
        if cond is not None:
            queue.extend(inline_if(pctx, graph, in_function, node, cond))
            changes += 1
            continue
        for sub in traversal.subgraphs_of(node):
            changes += _inline_ifs(pctx, sub, in_function)
    return changes


def _inline_all(pctx: PassContext) -> int:
    # From each body down (not over traversal.graphs): inlining an If moves its branch's nested
    # Ifs into the enclosing graph, where the same walk meets them next.
    return sum(_inline_ifs(pctx, body.graph, body.in_function) for body in list(traversal.bodies(pctx.model)))


def _has_constant_if(model: ir.Model) -> bool:
    return any(_constant_condition(node) is not None for site in traversal.graphs(model) for node in site.graph)


def _strict_inference_error(proto: onnx.ModelProto) -> str | None:
    try:
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as exc:
        return str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
    return None


def run_if_with_const_cond(pctx: PassContext) -> int:
    """Inline every If with a constant condition, unless that makes the model fail ONNX's strict
    shape inference when it passed before: a branch output's shape, hidden behind the If, becomes
    visible to its readers, and a reader that only ran because its input shape was unknown
    (Range of a [1] tensor from a Split) would now be rejected by onnxruntime at load time."""
    if not _has_constant_if(pctx.model):
        return 0
    proto = ir.serde.serialize_model(pctx.model)
    if proto.ByteSize() < _MAX_CHECKED_BYTES and _strict_inference_error(proto) is None:
        trial = ir.serde.deserialize_model(proto)
        trial_ctx = PassContext(trial, copy.deepcopy(pctx.names), copy.deepcopy(pctx.budget))
        _inline_all(trial_ctx)
        error = _strict_inference_error(ir.serde.serialize_model(trial))
        if error is not None:
            pctx.log.refuse("eliminate_if_with_const_cond", pctx.model.graph.name or "", "<all constant Ifs>",
                            f"inlining makes ONNX shape inference fail: {error}", guard="inline_if.shape_inference")
            return 0
    return _inline_all(pctx)


# --- rewrite_where -------------------------------------------------------------------------------


def swap_where_branches(m: Match, ctx: RewriteContext) -> Replacement:
    where: ir.Node = m["where"]
    dtype = ctx.facts.dtype(m["a"]) or ctx.facts.dtype(m["b"])
    if dtype is None:
        raise RewriteRefused("where_swap.dtype_unknown", "the selected values' element type is not known from trusted facts")
    if dtype.is_floating_point():
        # onnxruntime's CPU Where returns +0.0 where it selects -0.0 from its X input (it keeps
        # the sign from Y), so swapping X and Y would flip signs of zero under that runtime.
        raise RewriteRefused("where_swap.float", "swapping Where's branches changes which -0.0 onnxruntime turns into +0.0")
    new = ctx.node("Where", [m["c"], m["b"], m["a"]], hint=where.name or None)
    return Replacement([new], {where.outputs[0]: new.outputs[0]})


WHERE_NOT = Rule(
    "rewrite_where",
    Op("Where", Op("Not", Var("c"), name="not"), Var("a"), Var("b"), name="where"),
    swap_where_branches,
)


PASSES = (
    PassSpec("eliminate_if_with_const_cond",
             "Inline the taken branch of an If whose condition is a constant (names kept unique)",
             run=run_if_with_const_cond, kind=EXACT, phase=GRAPH, order=8, fuzz="if_const_cond",
             exactness="If's definition: it computes the branch its condition selects, and a constant "
                       "condition selects one branch on every input"),
    PassSpec("rewrite_where", "Where(Not(c), a, b) -> Where(c, b, a)", rules=(WHERE_NOT,), order=20,
             fuzz="where_not"),
    PassSpec("eliminate_common_subexpression",
             "Merge nodes with the same operator, attributes (bit-exact) and inputs; never random "
             "operators, subgraph-carrying nodes or custom domains",
             run=run_cse, kind=EXACT, phase=CLEANUP, order=80, fuzz="common_subexpression",
             exactness="the same deterministic operator on the same input values with bit-identical "
                       "attributes computes the same outputs"),
    PassSpec("eliminate_duplicate_initializer",
             "Merge initializers with the same dtype, shape and bytes (never graph inputs or outputs)",
             run=run_duplicate_initializer, kind=EXACT, phase=CLEANUP, order=85, fuzz="duplicate_initializer",
             exactness="initializers of the same dtype, shape and bytes are the same value"),
    PassSpec("eliminate_deadend",
             "Remove nodes whose outputs reach no graph output (subgraph captures counted; custom "
             "domains kept)", run=run_deadend, kind=EXACT, phase=CLEANUP, order=90, fuzz="deadend",
             exactness="it removes only nodes whose outputs nothing reads, and standard operators "
                       "have no side effects"),
    PassSpec("eliminate_unused_initializer",
             "Remove initializers nothing reads (graph inputs kept)", run=run_unused_initializer, kind=EXACT,
             phase=CLEANUP, order=95, fuzz="unused_initializer",
             exactness="it removes only initializers nothing reads"),
)
