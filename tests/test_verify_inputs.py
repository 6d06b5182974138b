"""Input loading and generation for verification."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from onnx import TensorProto, helper

from helpers import make_model, tensor, value_info
from onnxrefine.errors import BadInputError
from onnxrefine.verify.inputs import (check_inputs, generate_inputs, generate_labelled_inputs,
                                      load_inputs, save_inputs)


def _gather_model():
    """x: float [N, 5] with symbolic N; idx feeds Gather on axis 1 of x; shape feeds Reshape."""
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Add", ["k", "k"], ["kk"]),
        helper.make_node("Not", ["flag"], ["nflag"]),
    ]
    inputs = [value_info("x", TensorProto.FLOAT, ["N", 5]), value_info("idx", TensorProto.INT64, [3]),
              value_info("shape", TensorProto.INT64, [2]), value_info("k", TensorProto.INT32, [4]),
              value_info("flag", TensorProto.BOOL, [4])]
    outputs = [value_info("g", TensorProto.FLOAT, None), value_info("r", TensorProto.FLOAT, None),
               value_info("kk", TensorProto.INT32, None), value_info("nflag", TensorProto.BOOL, None)]
    return make_model(nodes, inputs, outputs)


def test_generation_uses_dims_and_defaults():
    model = _gather_model()
    sets = generate_inputs(model, seed=0, dims={"N": 7}, stress=False)
    assert len(sets) == 3
    assert sets[0]["x"].shape == (7, 5) and sets[0]["x"].dtype == np.float32
    assert generate_inputs(model, seed=0, stress=False)[0]["x"].shape == (2, 5)
    assert sets[0]["flag"].dtype == np.bool_ and sets[0]["k"].dtype == np.int32


def test_generation_is_deterministic_by_seed():
    model = _gather_model()
    first = generate_inputs(model, seed=3)
    again = generate_inputs(model, seed=3)
    other = generate_inputs(model, seed=4)
    assert all(np.array_equal(a["x"], b["x"], equal_nan=True) for a, b in zip(first, again))
    assert not np.array_equal(first[0]["x"], other[0]["x"])


def test_index_and_shape_inputs_stay_in_range():
    model = _gather_model()
    for label, feeds in generate_labelled_inputs(model, seed=1, dims={"N": 3}, trials=5):
        assert feeds["idx"].min() >= -5 and feeds["idx"].max() < 5
        assert feeds["shape"].min() >= 1 and feeds["shape"].max() <= 3
        # plain integers are small, but for the set drawn to reach int32 overflow (branches.py)
        assert (np.abs(feeds["k"]).max() > 3) == (label == "branch:int-range")


def test_index_range_without_known_dim_is_zero_one():
    # data's shape depends on a runtime shape input, so the indexed dim is unknown
    nodes = [helper.make_node("Reshape", ["x", "s"], ["data"]),
             helper.make_node("Gather", ["data", "idx"], ["out"], axis=0)]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, [4]),
                               value_info("s", TensorProto.INT64, [1]),
                               value_info("idx", TensorProto.INT64, [6])],
                       [value_info("out", TensorProto.FLOAT, None)])
    for feeds in generate_inputs(model, seed=0):
        assert set(np.unique(feeds["idx"])) <= {0, 1}


def test_an_attention_mask_is_never_negative():
    # onnxruntime's contrib Attention refuses a negative mask_index: generated masks stay in [0, 2)
    # (a BERT model onnxruntime's transformer optimizer wrote was left unverified with generated inputs)
    hidden, heads = 8, 2
    rng = np.random.default_rng(0)
    node = helper.make_node("Attention", ["x", "w", "b", "mask"], ["y"], domain="com.microsoft", num_heads=heads)
    model = make_model([node], [value_info("x", TensorProto.FLOAT, [1, 4, hidden]),
                                value_info("mask", TensorProto.INT32, [1, 4])],
                       [value_info("y", TensorProto.FLOAT, None)],
                       [tensor("w", rng.standard_normal((hidden, 3 * hidden)).astype(np.float32)),
                        tensor("b", np.zeros(3 * hidden, np.float32))])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for feeds in generate_inputs(model, seed=0, trials=4):
        assert set(np.unique(feeds["mask"])) <= {0, 1}
    # as onnxruntime's transformer optimizer writes it: the end positions are the mask's row sums
    summed = [helper.make_node("Cast", ["attention_mask"], ["m32"], to=TensorProto.INT32),
              helper.make_node("ReduceSum", ["m32", "axes"], ["mask"], keepdims=0)]
    model = make_model(summed + [node], [value_info("x", TensorProto.FLOAT, [1, 4, hidden]),
                                         value_info("attention_mask", TensorProto.INT64, [1, 4])],
                       [value_info("y", TensorProto.FLOAT, None)],
                       list(model.graph.initializer) + [tensor("axes", np.array([1], np.int64))])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for feeds in generate_inputs(model, seed=0, trials=4):
        assert set(np.unique(feeds["attention_mask"])) <= {0, 1}


def test_index_through_a_cast_still_counts_as_index():
    nodes = [helper.make_node("Cast", ["i32"], ["i64"], to=TensorProto.INT64),
             helper.make_node("Gather", ["w", "i64"], ["out"], axis=0)]
    model = make_model(nodes, [value_info("i32", TensorProto.INT32, [8])],
                       [value_info("out", TensorProto.FLOAT, None)],
                       [tensor("w", np.ones((4, 2), np.float32))])
    for feeds in generate_inputs(model, seed=0, trials=4):
        assert feeds["i32"].min() >= -4 and feeds["i32"].max() < 4


def test_float_inputs_generate_without_shape_inference(monkeypatch):
    """Only an integer input has a role (index, shape) that needs the model's inferred shapes."""
    from onnxrefine.verify import graphinfo

    def refuse(*args, **kwargs):
        raise AssertionError("shape inference was run")

    monkeypatch.setattr(graphinfo, "static_shapes", refuse)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [value_info("x", TensorProto.FLOAT, ["N", 5])],
                       [value_info("y", TensorProto.FLOAT, None)])
    [feeds] = generate_inputs(model, stress=False, trials=1)
    assert feeds["x"].shape[1] == 5 and feeds["x"].dtype == np.float32
    with pytest.raises(AssertionError, match="shape inference was run"):
        generate_inputs(_gather_model(), stress=False, trials=1)


