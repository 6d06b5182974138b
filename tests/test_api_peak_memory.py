"""The API path's peak memory: the pieces that keep `onnxrefine.optimize(proto)` at or
below onnxruntime's basic level on resnet50 (bench/corpus_speed.py measures the RSS itself).

- a weight read twice by one rule is one copy (ProtoTensorView shares its array while it is held);
- a BN fold scales a weight a block of output channels at a time, with results and refusals
  identical to the whole-array form (foldmath.scale_rounded);
- the caller's unchanged weights go into the result proto to proto, equal to the plain serialization;
- freed heap memory is handed back (ir/heap.py)."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import onnx
import pytest
from helpers import make_model, run, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import onnxrefine
from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import foldmath, heap, io
from onnxrefine.ir.foldmath import round_folded, scale_rounded, to_float64
from onnxrefine.ir.protoview import ProtoTensorView


def test_a_view_read_twice_while_held_is_one_array_and_none_is_kept_after():
    proto = tensor("w", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    view = ProtoTensorView(proto)
    first = view.numpy()
    assert view.numpy() is first  # protobuf would have copied raw_data a second time
    assert not first.flags.writeable  # shared, so nobody may write it
    del first
    gc.collect()
    assert view._array() is None  # noqa: SLF001 - nothing kept once the readers let go
    again = view.numpy()
    np.testing.assert_array_equal(again, np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    assert view._array() is again  # noqa: SLF001 - a fresh array, weakly held
    assert np.asarray(view, dtype=np.float64).dtype == np.float64


def test_views_of_typed_fields_are_not_shared():
    proto = helper.make_tensor("w", onnx.TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])  # float_data, no raw_data
    view = ProtoTensorView(proto)
    first = view.numpy()
    assert first.flags.writeable  # onnx-ir builds a fresh, writable array from float_data
    assert view.numpy() is not first  # so each reader gets its own: a write must not reach another
    np.testing.assert_array_equal(first, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,factor_shape", [((37, 3, 3, 3), (37, 1, 1, 1)), ((37, 5), (1, 5)),
                                                ((64, 2, 1, 1), (1, 1, 1, 1)), ((7,), (7,))])
def test_blockwise_scaling_equals_the_whole_array_form(monkeypatch, dtype, shape, factor_shape):
    monkeypatch.setattr(foldmath, "FOLD_BLOCK_ELEMENTS", 16)  # many blocks of a few channels
    rng = np.random.default_rng(0)
    weight = rng.normal(size=shape).astype(dtype)
    factors = rng.uniform(-2, 2, size=factor_shape)
    whole = round_folded(to_float64(weight) * factors, dtype, "folded weight")
    blocked = scale_rounded(weight, factors, dtype, "folded weight")
    assert blocked.dtype == whole.dtype and blocked.shape == whole.shape
    assert blocked.tobytes() == whole.tobytes()


def test_a_refused_block_gives_the_whole_array_refusal(monkeypatch):
    """float16 overflow in two blocks: the message names the largest value of the whole weight
    (100000), as it always did, not the first refused block's (70000)."""
    monkeypatch.setattr(foldmath, "FOLD_BLOCK_ELEMENTS", 4)
    weight = np.ones((8, 4), np.float32)
    weight[1, 0], weight[6, 2] = 7e4, 1e5
    factors = np.ones((8, 1))
    with pytest.raises(RewriteRefused) as whole:
        round_folded(to_float64(weight) * factors, np.float16, "folded weight")
    with pytest.raises(RewriteRefused) as blocked:
        scale_rounded(weight, factors, np.float16, "folded weight")
    assert "100000" in str(whole.value)
    assert str(blocked.value) == str(whole.value)


