"""The float64 reference's cheaper paths give what the plain ones give: a dot product's bounds in
float32 stay upper bounds channel by channel, a weight's float32 forms are the float64 ones rounded,
and a Gather from a weight converts only the rows it picks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from onnxrefine.verify.reference import bound_of, evaluate_float64
from onnxrefine.verify.reference import bound_nn, memory
from onnxrefine.verify.reference.bound_ops import OpContext


def _exact(left, right):
    return np.matmul(left.astype(np.float64), right.astype(np.float64))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(0, 2**31 - 1), st.sampled_from([1e-30, 1.0, 1e30]))
def test_a_stacked_float32_product_is_an_upper_bound(n, seed, scale):
    """Nonnegative operands of every magnitude float32 holds: the inflated float32 product is at
    least the float64 one (whose own rounding, 1e-16 relative, is far below the inflation)."""
    rng = np.random.default_rng(seed)
    lefts = [rng.random((3, n)) * scale, rng.random((3, n))]
    right = rng.random((n, 2)) * (1.0 + 2.0 ** -23)
    out = bound_nn._stacked_nonnegative(np.matmul, lefts, right, n)
    for left, got in zip(lefts, out):
        assert got is not None and np.all(got >= _exact(left, right) * (1.0 - 1e-13))


def test_a_left_float32_cannot_hold_runs_in_float64_alone():
    """One channel's operand float32 cannot hold (an infinite or NaN bound) leaves the others'
    products in float32; only its own entry is None (its caller computes it in float64). Before,
    one such operand sent every channel to float64."""
    rng = np.random.default_rng(0)
    held, unbounded = rng.random((2, 8)), np.full((2, 8), np.inf)
    right = rng.random((8, 3))
    out = bound_nn._stacked_nonnegative(np.matmul, [held, unbounded, held * 2], right, 8)
    assert out[1] is None and out[0] is not None and out[2] is not None
    assert np.all(out[0] >= _exact(held, right)) and np.all(out[2] >= _exact(held * 2, right))
    assert bound_nn._stacked_nonnegative(np.matmul, [held, np.full((2, 8), np.nan)], right, 8)[1] is None
    # a product float32 overflows even with its operand scaled down is left to float64 too
    wide = np.full((2, 8), 1e38)
    out = bound_nn._stacked_nonnegative(np.matmul, [held, wide], right * 1e9, 8)
    assert out[0] is not None and out[1] is None
    assert bound_nn._stacked_nonnegative(np.matmul, [held], None, 8) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2048), st.integers(0, 2**31 - 1), st.sampled_from([1e35, 1e39, 1e62, 1e200]),
       st.booleans())
def test_a_left_beyond_float32s_range_is_scaled_and_stays_an_upper_bound(n, seed, scale, spread):
    """A worst-case bound grown beyond float32's range (resnet50's last blocks carry 1e38 to 1e62)
    is handed to float32 scaled by a power of two: its product is still at least the float64 one,
    and as tight as the unscaled one (the summation's own n * u, entries 1e-20 of the largest
    included) where the right operand's float32 entries are all normal, as a float32 model's |w|
    without zeros is."""
    rng = np.random.default_rng(seed)
    left = rng.random((3, n)) * scale
    if spread:
        left[0] *= 1e-20  # a row far below the largest entry
    right = rng.random((n, 2)).astype(np.float32).astype(np.float64)
    (got,) = bound_nn._stacked_nonnegative(np.matmul, [left], right, n)
    exact = _exact(left, right)
    assert got is not None and np.all(got >= exact * (1.0 - 1e-13))
    assert np.all(got <= exact * (1.0 + (n + 4) * 2.0 ** -23))


def test_a_scaled_left_times_a_right_with_zeros_stays_covered():
    """A right operand with zeros (an underflowed w^2 rounds to 0 in float32: its rounding is then
    absolute) keeps the absolute term that covers it, scaled with the left."""
    left = np.full((1, 64), 1e40)
    exact_right = np.full((64, 1), 1e-46)  # each rounds to 0 in float32
    out = bound_nn._stacked_nonnegative(np.matmul, [left], exact_right.astype(np.float32), 64)
    assert out[0] is not None and out[0][0, 0] >= 64 * 1e40 * 1e-46


def _context() -> OpContext:
    node = helper.make_node("MatMul", ["a", "w"], ["y"])
    return OpContext(node, [], {}, 17, [], [], [], [], None, None, [])


def test_a_weights_float32_forms_are_its_float64_forms_rounded_once():
    """|w| and w^2 in float32, made once per node: the same values as the float64 forms rounded to
    float32, for a float32 weight and for float64 values float32 does not hold (w^2 of a rounded w
    would round twice); a weight float32 cannot hold gives None; another operand its own."""
    ctx = _context()
    rng = np.random.default_rng(1)
    for w in (rng.standard_normal((5, 4)).astype(np.float32).astype(np.float64), rng.standard_normal((5, 4)) / 3):
        narrowed = bound_nn._narrow_right(ctx, w)
        assert narrowed(False).dtype == np.float32
        assert np.array_equal(narrowed(False), np.abs(w).astype(np.float32))
        assert np.array_equal(narrowed(True), (np.abs(w) * np.abs(w)).astype(np.float32))
        assert narrowed(True) is narrowed(True) and bound_nn._narrow_right(ctx, w) is narrowed
    big = np.full((2, 2), 3e19)  # its square is beyond float32
    assert bound_nn._narrow_right(ctx, big)(False) is not None and bound_nn._narrow_right(ctx, big)(True) is None
    # a float32 weight's square made in float32 is the float64 square rounded once, bit for bit, also
    # where it is subnormal, rounds to zero or is the largest float32 holds
    edges = np.array([1e-23, 3e-23, 1e-30, 1.8e19, -1.7e19, 0.0, -0.0, 1.0 + 2.0 ** -23], np.float32)
    w = np.concatenate([edges, rng.standard_normal(4000).astype(np.float32)]).astype(np.float64)
    squared = bound_nn._narrow_right(ctx, w)(True)
    assert squared.tobytes() == np.square(w).astype(np.float32).tobytes()


def _embedding(dtype=np.float32) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    return make_model([helper.make_node("Gather", ["E", "ids"], ["h"]),
                       helper.make_node("MatMul", ["h", "W"], ["y"])],
                      [value_info("ids", TensorProto.INT64, [1, 6])], [value_info("y", elem, [1, 6, 4])],
                      [tensor("E", rng.standard_normal((50, 4)).astype(dtype)),
                       tensor("W", rng.standard_normal((4, 4)).astype(dtype))])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("external", [False, True])
def test_a_gather_from_a_weight_converts_only_the_rows_it_picks(dtype, external, tmp_path, monkeypatch):
    """The rows and their bounds are those of the whole table converted to float64 first, and the
    table itself is never converted (its load() is not called), embedded or memory-mapped."""
    model = _embedding(dtype)
    base_dir = None
    if external:
        path = tmp_path / "m.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="m.data", size_threshold=0)
        model, base_dir = onnx.load_model(str(path), load_external_data=False), str(tmp_path)
    ids = np.array([[0, 49, -1, 7, 7, 3]], dtype=np.int64)
    table = np.asarray(onnx.numpy_helper.to_array(_embedding(dtype).graph.initializer[0]), dtype=np.float64)
    original_load = memory.Initializer.load
    with monkeypatch.context() as patched:  # the plain path: the whole table converted first
        patched.setattr(memory.Initializer, "native", lambda self: np.asarray(
            onnx.numpy_helper.to_array(self.tensor, self.base_dir or ""), dtype=np.float64))
        plain = evaluate_float64(model, {"ids": ids}, outputs=["y", "h"], base_dir=base_dir)
    loads = []
    monkeypatch.setattr(memory.Initializer, "load",
                        lambda self: loads.append(self.tensor.name) or original_load(self))
    picked = evaluate_float64(model, {"ids": ids}, outputs=["y", "h"], base_dir=base_dir)
    assert "E" not in loads and "W" in loads
    assert picked["h"].dtype == np.float64 and np.array_equal(picked["h"], np.take(table, ids, axis=0))
    for name in ("h", "y"):
        assert np.array_equal(picked[name], plain[name])
        assert np.array_equal(bound_of(picked[name]), bound_of(plain[name]), equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 3]), st.sampled_from(["NOTSET", "VALID", "SAME_UPPER",
                                                                               "SAME_LOWER"]),
       st.booleans(), st.booleans())
def test_onnxruntime_stacked_convolutions_are_the_kernels_windows_and_bounds(seed, rank, auto_pad, grouped, strided):
    """onnxruntime's float32 Conv of the stacked operands reads the float64 kernel's windows (the
    same output shape, auto_pad resolved the kernel's way) and, inflated as the bound inflates it,
    is at least the float64 convolution of the same nonnegative operands."""
    from onnxrefine.verify.reference.kernels import nn
    from onnxrefine.verify.reference.stacked_conv import stacked_conv

    rng = np.random.default_rng(seed)
    group = 2 if grouped else 1
    channels, maps = 2 * group, 2 * group
    kernel = tuple(int(k) for k in rng.integers(1, 4, rank))
    spatial = tuple(int(s) for s in rng.integers(max(kernel), 7, rank))
    attrs = {"group": group, "auto_pad": auto_pad, "strides": [2 if strided else 1] * rank,
             "dilations": [int(d) for d in rng.integers(1, 3, rank)]}
    if auto_pad == "NOTSET":
        attrs["pads"] = [int(p) for p in rng.integers(0, 3, 2 * rank)]
    stacked = rng.random((3, 1, channels, *spatial)).astype(np.float32)
    right = rng.random((maps, channels // group, *kernel)).astype(np.float32)
    strides, dilations, effective, begins, ends = nn.geometry(lambda name, default=None: attrs.get(name, default),
                                                              spatial, kernel)
    if any(size + b + e < k for size, b, e, k in zip(spatial, begins, ends, effective)):
        return  # no output: the kernel refuses it too
    out = stacked_conv(stacked, right, attrs)
    assert out is not None
    n = (channels // group) * int(np.prod(kernel))
    inflate = 1.0 / ((1.0 - 2.0 ** -24) ** 2 * (1.0 - n * 2.0 ** -24))
    for index in range(3):
        exact = nn.conv(stacked[index].astype(np.float64), right.astype(np.float64), None, strides, dilations,
                        begins, ends, group)
        assert out[index].shape == exact.shape
        assert np.all(out[index].astype(np.float64) * inflate >= exact * (1.0 - 1e-13))


def test_a_stacked_convolution_onnxruntime_cannot_make_falls_back():
    """Operands the shapes of no Conv (channels that no group divides), or not float32: None, and the
    bound computes them with numpy."""
    from onnxrefine.verify.reference.stacked_conv import stacked_conv

    rng = np.random.default_rng(4)
    assert stacked_conv(rng.random((2, 1, 3, 5, 5)).astype(np.float32),
                        rng.random((4, 2, 3, 3)).astype(np.float32), {"group": 1}) is None
    assert stacked_conv(rng.random((2, 1, 2, 5, 5)), rng.random((4, 2, 3, 3)), {}) is None


def test_a_convolutions_bound_is_the_same_with_numpys_stacked_products(monkeypatch):
    """The bound of a Conv chain through onnxruntime's stacked convolutions agrees with numpy's to the
    float32 rounding of the stacked sums (each an upper bound, in other orders)."""
    from onnxrefine.verify.reference import stacked_conv

    rng = np.random.default_rng(5)
    model = make_model([helper.make_node("Conv", ["x", "W1"], ["h"], pads=[1, 1, 1, 1]),
                        helper.make_node("Relu", ["h"], ["r"]),
                        helper.make_node("Conv", ["r", "W2"], ["y"], group=4, pads=[1, 1, 1, 1], strides=[2, 2])],
                       [value_info("x", shape=[1, 3, 12, 12])], [value_info("y", shape=[1, 4, 6, 6])],
                       [tensor("W1", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                        tensor("W2", rng.standard_normal((4, 1, 3, 3)).astype(np.float32))])
    feeds = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    through = evaluate_float64(model, feeds)["y"]
    calls = []
    monkeypatch.setattr(bound_nn, "stacked_conv", lambda *args: calls.append(1))  # numpy's products
    plain = evaluate_float64(model, feeds)["y"]
    assert calls and np.array_equal(through, plain)
    np.testing.assert_allclose(bound_of(through), bound_of(plain), rtol=1e-5)
    assert stacked_conv.MAX_SESSIONS >= len(stacked_conv._sessions) > 0


def test_a_scalar_index_picks_a_float64_scalar():
    """Gather of a 1-D weight by a 0-d index gives a numpy scalar, converted like an array: what
    reads it computes in float64 (a float32 scalar left in place made Mul and Exp run in float32)."""
    table = np.array([1.1, 2.3, 0.7], dtype=np.float32)
    model = make_model([helper.make_node("Gather", ["T", "i"], ["g"]), helper.make_node("Mul", ["g", "g"], ["m"]),
                        helper.make_node("Exp", ["g"], ["e"])],
                       [value_info("i", TensorProto.INT64, [])], [value_info("m", shape=[]), value_info("e", shape=[])],
                       [tensor("T", table)])
    out = evaluate_float64(model, {"i": np.array(0, dtype=np.int64)}, outputs=["m", "e", "g"])
    exact = float(table[0])
    assert np.asarray(out["g"]).dtype == np.float64 and float(out["g"]) == exact
    assert np.asarray(out["m"]).dtype == np.float64 and float(out["m"]) == exact * exact
    assert float(out["e"]) == float(np.exp(np.float64(exact)))


def test_operands_below_float32s_range_stay_covered():
    """A left operand below float32's subnormal range rounds to 0 in the stacked product; times a
    large weight its lost products are far above n * tiny (a whole row of 1e-46 times 1e30 is
    1e-16 a term): the bound still covers them."""
    lefts = [np.full((1, 64), 1e-46)]
    right = np.full((64, 1), 1e30)
    out = bound_nn._stacked_nonnegative(np.matmul, lefts, right, 64)
    assert out[0] is not None and out[0][0, 0] >= 64 * 1e-46 * 1e30
