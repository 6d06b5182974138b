"""Float64 kernels for elementwise math, casts, reductions and softmax-like ops.

Each handler takes a ``NodeCall`` (see ``base.py``) and returns the list of its outputs. Floating
tensors are float64 throughout; integer and bool tensors keep their dtype.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import onnx
from onnx import helper

from onnxrefine.verify.reference.base import UnsupportedOperatorError, register_kernels

_EXTRA_FLOAT_NAMES = ("bfloat16", "float8", "float4", "float6")


def is_floating(dtype: np.dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.name.startswith(_EXTRA_FLOAT_NAMES))


def to_internal(value: np.ndarray) -> np.ndarray:
    """Upcast floating arrays to float64; widen ml_dtypes' 4-bit/2-bit ints to int8/uint8; keep the rest."""
    value = np.asarray(value)
    if value.dtype == np.float64:
        return value
    if is_floating(value.dtype):
        return value.astype(np.float64)
    if value.dtype.kind == "V" and value.dtype.name.startswith(("int", "uint")):
        return value.astype(np.uint8 if value.dtype.name.startswith("uint") else np.int8)
    return value


def internal_dtype_for(elem_type: int) -> np.dtype:
    """The dtype this evaluator uses for an ONNX element type."""
    if elem_type in _FLOAT_ELEM_TYPES:
        return np.dtype(np.float64)
    if elem_type == onnx.TensorProto.STRING:
        return np.dtype(object)
    return to_internal(np.zeros(0, dtype=helper.tensor_dtype_to_np_dtype(elem_type))).dtype


_FLOAT_ELEM_TYPES = frozenset(
    getattr(onnx.TensorProto, name)
    for name in (
        "FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ", "FLOAT4E2M1", "FLOAT8E8M0",
    )
    if hasattr(onnx.TensorProto, name)
)


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64) if not is_floating(np.asarray(x).dtype) else x


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf; math.erf is correctly rounded to ~1 ulp in float64, which a reference needs.
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(_erf_scalar(x), dtype=np.float64).reshape(x.shape)


# -- elementwise -------------------------------------------------------------------------------------------
def _unary(fn):
    def handler(call):
        with np.errstate(all="ignore"):
            return [np.asarray(fn(call.inputs[0]))]
    return handler


def _unary_attr(fn):
    def handler(call):
        with np.errstate(all="ignore"):
            return [np.asarray(fn(call.inputs[0], call))]
    return handler


def _binary(fn):
    def handler(call):
        with np.errstate(all="ignore"):
            return [np.asarray(fn(call.inputs[0], call.inputs[1]))]
    return handler


def _div(a, b):
    if a.dtype.kind in "iu":
        # ONNX integer Div truncates toward zero (C semantics), unlike numpy's floor division.
        q = np.floor_divide(a, b)
        adjust = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))
        return (q + adjust.astype(q.dtype)).astype(a.dtype)
    return np.divide(a, b)


def _pow(a, b):
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    return np.power(a, b.astype(np.float64) if b.dtype.kind == "b" else b)


def _mod(call):
    a, b = call.inputs
    with np.errstate(all="ignore"):
        if call.attr("fmod", 0):
            return [np.fmod(a, b).astype(a.dtype)]
        return [np.mod(a, b).astype(a.dtype)]


def _bitshift(call):
    a, b = call.inputs
    if call.attr("direction") == "LEFT":
        return [np.left_shift(a, b).astype(a.dtype)]
    return [np.right_shift(a, b).astype(a.dtype)]


def _variadic(fn, finish=None):
    def handler(call):
        values = [v for v in call.inputs if v is not None]
        with np.errstate(all="ignore"):
            out = functools.reduce(fn, values)
            if finish is not None:
                out = finish(out, len(values))
        return [np.asarray(out)]
    return handler


def _sigmoid(x):
    tail = np.exp(-np.abs(x))  # once: the expression used to compute it three times
    denominator = 1.0 + tail
    return np.where(x >= 0, 1.0 / denominator, tail / denominator)


