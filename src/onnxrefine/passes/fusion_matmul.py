"""MatMul fusions: MatMul + constant bias into Gemm, a matrix Transpose into Gemm's transA/transB,
and sibling MatMuls of one input merged into one MatMul + Split (fuse_qkv). Registered in
passes/fusion.py.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.quantization import refuse_quantized_layer
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.opargs import int64_constant
from onnxrefine.rewrite.pattern import Const, Match, Op, Opt, Var, constant_array_available
from onnxrefine.rewrite.rule import REASSOCIATING, Replacement, RewriteContext, Rule


# --- fuse_matmul_add_bias_into_gemm -----------------------------------------------------------

_GEMM_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)


def _gemm_columns(m: Match, ctx: RewriteContext, bias_dtype) -> int:
    """The column count N of MatMul(a, b) once Gemm can take its operands: opset, a 2-D weight of
    known shape, a float32/float64 pair, a 2-D input."""
    refuse_quantized_layer(m["matmul"], m["add"].outputs[0])  # quantized units stay as they are
    if ctx.opset() < 11:
        raise RewriteRefused("gemm.opset", "Gemm before opset 11 has other broadcast and optional-input rules")
    weight = constant_array(m["b"])
    if weight is None:
        weight_shape = ctx.facts.static_shape(m["b"])
        weight_type = ctx.facts.dtype(m["b"])
        if weight_shape is None or weight_type is None:
            raise RewriteRefused("gemm.weight_shape", "the computed weight's shape or element type is not known from trusted facts")
        weight_dtype = weight_type.numpy()
    else:
        weight_shape, weight_dtype = weight.shape, weight.dtype
    if len(weight_shape) != 2:
        raise RewriteRefused("gemm.weight_rank", "MatMul's second operand is not a matrix")
    if ir.DataType.from_numpy(weight_dtype) not in _GEMM_FLOATS or bias_dtype != weight_dtype:
        raise RewriteRefused("gemm.dtypes", f"dtypes {weight_dtype}/{bias_dtype} are not a float32 or float64 pair")
    if ctx.facts.rank(m["a"]) != 2:
        raise RewriteRefused("gemm.input_rank", "MatMul's input is not known to be 2-D (Gemm would reject it)")
    return weight_shape[1]


def _gemm(m: Match, ctx: RewriteContext) -> Replacement:
    new = ctx.node("Gemm", [m["a"], m["b"], m["c"]], hint=m["add"].name or None)
    return Replacement([new], {m["add"].outputs[0]: new.outputs[0]})


def fuse_matmul_add(m: Match, ctx: RewriteContext) -> Replacement:
    """The weight may be computed (onnxscript fuses those too) where it is known to be a 2-D matrix
    of static shape; a constant bias may be of any shape that broadcasts onto [M, N] without
    enlarging it."""
    bias = m.array("c")
    n = _gemm_columns(m, ctx, bias.dtype)
    if bias.ndim > 2 or (bias.ndim >= 1 and bias.shape[-1] not in (1, n)) or (bias.ndim == 2 and bias.shape[0] != 1):
        raise RewriteRefused("gemm.bias_shape", f"bias of shape {bias.shape} does not broadcast onto [M, {n}] without enlarging it")
    return _gemm(m, ctx)


def fuse_matmul_add_computed(m: Match, ctx: RewriteContext) -> Replacement | None:
    """A bias computed at run time (a graph input, or any node's output) of shape [N] or [1, N]:
    one value per column, as onnxoptimizer and onnxscript fuse it. A run-time value of another
    shape stays an Add: an [M, N] one is a residual connection that deployment-time fusions
    (SkipLayerNormalization) look for. onnxoptimizer puts the Gemm where the MatMul was, so a bias
    computed after the MatMul is read before it is made (the model no longer loads); here the Gemm
    takes the Add's place, after both operands."""
    if constant_array_available(m["c"]):
        return None  # fuse_matmul_add's case
    symbolic = ctx.facts.symbolic_shape(m["c"])
    if symbolic is not None and len(symbolic) == 2 and symbolic[0] != 1:
        return None  # a value per row too: a residual connection, no bias
    bias_type = ctx.facts.dtype(m["c"])
    n = _gemm_columns(m, ctx, None if bias_type is None else bias_type.numpy())
    shape = ctx.facts.static_shape(m["c"])
    if shape not in ((n,), (1, n)):
        raise RewriteRefused("gemm.bias_not_per_column", f"a run-time bias of shape {shape} is not one value per "
                             f"column ([{n}] or [1, {n}])")
    return _gemm(m, ctx)


MATMUL_ADD = Rule(
    "fuse_matmul_add_bias_into_gemm",
    Op("Add", Op("MatMul", Var("a"), Var("b"), name="matmul"), Const("c"), name="add"),
    fuse_matmul_add,
    kind=REASSOCIATING,
)
MATMUL_ADD_COMPUTED = Rule(
    "fuse_matmul_add_computed_bias",
    Op("Add", Op("MatMul", Var("a"), Var("b"), name="matmul"), Var("c"), name="add"),
    fuse_matmul_add_computed,
    kind=REASSOCIATING,
)


# --- fuse_transpose_into_gemm -----------------------------------------------------------------


def _transpose_into_gemm(m: Match, ctx: RewriteContext, flag: str) -> Replacement:
    perm = attr(m["transpose"], "perm")
    if perm is not None and list(perm) != [1, 0]:
        raise RewriteRefused("transpose_gemm.perm", f"Transpose perm {list(perm)} is not a matrix transpose")
    gemm: ir.Node = m["gemm"]
    attributes = dict(gemm.attributes)
    attributes[flag] = ir.AttrInt64(flag, 1 - int(attr(gemm, flag, 0)))
    inputs = list(gemm.inputs)
    inputs[0 if flag == "transA" else 1] = m["t_in"]
    new = ctx.node("Gemm", inputs, attributes, hint=gemm.name or None)
    return Replacement([new], {gemm.outputs[0]: new.outputs[0]})


TRANSPOSE_GEMM_A = Rule(
    "fuse_transpose_into_gemm_a",
    Op("Gemm", Op("Transpose", Var("t_in"), name="transpose"), Var("other"), Opt(Var("c")), name="gemm"),
    lambda m, ctx: _transpose_into_gemm(m, ctx, "transA"),
)
TRANSPOSE_GEMM_B = Rule(
    "fuse_transpose_into_gemm_b",
    Op("Gemm", Var("other"), Op("Transpose", Var("t_in"), name="transpose"), Opt(Var("c")), name="gemm"),
    lambda m, ctx: _transpose_into_gemm(m, ctx, "transB"),
)


# --- fuse_qkv ---------------------------------------------------------------------------------


def _sibling_matmuls(x: ir.Value, graph: ir.Graph) -> list[ir.Node]:
    found = []
    for use in x.uses():
        node = use.node
        if node.op_type != "MatMul" or node.domain not in STANDARD_DOMAINS or use.idx != 0 or node.graph is not graph:
            continue
        weight = constant_array(node.inputs[1])
        if weight is None or weight.ndim != 2 or node in found:
            continue
        found.append(node)
    return found


def _graph_order(ctx: RewriteContext, graph: ir.Graph, nodes: list[ir.Node]) -> dict[ir.Node, int]:
    """Positions of the graph's nodes, numbered once per driver run and graph (numbering the whole
    graph on every fuse_qkv was quadratic: 28 of 58 s on a 400-layer decoder). Rewrites insert
    nodes but never reorder the ones present, so old numbers keep their order; the graph is
    numbered again only when one of `nodes` is newer than the numbering. Keyed by the node
    itself (held), so a removed node's id() can never be taken for a new node's."""
    cache = ctx.__dict__.setdefault("_graph_order", {})
    order = cache.get(id(graph))
    if order is None or order[0] is not graph or any(node not in order[1] for node in nodes):
        order = (graph, {node: i for i, node in enumerate(graph)})
        cache[id(graph)] = order
    return order[1]


def fuse_sibling_matmuls(m: Match, ctx: RewriteContext) -> Replacement | None:
    root: ir.Node = m["matmul"]
    graph = root.graph
    siblings = _sibling_matmuls(m["x"], graph)
    if len(siblings) < 2:
        return None
    order = _graph_order(ctx, graph, siblings)
    siblings.sort(key=lambda n: order[n])
    if siblings[0] is not root:
        return None  # the earliest one fuses the group, so every reader stays after the producer
    weights = [constant_array(node.inputs[1]) for node in siblings]
    for node in siblings:  # quantized units stay as they are (ir/quantization.py)
        refuse_quantized_layer(node, node.outputs[0])
    if len({w.dtype for w in weights}) != 1 or len({w.shape[0] for w in weights}) != 1:
        raise RewriteRefused("qkv.weights_differ", "sibling MatMul weights differ in dtype or inner dimension")
    if ir.DataType.from_numpy(weights[0].dtype) not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
        raise RewriteRefused("qkv.dtype", f"weights of dtype {weights[0].dtype} are not floating point")
    hint = root.name or "qkv"
    merged = ctx.constant(np.concatenate(weights, axis=1), f"{hint}_merged_weight",
                          derived_from=[node.inputs[1] for node in siblings])
    matmul = ctx.node("MatMul", [m["x"], merged], hint=f"{hint}_merged")
    sizes = [w.shape[1] for w in weights]
    if ctx.opset() >= 13:
        split = ctx.node("Split", [matmul.outputs[0], int64_constant(ctx, sizes, f"{hint}_split_sizes")],
                         {"axis": -1}, num_outputs=len(siblings), hint=f"{hint}_split")
    else:
        split = ctx.node("Split", [matmul.outputs[0]], {"axis": -1, "split": sizes}, num_outputs=len(siblings),
                         hint=f"{hint}_split")
    outputs = {node.outputs[0]: out for node, out in zip(siblings, split.outputs)}
    return Replacement([matmul, split], outputs, also_removed=siblings[1:])


QKV = Rule(
    "fuse_qkv",
    Op("MatMul", Var("x"), Const("w"), name="matmul"),
    fuse_sibling_matmuls,
    kind=REASSOCIATING,
)
