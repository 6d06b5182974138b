"""The runs that check shape folds and learn certificates' shapes, at sizes of the symbolic dims the
model runs at (verify/ort/dims.py): a model that fails at the default sizes (a KV cache's mask that
must be as long as past + sequence) is checked at sizes that satisfy the sum its graph computes, a
fold is checked at two assignments in which every dim differs, and a model that runs at one only
is not certified by it."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from guardutil import expect_guard
from helpers import make_model, run, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.ir.facts import oracle as facts_oracle
from onnxrefine.verify.ort import dims as runnable

INT64 = TensorProto.INT64


def _cache_model() -> onnx.ModelProto:
    """A decoder step's bookkeeping: the keys are the cache and the new tokens (Concat); the mask's
    columns are read at positions 0 .. past + sequence - 1 and laid out as the mask (so it runs
    only where total = past + sequence, not at the default size 2 of every dim); the keys are
    scaled by the sum of what was read, and reshaped to a target computed from their static
    width (fold_shapes folds it; the runs that check it pass the mask's Gather).
    Unsqueeze(Unsqueeze(Range)): a rule rewrite whose boundary shape only a run gives."""
    nodes = [
        helper.make_node("Concat", ["past", "x"], ["keys"], axis=1),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Shape", ["past"], ["past_shape"]),
        helper.make_node("Gather", ["x_shape", "one"], ["sequence"], axis=0),
        helper.make_node("Gather", ["past_shape", "one"], ["cached"], axis=0),
        helper.make_node("Add", ["cached", "sequence"], ["length"]),
        helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
        helper.make_node("Gather", ["mask", "positions"], ["seen"], axis=1),
        helper.make_node("Unsqueeze", ["seen", "axis0"], ["seen1"]),
        helper.make_node("Unsqueeze", ["seen1", "axis0"], ["seen2"]),
        helper.make_node("Shape", ["mask"], ["mask_shape"]),
        helper.make_node("Reshape", ["seen", "mask_shape"], ["seen_as_mask"]),
        helper.make_node("Cast", ["seen_as_mask"], ["seen_float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["seen_float"], ["weights"], keepdims=0),
        helper.make_node("Mul", ["keys", "weights"], ["masked"]),
        helper.make_node("Shape", ["masked"], ["masked_shape"]),
        helper.make_node("Gather", ["masked_shape", "two"], ["width"], axis=0),
        helper.make_node("Unsqueeze", ["width", "axis0"], ["width1"]),
        helper.make_node("Concat", ["minus_one", "width1"], ["target"], axis=0),
        helper.make_node("Reshape", ["masked", "target"], ["rows"]),
    ]
    return make_model(
        nodes,
        [value_info("x", shape=["batch", "sequence", 4]), value_info("past", shape=["batch", "past", 4]),
         value_info("mask", INT64, ["batch", "total"])],
        [value_info("rows", shape=None), value_info("seen2", INT64, None)],
        [tensor("zero", np.array(0, np.int64)), tensor("one", np.array(1, np.int64)),
         tensor("two", np.array(2, np.int64)), tensor("axis0", np.array([0], np.int64)),
         tensor("minus_one", np.array([-1], np.int64))])


def _cache_feeds(batch=1, sequence=3, past=2):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((batch, sequence, 4), dtype=np.float32),
            "past": rng.standard_normal((batch, past, 4), dtype=np.float32),
            "mask": rng.integers(0, 2, (batch, past + sequence), dtype=np.int64)}


def test_a_model_that_fails_at_the_default_sizes_is_checked_where_its_sums_hold():
    model = _cache_model()
    result, report = onnxrefine.optimize_with_report(model, ["fold_shapes"])
    folds = [a for a in report.log.applied if a.rule == "fold_shapes"]
    assert folds and all(a.evidence == "certified" for a in folds)
    # total = past + sequence, read from the Add of the two dims; the other dims differ
    assert all("at batch=2, sequence=3, past=4, total=7 and at batch=3, sequence=4, past=5, total=9"
               in a.certificate for a in folds)
    assert not [r for r in report.log.refused.values() if r.rule == "fold_shapes"]
    assert "Concat" not in [n.op_type for n in result.graph.node if n.output[0] == "target"]
    assert_bit_identical(run(model, _cache_feeds()), run(result, _cache_feeds()))


def test_a_rule_rewrite_whose_shapes_only_a_run_gives_is_certified_at_the_sizes_the_model_runs_at():
    model = _cache_model()
    result, report = onnxrefine.optimize_with_report(model, ["fuse_consecutive_unsqueezes"])
    [entry] = [a for a in report.log.applied if a.rule == "fuse_consecutive_unsqueezes"]
    assert entry.evidence == "certified" and "at the shapes of a run of the model" in entry.certificate
    assert [n.op_type for n in result.graph.node].count("Unsqueeze") == 2
    assert_bit_identical(run(model, _cache_feeds()), run(result, _cache_feeds()))


def _batch_model(batch="batch") -> onnx.ModelProto:
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axis0"], ["count"]),
             helper.make_node("Relu", ["x"], ["y"])]
    return make_model(nodes, [value_info("x", shape=[batch, 3])],
                      [value_info("y", shape=[batch, 3]), value_info("count", INT64, [1])],
                      [tensor("zero", np.array(0, np.int64)), tensor("axis0", np.array([0], np.int64))])


def _batch_read_as_default(monkeypatch):
    """A planted wrong fact: the batch dim read from a Shape is the default size 2, a number."""
    elements = facts_oracle.StaticShapes.elements

    def planted(self, value, _depth=0):
        found = elements(self, value, _depth)
        producer = value.producer() if value is not None else None
        if found is not None and producer is not None and producer.op_type == "Gather" and not found.known():
            return dataclasses.replace(found, items=(2,))
        return found

    monkeypatch.setattr(facts_oracle.StaticShapes, "elements", planted)


@pytest.mark.parametrize("batch, key", [("batch", "batch"), (None, "x[0]")])
def test_a_fold_right_at_the_default_size_only_is_caught_at_the_second_assignment(monkeypatch, batch, key):
    # At size 2 the planted fold agrees with onnxruntime; at size 3 it does not. A dim with no
    # name is sized by its input and axis.
    _batch_read_as_default(monkeypatch)
    model = _batch_model(batch)
    result, report = expect_guard(model, ["fold_shapes"], "static_shape.runtime_disagrees",
                                  {"x": np.ones((5, 3), np.float32)}, rule="fold_shapes")
    reasons = sorted(r.reason for r in report.log.refused.values() if r.guard == "static_shape.runtime_disagrees")
    assert reasons == [f"folded 2 where onnxruntime computes 3 at {key}=3",
                       f"folded [2] where onnxruntime computes [3] at {key}=3"]
    assert "Gather" in [n.op_type for n in result.graph.node]


def _fixed_size_model() -> onnx.ModelProto:
    """x[n] reshaped to [2]: it runs at n = 2 only, so no second assignment checks its folds."""
    nodes = [helper.make_node("Reshape", ["x", "two"], ["y"]), helper.make_node("Shape", ["y"], ["s"])]
    return make_model(nodes, [value_info("x", shape=["n"])], [value_info("s", INT64, [1])],
                      [tensor("two", np.array([2], np.int64))])


def test_a_model_that_runs_at_one_assignment_only_is_not_certified_by_it():
    result, report = expect_guard(_fixed_size_model(), ["fold_shapes"], "certificate.graph_uncertifiable",
                                  {"x": np.ones(2, np.float32)}, rule="fold_shapes")
    [refusal] = [r for r in report.log.refused.values() if r.rule == "fold_shapes"]
    assert "runs at one assignment of its symbolic dims only (n=2)" in refusal.reason
    assert "Shape" in [n.op_type for n in result.graph.node]


def test_a_model_without_symbolic_dims_is_checked_in_one_run():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"])]
    model = make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("s", INT64, [2])])
    _, report = onnxrefine.optimize_with_report(model, ["fold_shapes"])
    [entry] = [a for a in report.log.applied if a.rule == "fold_shapes"]
    assert entry.certificate == "certified: onnxruntime computes the same value on the model's own input shapes"


_KEYS = st.lists(st.sampled_from("abcdefg"), min_size=3, max_size=6, unique=True)


@settings(max_examples=60, deadline=None)  # a loaded machine is slow, not wrong
@given(_KEYS, st.data())
def test_the_candidates_hold_a_sum_at_two_assignments_that_differ_everywhere(keys, data):
    whole, first, second = data.draw(st.permutations(keys))[:3]
    assignments = runnable.candidates(keys, [(whole, first, second)])
    assert runnable.differ_everywhere(assignments[0], assignments[1])  # the default and the distinct sizes
    assert all(list(a) == keys and all(size >= 2 for size in a.values()) for a in assignments)
    assert all(a != b for i, a in enumerate(assignments) for b in assignments[i + 1:])
    holding = [a for a in assignments if a[whole] == a[first] + a[second]]
    assert any(runnable.differ_everywhere(a, b) for i, a in enumerate(holding) for b in holding[i + 1:])


def test_the_sums_are_read_from_adds_and_subs_of_input_dims():
    import onnx_ir as ir

    from onnxrefine.ir.facts import StaticShapes

    model = ir.serde.deserialize_model(_cache_model())
    keys = runnable.dim_keys(model)
    assert keys == ["batch", "sequence", "past", "total"]
    assert runnable.dim_sums(model, StaticShapes(model), keys) == [("batch", "past", "sequence"),
                                                                    ("total", "past", "sequence")]
    sub = _cache_model()
    sub.graph.node[5].op_type = "Sub"  # past - sequence: past = sequence + another dim
    model = ir.serde.deserialize_model(sub)
    assert runnable.dim_sums(model, StaticShapes(model), keys) == [("past", "sequence", "batch"),
                                                                    ("past", "sequence", "total")]


@pytest.mark.parametrize("batch", ["batch", 2])
def test_a_run_over_the_memory_budget_is_a_reason_not_an_error(monkeypatch, batch):
    # Larger sizes would not fit either: the search stops at the first resource limit.
    import onnx_ir as ir

    from onnxrefine.resources import ResourceLimitError

    calls = []

    def over_budget(self, seed=0, dims=None):
        calls.append(dims)
        raise ResourceLimitError("the model (observed) needs 9 GiB, over the memory budget")

    monkeypatch.setattr(runnable.Cut, "run", over_budget)
    model = ir.serde.deserialize_model(_batch_model(batch))
    answer = runnable.RunnableDims().observe(model, [model.graph.outputs[1]], points=2)
    assert answer == "the model (observed) needs 9 GiB, over the memory budget" and len(calls) == 1