def _clip(call):
    x = call.inputs[0]
    if call.opset < 11:
        lo = call.attr("min")
        hi = call.attr("max")
    else:
        lo = call.input(1)
        hi = call.input(2)
    if x.dtype.kind == "f":
        # Omitted bounds are numeric_limits::lowest()/max() of the tensor's type (the spec;
        # onnxruntime does so), so Clip turns -inf/+inf into finite values: FLT_MAX for float32,
        # 65504 for float16, not float64's limits, in which the reference computes.
        limits = call.evaluator.declared_finfo(call.node.input[0], x.dtype)
        lo = limits.min if lo is None else lo
        hi = limits.max if hi is None else hi
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi, dtype=x.dtype))
    return [np.asarray(out)]


def _gelu(x, call):
    if call.attr("approximate", "none") == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _is_inf(x, call):
    pos = call.attr("detect_positive", 1)
    neg = call.attr("detect_negative", 1)
    if x.dtype.kind != "f":
        return np.zeros(x.shape, dtype=bool)
    return (np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))


def _shrink(x, call):
    bias = call.attr("bias", 0.0)
    lambd = call.attr("lambd", 0.5)
    out = np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))
    return out.astype(x.dtype)


def _prelu(call):
    x, slope = call.inputs
    return [np.where(x < 0, x * slope, x).astype(x.dtype)]


def _where(call):
    cond, a, b = call.inputs
    return [np.where(cond, a, b)]


def _cast_to(x: np.ndarray, elem_type: int, call) -> np.ndarray:
    target = internal_dtype_for(elem_type)
    if x.dtype == object and target != object:
        return np.array([float(v) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape).astype(target)
    if target == object:
        # String formatting of float64 differs from float32's; onnx.reference is the arbiter there.
        return call.evaluator._run_fallback(call)[0]
    if target == np.bool_:
        return x != 0
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f" and target.kind in "iu":
            # Truncation toward zero, as ONNX specifies; NaN/inf/out-of-range give numpy's (undefined) value.
            return np.trunc(x).astype(target)
        return x.astype(target)


def _cast(call):
    from onnxrefine.verify.reference.kernels.dtype import narrow_float_type, round_to

    to = call.attr("to")
    result = _cast_to(call.inputs[0], to, call)
    if narrow_float_type(to):
        # The spec's rounding and overflow to the narrow type (module kernels.dtype).
        result = round_to(result, to, saturate=bool(call.attr("saturate", 1)))
    return [result]


def _cast_like(call):
    x, like = call.inputs
    elem = helper.np_dtype_to_tensor_dtype(like.dtype) if like.dtype != object else onnx.TensorProto.STRING
    return [_cast_to(x, elem, call)]


def _identity(call):
    return [call.inputs[0]]


def _dropout(call):
    x = call.inputs[0]
    training = call.input(2)
    ratio = call.input(1)
    if training is not None and bool(np.asarray(training)) and (ratio is None or float(ratio) > 0):
        raise UnsupportedOperatorError("Dropout in training mode is random; not evaluated")
    outs = [x]
    if call.num_outputs > 1:
        outs.append(np.ones(x.shape, dtype=bool))
    return outs


# -- reductions ---------------------------------------------------------------------------------------------
def _reduce_axes(call, axes_from_input_opset: int):
    x = call.inputs[0]
    if call.opset >= axes_from_input_opset:
        axes_in = call.input(1)
        axes = None if axes_in is None else [int(a) for a in np.asarray(axes_in).reshape(-1)]
    else:
        axes = call.attr("axes")
    if not axes:
        if call.attr("noop_with_empty_axes", 0) and call.opset >= axes_from_input_opset:
            return None
        return tuple(range(x.ndim))
    return tuple(sorted(a % x.ndim if x.ndim else 0 for a in axes))


def _reducer(fn, empty_value, axes_opset=18):
    def handler(call):
        x = call.inputs[0]
        axes = _reduce_axes(call, axes_opset)
        if axes is None:
            return [x]
        keepdims = bool(call.attr("keepdims", 1))
        with np.errstate(all="ignore"):
            if x.ndim and any(x.shape[a] == 0 for a in axes) and empty_value is not None:
                shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
                if not keepdims:
                    shape = [d for i, d in enumerate(x.shape) if i not in axes]
                fill = empty_value(x.dtype) if callable(empty_value) else empty_value
                return [np.full(shape, fill, dtype=x.dtype if x.dtype.kind != "b" else x.dtype)]
            out = fn(x, axes, keepdims)
        return [np.asarray(out).astype(x.dtype, copy=False) if x.dtype.kind in "iub" else np.asarray(out)]
    return handler


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else (np.iinfo(dtype).min if dtype.kind in "iu" else False)


def _highest(dtype):
    return np.inf if dtype.kind == "f" else (np.iinfo(dtype).max if dtype.kind in "iu" else True)


def _logsumexp(x, axes, keepdims):
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axes)


