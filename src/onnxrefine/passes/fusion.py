"""Fusions under onnxoptimizer's names: chains of layout operators composed into one, Pad folded
into Conv/pooling, MatMul+Add into Gemm, Log(Softmax) into LogSoftmax, sibling MatMuls merged.

Exact fusions move no arithmetic (a composed permutation, merged axes, padding the consumer does
itself). Reassociating ones change how a result is rounded (LogSoftmax's own formula; a Gemm or a
wider MatMul that runtimes may block and accumulate differently), and are declared so.

Guards against the known mistakes of other optimizers: negative Squeeze/Unsqueeze axes resolved
against the rank at their own step; a zero Pad is never folded into MaxPool (its padding acts as
-inf), nor into an AveragePool that excludes padding from its count; a Reshape target keeps 0
(copy) only where it copies the very dim it stands for.

The rules live in one module per family (fusion_chains, fusion_matmul, fusion_pad); this module
declares and registers the passes, in the order they always had.
"""

from __future__ import annotations

from onnxrefine.passes.fusion_chains import (  # noqa: F401  (re-exported for callers and tests)
    CONCAT_RESHAPE,
    CONCATS,
    LOG_SOFTMAX,
    REDUCE_UNSQUEEZE,
    SLICES,
    SQUEEZES,
    TRANSPOSES,
    UNSQUEEZES,
    compose_perms,
    compose_squeezes,
    compose_unsqueezes,
)
from onnxrefine.passes.fusion_matmul import (  # noqa: F401  (re-exported for callers and tests)
    MATMUL_ADD,
    QKV,
    TRANSPOSE_GEMM_A,
    TRANSPOSE_GEMM_B,
    fuse_matmul_add,
    fuse_sibling_matmuls,
)
from onnxrefine.passes.fusion_pad import PAD_CONV, PAD_POOL
from onnxrefine.passes.registry import PassSpec, register
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING


_FUSION_PASSES = (
    ("fuse_consecutive_transposes", EXACT, "Transpose(Transpose(x)) -> one Transpose with the composed perm", (TRANSPOSES,)),
    ("fuse_consecutive_squeezes", EXACT, "Squeeze(Squeeze(x)) -> one Squeeze (negative axes resolved per step)", (SQUEEZES,)),
    ("fuse_consecutive_unsqueezes", EXACT, "Unsqueeze(Unsqueeze(x)) -> one Unsqueeze (axes of the output rank)", (UNSQUEEZES,)),
    ("fuse_consecutive_slices", EXACT, "Slice(Slice(x)) on disjoint axes -> one Slice", (SLICES,)),
    ("fuse_consecutive_concats", EXACT, "Concat of a same-axis Concat read only there -> one Concat", (CONCATS,)),
    ("fuse_consecutive_log_softmax", REASSOCIATING, "Log(Softmax(x)) -> LogSoftmax(x) (more accurate, not identical)",
     (LOG_SOFTMAX,)),
    ("fuse_consecutive_reduce_unsqueeze", EXACT, "Unsqueeze(ReduceX(x, keepdims=0)) on the same axes -> keepdims=1",
     (REDUCE_UNSQUEEZE,)),
    ("fuse_matmul_add_bias_into_gemm", REASSOCIATING, "MatMul(A 2-D, constant B) + constant bias -> Gemm", (MATMUL_ADD,)),
    ("fuse_transpose_into_gemm", EXACT, "Transpose [1,0] feeding Gemm -> Gemm transA/transB", (TRANSPOSE_GEMM_A, TRANSPOSE_GEMM_B)),
    ("fuse_pad_into_conv", EXACT, "Constant zero Pad on spatial dims -> Conv pads", (PAD_CONV,)),
    ("fuse_pad_into_pool", REASSOCIATING,
     "Zero Pad -> AveragePool(count_include_pad=1) pads where a window's zero sign (which may flip) reaches no "
     "sign-sensitive use; never MaxPool",
     (PAD_POOL,)),
    ("fuse_concat_into_reshape", EXACT, "Reshape target built by Concat of constants/known sizes -> constant target",
     (CONCAT_RESHAPE,)),
    ("fuse_qkv", REASSOCIATING, "MatMuls of one input by constant weights -> one MatMul on merged weights + Split", (QKV,)),
)

for _name, _kind, _summary, _rules in _FUSION_PASSES:
    register(PassSpec(_name, _kind, _summary, rules=_rules, order=30))
