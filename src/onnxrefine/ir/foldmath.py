"""Arithmetic on folded constants: computed in float64, rounded once, refused when unsafe.

`ml_dtypes` gives numpy dtypes for bfloat16 and the float8 formats, so one code path serves
every floating type ONNX stores.
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.attrs import attr, references
from onnxrefine.ir.opsets import STANDARD_DOMAINS

FLOAT_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.float16,
        np.float32,
        np.float64,
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
)


def is_float_dtype(dtype) -> bool:
    return np.dtype(dtype) in FLOAT_DTYPES


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The numpy value of `value` if it is a true constant, else None.

    A constant is an initializer that is not also a graph input (a graph input can be overridden
    at run time), or the output of a Constant node carrying a `value` tensor.
    """
    if value is None:
        return None
    if value.is_graph_input():
        return None
    if value.const_value is not None and (value.is_initializer() or value.producer() is None):
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain in STANDARD_DOMAINS:
        return constant_node_array(producer)
    return None


_CONSTANT_LIST_ATTRS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}


def constant_node_array(node: ir.Node) -> np.ndarray | None:
    """The value of a Constant node, whichever attribute carries it (sparse_value: None)."""
    if references(node):
        return None  # value=@v inside a function body: each caller's own, not known here
    tensor = attr(node, "value")
    if tensor is not None:
        return tensor.numpy()
    for name, dtype in _CONSTANT_LIST_ATTRS.items():
        value = attr(node, name)
        if value is not None:
            return np.array(value, dtype=dtype)
    return None


def to_float64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


def round_folded(result: np.ndarray, dtype, what: str) -> np.ndarray:
    """Round a float64 fold result once to `dtype`, refusing non-finite or underflowed results.

    Refused: any NaN or infinity in the float64 result or after rounding (the float16 overflow of
    a folded weight), and any nonzero value that rounds to zero (a scale that vanished).
    """
    dtype = np.dtype(dtype)
    if not is_float_dtype(dtype):
        raise RewriteRefused("foldmath.non_float_dtype", f"{what}: cannot fold into non-floating dtype {dtype}")
    if not np.all(np.isfinite(result)):
        raise RewriteRefused("foldmath.nonfinite", f"{what}: the folded value is not finite")
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = result.astype(dtype)
        back = rounded.astype(np.float64)
    if not np.all(np.isfinite(back)):
        big = float(np.max(np.abs(result)))
        raise RewriteRefused("foldmath.overflow", f"{what}: folded value {big:.6g} overflows {dtype.name}")
    if np.any((back == 0) & (result != 0)):
        raise RewriteRefused("foldmath.underflow", f"{what}: a folded value underflows to zero in {dtype.name}")
    return rounded


# --- Folding a weight by a per-output-channel factor in bounded memory ---------------------------
FOLD_BLOCK_ELEMENTS = 1 << 17  # 1 MiB of float64 a block


def scale_rounded(weight: np.ndarray, factors: np.ndarray, dtype, what: str) -> np.ndarray:
    """`round_folded(to_float64(weight) * factors, dtype, what)`, computed a block of output
    channels (axis 0) at a time, in one pass of a ufunc straight into the result for numpy's own
    float types (_scaled_into), else in float64 buffers kept from one fold to the next: the
    whole-weight float64 product and its rounding temporaries (about 6x the weight, the API path's
    peak on resnet50) become one block's at most, and a model's folds do not page-fault fresh
    temporaries on every weight (54k faults on resnet18-bn).

    Every element is computed exactly as in the whole-array form (the same conversions and the
    same float64 product); should any block be refused, the whole-array form runs again so the
    refusal (and its message) is the one it always gave."""
    dtype = np.dtype(dtype)
    rows = weight.shape[0] if weight.ndim else 0
    if (not rows or not weight.size or not is_float_dtype(dtype) or factors.ndim != weight.ndim
            or factors.shape[0] not in (1, rows) or np.broadcast_shapes(weight.shape, factors.shape) != weight.shape):
        return round_folded(to_float64(weight) * factors, dtype, what)
    step = max(1, FOLD_BLOCK_ELEMENTS // (weight.size // rows))
    out = np.empty(weight.shape, dtype=dtype)
    product, back, flags = _fold_buffers(min(rows, step) * (weight.size // rows))
    for start in range(0, rows, step):
        block = weight[start:start + step]
        shape = block.shape
        block_factors = factors if factors.shape[0] == 1 else factors[start:start + step]
        if block.dtype in _NATIVE_FLOATS and dtype in _NATIVE_FLOATS:
            if not _scaled_into(block, block_factors, out[start:start + step], flags[:block.size].reshape(shape)):
                return round_folded(to_float64(weight) * factors, dtype, what)
            continue
        result = product[:block.size].reshape(shape)
        result[...] = block  # to_float64: exact for every float dtype
        with np.errstate(over="ignore", invalid="ignore"):  # refused below; the whole-array form then says it
            np.multiply(result, block_factors, out=result)
        if not _rounded_into(result, out[start:start + step], back[:block.size].reshape(shape),
                             flags[:block.size].reshape(shape)):
            return round_folded(to_float64(weight) * factors, dtype, what)
    return out


# numpy's own float types: the ufuncs convert them to and from float64 with the casts astype uses
# (ml_dtypes' float8 and bfloat16 go through float64 buffers, as the whole-array form converts them)
_NATIVE_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def _scaled_into(block: np.ndarray, factors: np.ndarray, target: np.ndarray, flags: np.ndarray) -> bool:
    """round_folded(to_float64(block) * factors, target.dtype) written into `target` in one pass:
    the ufunc converts each element to float64 (exact), multiplies in float64 and rounds the
    product once to the target's type, as astype does; False where round_folded refuses. The
    checks read the rounded values: a NaN or infinity of the float64 product stays one when
    rounded, and a rounded zero whose product is not zero (recomputed there) underflowed."""
    with np.errstate(over="ignore", invalid="ignore"):
        np.multiply(block, factors, out=target, dtype=np.float64, casting="unsafe")
    if not np.isfinite(target, out=flags).all():
        return False
    np.equal(target, 0, out=flags)
    if not flags.any():
        return True
    product = np.multiply(block[flags], np.broadcast_to(factors, block.shape)[flags], dtype=np.float64)
    return not np.any(product != 0)


_scratch = threading.local()


def _fold_buffers(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two float64 buffers and a bool one of at least `size` elements, this thread's, kept for the
    next fold up to a block's size: fresh pages fault on first touch."""
    held = getattr(_scratch, "buffers", None)
    if held is None or held[0].size < size:
        held = (np.empty(size), np.empty(size), np.empty(size, dtype=bool))
        if size <= FOLD_BLOCK_ELEMENTS:  # one row over a block's size (a rare wide weight) is not kept
            _scratch.buffers = held
    return held


def _rounded_into(result: np.ndarray, target: np.ndarray, back: np.ndarray, flags: np.ndarray) -> bool:
    """round_folded(result, target.dtype) written into `target`, in the given buffers; False where
    round_folded refuses."""
    if not np.isfinite(result, out=flags).all():
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        target[...] = result  # result.astype(dtype)
        back[...] = target
    if not np.isfinite(back, out=flags).all():
        return False
    np.equal(back, 0, out=flags)
    return not (flags.any() and np.any(result[flags] != 0))
