"""Shape and element-type rules for onnxruntime's contrib operators (com.microsoft), so passes can
work around them: a no-op Reshape after Attention or a Transpose pair after FastGelu is only
removable when the shape through the contrib op is known.

Only operators whose output 0 is fully determined by their documented semantics are listed;
onnxruntime's kernels check these shapes at run time, as they do for standard operators.
Everything else (Attention with past state or explicit qkv_hidden_sizes, extra outputs such as
SkipLayerNormalization's mean) stays unknown.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

CONTRIB_DOMAIN = "com.microsoft"
# Output 0 has the shape and element type of input 0 (elementwise, bias over the last axis, or a
# normalization over the last axis).
_LIKE_INPUT0 = frozenset(
    """FastGelu QuickGelu BiasGelu Gelu BiasAdd SkipLayerNormalization SkipSimplifiedLayerNormalization
    SimplifiedLayerNormalization""".split()
)


def contrib_shape(node: ir.Node, index: int, shape_of: Callable[[int], tuple | None],
                  static_of: Callable[[int], tuple | None]) -> tuple | None:
    """Output `index` of a com.microsoft node, or None when not determined. `shape_of(i)` gives
    input i's symbolic shape, `static_of(i)` its static shape (a constant's)."""
    if node.domain != CONTRIB_DOMAIN or index != 0:
        return None
    op = node.op_type
    if op in _LIKE_INPUT0:
        return shape_of(0)
    if op == "Attention":
        # output: (batch, sequence, v_hidden) with Q, K, V packed along weight's last axis
        if len(node.inputs) > 4 and any(v is not None for v in node.inputs[4:]):
            return None  # past state, attention bias, ...: another layout
        if "qkv_hidden_sizes" in node.attributes or "past_present_share_buffer" in node.attributes:
            return None
        data, weight = shape_of(0), static_of(1)
        if data is None or len(data) != 3 or weight is None or len(weight) != 2 or weight[1] % 3:
            return None
        return (data[0], data[1], weight[1] // 3)
    return None


def contrib_dtype(node: ir.Node, index: int, dtype_of: Callable[[int], ir.DataType | None]) -> ir.DataType | None:
    if node.domain != CONTRIB_DOMAIN or index != 0:
        return None
    if node.op_type in _LIKE_INPUT0 or node.op_type in ("Attention", "FusedMatMul"):
        return dtype_of(0)
    return None
