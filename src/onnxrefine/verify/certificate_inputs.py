"""Adversarial input sets for certificates, and the reduced sizes they run on.

Float activations get six sets (each element a float of the activation's own dtype):
    finite   random normal values, every third element one of the edge values below
             (+-0, +-1, +-0.5, ties for Round and for float16/bfloat16 rounding, 1 +- one ulp,
             2^mantissa +- 1, 0.1, the largest float16, the smallest normal and subnormal)
    +0, -0   every element a zero of that sign (where a sign of zero survives or flips)
    inf/nan  the finite set with every fifth element +inf, -inf or NaN
    huge     +-max, +-max/2, +-sqrt(max) and values of that order (overflow)
    tiny     subnormals and the smallest normals of both signs (underflow)
Integer activations: small values with the type's extremes mixed in, zeros, extremes only.
Bool activations: random, all true, all false.

Reduced sizes: see `reduced_shapes`.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.bool_))

# Ops whose result is the same function of the input at every batch and spatial position (given
# constants that are per-channel), so a certificate may run them on smaller batch/spatial sizes.
_WINDOWED = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"})
_POSITIONWISE = frozenset(
    """Add Sub Mul Div Pow Max Min Sum Mean Relu LeakyRelu PRelu Clip Sigmoid Tanh HardSigmoid HardSwish
    Elu Selu Celu Softplus Softsign Exp Log Sqrt Abs Neg Reciprocal Erf Gelu Identity Dropout Cast
    BatchNormalization GlobalAveragePool GlobalMaxPool Floor Ceil Round Sign""".split()
)
_CHANNEL_INPUTS = {"Conv": (1, 2), "ConvTranspose": (1, 2), "BatchNormalization": (1, 2, 3, 4),
                   "PRelu": ()}
MIN_ELEMENTWISE = 4


def _edge_values(dtype: np.dtype) -> list[float]:
    info = np.finfo(dtype)
    mant = info.nmant
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -3.5, 0.1, -1 / 3,
              1 + float(info.eps), 1 - float(info.eps) / 2, -(2.0 - float(info.eps)),
              2.0 ** (mant + 1) - 1, -(2.0 ** (mant + 1) + 2), float(info.tiny), -float(info.tiny),
              float(info.smallest_subnormal), -float(info.smallest_subnormal) * 3]
    if info.bits >= 32:
        values += [1 + 2.0 ** -11, -(1 + 3 * 2.0 ** -11), 1 + 2.0 ** -8, 65504.0, 65520.0, -65519.99]
    return values


def _float_sets(shape, dtype: np.dtype, rng: np.random.Generator) -> dict[str, np.ndarray]:
    info = np.finfo(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    index = np.arange(size)

    def cycle(values, every: int, base: np.ndarray, offset: int = 0) -> np.ndarray:
        out = base.copy()
        picks = index[(index + offset) % every == 0]
        if picks.size:
            out[picks] = np.array(values, dtype=np.float64)[np.arange(picks.size) % len(values)]
        return out

    normal = rng.normal(0.0, 1.0, size)
    finite = cycle(_edge_values(dtype), 3, normal)
    top = float(info.max)
    huge_values = [top, -top, top / 2, -top / 3, math.sqrt(top), -math.sqrt(top) * 3, top / 7]
    tiny_values = [float(info.smallest_subnormal) * k for k in (1, -1, 3, -7, 255)] + \
                  [float(info.tiny), -float(info.tiny), float(info.tiny) / 2, 0.0, -0.0]
    sets = {
        "finite": finite,
        "+0": np.zeros(size),
        "-0": -np.zeros(size),
        "inf/nan": cycle([np.inf, -np.inf, np.nan], 5, finite, offset=1),
        "huge": cycle(huge_values, 1, normal),
        "tiny": cycle(tiny_values, 1, normal),
    }
    with np.errstate(over="ignore"):
        return {label: values.astype(dtype).reshape(shape) for label, values in sets.items()}


def _int_sets(shape, dtype: np.dtype, rng: np.random.Generator) -> dict[str, np.ndarray]:
    info = np.iinfo(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    low = max(int(info.min), -3)
    small = rng.integers(low, 4, size)
    extremes = np.array([info.min, info.max, 0, 1, info.max - 1], dtype=object)
    mixed = small.astype(object)
    mixed[::7] = extremes[np.arange(mixed[::7].size) % len(extremes)]
    return {
        "small": small.astype(dtype).reshape(shape),
        "mixed": mixed.astype(dtype).reshape(shape),
        "zeros": np.zeros(shape, dtype=dtype),
    }


def _bool_sets(shape, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"random": rng.random(shape) < 0.5, "true": np.ones(shape, bool), "false": np.zeros(shape, bool)}


def adversarial_sets(specs: dict[str, tuple[np.dtype, tuple]], seed: int = 0) -> list[tuple[str, dict]]:
    """[(label, feeds)] for activations name -> (dtype, concrete shape); the same labels for all."""
    rng = np.random.default_rng(seed)
    per_input = {}
    for name, (dtype, shape) in specs.items():
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            per_input[name] = _float_sets(shape, dtype, rng)
        elif dtype == np.bool_:
            per_input[name] = _bool_sets(shape, rng)
        else:
            per_input[name] = _int_sets(shape, dtype, rng)
    if not per_input:
        return [("constants only", {})]
    labels = []
    for sets in per_input.values():
        labels += [label for label in sets if label not in labels]
    result = []
    for label in labels:
        feeds = {}
        for name, sets in per_input.items():
            feeds[name] = sets[label] if label in sets else next(iter(sets.values()))
        result.append((label, feeds))
    return result


def _attr(node: ir.Node, name: str, default=None):
    attr = node.attributes.get(name)
    return default if attr is None or attr.is_ref() else attr.value


def _window(node: ir.Node, axis: int, constants: dict) -> tuple[int, int] | None:
    """(effective kernel extent, stride) of a windowed node along spatial axis `axis` (0-based)."""
    kernel = _attr(node, "kernel_shape")
    if kernel is None and node.op_type in ("Conv", "ConvTranspose") and len(node.inputs) > 1:
        weight = constants.get(node.inputs[1].name) if node.inputs[1] is not None else None
        kernel = list(weight.shape[2:]) if weight is not None else None
    if kernel is None or axis >= len(kernel):
        return None
    dilations = _attr(node, "dilations") or [1] * len(kernel)
    strides = _attr(node, "strides") or [1] * len(kernel)
    return (int(kernel[axis]) - 1) * int(dilations[axis]) + 1, int(strides[axis])


def reduced_shapes(nodes, shapes: dict[str, tuple], constant_sides) -> dict[str, tuple] | None:
    """Smaller shapes for the activations when every node of both sides is position-wise or
    windowed over per-channel constants: batch 1, each spatial axis just large enough for the
    windows along it (sum of extents and strides), with the original size's residue modulo the
    product of the strides (so the last window meets the same padding). None: keep the shapes."""
    constants = {side.name: side.array for side in constant_sides}
    ranks = {len(shape) for shape in shapes.values()}
    if not shapes or len(ranks) != 1 or min(ranks) < 3:
        return None
    rank = ranks.pop()
    windowed = []
    for node in nodes:
        op = node.op_type
        if op not in _WINDOWED and op not in _POSITIONWISE:
            return None
        if op == "ConvTranspose" and _attr(node, "output_shape") is not None:
            return None
        exempt = _CHANNEL_INPUTS.get(op, ())
        for index, value in enumerate(node.inputs):
            if value is None or index in exempt or value.name not in constants:
                continue
            dims = constants[value.name].shape
            aligned = (1,) * (rank - len(dims)) + tuple(dims)
            if len(aligned) != rank or any(d != 1 for axis, d in enumerate(aligned) if axis != 1):
                return None  # a constant that varies along a batch or spatial axis
        if op in _WINDOWED:
            windowed.append(node)
    reduced = {}
    for name, shape in shapes.items():
        dims = [1]  # batch
        dims.append(shape[1])
        for axis in range(rank - 2):
            size = shape[axis + 2]
            need, period = 1, 1
            for node in windowed:
                window = _window(node, axis, constants)
                if window is None:
                    return None
                extent, stride = window
                need += extent - 1 + stride - 1
                period *= stride
            if not windowed:
                need = MIN_ELEMENTWISE
            if size >= need:
                need += (size - need) % period
            dims.append(min(size, need))
        reduced[name] = tuple(dims)
    return reduced
