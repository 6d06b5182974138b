"""Which nodes and values belong to a model's quantization, so no pass undoes it.

A quantized model says, node by node, which tensors are held in integers and with which scale:
QuantizeLinear / DequantizeLinear pairs (QDQ format, onnxruntime's `quantize_static`), the dynamic
quantization operators (DynamicQuantizeLinear, MatMulInteger, ConvInteger) and the QOperator
format (QLinearConv, QLinearMatMul, com.microsoft QLinear*). onnxruntime turns a "node unit"
(DequantizeLinear on every input -> op -> QuantizeLinear) into an integer kernel; that only works
while the unit is intact. So, for every pass that folds, moves, merges or removes nodes:

- a Q/DQ node is never folded (folding DequantizeLinear of a constant weight turns an int8 weight
  into float32: onnxruntime then re-quantizes it with scales of its own and the outputs move by a
  quantization step), merged with a twin only where every consumer keeps the node unit the
  runtime's QDQ fusions form (`merge_refusal`), and never reached through by a fusion;
- a float layer inside a quantized region (its data input is dequantized, or its result is
  quantized next) does not get float arithmetic folded into it: the folded value is rounded
  differently, and QuantizeLinear amplifies a rounding-level change into a whole quantization
  step. Only rewrites that keep every quantized value bit-identical are allowed there.

`fold_refusal`, `merge_refusal` and `layer_refusal` give the reason a pass must decline (or None);
every pass asks the same questions here, so the policy is in one place.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.attrs import attr
from onnxrefine.ir.opsets import STANDARD_DOMAINS

QUANT_DOMAINS = (*STANDARD_DOMAINS, "com.microsoft")
# Nodes that set which tensors are quantized and how: never folded, merged or removed as a no-op.
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
QUANTIZING_OPS = QDQ_OPS | frozenset({"DynamicQuantizeLinear"})


def is_quantizing_node(node: ir.Node | None) -> bool:
    """QuantizeLinear, DequantizeLinear or DynamicQuantizeLinear (standard or com.microsoft)."""
    return node is not None and node.domain in QUANT_DOMAINS and node.op_type in QUANTIZING_OPS


def dequantized(value: ir.Value | None) -> bool:
    """The value is the output of a DequantizeLinear (a quantized weight or activation)."""
    producer = value.producer() if value is not None else None
    return producer is not None and producer.domain in QUANT_DOMAINS and producer.op_type == "DequantizeLinear"


def quantized_next(value: ir.Value | None) -> bool:
    """Some reader of the value quantizes it (QuantizeLinear / DynamicQuantizeLinear)."""
    return value is not None and any(
        use.node.domain in QUANT_DOMAINS and use.node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear")
        for use in value.uses())


def fold_refusal(node: ir.Node) -> str | None:
    """Why constant folding must leave `node` alone, or None."""
    if is_quantizing_node(node):
        return (f"{node.op_type} is part of the model's quantization: folding it would store the tensor in "
                "float and the runtime would re-quantize it with scales of its own")
    return None


def merge_refusal(node: ir.Node) -> str | None:
    """Why common-subexpression elimination must not merge `node` with a twin (the same inputs,
    scale and zero point included, and attributes), or None.

    The rule follows onnxruntime's QDQ handling. Its selectors turn a node unit (a DequantizeLinear
    on the inputs -> op -> one QuantizeLinear per output, the op's outputs read by those Qs only)
    into an integer kernel, and before they run, EnsureUniqueDQForNodeUnit gives every consumer
    of a shared DequantizeLinear a copy of its own. So:

    - twin DequantizeLinear nodes (standard domain) merge: onnxruntime copies the merged one back
      per consumer, and every consumer's node unit is the one it had;
    - twin QuantizeLinear nodes (standard domain) merge only where the quantized tensor's producer
      forms no node unit before or after: the tensor is a graph input, a constant or a graph
      output, its producer reads no DequantizeLinear output, or a node other than a
      QuantizeLinear reads it too. Otherwise one Q instead of two could let the producer become a
      unit (the selectors count one Q per output), which changes what a runtime that forms node
      units from the graph as given computes (onnxruntime's own common-subexpression elimination
      merges such twins before its selectors, so it loses nothing by this);
    - DynamicQuantizeLinear and the com.microsoft forms are never merged."""
    if not is_quantizing_node(node):
        return None
    if node.domain in STANDARD_DOMAINS and node.op_type == "DequantizeLinear":
        return None
    if node.domain in STANDARD_DOMAINS and node.op_type == "QuantizeLinear" and not _may_become_unit(node.inputs[0]):
        return None
    return f"{node.op_type} nodes are kept one per quantized unit, as the runtime's QDQ fusions expect"


def _may_become_unit(value: ir.Value | None) -> bool:
    """Whether the producer of `value`, quantized by QuantizeLinear twins, might form a QDQ node
    unit once they are one node (see merge_refusal)."""
    producer = value.producer() if value is not None else None
    if producer is None or value.is_graph_output():
        return False
    if not any(dequantized(v) for v in producer.inputs):
        return False
    return all(use.node.op_type == "QuantizeLinear" and use.node.domain in QUANT_DOMAINS for use in value.uses())


def layer_refusal(layer: ir.Node, result: ir.Value | None = None) -> str | None:
    """Why float arithmetic after `layer` (BatchNormalization, Mul, Add whose output is `result`)
    must not be folded into the layer's weights, or None.

    A layer reading a dequantized input or weight is part of a Q/DQ unit; a result read by
    QuantizeLinear is rounded to the quantization grid next, so a rounding-level change in the
    folded weights can move it by a whole step."""
    if any(dequantized(v) for v in layer.inputs):
        return (f"the {layer.op_type} is part of a quantized unit (a DequantizeLinear feeds it): folding float "
                "arithmetic into it is not exactly representable in its quantized form")
    if result is not None and quantized_next(result):
        return ("the folded result is quantized next (QuantizeLinear): a rounding-level change in the folded "
                "weights can move it by a whole quantization step")
    return None


def refuse_quantized_layer(layer: ir.Node, *results: ir.Value | None) -> None:
    """Raise RewriteRefused with `layer_refusal`'s reason when it has one (for rewrite rules)."""
    for result in results or (None,):
        reason = layer_refusal(layer, result)
        if reason is not None:
            raise RewriteRefused("quant.layer", reason)


def zero_sign_use(node: ir.Node, index: int) -> str | None:
    """How a quantized operator reading a float at input `index` treats a zero's sign, for
    ir/signed_zero.py: 'stop' (the output is the same for -0.0 and +0.0), 'carry', 'sink'; None
    for other operators.

    QuantizeLinear to an integer type computes saturate(round(x / scale) + zero_point): -0.0 and
    +0.0 both give zero_point. Its scale is a divisor (a sink). DynamicQuantizeLinear also derives
    its scale from the data, so it carries conservatively. The integer kernels read integers only.
    """
    if node.domain not in QUANT_DOMAINS:
        return None
    op = node.op_type
    if op == "QuantizeLinear":
        if index != 0:
            return "sink"
        zero_point = node.inputs[2] if len(node.inputs) > 2 else None
        target = zero_point.dtype if zero_point is not None else None
        declared = attr(node, "output_dtype")
        if declared is not None:
            target = ir.DataType(declared) if declared else target
        elif zero_point is None:
            target = ir.DataType.UINT8
        return "stop" if target is not None and target.is_integer() else "carry"
    if op == "DynamicQuantizeLinear":
        return "carry"
    if op in ("MatMulInteger", "ConvInteger"):
        return "stop"
    return None