def test_stress_sets_hold_negatives_zeros_large_inf_and_nan():
    model = _gather_model()
    labelled = dict(generate_labelled_inputs(model, seed=0, dims={"N": 16}))
    assert {"stress:negative", "stress:zeros_tiny", "stress:large", "stress:inf_nan"} <= set(labelled)
    assert (labelled["stress:negative"]["x"] < 0).all()
    zeros = labelled["stress:zeros_tiny"]["x"]
    assert ((zeros == 0) & np.signbit(zeros)).any() and ((zeros == 0) & ~np.signbit(zeros)).any()
    assert np.abs(labelled["stress:large"]["x"]).max() > 1e18
    assert np.isfinite(labelled["stress:large"]["x"]).all()
    special = labelled["stress:inf_nan"]["x"]
    assert np.isnan(special).any() and np.isposinf(special).any() and np.isneginf(special).any()
    # integers stay valid in every stress set
    assert all(-5 <= feeds["idx"].min() and feeds["idx"].max() < 5 for feeds in labelled.values())


def test_float16_stress_values_respect_the_dtype():
    model = make_model([helper.make_node("Relu", ["h"], ["y"])],
                       [value_info("h", TensorProto.FLOAT16, [64])],
                       [value_info("y", TensorProto.FLOAT16, None)])
    labelled = dict(generate_labelled_inputs(model, seed=0))
    large = labelled["stress:large"]["h"]
    assert large.dtype == np.float16 and np.isfinite(large).all() and np.abs(large).max() > 100


def test_npz_round_trip_single_and_multi(tmp_path):
    one = {"x": np.arange(3, dtype=np.float32)}
    path = tmp_path / "one.npz"
    save_inputs(path, [one])
    loaded = load_inputs(path)
    assert len(loaded) == 1 and np.array_equal(loaded[0]["x"], one["x"])
    two = [one, {"x": np.ones(3, np.float32)}]
    save_inputs(tmp_path / "two.npz", two)
    loaded = load_inputs(tmp_path / "two.npz")
    assert len(loaded) == 2 and np.array_equal(loaded[1]["x"], np.ones(3, np.float32))


