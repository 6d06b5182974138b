"""Shape folding: Shape, Size, and the integer arithmetic on shapes, folded where the dims they
read are known from trusted facts (ir/facts/), with symbolic dims kept symbolic.

- A Shape/Size/Gather/Slice/Concat/... whose every element is known becomes a constant; Shape's
  `start`/`end` (opset 15+) are honoured, and a symbolic dim is never folded to a number.
- A Reshape target computed from shapes becomes a constant when each unknown element is the
  size of the same axis of the data being reshaped: that element becomes 0 ("copy the input
  dim"), which needs allowzero=0. Reshape(x, Concat(Shape(x)[0:1], [12, 64])) -> Reshape(x, [0, 12, 64]).
All of it is integer bookkeeping over sizes the runtime itself would compute: EXACT.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.attrs import attr
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.facts import StaticShapes, Sym
from onnxrefine.passes import graphpass
from onnxrefine.passes.registry import GRAPH, NO_PATTERN_YET, PassContext, PassSpec
from onnxrefine.rewrite.log import CERTIFIED, UNCHECKED
from onnxrefine.rewrite.rule import EXACT

# Operators whose output value the oracle can compute from partial shape information.
FOLDABLE = frozenset("Shape Size Gather Slice Concat Unsqueeze Squeeze Cast Identity Reshape Add Sub Mul Div Max Min".split()
                     + ["Equal"])  # Equal of dims and negative ints (Expand's Where(Equal(shape, -1), 1, shape))


def _reshape_target(node: ir.Node, oracle: StaticShapes) -> np.ndarray | None:
    """A constant Reshape target equivalent to the computed one, or None."""
    if len(node.inputs) < 2 or node.inputs[1] is None or constant_array(node.inputs[1]) is not None:
        return None
    target = oracle.elements(node.inputs[1])
    if target is None or target.scalar or target.known():
        return None  # a fully known target is folded as a value
    if attr(node, "allowzero", 0):
        return None
    items = copying_target(target.items, oracle.symbolic_shape(node.inputs[0]))
    return None if items is None else np.array(items, dtype=np.int64)


def copying_target(items, data_shape) -> list[int] | None:
    """The partial value `items` of a Reshape target (allowzero=0) written with constants: a
    symbolic dim becomes 0 where it is the data's own dim at that position; None if another
    element is not known."""
    result = []
    for i, element in enumerate(items):
        if isinstance(element, int):
            result.append(element)
        elif isinstance(element, Sym) and data_shape is not None and i < len(data_shape) and data_shape[i] is element:
            result.append(0)
        else:
            return None
    return result


def fold_shapes_in_graph(pctx: PassContext, graph: ir.Graph, in_function: bool, oracle: StaticShapes,
                         only: frozenset[str], rule: str) -> int:
    folds = []  # (node, the constant it gives, whether it is a Reshape's new target)
    for node in list(graph):
        if node.graph is not graph or node.domain not in STANDARD_DOMAINS:
            continue
        if node.op_type == "Reshape" and "Reshape" in only:
            try:
                target = _reshape_target(node, oracle)
            except RewriteRefused as refused:  # allowzero=@a: the caller's, not known in the body
                graphpass.log_refuse(pctx, rule, graph, node, refused)
                continue
            if target is not None:
                folds.append((node, target, True))
                continue
        if node.op_type not in only or len(node.outputs) != 1:
            continue
        output = node.outputs[0]
        if edit.is_unread(node):
            continue
        elements = oracle.elements(output)
        if elements is None or not elements.known():
            continue
        if output.type is not None and output.dtype is not None and output.dtype != elements.dtype:
            graphpass.log_refuse(pctx, rule, graph, node,
                                 f"declared element type {output.dtype} differs from the computed {elements.dtype}",
                                 guard="static_shape.declared_dtype")
            continue
        folds.append((node, elements.array(), False))
    changes = 0
    for (node, array, is_target), evidence in zip(folds, _checked(pctx, graph, folds, rule, oracle)):
        if evidence is None:
            continue  # refused, and logged
        if is_target:
            old_target = node.inputs[1]
            value = edit.new_constant(pctx.names, graph, in_function, array,
                                      f"{old_target.name or 'shape'}_static", before=node)
            node.replace_input_with(1, value)
        else:
            output = node.outputs[0]
            value = edit.new_constant(pctx.names, graph, in_function, array, f"{output.name or node.op_type}_static",
                                      before=node)
            edit.replace_value(pctx.names, graph, output, value)
            edit.remove_nodes(graph, [node])
            edit.pass_on_name(output, value)
        graphpass.log_apply(pctx, rule, EXACT, graph, node, [value.name], evidence=evidence[0], certificate=evidence[1])
        changes += 1
    return changes


def _checked(pctx: PassContext, graph: ir.Graph, folds, rule: str, oracle: StaticShapes) -> list[tuple[str, str] | None]:
    """Each fold's (evidence, note), after comparing what it folds with the value onnxruntime
    computes in runs of the model at two assignments of its symbolic dims in which every dim
    differs (verify/ort/dims.py: a fold right at one size only is caught at the other); None for
    a fold refused here (the runtime disagrees, or nothing could be checked in a run that does not
    verify end to end)."""
    if pctx.certifier is None or not folds:
        return [(UNCHECKED, "")] * len(folds)
    probes = [v for node, _, is_target in folds for v in probes_of(node, is_target)]
    runs = graphpass.observed_runs(pctx, probes, oracle)
    if isinstance(runs, str):
        reason = f"the model does not run in onnxruntime to check it: {runs}"
        return [graphpass.uncertified(pctx, rule, graph, node, reason) for node, _, _ in folds]
    checked = []
    for node, array, is_target in folds:
        if any(id(v) not in observed for _, observed in runs for v in probes_of(node, is_target)):
            checked.append(graphpass.uncertified(
                pctx, rule, graph, node, "its value depends on a function's or a loop body's inputs, which "
                "onnxruntime gives values only within a call or an iteration"))
            continue
        disagreement = next((f"{detail} {graphpass.where_observed(runs, dims)}" for dims, observed in runs
                             for detail in [_disagreement(node, array, is_target, observed)] if detail), None)
        if disagreement is not None:
            graphpass.log_refuse(pctx, rule, graph, node, disagreement, guard="static_shape.runtime_disagrees")
            checked.append(None)
        else:
            checked.append((CERTIFIED, f"certified: onnxruntime computes the same value {graphpass.where_observed(runs)}"))
    return checked


def _disagreement(node: ir.Node, array, is_target: bool, observed: dict) -> str | None:
    """How a fold differs from one run's values (None: it agrees)."""
    if is_target:
        data, output = observed[id(node.inputs[0])], observed[id(node.outputs[0])]
        got, want = _reshaped(data.shape, array), tuple(output.shape)
        if got == want:
            return None
        return f"Reshape to {list(array)} gives {list(got) if got else got} where onnxruntime's is {list(want)}"
    computed = observed[id(node.outputs[0])]
    if computed.dtype == array.dtype and computed.shape == array.shape and np.array_equal(computed, array):
        return None
    return f"folded {array.tolist()} where onnxruntime computes {computed.tolist()}"


