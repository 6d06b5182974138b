"""Inlining model-local functions, only when asked (not in the default pipeline: functions are
kept by default, and every other pass already works inside them)."""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import InlinePass

from onnxrefine.ir import traversal
from onnxrefine.passes.registry import GRAPH, PassContext, PassSpec
from onnxrefine.rewrite.log import node_label
from onnxrefine.rewrite.rule import EXACT


def _local_calls(model: ir.Model) -> list[ir.Node]:
    local = set(model.functions)
    return [node for site in traversal.graphs(model) for node in site.graph if node.op_identifier() in local]


def inline_functions(pctx: PassContext) -> int:
    calls = _local_calls(pctx.model)
    if not calls:
        return 0
    labels = [(node.graph.name or "", node_label(node)) for node in calls]
    # onnx-ir's inliner (a well-kept library pass) names the inlined values after the call site.
    InlinePass()(pctx.model)
    pctx.names.absorb(pctx.model)
    for graph_name, label in labels:
        pctx.log.apply(rule="inline_functions", kind=EXACT, graph=graph_name, root=label, removed=[label], added=[])
    return len(calls)


PASSES = (
    PassSpec(
        "inline_functions",
        "Inline calls to model-local functions (off by default: functions are kept and optimized in place)",
        run=inline_functions,
        kind=EXACT,
        phase=GRAPH,
        order=5,
        default=False,
        not_fuzzed="the fuzz generator builds no model-local functions",
        exactness="a call of a model-local function means its body with the call's inputs, outputs and "
                  "attributes bound (ONNX function semantics); onnx-ir's inliner binds them",
    ),
)
