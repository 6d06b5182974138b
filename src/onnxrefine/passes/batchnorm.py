"""Folding inference-mode BatchNormalization (and constant Mul/Add) into the layer before it.

BN(y) = scale * (y - mean) / sqrt(var + eps) + B = s * y + shift, with s = scale / sqrt(var + eps)
and shift = B - mean * s, all computed in float64 and rounded once to the weight's dtype.
Every rule here reassociates arithmetic (W*s is rounded before the convolution sums instead of
after), so each is declared REASSOCIATING and verified against a float64 reference.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.attrs import attr
from onnxrefine.ir.foldmath import is_float_dtype, round_folded, scale_rounded, to_float64
from onnxrefine.ir.quantization import refuse_quantized_layer
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.signed_zero import refuse_if_observable
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Const, Match, Op, Opt, Var, constant_array_available
from onnxrefine.rewrite.rule import REASSOCIATING, Replacement, RewriteContext, Rule


def _bn(producer: Op) -> Op:
    return Op(
        "BatchNormalization", producer, Const("scale"), Const("bias"), Const("mean"), Const("var"), name="bn"
    )


def _conv(name: str = "conv") -> Op:
    return Op("Conv", Var("x"), Const("w"), Opt(Const("b")), name=name)


def bn_affine(m: Match, ctx: RewriteContext, channels: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(s, shift) in float64 for the matched BN, after every inference-mode guard."""
    bn: ir.Node = m["bn"]
    opset = ctx.opset()
    if attr(bn, "training_mode", 0) != 0:
        raise RewriteRefused("bn.training_mode", "BatchNormalization is in training mode")
    if opset < 7 and attr(bn, "is_test", 0) != 1:
        raise RewriteRefused("bn.is_test", "BatchNormalization (opset < 7) without is_test=1 runs in training mode")
    if opset < 9 and attr(bn, "spatial", 1) != 1:
        raise RewriteRefused("bn.spatial", "BatchNormalization with spatial=0 has per-element statistics")
    if any(out.uses() or out.is_graph_output() for out in bn.outputs[1:]):
        raise RewriteRefused("bn.stats_outputs", "BatchNormalization's running statistics outputs are read")
    params = {}
    for key in ("scale", "bias", "mean", "var"):
        array = m.array(key)
        if array.dtype != dtype:
            raise RewriteRefused("bn.param_dtype", f"BatchNormalization {key} dtype {array.dtype} differs from the weight's {dtype}")
        if array.shape != (channels,):
            raise RewriteRefused("bn.param_shape", f"BatchNormalization {key} has shape {array.shape}, expected ({channels},)")
        params[key] = to_float64(array)
    epsilon = float(np.float32(attr(bn, "epsilon", 1e-5)))
    denominator = params["var"] + epsilon
    if not np.all(np.isfinite(denominator)) or np.any(denominator <= 0):
        raise RewriteRefused("bn.variance", "variance + epsilon is not a finite positive number")
    scale = params["scale"] / np.sqrt(denominator)
    shift = params["bias"] - params["mean"] * scale
    if not (np.all(np.isfinite(scale)) and np.all(np.isfinite(shift))):
        raise RewriteRefused("bn.affine_nonfinite", "the BatchNormalization affine form is not finite")
    if _has_negative_zero(shift) or _has_negative_zero(params["bias"]):
        # BN ends by adding shift (or B): a -0.0 there keeps the sign of a zero y*s, which a
        # negative s flips, while the folded layer's zeros come out as +0.0 (its sums start at +0.0).
        refuse_if_observable(ctx, bn.outputs[0], "folding a BatchNormalization whose shift holds -0.0")
    return scale, shift


def _has_negative_zero(array: np.ndarray) -> bool:
    return bool(np.any((array == 0) & np.signbit(array)))


def _float_weight(m: Match, key: str = "w") -> np.ndarray:
    weight = m.array(key)
    if not is_float_dtype(weight.dtype):
        raise RewriteRefused("bn_fold.weight_dtype", f"weight dtype {weight.dtype} is not floating point")
    return weight


def _bias64(m: Match, key: str, channels: int, dtype: np.dtype) -> np.ndarray:
    bias = m.array(key)
    if bias is None:
        return np.zeros(channels)
    if bias.dtype != dtype or bias.shape != (channels,):
        raise RewriteRefused("bn_fold.bias", f"bias has dtype {bias.dtype} and shape {bias.shape}, expected {dtype} ({channels},)")
    return to_float64(bias)