def probes_of(node: ir.Node, is_target: bool) -> list[ir.Value]:
    """The values whose runtime arrays check a fold: the folded output, or a Reshape's data and output."""
    return [node.inputs[0], node.outputs[0]] if is_target else [node.outputs[0]]


def _reshaped(shape: tuple, target) -> tuple | None:
    """The output shape of Reshape(data of `shape`, `target`) with allowzero=0 (None: no such)."""
    dims = [int(shape[i]) if int(t) == 0 and i < len(shape) else int(t) for i, t in enumerate(target)]
    if dims.count(-1) > 1:
        return None
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0:
            return None
        dims[dims.index(-1)] = int(np.prod(shape, dtype=np.int64)) // known
    return tuple(dims) if int(np.prod(dims, dtype=np.int64)) == int(np.prod(shape, dtype=np.int64)) else None


def _runner(only: frozenset[str], rule: str):
    def run(pctx: PassContext) -> int:
        oracle = StaticShapes(pctx.model)
        return sum(
            fold_shapes_in_graph(pctx, site.graph, site.in_function, oracle, only, rule)
            for site in list(traversal.graphs(pctx.model))
        )

    return run


SHAPE_EXACTNESS = ("integer bookkeeping over the dims the trusted facts give; each folded value checked "
                   "against onnxruntime at two sizes of the model's symbolic dims")

PASSES = (
    PassSpec(
        "fold_shapes",
        "Fold Shape/Size and integer shape arithmetic (Gather, Slice, Concat, ...) over trusted static "
        "dims; make computed Reshape targets constant (symbolic dims become 0)",
        run=_runner(FOLDABLE, "fold_shapes"),
        kind=EXACT,
        phase=GRAPH,
        order=12,
        exactness=SHAPE_EXACTNESS,
        not_fuzzed=NO_PATTERN_YET,
    ),
    PassSpec(
        "eliminate_shape_op",
        "Replace Shape/Size of a tensor whose needed dims are statically known by a constant "
        "(honours Shape's start/end)",
        run=_runner(frozenset({"Shape", "Size"}), "eliminate_shape_op"),
        kind=EXACT,
        phase=GRAPH,
        order=12,
        exactness=SHAPE_EXACTNESS,
        default=False,
        fuzz="shape_op",
    ),
    PassSpec(
        "eliminate_shape_gather",
        "Replace Gather from a Shape by a constant when the gathered dims are statically known",
        run=_runner(frozenset({"Gather"}), "eliminate_shape_gather"),
        kind=EXACT,
        phase=GRAPH,
        order=12,
        exactness=SHAPE_EXACTNESS,
        default=False,
        fuzz="shape_gather",
    ),
    PassSpec(
        "eliminate_slice_after_shape",
        "Replace Slice of a Shape by a constant when the sliced dims are statically known "
        "(honours Shape's start/end, unlike onnxoptimizer)",
        run=_runner(frozenset({"Slice"}), "eliminate_slice_after_shape"),
        kind=EXACT,
        phase=GRAPH,
        order=12,
        exactness=SHAPE_EXACTNESS,
        default=False,
        fuzz="slice_after_shape",
    ),
)
