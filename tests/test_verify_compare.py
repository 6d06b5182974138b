"""Unit tests for verify.compare: ulp distance, the max_rel floor, NaN/inf patterns."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnxrefine.verify.judge import compare


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16])
def test_ulp_distance_counts_representable_steps(dtype):
    dtype = np.dtype(dtype)
    start = np.array([1.0, -1.0, 0.0, 1e-3], dtype=dtype)
    steps = np.array([1, 3, 2, 7])
    moved = start.copy()
    for index, count in enumerate(steps):
        value = start[index]
        for _ in range(count):
            value = _next_up(value, dtype)
        moved[index] = value
    assert compare.ulp_distance(start, moved).tolist() == steps.tolist()
    assert compare.ulp_distance(moved, start).tolist() == steps.tolist()


def _next_up(value, dtype):
    key = int(compare.ordered_int(np.array([value], dtype=dtype))[0]) + 1
    bits = 8 * dtype.itemsize
    raw = key if key >= 0 else (-key) | (1 << (bits - 1))
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    return np.array([raw], dtype=unsigned).view(dtype)[0]


def test_ulp_distance_across_zero_and_signed_zeros():
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    a = np.array([tiny, 0.0, -0.0], dtype=np.float32)
    b = np.array([-tiny, -0.0, 0.0], dtype=np.float32)
    assert compare.ulp_distance(a, b).tolist() == [2.0, 0.0, 0.0]


def test_ulp_distance_one_ulp_float32_and_nan_left_out():
    a = np.array([1.0, np.nan, 2.0], dtype=np.float32)
    b = np.array([np.nextafter(np.float32(1.0), np.float32(2.0)), 1.0, 2.0], dtype=np.float32)
    distance = compare.ulp_distance(a, b)
    assert distance[0] == 1.0 and np.isnan(distance[1]) and distance[2] == 0.0


def test_ulp_distance_float64_extremes_do_not_overflow():
    a = np.array([np.finfo(np.float64).max], dtype=np.float64)
    b = -a
    distance = compare.ulp_distance(a, b)
    assert np.isfinite(distance[0]) and distance[0] > 1e18


def test_max_rel_uses_a_magnitude_floor_not_near_zero_values():
    baseline = np.array([1.0, 1.0, 1.0, 1e-30], dtype=np.float32)
    candidate = np.array([1.0, 1.0, 1.0, 1e-6], dtype=np.float32)
    result = compare.compare_arrays(candidate, baseline)
    rms = np.sqrt(3.0 / 4.0)
    assert result.rel_floor == pytest.approx(compare.REL_FLOOR_FRACTION * rms, rel=1e-6)
    assert result.max_rel == pytest.approx(1e-6 / result.rel_floor, rel=1e-5)
    assert result.max_rel < 1e-2  # dividing by 1e-30 would have said 1e24
    assert result.min_rtol > 1e20  # the plain rtol needed is still reported honestly


def test_compare_counts_differences_patterns_and_tolerances():
    baseline = np.array([1.0, 2.0, np.nan, np.inf, 5.0, np.nan], dtype=np.float32)
    candidate = np.array([1.0, 2.5, 3.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    result = compare.compare_arrays(candidate, baseline)
    assert result.differing == 3
    assert result.pattern_changes == 2
    assert result.max_abs == pytest.approx(0.5)
    assert result.min_atol == pytest.approx(0.5)
    assert result.min_rtol == pytest.approx(0.25)
    histogram = {row["ulps"]: row["count"] for row in result.ulp_histogram}
    assert sum(histogram.values()) == 2  # the two finite pairs: 0 ulps and many
    assert histogram["0"] == 1


def test_shape_and_dtype_differences_stop_the_comparison():
    result = compare.compare_arrays(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert not result.comparable
    result = compare.compare_arrays(np.zeros(3, np.float64), np.zeros(3, np.float32))
    assert not result.comparable


def test_bit_identical_treats_nans_alike_and_signed_zeros_apart():
    a = np.array([np.nan, 0.0, 1.0], dtype=np.float32)
    b = np.array([-np.nan, -0.0, 1.0], dtype=np.float32)
    assert compare.bit_identical(a, b).tolist() == [True, False, True]


def test_integer_outputs_compare():
    result = compare.compare_arrays(np.array([1, 2, 4]), np.array([1, 2, 3]))
    assert result.differing == 1 and result.max_abs == 1.0


def test_merge_keeps_maxima():
    first = compare.compare_arrays(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32))
    second = compare.compare_arrays(np.array([1.0, 2.0], np.float32), np.array([1.1, 2.0], np.float32))
    merged = compare.merge([first, second])
    assert merged.differing == 2 and merged.size == 4
    assert merged.max_abs == pytest.approx(0.5)


def _value_class_by_select(values):
    values = np.asarray(values, dtype=np.float64)
    return np.select([np.isnan(values), values == np.inf, values == -np.inf], [3, 1, 2], 0)


def _bit_identical_through_float64(a, b):
    view = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    same = np.ascontiguousarray(a).view(view) == np.ascontiguousarray(b).view(view)
    return same | (np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("specials", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_fast_paths_of_value_class_and_bit_identical_agree_with_the_whole_forms(dtype, specials, seed):
    """The all-finite and all-identical shortcuts give what the whole forms give, element for element
    (NaNs of any payload alike, -0 and +0 apart, every class told apart)."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((7, 5)) * 4).astype(dtype)
    b = a.copy()
    if specials:
        flat = a.reshape(-1)
        for index, value in zip(rng.choice(flat.size, 6, replace=False), (np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan)):
            flat[index] = value
        b = a.copy()
        b.reshape(-1)[rng.choice(flat.size, 5, replace=False)] = np.asarray([np.nan, 1.0, -0.0, np.inf, 2.0], dtype)
    if seed % 2:
        b = a.copy()  # identical: the shortcut
    for values in (a, b):
        got = compare.value_class(values)
        assert got.dtype == np.int64 and np.array_equal(got, _value_class_by_select(values))
    got = compare.bit_identical(a, b)
    assert got.dtype == bool and np.array_equal(got, _bit_identical_through_float64(a, b))