def _channel_axis(scale: np.ndarray, rank: int, axis: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = scale.size
    return scale.reshape(shape)


def _per_channel(constant: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """A constant broadcast over an NC... tensor of `rank` dims, as a (channels,) vector, if it
    varies along the channel axis only; None if it varies elsewhere too."""
    if constant.ndim > rank:
        raise RewriteRefused("affine_fold.rank", f"constant of rank {constant.ndim} broadcasts the rank-{rank} output up")
    aligned = constant.reshape((1,) * (rank - constant.ndim) + constant.shape)
    if aligned.shape[1] not in (1, channels):
        raise RewriteRefused("affine_fold.channels", f"constant's channel dimension {aligned.shape[1]} does not match {channels}")
    if any(d != 1 for i, d in enumerate(aligned.shape) if i != 1):
        return None
    return np.broadcast_to(to_float64(aligned).reshape(-1), (channels,))


def _constant_like(m: Match, weight: np.ndarray, what: str) -> np.ndarray:
    """The matched constant "c", refused unless it has the weight's dtype."""
    constant = m.array("c")
    if constant.dtype != weight.dtype:
        raise RewriteRefused("affine_fold.dtype", f"{what} dtype {constant.dtype} differs from the weight's {weight.dtype}")
    return constant


def _per_channel_constant(m: Match, weight: np.ndarray, what: str) -> np.ndarray:
    """The matched constant "c" as a float64 per-output-channel vector, or a refusal."""
    per_channel = _per_channel(_constant_like(m, weight, what), weight.ndim, weight.shape[0])
    if per_channel is None:
        raise RewriteRefused("affine_fold.non_channel", f"{what} varies along a non-channel axis")
    return per_channel


def _new_conv(m: Match, ctx: RewriteContext, weight: np.ndarray, bias: np.ndarray | None) -> ir.Node:
    conv: ir.Node = m["conv"]
    w_value = ctx.constant(weight, f"{conv.name or 'conv'}_weight_folded", derived_from=[m["w"]])
    inputs = [m["x"], w_value]
    if bias is not None:
        inputs.append(ctx.constant(bias, f"{conv.name or 'conv'}_bias_folded", derived_from=[m.get("b")]))
    return ctx.node(conv.op_type, inputs, list(conv.attributes.values()), hint=conv.name or None)


def _conv_affine(m: Match, ctx: RewriteContext, scale64: np.ndarray, add64: np.ndarray | None) -> ir.Node:
    """Conv with weight W*scale (per output channel) and bias b*scale + add (no bias when
    there was none and nothing is added)."""
    weight = _float_weight(m)
    channels = weight.shape[0]
    bias = _bias64(m, "b", channels, weight.dtype)
    new_weight = scale_rounded(weight, _channel_axis(scale64, weight.ndim, 0), weight.dtype, "folded weight")
    if add64 is None and m.get("b") is None:
        return _new_conv(m, ctx, new_weight, None)
    new_bias = round_folded(bias * scale64 + (0.0 if add64 is None else add64), weight.dtype, "folded bias")
    return _new_conv(m, ctx, new_weight, new_bias)


def fold_conv_bn(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["conv"], m["bn"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    scale, shift = bn_affine(m, ctx, weight.shape[0], weight.dtype)
    conv = _conv_affine(m, ctx, scale, shift)
    return Replacement([conv], {m["bn"].outputs[0]: conv.outputs[0]})


def fold_conv_transpose_bn(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["conv"], m["bn"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    group = int(attr(m["conv"], "group", 1))
    c_in, c_out_per_group = weight.shape[0], weight.shape[1]
    if group < 1 or c_in % group:
        raise RewriteRefused("bn_conv.group", f"group {group} does not divide the {c_in} input channels")
    channels = group * c_out_per_group
    scale, shift = bn_affine(m, ctx, channels, weight.dtype)
    bias = _bias64(m, "b", channels, weight.dtype)
    grouped = to_float64(weight).reshape((group, c_in // group, c_out_per_group) + weight.shape[2:])
    factors = scale.reshape((group, 1, c_out_per_group) + (1,) * (weight.ndim - 2))
    new_weight = round_folded((grouped * factors).reshape(weight.shape), weight.dtype, "folded weight")
    new_bias = round_folded(bias * scale + shift, weight.dtype, "folded bias")
    conv = _new_conv(m, ctx, new_weight, new_bias)
    return Replacement([conv], {m["bn"].outputs[0]: conv.outputs[0]})


def fold_conv_add_bn(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["conv"], m["bn"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    channels = weight.shape[0]
    scale, shift = bn_affine(m, ctx, channels, weight.dtype)
    added = _constant_like(m, weight, "added constant")
    per_channel = _per_channel(added, weight.ndim, channels)
    if per_channel is not None:
        conv = _conv_affine(m, ctx, scale, (per_channel * scale) + shift)
        return Replacement([conv], {m["bn"].outputs[0]: conv.outputs[0]})
    # A spatial constant stays an Add, rescaled per channel; broadcasting it over the channels
    # may enlarge it, which the constant budget bounds.
    conv = _conv_affine(m, ctx, scale, shift)
    aligned = to_float64(added).reshape((1,) * (weight.ndim - added.ndim) + added.shape)
    scaled = round_folded(aligned * _channel_axis(scale, weight.ndim, 1), weight.dtype, "rescaled added constant")
    scaled_value = ctx.constant(scaled, f"{m['add'].name or 'add'}_constant_folded", derived_from=[m["c"]])
    add = ctx.node("Add", [conv.outputs[0], scaled_value], hint=m["add"].name or None)
    return Replacement([conv, add], {m["bn"].outputs[0]: add.outputs[0]})


def fold_gemm_bn(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["gemm"], m["bn"].outputs[0])  # quantized units stay as they are
    gemm: ir.Node = m["gemm"]
    if ctx.opset() < 7:
        raise RewriteRefused("bn_gemm.opset", "Gemm before opset 7 has broadcast semantics of its own")
    weight = _float_weight(m)
    if weight.ndim != 2:
        raise RewriteRefused("bn_gemm.weight_rank", "Gemm weight is not 2-D")
    trans_b = int(attr(gemm, "transB", 0))
    channels = weight.shape[0] if trans_b else weight.shape[1]
    scale, shift = bn_affine(m, ctx, channels, weight.dtype)
    beta = float(np.float32(attr(gemm, "beta", 1.0)))
    factors = scale[:, None] if trans_b else scale[None, :]
    new_weight = scale_rounded(weight, factors, weight.dtype, "folded weight")
    bias = m.array("c")
    if bias is None:
        new_bias64 = shift
    else:
        if bias.dtype != weight.dtype:
            raise RewriteRefused("bn_gemm.c_dtype", f"Gemm C dtype {bias.dtype} differs from the weight's {weight.dtype}")
        try:
            np.broadcast_shapes(bias.shape, (channels,))
        except ValueError:
            raise RewriteRefused("bn_gemm.c_shape", f"Gemm C of shape {bias.shape} does not broadcast over {channels} columns") from None
        new_bias64 = beta * to_float64(bias) * scale + shift
    new_bias = round_folded(new_bias64, weight.dtype, "folded bias")
    attributes = {k: v for k, v in gemm.attributes.items() if k != "beta"}
    w_value = ctx.constant(new_weight, f"{gemm.name or 'gemm'}_weight_folded", derived_from=[m["w"]])
    c_value = ctx.constant(new_bias, f"{gemm.name or 'gemm'}_bias_folded", derived_from=[m.get("c")])
    new = ctx.node("Gemm", [m["x"], w_value, c_value], list(attributes.values()), hint=gemm.name or None)
    return Replacement([new], {m["bn"].outputs[0]: new.outputs[0]})


def fold_matmul_bn(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["matmul"], m["bn"].outputs[0])  # quantized units stay as they are
    if ctx.opset() < 7:
        raise RewriteRefused("bn_matmul.opset", "Gemm before opset 7 has broadcast semantics of its own")
    weight = _float_weight(m)
    if weight.ndim != 2:
        raise RewriteRefused("bn_matmul.weight_rank", "MatMul weight is not a constant 2-D matrix")
    if ctx.facts.rank(m["matmul"].outputs[0]) != 2:
        raise RewriteRefused("bn_matmul.output_rank", "MatMul output rank is not known to be 2 (BatchNormalization's channel axis)")
    channels = weight.shape[1]
    scale, shift = bn_affine(m, ctx, channels, weight.dtype)
    new_weight = scale_rounded(weight, scale[None, :], weight.dtype, "folded weight")
    new_bias = round_folded(shift, weight.dtype, "folded bias")
    hint = m["matmul"].name or "matmul"
    w_value = ctx.constant(new_weight, f"{hint}_weight_folded", derived_from=[m["w"]])
    c_value = ctx.constant(new_bias, f"{hint}_bias_folded")
    new = ctx.node("Gemm", [m["x"], w_value, c_value], hint=m["matmul"].name or None)
    return Replacement([new], {m["bn"].outputs[0]: new.outputs[0]})


def fold_conv_mul(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["conv"], m["op"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    per_channel = _per_channel_constant(m, weight, "multiplier")
    if np.any(per_channel <= 0) or np.any(np.signbit(per_channel)):
        # Conv(x, W) * s with s < 0 turns the Conv's zeros (+0.0: a window in the padding) into
        # -0.0; Conv(x, W*s) gives +0.0 there. Only where no sign-sensitive use can tell.
        refuse_if_observable(ctx, m["op"].outputs[0], "folding a negative or zero scale into the Conv")
    conv = _conv_affine(m, ctx, per_channel, None)
    return Replacement([conv], {m["op"].outputs[0]: conv.outputs[0]})


def fold_conv_add(m: Match, ctx: RewriteContext) -> Replacement:
    refuse_quantized_layer(m["conv"], m["op"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    per_channel = _per_channel_constant(m, weight, "added constant")
    if m.get("b") is None:
        # The added constant becomes the bias as it is: adding it to an invented +0.0 bias would
        # turn a -0.0 in it into +0.0 (Conv + (-0.0) keeps a zero's sign, Conv + (+0.0) does not).
        new_bias = round_folded(np.array(per_channel), weight.dtype, "folded bias")
    else:
        bias = _bias64(m, "b", weight.shape[0], weight.dtype)
        new_bias = round_folded(bias + per_channel, weight.dtype, "folded bias")
    conv: ir.Node = m["conv"]
    b_value = ctx.constant(new_bias, f"{conv.name or 'conv'}_bias_folded", derived_from=[m.get("b")])
    new = ctx.node("Conv", [m["x"], m["w"], b_value], list(conv.attributes.values()), hint=conv.name or None)
    return Replacement([new], {m["op"].outputs[0]: new.outputs[0]})


# Ops whose output holds their data input's elements in the same order, only shaped otherwise.
_RESHAPING_OPS = ("Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity")


def _channel_axis_of(shape: tuple[int, ...], rank: int, channels: int) -> int:
    """The axis of `shape` that broadcasts onto the channel axis of a rank-`rank` NC... output,
    refused unless every other dim is 1 and that one is `channels`: exactly per channel."""
    if len(shape) > rank or len(shape) < rank - 1:
        raise RewriteRefused("conv_bias.rank", f"an added value of rank {len(shape)} does not line up with the "
                             f"channel axis of a rank-{rank} Conv output")
    axis = len(shape) - rank + 1
    if shape[axis] != channels or any(d != 1 for i, d in enumerate(shape) if i != axis):
        raise RewriteRefused("conv_bias.not_per_channel", f"an added value of shape {list(shape)} is not one value "
                             f"per output channel ({channels})")
    return axis


def fold_conv_add_computed(m: Match, ctx: RewriteContext) -> Replacement | None:
    """Conv(x, W) + c, c computed at run time (a graph input or any node's output) of shape
    [M, 1, ...] or [1, M, 1, ...] for M output channels: c becomes the Conv's bias, read as the
    [M] tensor a Reshape/Unsqueeze/Squeeze/Flatten/Identity made it from, or through a new
    Squeeze. onnxoptimizer does this too but moves only the bias's own producer before the Conv,
    so a bias computed after the Conv from values computed after it leaves the graph out of order;
    here the Conv takes the Add's place, after everything the bias reads. Declared reassociating
    like the constant case: a runtime may add the bias into its accumulator before the sums.
    A Conv that already has a bias is not matched (its two additions would be reassociated)."""
    c, weight = m["c"], m["w"]
    if constant_array_available(c) and constant_array_available(weight):
        return None  # fold_conv_add folds it into a constant bias
    refuse_quantized_layer(m["conv"], m["op"].outputs[0])  # quantized units stay as they are
    weight_shape = ctx.facts.static_shape(weight)
    symbolic = ctx.facts.symbolic_shape(c)
    if weight_shape is not None and symbolic is not None and math.prod(d for d in symbolic if isinstance(d, int)) > weight_shape[0]:
        return None  # more values than channels: a residual or per-element value, no bias
    bias_shape = ctx.facts.static_shape(c)
    if weight_shape is None or len(weight_shape) < 3 or bias_shape is None:
        raise RewriteRefused("conv_bias.shape_unknown", "the weight's or the added value's shape is not known from "
                             "trusted facts")
    channels = weight_shape[0]
    axis = _channel_axis_of(bias_shape, len(weight_shape), channels)
    conv: ir.Node = m["conv"]
    hint = f"{conv.name or 'conv'}_bias"
    producer, nodes, removed = c.producer(), [], []
    if (producer is not None and producer.op_type in _RESHAPING_OPS and producer.domain in STANDARD_DOMAINS
            and ctx.facts.static_shape(producer.inputs[0]) == (channels,)):
        bias, removed = producer.inputs[0], [producer]
    else:
        axes = [i for i in range(len(bias_shape)) if i != axis]
        if ctx.opset() >= 13:
            squeeze = ctx.node("Squeeze", [c, ctx.constant(np.array(axes, np.int64), f"{hint}_axes")], hint=hint)
        else:
            squeeze = ctx.node("Squeeze", [c], {"axes": axes}, hint=hint)
        bias, nodes = squeeze.outputs[0], [squeeze]
    new = ctx.node("Conv", [m["x"], weight, bias], list(conv.attributes.values()), hint=conv.name or None)
    return Replacement([*nodes, new], {m["op"].outputs[0]: new.outputs[0]}, also_removed=removed)


def _transpose_channels(m: Match, weight: np.ndarray, what: str) -> tuple[int, np.ndarray]:
    """(group, the constant "c" per output channel) of a ConvTranspose, whose weight is
    [C_in, C_out / group, k...]: output channel g * C_out/group + j is group g's column j."""
    group = int(attr(m["conv"], "group", 1))
    if group < 1 or weight.shape[0] % group:
        raise RewriteRefused("conv_transpose_affine.group", f"group {group} does not divide the {weight.shape[0]} input channels")
    per_channel = _per_channel(_constant_like(m, weight, what), weight.ndim, group * weight.shape[1])
    if per_channel is None:
        raise RewriteRefused("conv_transpose_affine.non_channel", f"{what} varies along a non-channel axis")
    return group, per_channel


def fold_conv_transpose_mul(m: Match, ctx: RewriteContext) -> Replacement:
    """ConvTranspose(x, W, b) * s -> ConvTranspose(x, W * s, b * s), s per output channel (group-wise)."""
    refuse_quantized_layer(m["conv"], m["op"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    group, scale = _transpose_channels(m, weight, "multiplier")
    if np.any(scale <= 0) or np.any(np.signbit(scale)):
        refuse_if_observable(ctx, m["op"].outputs[0], "folding a negative or zero scale into the ConvTranspose")
    grouped = to_float64(weight).reshape((group, weight.shape[0] // group, weight.shape[1]) + weight.shape[2:])
    factors = scale.reshape((group, 1, weight.shape[1]) + (1,) * (weight.ndim - 2))
    new_weight = round_folded((grouped * factors).reshape(weight.shape), weight.dtype, "folded weight")
    new_bias = None
    if m.get("b") is not None:
        new_bias = round_folded(_bias64(m, "b", scale.size, weight.dtype) * scale, weight.dtype, "folded bias")
    conv = _new_conv(m, ctx, new_weight, new_bias)
    return Replacement([conv], {m["op"].outputs[0]: conv.outputs[0]})


def fold_conv_transpose_add(m: Match, ctx: RewriteContext) -> Replacement:
    """ConvTranspose(x, W, b) + c -> ConvTranspose(x, W, b + c), c per output channel."""
    refuse_quantized_layer(m["conv"], m["op"].outputs[0])  # quantized units stay as they are
    weight = _float_weight(m)
    _, added = _transpose_channels(m, weight, "added constant")
    if m.get("b") is None:  # as it is: adding it to an invented +0.0 would lose a -0.0 in it
        new_bias = round_folded(np.array(added), weight.dtype, "folded bias")
    else:
        new_bias = round_folded(_bias64(m, "b", added.size, weight.dtype) + added, weight.dtype, "folded bias")
    conv: ir.Node = m["conv"]
    b_value = ctx.constant(new_bias, f"{conv.name or 'conv'}_bias_folded", derived_from=[m.get("b")])
    new = ctx.node("ConvTranspose", [m["x"], m["w"], b_value], list(conv.attributes.values()), hint=conv.name or None)
    return Replacement([new], {m["op"].outputs[0]: new.outputs[0]})


def _conv_transpose() -> Op:
    return Op("ConvTranspose", Var("x"), Const("w"), Opt(Const("b")), name="conv")


CONV_BN = Rule("conv_bn", _bn(_conv()), fold_conv_bn, kind=REASSOCIATING, benefit=3)
CONV_TRANSPOSE_BN = Rule(
    "conv_transpose_bn",
    _bn(Op("ConvTranspose", Var("x"), Const("w"), Opt(Const("b")), name="conv")),
    fold_conv_transpose_bn,
    kind=REASSOCIATING,
    benefit=3,
)
CONV_ADD_BN = Rule(
    "conv_add_bn", _bn(Op("Add", _conv(), Const("c"), name="add")), fold_conv_add_bn, kind=REASSOCIATING, benefit=4
)
GEMM_BN = Rule(
    "gemm_bn", _bn(Op("Gemm", Var("x"), Const("w"), Opt(Const("c")), name="gemm")), fold_gemm_bn,
    kind=REASSOCIATING, benefit=3,
)
MATMUL_BN = Rule(
    "matmul_bn", _bn(Op("MatMul", Var("x"), Const("w"), name="matmul")), fold_matmul_bn, kind=REASSOCIATING, benefit=3
)
CONV_MUL = Rule("conv_mul", Op("Mul", _conv(), Const("c"), name="op"), fold_conv_mul, kind=REASSOCIATING)
CONV_ADD = Rule("conv_add", Op("Add", _conv(), Const("c"), name="op"), fold_conv_add, kind=REASSOCIATING)
CONV_ADD_COMPUTED = Rule("conv_add_computed", Op("Add", Op("Conv", Var("x"), Var("w"), name="conv"), Var("c"), name="op"),
                         fold_conv_add_computed, kind=REASSOCIATING)
CONV_TRANSPOSE_MUL = Rule("conv_transpose_mul", Op("Mul", _conv_transpose(), Const("c"), name="op"),
                          fold_conv_transpose_mul, kind=REASSOCIATING)
CONV_TRANSPOSE_ADD = Rule("conv_transpose_add", Op("Add", _conv_transpose(), Const("c"), name="op"),
                          fold_conv_transpose_add, kind=REASSOCIATING)


PASSES = (
    PassSpec(
        "fuse_bn_into_conv",
        "Fold inference BatchNormalization into the Conv/ConvTranspose before it (also through a constant Add)",
        rules=(CONV_BN, CONV_TRANSPOSE_BN, CONV_ADD_BN),
        order=40,
        fuzz="conv_bn",
    ),
    PassSpec(
        "fuse_bn_into_gemm",
        "Fold inference BatchNormalization into a Gemm, or a MatMul by a constant matrix (becomes Gemm)",
        rules=(GEMM_BN, MATMUL_BN),
        order=40,
        not_fuzzed=NO_PATTERN_YET,
    ),
    PassSpec(
        "fuse_mul_into_conv",
        "Fold a scalar or per-channel constant Mul after a Conv or ConvTranspose into its weight and bias (a "
        "negative or zero scale only where the zeros it flips reach no sign-sensitive use)",
        rules=(CONV_MUL, CONV_TRANSPOSE_MUL),
        order=41,
        not_fuzzed=NO_PATTERN_YET,
    ),
    PassSpec(
        "fuse_add_bias_into_conv",
        "Fold a scalar or per-channel constant Add after a Conv or ConvTranspose into its bias; a per-channel "
        "value computed at run time into a Conv without bias",
        rules=(CONV_ADD, CONV_TRANSPOSE_ADD, CONV_ADD_COMPUTED),
        order=42,
        fuzz="conv_add_bias",
    ),
)
