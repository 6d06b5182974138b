"""The graph-level passes' view of the one graph-edit API (ir/edit.py) and traversal
(ir/traversal.py), taking the pass context's names and budget: the rule driver keeps the same
invariants through the same functions (graph outputs keep their names, new names come from the
NameAllocator, new constants go through the constant budget, and graphs inside functions get
Constant nodes instead of initializers).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.opsets import STANDARD_DOMAINS, opset_version  # noqa: F401 - passes read graphedit.STANDARD_DOMAINS
from onnxrefine.passes.registry import PassContext
from onnxrefine.rewrite.log import DEFERRED, UNCHECKED, node_label

subgraphs_of = traversal.subgraphs_of


def graphs(model: ir.Model) -> Iterator[tuple[ir.Graph, bool]]:
    """(graph, inside_a_function) for every graph holding nodes, in ir/traversal.py's order."""
    for site in traversal.graphs(model):
        yield site.graph, site.in_function


def charge_constant(pctx: PassContext, nbytes: int, source_bytes: int, freed: int = 0) -> None:
    """Raise RewriteRefused when a new constant of `nbytes` does not fit the budget; else charge it."""
    reason = edit.over_budget(pctx.budget, [nbytes], freed, source_bytes)
    if reason is not None:
        raise RewriteRefused("budget.graph_constant", reason)
    pctx.budget.charge([nbytes], freed)


def new_constant(pctx: PassContext, graph: ir.Graph, in_function: bool, array: np.ndarray, hint: str,
                 before: ir.Node | None) -> ir.Value:
    """A constant holding `array` exactly: an initializer of `graph`, or a Constant node in a
    function (inserted before `before`, or appended)."""
    return edit.new_constant(pctx.names, graph, in_function, array, hint, before)


def replace_value(pctx: PassContext, graph: ir.Graph, old: ir.Value, new: ir.Value) -> None:
    """Point every reader of `old` (subgraph captures included) at `new`; a graph output keeps its
    name, which `new` takes over (new must be a fresh value of `graph`)."""
    edit.replace_value(pctx.names, graph, old, new)


is_dead = edit.is_unread
pass_on_name = edit.pass_on_name


def log_apply(pctx: PassContext, rule: str, kind: str, graph: ir.Graph, node: ir.Node, added=(), *,
              evidence: str = UNCHECKED, certificate: str = "") -> None:
    """Log a graph-level rewrite with what stands behind it (rewrite/log.py EVIDENCE) and its note."""
    pctx.log.apply(rule=rule, kind=kind, graph=graph.name or "", root=node_label(node),
                   removed=[node_label(node)], added=list(added), evidence=evidence, certificate=certificate)


def uncertified(pctx: PassContext, rule: str, graph: ir.Graph, node: ir.Node, reason: str) -> tuple[str, str] | None:
    """A graph-level rewrite that no check could vouch for: left to the end-to-end verdict
    ((evidence, note)) in a run that verifies, else refused here and logged (None)."""
    if getattr(pctx.certifier, "defer_uncertified", False):
        return DEFERRED, f"deferred: {reason}"
    log_refuse(pctx, rule, graph, node, f"no certificate: {reason}", guard="certificate.graph_uncertifiable")
    return None


def log_refuse(pctx: PassContext, rule: str, graph: ir.Graph, node: ir.Node, reason: str | RewriteRefused,
               guard: str = "") -> None:
    """Log a refusal: a caught RewriteRefused (its guard id recorded), or a reason and a literal `guard`."""
    if isinstance(reason, RewriteRefused):
        reason, guard = str(reason), reason.guard
    pctx.log.refuse(rule, graph.name or "", node_label(node), reason, guard)


def opset_of(model: ir.Model, graph: ir.Graph, domain: str = "") -> int:
    return opset_version(graph.opset_imports, model.opset_imports, domain)
