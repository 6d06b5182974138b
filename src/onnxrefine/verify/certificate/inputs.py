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

import ml_dtypes
import numpy as np
import onnx_ir as ir

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.opsets import STANDARD_DOMAINS

# Float types onnxruntime's Python binding neither takes nor returns: a certificate model reads
# them as float32 (every value of theirs is one, exactly) and Casts them in, and Casts its outputs
# of these types back to float32 (a widening: bit-identical there iff bit-identical in the type,
# NaN payloads aside). Only exact rewrites use them (no derived bound of theirs yet).
NARROW_FLOATS = frozenset(np.dtype(t) for t in (
    ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz))
SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.bool_)) | NARROW_FLOATS

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
    info = ml_dtypes.finfo(dtype)
    mant = info.nmant
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -3.5, 0.1, -1 / 3,
              1 + float(info.eps), 1 - float(info.eps) / 2, -(2.0 - float(info.eps)),
              2.0 ** (mant + 1) - 1, -(2.0 ** (mant + 1) + 2), float(info.tiny), -float(info.tiny),
              float(info.smallest_subnormal), -float(info.smallest_subnormal) * 3]
    if info.bits >= 32:
        values += [1 + 2.0 ** -11, -(1 + 3 * 2.0 ** -11), 1 + 2.0 ** -8, 65504.0, 65520.0, -65519.99]
    return values


