"""What graph-level passes share besides the edit API: logging a rewrite with the evidence behind
it, logging a refusal under its guard id, charging a new constant to the budget, the opset a graph
reads. A pass edits its graph only through ir/edit.py (the rule driver keeps the same invariants
through the same functions) and visits graphs through ir/traversal.py.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit
from onnxrefine.ir.opsets import opset_version
from onnxrefine.passes.registry import PassContext
from onnxrefine.rewrite.log import DEFERRED, UNCHECKED, node_label


def charge_constant(pctx: PassContext, nbytes: int, source_bytes: int, freed: int = 0) -> None:
    """Raise RewriteRefused when a new constant of `nbytes` does not fit the budget; else charge it."""
    reason = edit.over_budget(pctx.budget, [nbytes], freed, source_bytes)
    if reason is not None:
        raise RewriteRefused("budget.graph_constant", reason)
    pctx.budget.charge([nbytes], freed)


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


def observed_runs(pctx: PassContext, values, facts) -> list[tuple[dict, dict]] | str:
    """[(sizes of the symbolic dims, id(value) -> its array)] of `values` in runs of the model at
    two assignments of its symbolic dims in which every dim differs (one run where it has none;
    verify/ort/dims.py, the certifier's record of the sizes the model runs at), or a one-line
    reason there are not two: a value right at one size only is caught at the other."""
    from onnxrefine.verify import ort

    searcher = getattr(pctx.certifier, "runnable_dims", None) or ort.RunnableDims()
    return searcher.observe(pctx.model, values, facts=facts, points=2)


def where_observed(runs, dims: dict | None = None) -> str:
    """Where `runs` (observed_runs) were made, or the one of them at `dims`, in words."""
    from onnxrefine.verify import ort

    shown = [ort.shown_dims(d) for d, _ in runs] if dims is None else [ort.shown_dims(dims)]
    return "on the model's own input shapes" if shown == [""] else "at " + " and at ".join(shown)


def log_refuse(pctx: PassContext, rule: str, graph: ir.Graph, node: ir.Node, reason: str | RewriteRefused,
               guard: str = "") -> None:
    """Log a refusal: a caught RewriteRefused (its guard id recorded), or a reason and a literal `guard`."""
    if isinstance(reason, RewriteRefused):
        reason, guard = str(reason), reason.guard
    pctx.log.refuse(rule, graph.name or "", node_label(node), reason, guard)


def opset_of(model: ir.Model, graph: ir.Graph, domain: str = "") -> int:
    return opset_version(graph.opset_imports, model.opset_imports, domain)