def _arg(fn):
    def handler(call):
        x = call.inputs[0]
        axis = call.attr("axis", 0) % max(x.ndim, 1)
        keepdims = bool(call.attr("keepdims", 1))
        if call.attr("select_last_index", 0):
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)  # numpy returns the first index among ties, as ONNX wants
        idx = np.asarray(idx, dtype=np.int64)
        if keepdims:
            idx = np.expand_dims(idx, axis)
        return [idx]
    return handler


def _coerced_2d(call, fn):
    x = call.inputs[0]
    if call.opset < 13:
        axis = call.attr("axis", 1) % max(x.ndim, 1)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = x.reshape(rows, -1)
        return [fn(flat, 1).reshape(x.shape)]
    axis = call.attr("axis", -1) % max(x.ndim, 1)
    return [fn(x, axis)]


def _softmax_fn(x, axis):
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_fn(x, axis):
    with np.errstate(all="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax_fn(x, axis):
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, idx, 1, axis=axis)
    return out


def _matmul(call):
    a, b = call.inputs
    return [np.matmul(a, b)]


def _gemm(call):
    a, b = call.inputs[0], call.inputs[1]
    c = call.input(2)
    if call.attr("transA", 0):
        a = a.T
    if call.attr("transB", 0):
        b = b.T
    alpha = call.attr("alpha", 1.0)
    beta = call.attr("beta", 1.0)
    out = a @ b
    if alpha != 1.0:
        out = out * np.asarray(alpha, dtype=out.dtype) if out.dtype.kind == "f" else (out * alpha).astype(out.dtype)
    if c is not None:
        out = out + (c * beta if beta != 1.0 else c)
    return [np.asarray(out).astype(a.dtype, copy=False)]


def _einsum(call):
    return [np.asarray(np.einsum(call.attr("equation").replace(" ", ""), *call.inputs, optimize=True))]


