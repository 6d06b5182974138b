"""SplitToSequence read only by SequenceAt at constant positions is a Split (the dynamo exporter's
torch.split / chunk: GPT-2's q/k/v, 4 nodes a layer become 1; onnxscript does the same).

Split and SplitToSequence cut the same pieces for the same `split` and axis; SequenceAt(seq, i)
picks piece i (negative i counts from the end). Data movement only: EXACT.

Guards: `split` is a constant (a 1-D list of sizes, or a scalar chunk size with the axis' size
static from trusted facts; without `split` the pieces are keepdims-dependent and it is left alone);
the sequence is read only by SequenceAt nodes of the same graph whose positions are constant
scalars inside the piece count; the sequence is not a graph output.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.attrs import attr
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.facts import StaticShapes
from onnxrefine.passes import graphpass
from onnxrefine.passes.registry import GRAPH, NO_PATTERN_YET, PassContext, PassSpec
from onnxrefine.rewrite.rule import EXACT

RULE = "split_to_sequence_as_split"


def _sizes(node: ir.Node, oracle: StaticShapes) -> list[int]:
    if len(node.inputs) < 2 or node.inputs[1] is None:
        raise RewriteRefused("split_seq.no_split", "no split input: the pieces depend on keepdims")
    split = constant_array(node.inputs[1])
    if split is None:
        raise RewriteRefused("split_seq.split_not_constant", "split is not a constant")
    if split.ndim == 1:
        sizes = [int(s) for s in split]
        if not sizes or any(s < 0 for s in sizes):
            raise RewriteRefused("split_seq.sizes_invalid", f"split sizes {sizes} are not valid")
        return sizes
    if split.ndim != 0:
        raise RewriteRefused("split_seq.split_rank", "split is neither a scalar nor a list")
    chunk = int(split)
    shape = oracle.symbolic_shape(node.inputs[0])
    axis = int(attr(node, "axis", 0))
    if shape is None or not -len(shape) <= axis < len(shape) or not isinstance(shape[axis], int):
        raise RewriteRefused("split_seq.axis_not_static", "a chunk size needs the axis' size static from trusted facts")
    return chunk_sizes(shape[axis], chunk)


def chunk_sizes(dim: int, chunk: int) -> list[int]:
    """The pieces SplitToSequence cuts a dim of `dim` into for a scalar split `chunk`: equal
    chunks, the last one smaller when `chunk` does not divide `dim`."""
    if chunk <= 0 or dim <= 0:
        raise RewriteRefused("split_seq.chunk", f"chunk {chunk} over a dim of {dim}")
    count = -(-dim // chunk)
    return [chunk] * (count - 1) + [dim - chunk * (count - 1)]


def piece_index(position: int, count: int) -> int | None:
    """The piece SequenceAt(sequence of `count` pieces, `position`) reads (negative positions
    count from the end); None outside the sequence."""
    index = position + count if position < 0 else position
    return index if 0 <= index < count else None


def _readers(node: ir.Node, graph: ir.Graph, count: int) -> list[tuple[ir.Node, int]]:
    sequence = node.outputs[0]
    if sequence.is_graph_output():
        raise RewriteRefused("split_seq.graph_output", "the sequence is a graph output")
    readers = []
    for user, slot in sequence.uses():
        if user.op_type != "SequenceAt" or user.domain not in STANDARD_DOMAINS or slot != 0:
            raise RewriteRefused("split_seq.other_reader", f"the sequence is read by {user.op_type}, not only SequenceAt")
        if user.graph is not graph:
            raise RewriteRefused("split_seq.subgraph_reader", "the sequence is read inside a subgraph")
        position = constant_array(user.inputs[1]) if len(user.inputs) > 1 and user.inputs[1] is not None else None
        if position is None or position.size != 1 or position.dtype.kind not in "iu":
            raise RewriteRefused("split_seq.position_not_constant", "a SequenceAt position is not a constant integer")
        index = piece_index(int(position.reshape(())), count)
        if index is None:
            raise RewriteRefused("split_seq.position_outside", f"SequenceAt position {int(position.reshape(()))} is outside {count} pieces")
        readers.append((user, index))
    if not readers:
        raise RewriteRefused("split_seq.no_reader", "nothing reads the sequence")
    return readers


def rewrite_graph(pctx: PassContext, graph: ir.Graph, in_function: bool, oracle: StaticShapes) -> int:
    changes = 0
    for node in list(graph):
        if node.graph is not graph or node.op_type != "SplitToSequence" or node.domain not in STANDARD_DOMAINS:
            continue
        try:
            sizes = _sizes(node, oracle)
            readers = _readers(node, graph, len(sizes))
            axis = int(attr(node, "axis", 0))
        except RewriteRefused as refused:
            graphpass.log_refuse(pctx, RULE, graph, node, refused)
            continue
        inputs = [node.inputs[0]]
        attributes = [ir.AttrInt64("axis", axis)]
        if graphpass.opset_of(pctx.model, graph) >= 13:
            inputs.append(edit.new_constant(pctx.names, graph, in_function, np.array(sizes, np.int64),
                                            f"{node.name or 'split'}_sizes", before=node))
        else:
            attributes.append(ir.AttrInt64s("split", sizes))
        split = ir.Node("", "Split", inputs, attributes, num_outputs=len(sizes),
                        name=pctx.names.fresh(node.name or "split"))
        for output in split.outputs:
            output.name = pctx.names.fresh(f"{node.name or 'split'}_piece")
        edit.insert_nodes(graph, [split], before=node)
        named: set[int] = set()
        for reader, index in readers:
            edit.replace_value(pctx.names, graph, reader.outputs[0], split.outputs[index])
            edit.remove_nodes(graph, [reader])
            if index not in named:  # each piece is called what its first SequenceAt's output was
                named.add(index)
                edit.pass_on_name(reader.outputs[0], split.outputs[index])
        edit.remove_nodes(graph, [node])
        if node.name:
            split.name = node.name  # the Split stands where the SplitToSequence stood
        graphpass.log_apply(pctx, RULE, EXACT, graph, node, [split.name])
        changes += 1
    return changes


def run(pctx: PassContext) -> int:
    oracle = StaticShapes(pctx.model)
    return sum(rewrite_graph(pctx, site.graph, site.in_function, oracle) for site in list(traversal.graphs(pctx.model)))


PASSES = (
    PassSpec(
        RULE,
        "SplitToSequence read only by SequenceAt at constant positions -> Split (constant split sizes)",
        run=run, kind=EXACT, phase=GRAPH, order=23, not_fuzzed=NO_PATTERN_YET,
        exactness="SequenceAt(SplitToSequence(x, sizes), i) is the i-th piece of Split(x, sizes) by both "
                  "operators' definitions, at constant positions and sizes",
    ),
)
