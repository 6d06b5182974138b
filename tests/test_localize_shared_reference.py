"""Localisation observes the output check's float64 evaluation of an input set instead of making
its own (verify_models: localize.EarlyLocalisation); the judgement is the same either way."""

from __future__ import annotations

import numpy as np
from test_localize import DILUTED_VAR, residual_net

from onnxrefine.verify import verify_models
from onnxrefine.verify import reference
from onnxrefine.verify.reference import evaluator
from onnxrefine.verify.localize.layerwise import localize


def _evaluations(monkeypatch) -> list:
    """Counts the float64 evaluations verification asks of the reference's face."""
    calls = []
    original = reference.evaluate_float64

    def counting(model, feeds, **kwargs):
        calls.append(kwargs.get("observe") is not None)
        return original(model, feeds, **kwargs)

    monkeypatch.setattr(reference, "evaluate_float64", counting)
    return calls


def test_one_float64_evaluation_per_set_serves_outputs_and_localisation(monkeypatch):
    original, candidate = residual_net(bad_block=5, small_var=DILUTED_VAR)
    sets = [{"x": np.random.default_rng(i).standard_normal((1, 8, 12, 12)).astype(np.float32)} for i in range(2)]
    calls = _evaluations(monkeypatch)
    report = verify_models(original, candidate, inputs=sets, trials=2)
    section = report.localisation
    assert report.outputs[0].differing > 0  # so the output check evaluates float64 on both sets
    assert section["shared_reference"] == 2 and section["input_sets"] == 2
    assert calls == [True, True]  # each set evaluated once, observed by localisation
    # the same judgement as localisation on its own evaluations
    alone = localize(original, candidate, list(zip(report.input_sets, sets)),
                     u=report.settings["unit_roundoff"], perturb_count=report.settings["perturbation_runs"], seed=0)
    assert section["first_bad"]["name"] == alone["first_bad"]["name"] == "bn5"
    strip = ("seconds",)
    assert [{k: v for k, v in value.items() if k not in strip} for value in section["values"]] == \
        [{k: v for k, v in value.items() if k not in strip} for value in alone["values"]]


def test_sets_whose_outputs_are_identical_are_localised_on_their_own_evaluation(monkeypatch):
    # identical outputs: the output check needs no float64, localisation evaluates the set itself
    original, _ = residual_net(bad_block=None)
    calls = _evaluations(monkeypatch)
    report = verify_models(original, original, inputs=[{"x": np.ones((1, 8, 12, 12), np.float32)}])
    assert report.verdict == "exact"
    assert report.localisation["shared_reference"] == 0
    assert calls in ([], [True])  # identical computations may leave nothing to localise


def test_where_the_shared_evaluation_stops_later_values_use_the_fallback(monkeypatch):
    kernel = evaluator._NATIVE["Relu"]

    def refuse_relu3(call):
        if call.node.name == "relu3_node":
            raise reference.UnsupportedOperatorError("planted: relu3 not evaluated")
        return kernel(call)

    monkeypatch.setitem(evaluator._NATIVE, "Relu", refuse_relu3)
    original, candidate = residual_net(bad_block=1, blocks=6)
    report = verify_models(original, candidate)
    section = report.localisation
    assert section["shared_reference"] >= 1
    assert section["reference"] == "partial" and report.first_bad_value["name"] == "bn1"
