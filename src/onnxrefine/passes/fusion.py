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
    SQUEEZE_UNSQUEEZE,
    SQUEEZES,
    TRANSPOSES,
    TRANSPOSES_IDENTITY,
    UNSQUEEZE_SQUEEZE,
    UNSQUEEZES,
    compose_perms,
    compose_squeezes,
    compose_unsqueezes,
)
from onnxrefine.passes.fusion_matmul import (  # noqa: F401  (re-exported for callers and tests)
    MATMUL_ADD,
    MATMUL_ADD_COMPUTED,
    QKV,
    TRANSPOSE_GEMM_A,
    TRANSPOSE_GEMM_B,
    fuse_matmul_add,
    fuse_matmul_add_computed,
    fuse_sibling_matmuls,
)
from onnxrefine.passes.fusion_pad import PAD_CONV, PAD_POOL
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec

PASSES = (
    PassSpec("fuse_consecutive_transposes", "Transpose(Transpose(x)) -> one Transpose with the composed perm (x "
             "itself when it is the identity, the inner one kept for its other readers)",
             rules=(TRANSPOSES, TRANSPOSES_IDENTITY), order=30, fuzz="consecutive_transposes"),
    PassSpec("fuse_consecutive_squeezes", "Squeeze(Squeeze(x)) -> one Squeeze (negative axes resolved per step)",
             rules=(SQUEEZES,), order=30, fuzz="consecutive_squeezes"),
    PassSpec("fuse_consecutive_unsqueezes", "Unsqueeze(Unsqueeze(x)) -> one Unsqueeze (axes of the output rank)",
             rules=(UNSQUEEZES,), order=30, fuzz="consecutive_unsqueezes"),
    PassSpec("fuse_consecutive_squeeze_unsqueeze", "Unsqueeze(Squeeze(x, a), a) -> x where x's dims at a are known "
             "to be 1; Squeeze(Unsqueeze(x, a), a) -> x", rules=(SQUEEZE_UNSQUEEZE, UNSQUEEZE_SQUEEZE), order=30,
             not_fuzzed=NO_PATTERN_YET),
    PassSpec("fuse_consecutive_slices", "Slice(Slice(x)) on disjoint axes -> one Slice",
             rules=(SLICES,), order=30, fuzz="consecutive_slices"),
    PassSpec("fuse_consecutive_concats", "Concat of a same-axis Concat read only there -> one Concat",
             rules=(CONCATS,), order=30, fuzz="consecutive_concats"),
    PassSpec("fuse_consecutive_log_softmax", "Log(Softmax(x)) -> LogSoftmax(x) (more accurate, not identical)",
             rules=(LOG_SOFTMAX,), order=30, fuzz="log_softmax"),
    PassSpec("fuse_consecutive_reduce_unsqueeze", "Unsqueeze(ReduceX(x, keepdims=0)) on the same axes -> keepdims=1",
             rules=(REDUCE_UNSQUEEZE,), order=30, fuzz="reduce_unsqueeze"),
    PassSpec("fuse_matmul_add_bias_into_gemm", "MatMul(A 2-D, B 2-D: constant, or computed of static shape) + "
             "constant bias, or a run-time one per column ([N] or [1, N]) -> Gemm",
             rules=(MATMUL_ADD, MATMUL_ADD_COMPUTED), order=30, fuzz="matmul_add"),
    PassSpec("fuse_transpose_into_gemm", "Transpose [1,0] feeding Gemm -> Gemm transA/transB",
             rules=(TRANSPOSE_GEMM_A, TRANSPOSE_GEMM_B), order=30, fuzz="transpose_gemm"),
    PassSpec("fuse_pad_into_conv", "Constant zero Pad on spatial dims -> Conv pads (auto_pad=VALID too); a Pad of "
             "x_zero_point -> ConvInteger pads",
             rules=(PAD_CONV,), order=30, fuzz="pad_conv"),
    PassSpec("fuse_pad_into_pool",
             "Zero Pad -> AveragePool(count_include_pad=1) pads where a window's zero sign (which may flip) reaches "
             "no sign-sensitive use; never MaxPool",
             rules=(PAD_POOL,), order=30, fuzz="pad_pool"),
    PassSpec("fuse_concat_into_reshape", "Reshape target built by Concat of constants/known sizes -> constant target "
             "(a Concat other nodes read stays for them)",
             rules=(CONCAT_RESHAPE,), order=30, fuzz="concat_into_reshape"),
    PassSpec("fuse_qkv", "MatMuls of one input by constant weights -> one MatMul on merged weights + Split",
             rules=(QKV,), order=30, fuzz="qkv"),
)
