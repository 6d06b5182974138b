"""Each run-time dim read once: integer shape values that the trusted facts (ir/facts/) show to
hold the same elements are merged into the first of them.

An exported transformer reads the batch and sequence sizes again in every attention block, from
a different tensor each time: Gather(Shape(hidden), 0), Gather(Shape(scores), 0), ... The facts
give each run-time dim one token (`Sym`) and carry it through the operators that keep it, so two
such values whose partial values are the same tokens and ints, in the same element type and rank,
are equal on every input: the later one is replaced by the earlier (which comes first in the
graph, so no cycle can form), and the Unsqueezes and Concats built on them become common
subexpressions for `eliminate_common_subexpression`.

What is never merged: two dims that only share a `dim_param` name (onnxruntime checks a symbolic
dim against nothing, so `batch` of two inputs may differ: they are different tokens); a value
whose elements are all known (fold_shapes makes it a constant); a value with an unknown element;
values of different graphs. Each merge is checked like a shape fold: both values are computed by
onnxruntime in runs of the model at two assignments of its symbolic dims in which every dim
differs (verify/ort/dims.py; two dims equal at one size are told apart at the other) and must agree;
what cannot be run is left to the end-to-end verdict, or refused. EXACT: the reader gets the same integers.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.ir import edit, traversal
from onnxrefine.ir.facts import Elements, StaticShapes, Sym
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.passes import graphpass
from onnxrefine.passes.registry import GRAPH, NO_PATTERN_YET, PassContext, PassSpec
from onnxrefine.rewrite.log import CERTIFIED, UNCHECKED
from onnxrefine.rewrite.rule import EXACT

RULE = "merge_dim_reads"


def fact_key(elements: Elements | None) -> tuple | None:
    """What makes two values equal at run time by the facts: element type, rank and each element
    (an int, or its dim's token itself); None for a value with an unknown element or
    with no run-time dim at all."""
    if elements is None or any(e is None for e in elements.items):
        return None
    if not any(isinstance(e, Sym) for e in elements.items):
        return None
    return elements.dtype, elements.scalar, elements.items  # a Sym hashes and compares by identity


def _merges_in_graph(pctx: PassContext, graph: ir.Graph, oracle: StaticShapes) -> list[tuple[ir.Node, ir.Value]]:
    """(node, the earlier value its one output equals) for each node whose value was read before."""
    first: dict[tuple, ir.Value] = {}
    merges = []
    for node in graph:
        if node.domain not in STANDARD_DOMAINS or len(node.outputs) != 1 or edit.is_unread(node):
            continue
        output = node.outputs[0]
        key = fact_key(oracle.elements(output))
        if key is None:
            continue
        earlier = first.setdefault(key, output)
        if earlier is output:
            continue
        if output.is_graph_output():
            graphpass.log_refuse(pctx, RULE, graph, node, "the value is a graph output: the value read first "
                                 "would have to take its name and lose its own", guard="merge_dim_reads.graph_output")
            continue
        merges.append((node, earlier))
    return merges


def _checked(pctx: PassContext, graph: ir.Graph, merges, oracle: StaticShapes) -> list[tuple[str, str] | None]:
    """Each merge's (evidence, note) once onnxruntime computed both values alike in the runs of
    graphpass.observed_runs (two sizes of the symbolic dims); None for a merge refused here (they
    differ, or nothing could be run in a run that does not verify end to end)."""
    if pctx.certifier is None or not merges:
        return [(UNCHECKED, "")] * len(merges)
    probes = [v for node, earlier in merges for v in (node.outputs[0], earlier)]
    runs = graphpass.observed_runs(pctx, probes, oracle)
    if isinstance(runs, str):
        reason = f"the model does not run in onnxruntime to check it: {runs}"
        return [graphpass.uncertified(pctx, RULE, graph, node, reason) for node, _ in merges]
    checked = []
    for node, earlier in merges:
        later = node.outputs[0]
        if any(id(later) not in observed or id(earlier) not in observed for _, observed in runs):
            checked.append(graphpass.uncertified(
                pctx, RULE, graph, node, "its value depends on a function's or a loop body's inputs, which "
                "onnxruntime gives values only within a call or an iteration"))
            continue
        differing = next(((dims, observed[id(later)], observed[id(earlier)]) for dims, observed in runs
                          if not _same(observed[id(later)], observed[id(earlier)])), None)
        if differing is not None:
            dims, got, want = differing
            graphpass.log_refuse(pctx, RULE, graph, node, f"onnxruntime computes {got.tolist()} here and "
                                 f"{want.tolist()} for {earlier.name!r} {graphpass.where_observed(runs, dims)}",
                                 guard="merge_dim_reads.runtime_disagrees")
            checked.append(None)
            continue
        checked.append((CERTIFIED, f"certified: onnxruntime computes the same value as {earlier.name!r} "
                                   f"{graphpass.where_observed(runs)}"))
    return checked


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def merge_in_graph(pctx: PassContext, graph: ir.Graph, oracle: StaticShapes) -> int:
    merges = _merges_in_graph(pctx, graph, oracle)
    changes = 0
    for (node, earlier), evidence in zip(merges, _checked(pctx, graph, merges, oracle)):
        if evidence is None:
            continue
        edit.replace_value(pctx.names, graph, node.outputs[0], earlier)
        edit.remove_unread(graph, [node])
        graphpass.log_apply(pctx, RULE, EXACT, graph, node, [earlier.name or ""], evidence=evidence[0],
                            certificate=evidence[1])
        changes += 1
    return changes


def run_merge_dim_reads(pctx: PassContext) -> int:
    oracle = StaticShapes(pctx.model)
    return sum(merge_in_graph(pctx, site.graph, oracle) for site in list(traversal.graphs(pctx.model)))


PASSES = (
    PassSpec(
        RULE,
        "Read each run-time dim once: merge integer shape values (Gather of Shape, Concat of dims, ...) "
        "that the trusted facts show to be the same dims, never two dims that only share a name",
        run=run_merge_dim_reads,
        kind=EXACT,
        phase=GRAPH,
        order=13,
        exactness="values with the same element type, rank and elements (ints, and the same run-time dims "
                  "by the trusted facts) are equal on every input; each merge checked against onnxruntime "
                  "at two sizes of the model's symbolic dims",
        not_fuzzed=NO_PATTERN_YET,
    ),
)