def test_npz_with_object_arrays_is_refused(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(BadInputError):
        load_inputs(path)


class _MakesMarker:
    """Unpickling this object creates a marker file: proof that the pickle was loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_without_trust_is_refused_and_never_loaded(tmp_path):
    marker = tmp_path / "UNPICKLED"
    path = tmp_path / "oracle.pkl"
    path.write_bytes(pickle.dumps({"input": {"x": np.zeros(2)}, "boom": _MakesMarker(str(marker))}))
    with pytest.raises(BadInputError, match="refusing to unpickle.*--trust-pickle"):
        load_inputs(path)
    assert not marker.exists()
    # proof that the file really would have run code
    load_inputs(path, trust_pickle=True)
    assert marker.exists()


def test_pickle_refusal_happens_before_opening(tmp_path):
    with pytest.raises(BadInputError, match="refusing to unpickle"):
        load_inputs(tmp_path / "does-not-exist.pkl")


def test_trusted_oracle_layout_loads(tmp_path):
    path = tmp_path / "oracle.pkl"
    arrays = {"x": np.ones((2, 5), np.float32)}
    path.write_bytes(pickle.dumps({"input": arrays, "output": {"y": np.zeros(1)}}))
    loaded = load_inputs(path, trust_pickle=True)
    assert list(loaded[0]) == ["x"] and np.array_equal(loaded[0]["x"], arrays["x"])


def test_check_inputs_reports_missing_extra_dtype_and_shape():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [value_info("x", TensorProto.FLOAT, ["N", 4])],
                       [value_info("y", TensorProto.FLOAT, None)])
    check_inputs(model, [{"x": np.zeros((3, 4), np.float32)}])
    with pytest.raises(BadInputError, match="missing"):
        check_inputs(model, [{}])
    with pytest.raises(BadInputError, match="not inputs"):
        check_inputs(model, [{"x": np.zeros((3, 4), np.float32), "z": np.zeros(1)}])
    with pytest.raises(BadInputError, match="float64"):
        check_inputs(model, [{"x": np.zeros((3, 4), np.float64)}])
    with pytest.raises(BadInputError, match="shape"):
        check_inputs(model, [{"x": np.zeros((3, 5), np.float32)}])
    with pytest.raises(BadInputError, match="rank"):
        check_inputs(model, [{"x": np.zeros(4, np.float32)}])


def test_missing_npz_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="not found"):
        load_inputs(os.fspath(tmp_path / "none.npz"))


def test_missing_inputs_say_what_the_file_gave():
    """An npz keyed by other names ('image' where the model reads 'x', or sets keyed 'a/x') said only
    which input was missing; it now names what was given and how several sets are keyed."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [value_info("x", TensorProto.FLOAT, ["N", 4])],
                       [value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(BadInputError) as raised:
        check_inputs(model, [{"a/x": np.zeros((3, 4), np.float32)}])
    assert str(raised.value) == ("inputs: missing model input(s) x (given: a/x; several sets are keyed "
                                 "'<n>/<name>', n = 0, 1, ...)")
    with pytest.raises(BadInputError, match=r"missing model input\(s\) x \(no arrays given\)"):
        check_inputs(model, [{}])


def test_a_memo_infers_the_model_s_shapes_once_for_sets_at_every_size(monkeypatch):
    # A shape observation generates its cut's sets again at each size it tries: the model's
    # inferred shapes (for its integer inputs' roles) are the same each time, kept in the memo.
    from onnxrefine.verify import graphinfo

    model = _gather_model()
    calls = []
    static_shapes = graphinfo.static_shapes
    monkeypatch.setattr(graphinfo, "static_shapes", lambda *args: calls.append(1) or static_shapes(*args))
    memo: dict = {}
    with_memo = [generate_labelled_inputs(model, seed=3, dims={"N": size}, memo=memo) for size in (2, 3, 2)]
    assert len(calls) == 1
    without = [generate_labelled_inputs(model, seed=3, dims={"N": size}) for size in (2, 3, 2)]
    assert len(calls) == 4
    for kept, fresh in zip(with_memo, without):
        assert [label for label, _ in kept] == [label for label, _ in fresh]
        for (_, a), (_, b) in zip(kept, fresh):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
