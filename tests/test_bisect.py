"""onnxrefine bisect: names the first wrong step (and rewrite) and writes a bundle that reproduces."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import make_model, plant_pass, tensor, value_info
from onnx import helper

from onnxrefine.cli.main import main
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule
from onnxrefine.triage.adapters import ADAPTERS
from onnxrefine.triage.bisect import bisect


def neg_relu_to_relu(m, ctx):
    """Wrong on purpose: Relu(Neg(x)) -> Relu(x) only agrees where x == 0."""
    node = ctx.node("Relu", [m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


@pytest.fixture
def planted(monkeypatch):
    rule = Rule("drop_neg_under_relu", Op("Relu", Op("Neg", Var("x"))), neg_relu_to_relu, kind=EXACT)
    spec = PassSpec("planted_drop_neg", "test only", rules=(rule,))
    plant_pass(monkeypatch, spec)
    return spec.name


def model() -> onnx.ModelProto:
    # Three Relu(Neg(.)) sites; only the middle one is NOT symmetric in its effect... all three
    # differ, so the first rewrite already mismatches; plus BN-free Identity noise around them.
    nodes = [
        helper.make_node("Neg", ["x"], ["n0"]), helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("Add", ["r0", "one"], ["a0"]),
        helper.make_node("Neg", ["a0"], ["n1"]), helper.make_node("Relu", ["n1"], ["r1"]),
    ]
    return make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("r1", shape=[2, 3])],
                      [tensor("one", np.ones((2, 3), np.float32))])


def test_bisect_names_the_pass_and_the_rewrite(tmp_path, planted):
    out = tmp_path / "bundle"
    result = bisect(model(), optimizer="onnxrefine", passes=["fuse_bn_into_conv", planted], out_dir=out)
    assert result.verdict == "mismatch"
    assert result.step == planted
    assert result.rewrite["rule"] == "drop_neg_under_relu"
    assert [s["status"] for s in result.steps] == ["unchanged", "mismatch"]
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "inputs.npz", "optimized.onnx", "original.onnx", "report.json"]
    report = json.loads((out / "report.json").read_text())
    assert report["verification"]["verdict"] == "mismatch"
    readme = (out / "README.md").read_text()
    assert "onnxrefine verify original.onnx optimized.onnx --inputs inputs.npz" in readme
    # The single culprit rewrite: the bundle's pair differs by one Relu(Neg) site.
    before = onnx.load(out / "original.onnx")
    after = onnx.load(out / "optimized.onnx")
    assert len(before.graph.node) - len(after.graph.node) == 1
    # The bundle reproduces with the command its README gives.
    code = main(["verify", str(out / "original.onnx"), str(out / "optimized.onnx"), "--inputs", str(out / "inputs.npz")])
    assert code == 1


def test_bisect_clean_run_writes_nothing(tmp_path):
    out = tmp_path / "bundle"
    result = bisect(model(), optimizer="onnxrefine", passes=["fuse_bn_into_conv"], out_dir=out)
    assert result.verdict == "clean"
    assert not out.exists()


def test_cli_bisect_clean(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(model(), path)
    assert main(["bisect", str(path), "--passes", "fuse_bn_into_conv"]) == 0
    # One of the four verdict words (the run found no mismatch), not a word of its own.
    assert capsys.readouterr().out.strip().splitlines()[-2:] == ["no step turns the verdict to mismatch",
                                                                 "verdict: exact"]


@pytest.mark.skipif(ADAPTERS["onnxoptimizer"].available(), reason="onnxoptimizer is installed here")
def test_missing_peer_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(model(), path)
    assert main(["bisect", str(path), "--optimizer", "onnxoptimizer"]) == 2
    assert "not installed" in capsys.readouterr().err


def test_pipeline_adapter_is_one_step_of_the_whole_pipeline():
    (name, apply), = ADAPTERS["onnxrefine-pipeline"].steps(None)
    assert name == "onnxrefine pipeline"
    assert [n.op_type for n in apply(model()).graph.node] == [n.op_type for n in model().graph.node]


@settings(max_examples=100, deadline=None)  # a loaded machine is slow, not wrong
@given(st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=40), st.data())
def test_the_bisector_finds_the_first_bad_step_in_few_replays(kinds, data):
    """Optimization with verification and `onnxrefine bisect` share this search: whatever the mix
    of rule rewrites and graph-pass runs over rounds, it names the first step whose prefix is bad
    in about log2(runs) + log2(steps of a run) questions, never asking about the known ends."""
    from onnxrefine.passes.bisection import first_bad_step
    from onnxrefine.passes.pipeline import Step

    rounds = sorted(round_ for round_, _ in kinds)
    steps = [Step(index, round_, "p", "rule" if is_rule else None)
             for index, (round_, (_, is_rule)) in enumerate(zip(rounds, kinds), start=1)]
    first = data.draw(st.integers(1, len(steps)))
    asked = []

    def is_bad(count: int) -> bool:
        asked.append(count)
        return count >= first

    assert first_bad_step(steps, is_bad) is steps[first - 1]
    assert 0 not in asked and len(steps) not in asked
    assert len(asked) <= 2 * (len(steps).bit_length())