def _cumsum(call):
    x, axis = call.inputs
    axis = int(np.asarray(axis).reshape(-1)[0]) % max(x.ndim, 1)
    if call.attr("reverse", 0):
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if call.attr("exclusive", 0):
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)), np.take(out, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    if call.attr("reverse", 0):
        out = np.flip(out, axis)
    return [np.ascontiguousarray(out)]


def _elu(x, call):
    alpha = call.attr("alpha", 1.0)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _selu(x, call):
    alpha = call.attr("alpha", 1.67326319217681884765625)
    gamma = call.attr("gamma", 1.05070102214813232421875)
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _celu(x, call):
    alpha = call.attr("alpha", 1.0)
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


def _hard_sigmoid(x, call):
    alpha = call.attr("alpha", 0.2)
    beta = call.attr("beta", 0.5)
    return np.clip(alpha * x + beta, 0, 1)


HANDLERS = register_kernels({
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Pow": _binary(_pow),
    "Mod": _mod,
    "BitShift": _bitshift,
    "And": _binary(np.logical_and),
    "Or": _binary(np.logical_or),
    "Xor": _binary(np.logical_xor),
    "BitwiseAnd": _binary(np.bitwise_and),
    "BitwiseOr": _binary(np.bitwise_or),
    "BitwiseXor": _binary(np.bitwise_xor),
    "BitwiseNot": _unary(np.invert),
    "Not": _unary(np.logical_not),
    "Equal": _binary(np.equal),
    "Less": _binary(np.less),
    "LessOrEqual": _binary(np.less_equal),
    "Greater": _binary(np.greater),
    "GreaterOrEqual": _binary(np.greater_equal),
    "Max": _variadic(np.maximum),
    "Min": _variadic(np.minimum),
    "Sum": _variadic(np.add),
    "Mean": _variadic(np.add, lambda total, n: total / n),
    "Where": _where,
    "Abs": _unary(np.abs),
    "Neg": _unary(np.negative),
    "Exp": _unary(np.exp),
    "Log": _unary(np.log),
    "Sqrt": _unary(np.sqrt),
    "Reciprocal": _unary(lambda x: 1.0 / x),
    "Floor": _unary(np.floor),
    "Ceil": _unary(np.ceil),
    "Round": _unary(np.round),  # numpy rounds half to even, as ONNX specifies
    "Sign": _unary(lambda x: np.sign(x).astype(x.dtype)),
    "Relu": _unary(lambda x: np.maximum(x, np.zeros((), dtype=x.dtype))),
    "LeakyRelu": _unary_attr(lambda x, c: np.where(x >= 0, x, x * c.attr("alpha", 0.01))),
    "Sigmoid": _unary(_sigmoid),
    "HardSigmoid": _unary_attr(_hard_sigmoid),
    "HardSwish": _unary(lambda x: x * np.clip(x / 6.0 + 0.5, 0, 1)),
    "Tanh": _unary(np.tanh),
    "Erf": _unary(erf),
    "Gelu": _unary_attr(_gelu),
    "Softplus": _unary(_softplus),
    "Softsign": _unary(lambda x: x / (1.0 + np.abs(x))),
    "Mish": _unary(lambda x: x * np.tanh(_softplus(x))),
    "Elu": _unary_attr(_elu),
    "Selu": _unary_attr(_selu),
    "Celu": _unary_attr(_celu),
    "ThresholdedRelu": _unary_attr(lambda x, c: np.where(x > c.attr("alpha", 1.0), x, 0.0)),
    "Shrink": _unary_attr(_shrink),
    "PRelu": _prelu,
    "Clip": _clip,
    "IsNaN": _unary(lambda x: np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, dtype=bool)),
    "IsInf": _unary_attr(_is_inf),
    "Sin": _unary(np.sin),
    "Cos": _unary(np.cos),
    "Tan": _unary(np.tan),
    "Asin": _unary(np.arcsin),
    "Acos": _unary(np.arccos),
    "Atan": _unary(np.arctan),
    "Sinh": _unary(np.sinh),
    "Cosh": _unary(np.cosh),
    "Asinh": _unary(np.arcsinh),
    "Acosh": _unary(np.arccosh),
    "Atanh": _unary(np.arctanh),
    "Cast": _cast,
    "CastLike": _cast_like,
    "Identity": _identity,
    "Dropout": _dropout,
    "ReduceSum": _reducer(lambda x, a, k: np.sum(x, axis=a, keepdims=k), 0, axes_opset=13),
    "ReduceMean": _reducer(lambda x, a, k: np.mean(x, axis=a, keepdims=k), np.nan),
    "ReduceMax": _reducer(lambda x, a, k: np.max(x, axis=a, keepdims=k), _lowest),
    "ReduceMin": _reducer(lambda x, a, k: np.min(x, axis=a, keepdims=k), _highest),
    "ReduceProd": _reducer(lambda x, a, k: np.prod(x, axis=a, keepdims=k), 1),
    "ReduceL1": _reducer(lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k), 0),
    "ReduceL2": _reducer(lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)), 0),
    "ReduceSumSquare": _reducer(lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k), 0),
    "ReduceLogSum": _reducer(lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)), -np.inf),
    "ReduceLogSumExp": _reducer(_logsumexp, -np.inf),
    "ArgMax": _arg(np.argmax),
    "ArgMin": _arg(np.argmin),
    "Softmax": lambda call: _coerced_2d(call, _softmax_fn),
    "LogSoftmax": lambda call: _coerced_2d(call, _log_softmax_fn),
    "Hardmax": lambda call: _coerced_2d(call, _hardmax_fn),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Einsum": _einsum,
    "CumSum": _cumsum,
})
