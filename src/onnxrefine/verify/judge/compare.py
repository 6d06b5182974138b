"""Elementwise comparison of two outputs: differences, ulp distances, NaN/inf pattern changes.

Definitions (all computed in float64 from the original dtype):

- ulp distance: float bits reinterpreted as sign-magnitude integers and mapped onto one ordered
  integer line (negative values mirrored below zero), so the distance between two floats of the
  same dtype is the number of representable values between them; +0 and -0 are 0 apart.
  Elements where either side is NaN are left out (NaN positions are counted separately).
- max_rel: |a - b| / max(|b|, floor) where b is the baseline (the original) and
  floor = max(1e-3 * RMS(|b|) over finite elements, smallest normal of the dtype). Near-zero
  baselines therefore never blow the ratio up: a difference on an element that is 1000x smaller
  than the output's typical magnitude counts relative to that typical magnitude / 1000.
- min_atol: smallest atol that passes with rtol=0 (max_abs); min_rtol: smallest rtol that passes
  with atol=0 (max |a-b|/|b|, inf when b == 0 and a != b).
- differing: elements that are not bit-identical (two NaNs count as identical).
- pattern_changes: elements whose class (finite / +inf / -inf / NaN) differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import ml_dtypes
import numpy as np

from onnxrefine.verify import graphinfo

ULP_BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 16), (17, 256), (257, 65536), (65537, float("inf")))
REL_FLOOR_FRACTION = 1e-3

_INT_VIEW = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def ordered_int(values: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the floats (sign-magnitude -> two's complement)."""
    values = np.ascontiguousarray(values)
    as_int = values.view(_INT_VIEW[values.dtype.itemsize]).astype(np.int64)
    magnitude_mask = np.int64((1 << (8 * values.dtype.itemsize - 1)) - 1)
    return np.where(as_int < 0, -(as_int & magnitude_mask), as_int)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ulp distance (float64) between same-dtype float arrays; NaN where either is NaN."""
    a = np.asarray(a)
    b = np.asarray(b)
    key_a, key_b = ordered_int(a), ordered_int(b)
    same_side = (key_a >= 0) == (key_b >= 0)
    with np.errstate(over="ignore", invalid="ignore"):
        near = np.abs(key_a - key_b).astype(np.float64)
    # Opposite signs may overflow int64 for float64; the sum of magnitudes in float64 is exact
    # enough there (such distances are astronomically large anyway).
    far = np.abs(key_a).astype(np.float64) + np.abs(key_b).astype(np.float64)
    distance = np.where(same_side, near, far)
    nan = np.isnan(a.astype(np.float64)) | np.isnan(b.astype(np.float64))
    return np.where(nan, np.nan, distance)


class ValueClass(IntEnum):
    """The class of a float element; value_class() returns these as plain integers."""

    FINITE = 0
    POS_INF = 1
    NEG_INF = 2
    NAN = 3


def value_class(values: np.ndarray) -> np.ndarray:
    """Elementwise ValueClass: 0 finite, 1 +inf, 2 -inf, 3 NaN (int64)."""
    values = np.asarray(values, dtype=np.float64)
    if np.isfinite(values).all():  # the common case, without np.select's pass per class (20x faster)
        return np.zeros(values.shape, dtype=np.int64)
    return np.select([np.isnan(values), values == np.inf, values == -np.inf],
                     [ValueClass.NAN, ValueClass.POS_INF, ValueClass.NEG_INF], ValueClass.FINITE)


def bit_identical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: same bits, with any two NaNs counting as identical."""
    a, b = np.asarray(a), np.asarray(b)
    if graphinfo.is_float_dtype(a.dtype) and a.dtype == b.dtype:
        view = _INT_VIEW[a.dtype.itemsize]
        same = np.ascontiguousarray(a).view(view) == np.ascontiguousarray(b).view(view)
        if same.all():
            return same
        # numpy's own float types test NaN in place; ml_dtypes' through float64
        if a.dtype not in (np.float16, np.float32, np.float64):
            a, b = a.astype(np.float64), b.astype(np.float64)
        return same | (np.isnan(a) & np.isnan(b))
    return a == b


