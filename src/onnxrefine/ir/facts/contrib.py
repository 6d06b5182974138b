"""onnxruntime's contrib operators (com.microsoft), so passes can work around them: a no-op
Reshape after Attention or a Transpose pair after FastGelu is only removable when the shape
through the contrib op is known.

Only operators whose output 0 is fully determined by their documented semantics are listed;
onnxruntime's kernels check these shapes at run time, as they do for standard operators.
Everything else (Attention with past state or explicit qkv_hidden_sizes, extra outputs such as
SkipLayerNormalization's mean) stays unknown.
"""

from __future__ import annotations

from onnxrefine.ir.facts.core import CONTRIB_DOMAIN, Site, dtype_rule, shape_rule

# Output 0 has the shape and element type of input 0 (elementwise, bias over the last axis, or a
# normalization over the last axis).
_LIKE_INPUT0 = tuple(
    """FastGelu QuickGelu BiasGelu Gelu BiasAdd SkipLayerNormalization SkipSimplifiedLayerNormalization
    SimplifiedLayerNormalization""".split()
)


@shape_rule(_LIKE_INPUT0, domain=CONTRIB_DOMAIN)
def like_input0_shape(site: Site):
    return site.shape(0)


@shape_rule("Attention", domain=CONTRIB_DOMAIN)
def attention_shape(site: Site):
    # output: (batch, sequence, v_hidden) with Q, K, V packed along weight's last axis
    node = site.node
    if len(node.inputs) > 4 and any(v is not None for v in node.inputs[4:]):
        return None  # past state, attention bias, ...: another layout
    if "qkv_hidden_sizes" in node.attributes or "past_present_share_buffer" in node.attributes:
        return None
    data, weight = site.shape(0), site.static(1)
    if data is None or len(data) != 3 or weight is None or len(weight) != 2 or weight[1] % 3:
        return None
    return (data[0], data[1], weight[1] // 3)


@dtype_rule(_LIKE_INPUT0 + ("Attention", "FusedMatMul"), domain=CONTRIB_DOMAIN)
def like_input0_dtype(site: Site):
    return site.dtype(0)