def _float_sets(shape, dtype: np.dtype, rng: np.random.Generator, heavy: bool) -> dict[str, np.ndarray]:
    info = ml_dtypes.finfo(dtype)
    size = int(np.prod(shape, dtype=np.int64))

    # Built in the dtype itself: each element is rounded once from its float64 value, as a
    # float64 array converted at the end would be, at half the memory traffic.
    def cycle(values, every: int, base: np.ndarray, offset: int = 0) -> np.ndarray:
        out = base.copy()
        picks = out[(-offset) % every::every]  # the elements with (index + offset) % every == 0
        if picks.size:
            with np.errstate(over="ignore"):
                picks[:] = np.resize(np.array(values, dtype=np.float64).astype(dtype), picks.size)
        return out

    normal = rng.normal(0.0, 1.0, size).astype(dtype)
    edges = _edge_values(dtype)
    tiny_values = [float(info.smallest_subnormal) * k for k in (1, -1, 3, -7, 255)] + \
                  [float(info.tiny), -float(info.tiny), float(info.tiny) / 2, 0.0, -0.0]
    if heavy:
        # Subnormal operands cost ~100x per multiply-add on x86: in a large accumulation, a few.
        edges = [v for v in edges if v == 0 or abs(v) >= float(info.tiny)]
    finite = cycle(edges, 3, normal)
    if heavy:
        finite = cycle(tiny_values, max(1, size // 4), finite, offset=size // 8)
    top = float(info.max)
    huge_values = [top, -top, top / 2, -top / 3, math.sqrt(top), -math.sqrt(top) * 3, top / 7]
    sets = {
        "finite": finite,
        "+0": np.zeros(size, dtype),
        "-0": -np.zeros(size, dtype),
        "inf/nan": cycle([np.inf, -np.inf, np.nan], 5, finite, offset=1),
        "huge": cycle(huge_values, 1, normal),
        "tiny": cycle(tiny_values, max(1, size // 16) if heavy else 1, np.zeros(size, dtype)),
    }
    return {label: values.reshape(shape) for label, values in sets.items()}


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


def adversarial_sets(specs: dict[str, tuple[np.dtype, tuple]], seed: int = 0, heavy: bool = False
                     ) -> list[tuple[str, dict]]:
    """[(label, feeds)] for activations name -> (dtype, concrete shape); the same labels for all.
    `heavy` (large accumulations): subnormals only at a few positions, where they cost little."""
    rng = np.random.default_rng(seed)
    per_input = {}
    for name, (dtype, shape) in specs.items():
        dtype = np.dtype(dtype)
        if dtype.kind == "f" or dtype in NARROW_FLOATS:
            per_input[name] = _float_sets(shape, dtype, rng, heavy)
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


# Ops that only move, select or replicate the elements of their float data inputs (at `_DATA`
# positions; every other input an integer one: shapes, axes, indices), so what they output is
# the input's own bits at positions fixed by shapes and integers alone. Shape and Size read only
# the shape.
MOVEMENT_OPS = frozenset("""Reshape Transpose Squeeze Unsqueeze Flatten Identity Concat Split Slice
    Expand Tile Gather Shape Size""".split())
_ALL_INPUTS = frozenset({"Concat", "Shape", "Size"})


def moves_data_only(nodes, float_activations: bool, dtype_of) -> bool:
    """Whether every node either moves float elements without looking at them (`MOVEMENT_OPS`,
    float values only at data positions) or sees no float value at all. Then each output element
    is a copy of one input element (or of a constant) chosen by shapes and integers alone, and a
    single input set whose elements are all distinct shows the whole choice: an exact rewrite
    identical there is identical on every input, inf/NaN/-0 and payloads included (these kernels
    copy bytes in onnxruntime; float16 and narrower stay on the six sets)."""
    if not float_activations:
        return False
    for node in nodes:
        for index, value in enumerate(node.inputs):
            if value is None:
                continue
            dtype = dtype_of(value)  # an ir.DataType (None: unknown)
            if dtype is None:
                return False
            try:
                kind = np.dtype(dtype.numpy()).kind
            except Exception:  # noqa: BLE001 - strings and other types numpy has no dtype for
                return False
            if kind in "iub":
                continue
            if kind != "f" or node.op_type not in MOVEMENT_OPS or node.domain not in STANDARD_DOMAINS:
                return False
            if index != 0 and node.op_type not in _ALL_INPUTS:
                return False  # a float where an integer (shape, axes, indices) goes
    return True


def distinct_set(specs: dict[str, tuple[np.dtype, tuple]]) -> list[tuple[str, dict]] | None:
    """One float set whose elements are all distinct across every activation (consecutive
    integers, exact in float32/float64 below 2^24), or None where the dtypes cannot hold that."""
    feeds, start = {}, 1
    for name, (dtype, shape) in specs.items():
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64))
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or start + size >= 1 << 24:
            return None
        feeds[name] = np.arange(start, start + size, dtype=dtype).reshape(shape)
        start += size
    return [("distinct", feeds)]


def _window(node: ir.Node, axis: int, constants: dict) -> tuple[int, int] | None:
    """(effective kernel extent, stride) of a windowed node along spatial axis `axis` (0-based)."""
    kernel = attr(node, "kernel_shape")
    if kernel is None and node.op_type in ("Conv", "ConvTranspose") and len(node.inputs) > 1:
        weight = constants.get(node.inputs[1].name) if node.inputs[1] is not None else None
        kernel = list(weight.shape[2:]) if weight is not None else None
    if kernel is None or axis >= len(kernel):
        return None
    dilations = attr(node, "dilations") or [1] * len(kernel)
    strides = attr(node, "strides") or [1] * len(kernel)
    return (int(kernel[axis]) - 1) * int(dilations[axis]) + 1, int(strides[axis])


def reduced_shapes(groups, shapes: dict[str, tuple], constant_sides) -> dict[str, tuple] | None:
    """Smaller shapes for the activations, or None (keep them).

    When every node of every group (the original side, the replacement) computes each position
    of the batch and of the free axes independently (elementwise ops, convolutions and pools over
    per-channel constants, MatMul/Gemm by a constant matrix along their rows), those axes shrink:
    the batch to 1 (so input sets can be stacked on it), an axis under one window per side to the
    smallest size at which every window pattern of the full size occurs (`window_patterns`: the
    interior window and each border window, with the padding it meets), under a chain of windows
    to the sum of their extents (keeping the original size's residue modulo the strides), any
    other free axis to a few elements.
    Axes along which a constant varies, the channel axis of windowed ops and the reduced axis of
    a matrix product keep their size."""
    constants = {side.name: side.array for side in constant_sides}
    ranks = {len(shape) for shape in shapes.values()}
    if not shapes or len(ranks) != 1 or min(ranks) < 2:
        return None
    rank = ranks.pop()
    pinned: set[int] = set()
    windowed_groups = []
    for group in groups:
        windowed = []
        for node in group:
            axes = _pinned_axes(node, constants, rank)
            if axes is None:
                return None
            pinned |= axes
            if node.op_type in _WINDOWED:
                windowed.append(node)
        windowed_groups.append(windowed)
    if 0 in pinned or (any(windowed_groups) and (rank < 3 or pinned - {1})):
        return None
    reduced = {}
    for name, shape in shapes.items():
        dims = [1]
        for axis in range(1, rank):
            size = shape[axis]
            if axis in pinned or (axis == 1 and any(windowed_groups)):
                dims.append(size)
            elif any(windowed_groups):
                need = _window_size(windowed_groups, axis - 2, constants, size)
                if need is None:
                    return None
                dims.append(min(size, need))
            else:
                dims.append(min(size, MIN_ELEMENTWISE))
        reduced[name] = tuple(dims)
    return reduced


def width_stackable(groups, shapes: dict[str, tuple], constant_sides) -> bool:
    """Whether the input sets may be laid side by side along the last axis (one image, the sets
    in its columns) instead of along the batch: every reduced activation is one column wide, and
    every node computes each column from the same column alone (elementwise ops and per-channel
    constants; windows one tap wide along that axis, stride 1, no padding there). A global pool
    mixes columns, a padded or wider window would read a neighbour set (or real padding would
    become data): those stay on the batch. Why bother: onnxruntime computes a convolution image
    by image, so six sets on the batch read the weights six times, in one image once."""
    constants = {side.name: side.array for side in constant_sides}
    ranks = {len(shape) for shape in shapes.values()}
    if len(ranks) != 1 or min(ranks) < 3 or any(shape[-1] != 1 for shape in shapes.values()):
        return False
    rank = ranks.pop()
    for group in groups:
        for node in group:
            if node.op_type in _WINDOWED:
                geometry = _window_geometry(node, rank - 3, constants)
                if geometry is None or node.op_type == "LpPool":
                    return False
                taps, _, stride, begin, end = geometry
                if (taps, stride, begin, end) != (1, 1, 0, 0):
                    return False
            elif node.op_type not in _POSITIONWISE or node.op_type.startswith("Global"):
                return False
    return True


def _window_size(windowed_groups, axis: int, constants: dict, size: int) -> int | None:
    need, period, searched = 1, 1, []
    for windowed in windowed_groups:
        group_need, group_period = 1, 1
        for node in windowed:
            window = _window(node, axis, constants)
            if window is None:
                return None
            extent, stride = window
            group_need += extent - 1 + stride - 1
            group_period *= stride
        need, period = max(need, group_need), math.lcm(period, group_period)
        if len(windowed) == 1:
            searched.append(windowed[0])
    if size >= need:
        need += (size - need) % period
    if searched and len(searched) == sum(1 for w in windowed_groups if w):
        # One window per side: the smallest size at which every window pattern of the full size
        # (which taps read data and which padding: interior and each border) occurs.
        covering = _smallest_covering(searched, axis, constants, size)
        if covering is not None:
            need = covering
    return need


def _pinned_axes(node: ir.Node, constants: dict, rank: int) -> set[int] | None:
    """Axes of a rank-`rank` activation this node ties to a constant's size (None: the node is
    not position-wise at all)."""
    op = node.op_type
    pinned: set[int] = set()
    exempt = _CHANNEL_INPUTS.get(op, ())
    if op in ("MatMul", "Gemm"):
        b = node.inputs[1] if len(node.inputs) > 1 else None
        if b is None or b.name not in constants or constants[b.name].ndim != 2:
            return None
        if op == "Gemm" and (attr(node, "transA", 0) or rank != 2):
            return None
        pinned.add(rank - 1)  # the reduced axis K
        exempt = (1,)
    elif op == "Split":
        axis = int(attr(node, "axis", 0))
        if axis % rank != rank - 1:
            return None
        pinned.add(rank - 1)  # split along the last axis (sibling MatMuls' outputs, say)
        exempt = (1,)
    elif op not in _WINDOWED and op not in _POSITIONWISE:
        return None
    if op == "ConvTranspose" and attr(node, "output_shape") is not None:
        return None
    for index, value in enumerate(node.inputs):
        if value is None or index in exempt or value.name not in constants:
            continue
        dims = constants[value.name].shape
        if len(dims) > rank:
            return None
        aligned = (1,) * (rank - len(dims)) + tuple(dims)
        pinned |= {axis for axis, d in enumerate(aligned) if d != 1}
    return pinned


def _window_geometry(node: ir.Node, axis: int, constants: dict) -> tuple | None:
    """(taps, dilation, stride, pad begin, pad end) along `axis`; None where the output count or
    the pads are implicit (auto_pad, ceil_mode, ConvTranspose)."""
    if node.op_type == "ConvTranspose" or attr(node, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET", "VALID", b"VALID"):
        return None
    if attr(node, "ceil_mode", 0):
        return None
    kernel = attr(node, "kernel_shape")
    if kernel is None and len(node.inputs) > 1 and node.inputs[1] is not None and node.inputs[1].name in constants:
        kernel = list(constants[node.inputs[1].name].shape[2:])
    if kernel is None or axis >= len(kernel):
        return None
    rank = len(kernel)
    pads = attr(node, "pads") or [0] * (2 * rank)
    if attr(node, "auto_pad", "NOTSET") in ("VALID", b"VALID"):
        pads = [0] * (2 * rank)
    dilation = int((attr(node, "dilations") or [1] * rank)[axis])
    stride = int((attr(node, "strides") or [1] * rank)[axis])
    return int(kernel[axis]), dilation, stride, int(pads[axis]), int(pads[axis + rank])


def window_patterns(size: int, taps: int, dilation: int, stride: int, begin: int, end: int) -> set:
    """The window patterns along one axis of an input of `size`: for each output position, the
    range of taps that read data rather than padding ((first, last), or None when all padding).
    An output's value is a function of its pattern and the data under it, so a smaller input
    that shows every pattern of the full one exercises every way the full one mixes data and
    padding (the interior windows and each border window)."""
    extent = (taps - 1) * dilation + 1
    outputs = (size + begin + end - extent) // stride + 1
    patterns = set()
    for o in range(max(outputs, 0)):
        start = o * stride - begin  # the position tap 0 reads
        first = 0 if start >= 0 else (-start + dilation - 1) // dilation
        last = min(taps - 1, (size - 1 - start) // dilation) if size - 1 - start >= 0 else -1
        patterns.add((first, last) if first <= last else None)
    return patterns


def _smallest_covering(nodes, axis: int, constants: dict, size: int) -> int | None:
    """The smallest input size at which each node shows every window pattern it shows at `size`
    (`window_patterns`); None where a node's geometry is implicit."""
    geometries = [_window_geometry(node, axis, constants) for node in nodes]
    if any(g is None for g in geometries):
        return None
    wanted = [window_patterns(size, *g) for g in geometries]
    for candidate in range(1, size + 1):
        if all(window_patterns(candidate, *g) >= w for g, w in zip(geometries, wanted)):
            return candidate
    return None