def largest_first(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest of `values` (1-D, no NaN), largest first, equal values in index
    order: what a stable sort's first `count` give, without sorting the whole array."""
    if values.size <= count or count <= 0:
        return np.argsort(-values, kind="stable")[:max(count, 0)]
    threshold = np.partition(values, values.size - count)[values.size - count]
    above = np.flatnonzero(values > threshold)
    chosen = np.concatenate([above, np.flatnonzero(values == threshold)[:count - above.size]])
    return chosen[np.argsort(-values[chosen], kind="stable")]


def magnitude_floor(baseline: np.ndarray, dtype) -> float:
    finite = np.abs(baseline[np.isfinite(baseline)])
    rms = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0
    tiny = float(ml_dtypes.finfo(np.dtype(dtype)).tiny) if graphinfo.is_float_dtype(dtype) else 0.0
    return max(REL_FLOOR_FRACTION * rms, tiny, np.finfo(np.float64).tiny)


def ulp_histogram(distances: np.ndarray) -> list[dict]:
    distances = distances[~np.isnan(distances)]
    rows = []
    for low, high in ULP_BINS:
        count = int(np.count_nonzero((distances >= low) & (distances <= high)))
        label = f"{low}" if low == high else (f">{low - 1}" if high == float("inf") else f"{low}-{high}")
        rows.append({"ulps": label, "count": count})
    return rows


@dataclass
class Comparison:
    """Differences between a candidate output and a baseline (the original) output."""

    shape_a: tuple
    shape_b: tuple
    dtype_a: str
    dtype_b: str
    size: int = 0
    differing: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    rel_floor: float = 0.0
    max_ulp: float = 0.0
    p99_ulp: float = 0.0
    pattern_changes: int = 0
    min_atol: float = 0.0
    min_rtol: float = 0.0
    ulp_histogram: list = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return self.shape_a == self.shape_b and self.dtype_a == self.dtype_b

    def to_dict(self) -> dict:
        return {key: _json_number(value) if isinstance(value, float) else value
                for key, value in self.__dict__.items()}


def compare_arrays(candidate: np.ndarray, baseline: np.ndarray) -> Comparison:
    """Compare `candidate` against `baseline`; shape or dtype differences stop at the header."""
    candidate, baseline = np.asarray(candidate), np.asarray(baseline)
    result = Comparison(tuple(candidate.shape), tuple(baseline.shape), str(candidate.dtype),
                        str(baseline.dtype), size=int(baseline.size))
    if not result.comparable:
        result.differing = int(max(candidate.size, baseline.size))
        return result
    same = bit_identical(candidate, baseline)
    result.differing = int(np.count_nonzero(~same))
    if result.differing == 0 or baseline.size == 0:
        return result
    if graphinfo.is_float_dtype(baseline.dtype):
        a = candidate.astype(np.float64)
        b = baseline.astype(np.float64)
        result.pattern_changes = int(np.count_nonzero(value_class(a) != value_class(b)))
        both_finite = np.isfinite(a) & np.isfinite(b)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(both_finite, np.abs(a - b), 0.0)
        result.rel_floor = magnitude_floor(b, baseline.dtype)
        result.max_abs = float(diff.max(initial=0.0))
        result.max_rel = float((diff / np.maximum(np.abs(b), result.rel_floor)).max(initial=0.0))
        result.min_atol = result.max_abs
        with np.errstate(divide="ignore", invalid="ignore"):
            plain_rel = np.where(diff > 0, diff / np.abs(b), 0.0)
        result.min_rtol = float(plain_rel.max(initial=0.0))
        distances = ulp_distance(candidate, baseline)
        finite_distances = distances[both_finite]
        if finite_distances.size:
            result.max_ulp = float(finite_distances.max())
            result.p99_ulp = float(np.percentile(finite_distances, 99))
        result.ulp_histogram = ulp_histogram(finite_distances)
    elif baseline.dtype.kind in "iub":
        diff = np.abs(candidate.astype(np.float64) - baseline.astype(np.float64))
        result.max_abs = result.min_atol = float(diff.max(initial=0.0))
        result.rel_floor = 1.0
        result.max_rel = float((diff / np.maximum(np.abs(baseline.astype(np.float64)), 1.0)).max())
        with np.errstate(divide="ignore", invalid="ignore"):
            plain_rel = np.where(diff > 0, diff / np.abs(baseline.astype(np.float64)), 0.0)
        result.min_rtol = float(plain_rel.max(initial=0.0))
    return result


def merge(comparisons: list[Comparison]) -> Comparison:
    """One summary over several input sets (maxima; the p99 of ulps is the max of the p99s)."""
    first = comparisons[0]
    merged = Comparison(first.shape_a, first.shape_b, first.dtype_a, first.dtype_b)
    histogram: dict[str, int] = {}
    for item in comparisons:
        if not item.comparable:
            return item
        merged.size += item.size
        merged.differing += item.differing
        merged.pattern_changes += item.pattern_changes
        for name in ("max_abs", "max_rel", "max_ulp", "p99_ulp", "min_atol", "min_rtol", "rel_floor"):
            setattr(merged, name, max(getattr(merged, name), getattr(item, name)))
        for row in item.ulp_histogram:
            histogram[row["ulps"]] = histogram.get(row["ulps"], 0) + row["count"]
    merged.ulp_histogram = [{"ulps": key, "count": count} for key, count in histogram.items()]
    return merged


def _json_number(value: float):
    if np.isnan(value):
        return "nan"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(value)