def test_bn_fold_through_the_api_is_unchanged_by_blocks(monkeypatch):
    rng = np.random.default_rng(3)
    inits = [tensor("w", rng.normal(size=(16, 3, 3, 3)).astype(np.float32)),
             tensor("s", rng.uniform(0.5, 1.5, 16).astype(np.float32)),
             tensor("b", rng.normal(size=16).astype(np.float32)),
             tensor("m", rng.normal(size=16).astype(np.float32)),
             tensor("v", rng.uniform(0.5, 1.5, 16).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
    proto = make_model(nodes, [value_info("x", shape=[1, 3, 6, 6])], [value_info("y", shape=[1, 16, 6, 6])], inits)
    whole = onnxrefine.optimize(proto)
    monkeypatch.setattr(foldmath, "FOLD_BLOCK_ELEMENTS", 27)  # one output channel a block
    blocked = onnxrefine.optimize(proto)
    assert [n.op_type for n in blocked.graph.node] == ["Conv"]
    assert [t.SerializeToString() for t in blocked.graph.initializer] == \
        [t.SerializeToString() for t in whole.graph.initializer]
    x = rng.normal(size=(1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(run(proto, {"x": x})[0], run(blocked, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_unchanged_caller_weights_are_copied_proto_to_proto_as_the_plain_form_writes_them():
    w = tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.doc_string = "kept"
    entry = w.metadata_props.add()
    entry.key, entry.value = "origin", "export"
    typed = helper.make_tensor("t", onnx.TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])  # float_data
    proto = make_model([helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "t"], ["y"])],
                       [value_info("x", shape=[2, 3])], [value_info("y", shape=[2, 4])], [w, typed])
    model = io.to_ir(proto)[0]
    model.graph.initializers["w"].name = "renamed"
    plain = io.to_proto(model)
    model = io.to_ir(proto)[0]
    model.graph.initializers["w"].name = "renamed"
    assert isinstance(model.graph.initializers["renamed"].const_value, ProtoTensorView)
    consumed = io.to_proto(model, consume=True)
    assert [t.SerializeToString() for t in consumed.graph.initializer] == \
        [t.SerializeToString() for t in plain.graph.initializer]
    renamed = next(t for t in consumed.graph.initializer if t.name == "renamed")
    assert renamed.metadata_props[0].value == "export" and renamed.doc_string == "kept"
    assert proto.graph.initializer[0].name == "w"  # the caller's proto keeps its names


def test_freed_heap_memory_is_released_where_the_c_library_can():
    import ctypes.util
    import sys

    glibc = sys.platform.startswith("linux") and "libc.so" in (ctypes.util.find_library("c") or "")
    assert heap.release_freed() is glibc or not glibc


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), tail=st.lists(st.integers(1, 4), min_size=0, max_size=3),
       per_row=st.booleans(), block=st.integers(1, 40), dtype=st.sampled_from(["float32", "float16", "bfloat16"]),
       seed=st.integers(0, 2**16), extreme=st.booleans())
def test_buffered_scaling_is_bit_identical_to_the_whole_array_form(rows, tail, per_row, block, dtype, seed, extreme):
    """The fold in kept buffers gives main's whole-array result bit for bit, or the same refusal
    (overflow, underflow to zero, non-finite), on random weights, factors and block sizes."""
    dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    shape = (rows, *tail)
    weight = rng.normal(size=shape).astype(np.float32)
    if extreme:  # zeros, subnormals, huge values: the refusals and the sign of zero
        weight.flat[rng.integers(0, weight.size, 3)] = rng.choice([0.0, -0.0, 1e-40, 3e4, 1e30], 3)
    weight = weight.astype(dtype)
    factor_shape = ((rows,) if per_row else (1,)) + (1,) * len(tail)
    factors = rng.choice([-2.0, 0.5, 1e-30, 7.3, 1e10] if extreme else [-2.0, 0.5, 1.7], size=factor_shape)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(foldmath, "FOLD_BLOCK_ELEMENTS", block)
        try:
            whole = round_folded(to_float64(weight) * factors, dtype, "folded weight")
        except RewriteRefused as refused:
            with pytest.raises(RewriteRefused) as buffered:
                scale_rounded(weight, factors, dtype, "folded weight")
            assert str(buffered.value) == str(refused)
            return
        buffered = scale_rounded(weight, factors, dtype, "folded weight")
    assert buffered.dtype == whole.dtype and buffered.shape == whole.shape
    assert buffered.tobytes() == whole.tobytes()


@pytest.mark.parametrize(("factor", "value", "dtype"), [(1e-30, 1.0, np.float16), (1e10, 1.0, np.float16),
                                                        (1e300, 1e30, np.float32), (-0.5, -0.0, np.float32)])
def test_buffered_scaling_refuses_as_the_whole_array_form(monkeypatch, factor, value, dtype):
    """Underflow to zero, overflow of the dtype, a non-finite float64 product, and -0.0 (kept, not
    refused): the same outcome with the fold in kept buffers, a block of one channel."""
    monkeypatch.setattr(foldmath, "FOLD_BLOCK_ELEMENTS", 2)
    weight = np.full((4, 2), value, dtype)
    weight[0, 0] = 1.0
    factors = np.full((4, 1), factor)
    factors[0] = 1.0  # the first block is fine: the refusal comes from a later one
    try:
        whole = round_folded(to_float64(weight) * factors, dtype, "folded weight")
    except RewriteRefused as refused:
        with pytest.raises(RewriteRefused) as buffered:
            scale_rounded(weight, factors, dtype, "folded weight")
        assert buffered.value.guard == refused.guard and str(buffered.value) == str(refused)
        return
    assert scale_rounded(weight, factors, dtype, "folded weight").tobytes() == whole.tobytes()


_EDGES = [0.0, -0.0, 1.0, -1.5, 1e-30, 1e-300, 3e38, 7e4, 1e300, np.inf, -np.inf, np.nan]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["float32", "float16", "float64", "bfloat16"]), st.integers(1, 9), st.integers(1, 6),
       st.lists(st.sampled_from(_EDGES), min_size=0, max_size=3), st.integers(0, 2**31 - 1))
def test_blockwise_scaling_refuses_and_rounds_as_the_whole_array_form(dtype, rows, cols, edges, seed):
    """With factors that overflow, underflow to zero, are zero, infinite or NaN, in any float type
    (numpy's own, whose blocks are checked on the rounded weight, and ml_dtypes' bfloat16): the
    same bits, or the same refusal with the same message."""
    dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    weight = rng.normal(size=(rows, cols)).astype(dtype)
    factors = rng.uniform(-2, 2, size=(rows, 1))
    for index, value in enumerate(edges):
        factors[(index * 7 + seed) % rows, 0] = value
    outcomes = []
    for fold in (lambda: round_folded(to_float64(weight) * factors, dtype, "folded weight"),
                 lambda: scale_rounded(weight, factors, dtype, "folded weight")):
        try:
            with np.errstate(all="ignore"), pytest.MonkeyPatch.context() as patch:
                patch.setattr(foldmath, "FOLD_BLOCK_ELEMENTS", 8)
                outcomes.append(("ok", fold().tobytes()))
        except RewriteRefused as refused:
            outcomes.append(("refused", refused.guard, str(refused)))
    assert outcomes[0] == outcomes[1]
