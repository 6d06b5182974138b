"""Moving the inputs: the few-ulp perturbation runs of the original (verdict.py's controls and its
measured sensitivity) and the stand-ins for non-finite inputs that measure each element's dependency
on them (SetEvidence.nonfinite_cone)."""

from __future__ import annotations

import numpy as np

from onnxrefine.verify import graphinfo
from onnxrefine.verify.judge.compare import ordered_int
from onnxrefine.verify.judge.rules import PERTURB_ULPS


def nonfinite_replaced(feeds, value: float) -> dict:
    """The feeds with every inf/NaN float element replaced by `value`.

    Running the original on these (twice, with two values) and seeing which output elements change
    gives each element's dependency on the non-finite inputs (SetEvidence.nonfinite_cone). An
    element that does not change cannot depend on them through any path onnxruntime evaluates
    (it is deterministic; the rerun control covers the rest). One that depends on them but happens
    to come out the same under both values (a Min against an inf, say) is left out of the cone:
    that errs towards judging the element, never towards excusing it.
    """
    replaced = {}
    for name, array in feeds.items():
        array = np.asarray(array)
        if graphinfo.is_float_dtype(array.dtype) and array.size:
            bad = ~np.isfinite(array.astype(np.float64))
            if bad.any():
                array = np.where(bad, np.asarray(value, dtype=array.dtype), array).astype(array.dtype)
        replaced[name] = array
    return replaced


def perturb(array: np.ndarray, rng: np.random.Generator, max_ulps: int = PERTURB_ULPS,
            checkerboard: int | None = None) -> np.ndarray:
    """Move each finite element by up to max_ulps ulps.

    checkerboard=0/1: +max_ulps on even/odd flat positions and -max_ulps on the others (moves any
    two neighbours apart or together by 2*max_ulps deterministically); None: random offsets.
    """
    if not graphinfo.is_float_dtype(array.dtype) or array.size == 0:
        return array
    bits = 8 * array.dtype.itemsize
    keys = ordered_int(array)
    if checkerboard is None:
        offsets = rng.integers(-max_ulps, max_ulps + 1, size=array.shape)
    else:
        parity = (np.arange(array.size).reshape(array.shape) + checkerboard) % 2
        offsets = np.where(parity == 0, max_ulps, -max_ulps)
    moved = keys + offsets
    sign_bit = np.int64(1) << np.int64(bits - 1) if bits < 64 else np.int64(np.iinfo(np.int64).min)
    raw = np.where(moved < 0, (-moved) | sign_bit, moved)
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64, 1: np.uint8}[array.dtype.itemsize]
    result = raw.astype(unsigned).view(array.dtype).reshape(array.shape)
    keep = ~np.isfinite(array.astype(np.float64)) | ~np.isfinite(result.astype(np.float64))
    return np.where(keep, array, result).astype(array.dtype)
