"""End-to-end verification of a model that does not run at the generated inputs' default sizes
(every symbolic dim 2): a KV cache's mask must be as long as past + sequence. Verification runs at
sizes the original runs at (verify/ort/dims.py's search) and says so; `dims` given wins; a model
that runs at no sizes is skipped as before."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from helpers import make_model, plant_wrong_pass, tensor, value_info
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.cli.main import main
from onnxrefine.errors import BadInputError
from onnxrefine.verified import VerifySettings
from onnxrefine.verify import verify_models


def _cache_model(extra: int = 0) -> onnx.ModelProto:
    """The keys are the cache and the new tokens; the mask is read at positions 0 .. past +
    sequence - 1 (+ `extra`), so it runs only where total >= past + sequence (with `extra` 1 on
    the mask's own length: nowhere). An Identity gives a rewrite to verify."""
    if extra:
        length_nodes = [helper.make_node("Shape", ["mask"], ["mask_shape"]),
                        helper.make_node("Gather", ["mask_shape", "one"], ["total"], axis=0),
                        helper.make_node("Add", ["total", "one"], ["length"])]
    else:
        length_nodes = [helper.make_node("Shape", ["x"], ["x_shape"]),
                        helper.make_node("Shape", ["past"], ["past_shape"]),
                        helper.make_node("Gather", ["x_shape", "one"], ["sequence"], axis=0),
                        helper.make_node("Gather", ["past_shape", "one"], ["cached"], axis=0),
                        helper.make_node("Add", ["cached", "sequence"], ["length"])]
    nodes = [
        helper.make_node("Concat", ["past", "x"], ["keys"], axis=1),
        *length_nodes,
        helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
        helper.make_node("Gather", ["mask", "positions"], ["seen"], axis=1),
        helper.make_node("Cast", ["seen"], ["seen_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["seen_float", "last"], ["weights"]),
        helper.make_node("Mul", ["keys", "weights"], ["masked"]),
        helper.make_node("Identity", ["masked"], ["kept"]),
        helper.make_node("Relu", ["kept"], ["y"]),
    ]
    return make_model(
        nodes,
        [value_info("x", shape=["batch", "sequence", 4]), value_info("past", shape=["batch", "past", 4]),
         value_info("mask", TensorProto.INT64, ["batch", "total"])],
        [value_info("y", shape=None)],
        [tensor("zero", np.array(0, np.int64)), tensor("one", np.array(1, np.int64)),
         tensor("last", np.array([-1], np.int64))])


@pytest.fixture
def planted_pass(monkeypatch):
    return plant_wrong_pass(monkeypatch, "planted_wrong_at_sizes")


SIZES = "batch=2, sequence=3, past=4, total=7 and at batch=3, sequence=4, past=5, total=9"


def test_a_model_failing_at_the_default_sizes_is_verified_at_sizes_it_runs_at():
    _, report = onnxrefine.optimize_with_report(_cache_model(), ["eliminate_identity"], verify=VerifySettings())
    verification = report.verification
    assert verification["status"] == "verified" and verification["verdict"] == "exact"
    assert verification["sizes"].startswith(SIZES + " (default sizes fail in the original: ")
    assert "Gather" in verification["sizes"]
    assert f"; at {SIZES}" in verification["plan"]
    assert len(verification["input_sets"]) >= 2  # the first two sets are at the two assignments


def test_a_wrong_rewrite_that_shows_only_at_those_sizes_is_rolled_back(planted_pass):
    optimized, report = onnxrefine.optimize_with_report(
        _cache_model(), ["eliminate_identity", planted_pass], verify=VerifySettings(),
        certify=False)  # the certificate would refuse the planted rule before verification sees it
    assert [(r["pass"], r.get("rule"), r["verdict"]) for r in report.rolled_back] == \
        [(planted_pass, "relu_to_abs", "mismatch")]
    assert "Abs" not in [node.op_type for node in optimized.graph.node]
    assert report.verification["status"] == "verified" and SIZES in report.verification["sizes"]


def test_given_dims_win_even_where_the_model_fails_at_them():
    everywhere_two = {"batch": 2, "sequence": 2, "past": 2, "total": 2}
    _, report = onnxrefine.optimize_with_report(_cache_model(), ["eliminate_identity"],
                                                verify=VerifySettings(dims=everywhere_two))
    assert report.verification["status"] == "skipped"
    assert "does not run in onnxruntime" in report.verification["reason"]
    runnable = {"batch": 1, "sequence": 2, "past": 1, "total": 3}
    _, report = onnxrefine.optimize_with_report(_cache_model(), ["eliminate_identity"],
                                                verify=VerifySettings(dims=runnable))
    assert report.verification["status"] == "verified" and "sizes" not in report.verification


def test_a_model_that_runs_at_no_sizes_is_skipped_as_before():
    _, report = onnxrefine.optimize_with_report(_cache_model(extra=1), ["eliminate_identity"], verify=VerifySettings())
    assert report.verification["status"] == "skipped"
    assert report.verification["reason"].startswith("the model does not run in onnxruntime (")
    assert "sizes" not in report.verification


def test_with_verify_forced_a_model_that_runs_at_no_sizes_cannot_be_verified():
    with pytest.raises(BadInputError, match="cannot verify: "):
        onnxrefine.optimize_with_report(_cache_model(extra=1), ["eliminate_identity"],
                                        verify=VerifySettings(enabled=True))


def _relu_as_abs(model: onnx.ModelProto) -> onnx.ModelProto:
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    for node in wrong.graph.node:
        if node.op_type == "Relu":
            node.op_type = "Abs"
    return wrong


def test_verify_models_compares_at_sizes_the_original_runs_at():
    model = _cache_model()
    report = verify_models(model, model, trials=1, localize=False)
    assert report.verdict == "exact"
    assert report.notes[0].startswith(f"verified at {SIZES} (default sizes fail in the original: ")
    assert verify_models(model, _relu_as_abs(model), trials=1, localize=False).verdict == "mismatch"


def test_verify_models_with_dims_given_or_no_runnable_sizes_fails_as_before():
    with pytest.raises(BadInputError, match="does not run|failed to run"):
        verify_models(_cache_model(), _cache_model(), trials=1, localize=False,
                      dims={"batch": 2, "sequence": 2, "past": 2, "total": 2})
    with pytest.raises(BadInputError, match="failed to run the original"):
        verify_models(_cache_model(extra=1), _cache_model(extra=1), trials=1, localize=False)


def test_the_optimize_summary_names_the_sizes(tmp_path, capsys):
    source, output = tmp_path / "cache.onnx", tmp_path / "out.onnx"
    onnx.save(_cache_model(), source)
    assert main(["optimize", str(source), "-o", str(output), "--passes", "eliminate_identity"]) == 0
    line = [text for text in capsys.readouterr().out.splitlines() if text.startswith("verification: passed")]
    assert line and f") at {SIZES} (default sizes fail in the original: " in line[0]


def test_a_model_that_runs_at_the_default_sizes_gets_no_other_sizes():
    # its failure elsewhere (an input set's values) is not the sizes' fault: no search answer
    from onnxrefine.verify.ort import sizes_it_runs_at

    model = ir.from_proto(make_model([helper.make_node("Relu", ["x"], ["y"])],
                                          [value_info("x", shape=["N", 4])], [value_info("y", shape=None)]))
    assert sizes_it_runs_at(model) == "it runs at the default sizes of its symbolic dims, so they are not why it fails"
    assert isinstance(sizes_it_runs_at(ir.from_proto(_cache_model())), list)
