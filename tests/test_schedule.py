"""One schedule: verified and unverified optimization apply the same rewrites; the result is
verified once; a wrong rewrite or pass is found by bisection and rolled back; the plan is said
before any verification runs."""

from __future__ import annotations

import re

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import make_model, op_types, plant_pass, run, tensor, value_info
from onnx import TensorProto, helper

import onnxrefine
import onnxrefine.verify as verify_package
from onnxrefine.verify import plan as verify_plan
from onnxrefine.cli.main import main
from onnxrefine.ir import io
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.passes.pipeline import run_passes
from onnxrefine.passes.registry import GRAPH, PassSpec, default_pass_names
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule
from onnxrefine.verified import VerifySettings

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("ONNXREFINE_CORPUS", ROOT / "bench" / "corpus"))  # bench/build_corpus.py writes it
CORPUS_MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_0"]


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    # Plans depend on the machine's load; tests pin it so the same model gets the same plan.
    monkeypatch.setattr(verify_plan, "machine_slowdown", lambda: 1.0)


# -- models built in code, structurally different ------------------------------------------------


def conv_bn_residual() -> onnx.ModelProto:
    """Conv+BN twice, a residual Add, a no-op Identity and Dropout, a Flatten+Gemm head."""
    rng = np.random.default_rng(0)

    def bn(prefix, channels):
        return [tensor(f"{prefix}_s", rng.uniform(0.5, 1.5, channels).astype(np.float32)),
                tensor(f"{prefix}_b", rng.normal(0, 0.2, channels).astype(np.float32)),
                tensor(f"{prefix}_m", rng.normal(0, 0.2, channels).astype(np.float32)),
                tensor(f"{prefix}_v", rng.uniform(0.5, 1.5, channels).astype(np.float32))]

    inits = [tensor("W1", rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32)),
             tensor("W2", rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32)),
             tensor("G", rng.normal(0, 0.3, (6, 64)).astype(np.float32)),
             tensor("g", rng.normal(0, 0.3, 6).astype(np.float32)), *bn("bn1", 4), *bn("bn2", 4)]
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Identity", ["r1"], ["i1"], name="id1"),
        helper.make_node("Conv", ["i1", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"], name="bn2"),
        helper.make_node("Add", ["n2", "x"], ["a"], name="add"),
        helper.make_node("Dropout", ["a"], ["d"], name="drop"),
        helper.make_node("Flatten", ["d"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "G", "g"], ["y"], name="head", transB=1),
    ]
    return make_model(nodes, [value_info("x", shape=[1, 4, 4, 4])], [value_info("y", shape=[1, 6])], inits)


def matmul_chain() -> onnx.ModelProto:
    """Transformer-like: computed Reshape targets, MatMul+Add (Gemm fusion), a Transpose pair."""
    rng = np.random.default_rng(1)
    inits = [tensor("A", rng.normal(0, 0.3, (8, 8)).astype(np.float32)),
             tensor("bias", rng.normal(0, 0.3, 8).astype(np.float32)),
             tensor("B", rng.normal(0, 0.3, (8, 8)).astype(np.float32)),
             tensor("zero", np.array([0], np.int64)), tensor("minus1", np.array([-1], np.int64))]
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Concat", ["batch", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "A"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "bias"], ["h"], name="add_bias"),
        helper.make_node("Transpose", ["h"], ["t1"], name="t1", perm=[1, 0]),
        helper.make_node("Transpose", ["t1"], ["t2"], name="t2", perm=[1, 0]),
        helper.make_node("Tanh", ["t2"], ["th"], name="tanh"),
        helper.make_node("MatMul", ["th", "B"], ["y"], name="mm2"),
    ]
    return make_model(nodes, [value_info("x", shape=[3, 2, 4])], [value_info("y", shape=[3, 8])], inits)


def constant_subgraph() -> onnx.ModelProto:
    """Constant nodes to extract and fold, an If on a constant condition, a Cast chain, Squeeze/Unsqueeze."""
    then_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["then_out"], name="neg")], "then", [],
                                    [value_info("then_out", shape=[2, 3])])
    else_branch = helper.make_graph([helper.make_node("Abs", ["x"], ["else_out"], name="abs")], "else", [],
                                    [value_info("else_out", shape=[2, 3])])
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k", value=helper.make_tensor("kv", TensorProto.FLOAT, [3],
                                                                                [1.0, 2.0, 3.0])),
        helper.make_node("Constant", [], ["cond"], name="cond",
                         value=helper.make_tensor("cv", TensorProto.BOOL, [], [True])),
        helper.make_node("Mul", ["k", "k"], ["k2"], name="k2"),
        helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Add", ["branch", "k2"], ["s"], name="add"),
        helper.make_node("Cast", ["s"], ["s64"], name="to64", to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["s64"], ["s32"], name="to32", to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["s32", "axes"], ["u"], name="unsq"),
        helper.make_node("Squeeze", ["u", "axes"], ["y"], name="sq"),
    ]
    return make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("y", shape=[2, 3])],
                      [tensor("axes", np.array([0], np.int64))])


def _essence(model: onnx.ModelProto) -> bytes:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.metadata_props[:]
    return copy.SerializeToString(deterministic=True)


def assert_same_rewrites(model: onnx.ModelProto, settings: VerifySettings) -> dict:
    """The same schedule with and without verification; the one difference allowed: a rewrite no
    certificate can be made for is refused without verification, left to its verdict with it."""
    plain, plain_report = onnxrefine.optimize_with_report(model)
    verified, report = onnxrefine.optimize_with_report(model, verify=settings)
    assert report.verification["status"] == "verified", report.verification
    assert report.verification["verdict"] in ("exact", "rounding")
    assert report.rolled_back == []
    deferred = [(a.rule, a.root) for a in report.log.applied if a.evidence == "deferred"]
    uncertified = [(r.rule, r.node) for r in plain_report.log.refused.values() if r.guard == "certificate.uncertifiable"]
    assert sorted(deferred) == sorted(uncertified)
    if not deferred:
        assert plain_report.log.counts() == report.log.counts()
        assert [a.root for a in plain_report.log.applied] == [a.root for a in report.log.applied]
        assert _essence(plain) == _essence(verified)
    return dict(report.log.counts())


@pytest.mark.parametrize("build", [conv_bn_residual, matmul_chain, constant_subgraph])
def test_same_rewrites_with_and_without_verification(build):
    counts = assert_same_rewrites(build(), VerifySettings(enabled=True))
    assert sum(counts.values()) >= 2  # the model really exercises the schedule


def test_same_rewrites_on_the_example():
    model = onnx.load(ROOT / "examples" / "tiny_cnn.onnx")
    counts = assert_same_rewrites(model, VerifySettings())
    # What --no-verify has always applied (conv_add before the BN, then conv_bn); the old
    # per-pass verified pipeline applied conv_add_bn:1, conv_bn:2 instead.
    assert counts["conv_add"] == 1 and counts["conv_bn"] == 3


@pytest.mark.parametrize("name", CORPUS_MODELS)
def test_same_rewrites_on_corpus_models(name):
    path = CORPUS / f"{name}.onnx"
    if not path.is_file() or not (CORPUS / f"{name}.inputs.npz").is_file():
        pytest.skip(f"corpus model {name} not built (bench/build_corpus.py; or set ONNXREFINE_CORPUS)")
    inputs = verify_package.load_inputs(CORPUS / f"{name}.inputs.npz")
    # One given input set keeps the forced verification short; verification still runs.
    counts = assert_same_rewrites(onnx.load(path), VerifySettings(enabled=True, inputs=inputs[:1]))
    assert counts


# -- the schedule's replay -----------------------------------------------------------------------


def test_a_replay_of_k_steps_is_the_prefix_of_the_full_schedule():
    original = conv_bn_residual()
    steps, full = [], io.proto_to_ir(original)
    log = run_passes(full, default_pass_names(), budget=ConstantBudget(io.tensor_bytes(full)),
                     on_event=lambda kind, **info: steps.append(info["step"]) if kind == "step" else None)
    assert len(steps) >= 4 and [s.index for s in steps] == list(range(1, len(steps) + 1))
    replayed = io.proto_to_ir(original)
    run_passes(replayed, default_pass_names(), budget=ConstantBudget(io.tensor_bytes(replayed)),
               max_steps=len(steps))
    assert _essence(io.to_proto(replayed)) == _essence(io.to_proto(full))
    rule_steps = [s for s in steps if s.rule is not None]
    for k in range(len(rule_steps) + 1):
        prefix = io.proto_to_ir(original)
        prefix_log = run_passes(prefix, default_pass_names(), budget=ConstantBudget(io.tensor_bytes(prefix)),
                                max_steps=k)
        assert [a.root for a in prefix_log.applied[:k]] == [a.root for a in log.applied[:k]]


def test_no_unit_runs_again_on_a_model_it_found_nothing_in():
    """The driver run and each graph pass are skipped while the model is as they left it having
    found nothing, and the rounds end once every one is in that state: no all no-op last round
    (which would find nothing, and costs a full sweep of every rule and graph pass)."""
    model = io.proto_to_ir(conv_bn_residual())
    events = []
    run_passes(model, default_pass_names(), budget=ConstantBudget(io.tensor_bytes(model)),
               on_event=lambda kind, **info: events.append((kind, info)))
    runs = [(info["round"], info["name"], info["changes"]) for kind, info in events if kind == "pass"]
    rounds = [info["rounds"] for kind, info in events if kind == "done"][0]
    assert rounds >= 1 and any(changes for _, _, changes in runs)
    last_round = [changes for round_index, _, changes in runs if round_index == rounds]
    assert rounds == 1 or any(last_round), runs
    seen_nothing: dict[str, int] = {}  # unit -> count of changes by anyone when it last found nothing
    total = 0
    for _, name, changes in runs:
        assert seen_nothing.get(name) != total, f"{name} ran again on the model it found nothing in"
        total += changes
        if not changes:
            seen_nothing[name] = total


# -- verify once ---------------------------------------------------------------------------------


@pytest.fixture
def spy(monkeypatch):
    calls = []
    real = verify_package.verify_models

    def counting(*args, **kwargs):
        calls.append(("verify_models", kwargs.get("inputs")))
        return real(*args, **kwargs)

    monkeypatch.setattr(verify_package, "verify_models", counting)
    return calls


def test_a_clean_model_is_verified_exactly_once(spy):
    _, report = onnxrefine.optimize_with_report(conv_bn_residual(), verify=VerifySettings())
    assert report.verification["status"] == "verified"
    assert report.verification["verifications"] == 1
    assert len(spy) == 1
    assert report.log.counts()["conv_bn"] == 2  # several passes changed the model: still one check


def test_an_unchanged_model_needs_no_verification(spy):
    # Nothing in the default schedule applies to a lone Tanh: the model is the original.
    model = make_model([helper.make_node("Tanh", ["x"], ["y"])], [value_info("x", shape=[2])],
                       [value_info("y", shape=[2])])
    optimized, report = onnxrefine.optimize_with_report(model, verify=VerifySettings())
    assert report.log.applied == [] and spy == []
    assert report.verification["verdict"] == "exact" and report.verification["verifications"] == 0
    assert op_types(optimized) == ["Tanh"]
    _, forced = onnxrefine.optimize_with_report(model, verify=VerifySettings(enabled=True))
    assert len(spy) == 1 and forced.verification["verdict"] == "exact"  # --verify runs it anyway


def test_the_plan_is_said_before_any_verification_runs(spy):
    events = []

    def on_event(kind, **info):
        if kind in ("verify_plan", "verify"):
            events.append((kind, info.get("text") or info.get("phase")))
            events.append(("calls so far", len(spy)))

    onnxrefine.optimize_with_report(conv_bn_residual(), verify=VerifySettings(), on_event=on_event)
    # How many sets fit follows the schedule's own time (no floor in seconds): 2 to 5 here.
    assert events[0][0] == "verify_plan" and re.match(r"verifying end to end on [2-5] input set\(s\)", events[0][1])
    assert events[1] == ("calls so far", 0)


def test_over_budget_auto_mode_skips_up_front_and_never_verifies(spy):
    optimized, report = onnxrefine.optimize_with_report(conv_bn_residual(), verify=VerifySettings(budget_s=1e-6))
    assert spy == []
    assert report.verification["status"] == "skipped"
    assert "over the limit of 1e-06 s" in report.verification["reason"]
    assert "Conv" in op_types(optimized) and "BatchNormalization" not in op_types(optimized)


def test_a_tight_budget_drops_input_sets_before_running(monkeypatch, spy):
    # Estimates as on a machine 50x slower than calibrated, so the budget below is seconds, not
    # milliseconds: the runtime guard (twice the estimate) then never cuts a set on a loaded machine.
    monkeypatch.setattr(verify_plan, "machine_slowdown", lambda: 50.0)
    model = conv_bn_residual()
    full = verify_plan.make_plan(model, budget_s=1e6, forced=False, trials=1, seed=0, dims=None, inputs=None,
                                 weight_bytes=0)
    assert [label for label, _ in full.sets] == ["random0", "stress:inf_nan", "stress:zeros_tiny",
                                                 "stress:large", "stress:negative"]
    per_set = (full.estimate_s - verify_plan.estimate_cost(
        verify_plan.light_model(model), full.sets[0][1], 0, 2).fixed_s) / 5
    budget = full.estimate_s - 1.5 * per_set  # room for three sets, not four
    cut = verify_plan.make_plan(model, budget_s=budget, forced=False, trials=1, seed=0, dims=None, inputs=None,
                                weight_bytes=0)
    assert len(cut.sets) == 3 and "2 more set(s) left out" in cut.text
    forced = verify_plan.make_plan(model, budget_s=budget, forced=True, trials=1, seed=0, dims=None, inputs=None,
                                   weight_bytes=0)
    assert len(forced.sets) == 5  # --verify runs every set whatever the estimate
    _, report = onnxrefine.optimize_with_report(model, verify=VerifySettings(budget_s=budget))
    assert report.verification["input_sets"] == ["random0", "stress:inf_nan", "stress:zeros_tiny"]
    assert len(spy) == 1 and len(spy[0][1]) == 3


def test_a_plan_makes_only_the_sets_it_keeps_and_they_are_the_sets_made_at_once(monkeypatch):
    """Generated sets are made when read: a plan cut to two sets makes those two, bit for bit the
    arrays of an eager generation (each set has its own generator)."""
    from onnxrefine.verify import inputs as verify_inputs

    monkeypatch.setattr(verify_plan, "machine_slowdown", lambda: 50.0)
    model = conv_bn_residual()
    eager = verify_plan.choose_sets(verify_inputs.generate_labelled_inputs(
        verify_plan.light_model(model), seed=3, stress=True, trials=2), 2)
    made = []
    make_array = verify_inputs._make_array
    monkeypatch.setattr(verify_inputs, "_make_array",
                        lambda spec, shape, kind, rng, role: made.append(kind) or make_array(spec, shape, kind, rng, role))
    plan = verify_plan.make_plan(model, budget_s=0.0, forced=False, trials=2, seed=3, dims=None, inputs=None,
                                 weight_bytes=0, limit_s=1e6)
    kept = [label for label, _ in plan.sets]
    assert plan.run and kept == ["random0", "stress:inf_nan"] and len(eager) == 6
    assert sorted(set(made)) == sorted(kept)  # the four sets left out were never made
    for (label, got), (eager_label, want) in zip(plan.sets, eager):
        assert label == eager_label and type(got) is dict and got.keys() == want.keys()
        for name in want:
            assert got[name].dtype == want[name].dtype and got[name].tobytes() == want[name].tobytes()


def big_conv() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return make_model([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])],
                      [value_info("x", shape=[1, 64, 112, 112])], [value_info("y", shape=[1, 64, 112, 112])],
                      [tensor("W", rng.normal(0, 0.1, (64, 64, 3, 3)).astype(np.float32))])


def test_exact_only_schedules_are_estimated_without_the_reference():
    # Exact rewrites leave outputs bit-identical: no perturbation runs, no float64 evaluation.
    kwargs = dict(budget_s=1e6, forced=False, trials=1, seed=0, dims=None, inputs=None, weight_bytes=147456)
    reassociating = verify_plan.make_plan(big_conv(), **kwargs)
    exact = verify_plan.make_plan(big_conv(), differs=False, **kwargs)
    assert exact.estimate_s < 0.5 * reassociating.estimate_s


def test_auto_mode_cuts_to_the_kept_sets_rather_than_skip(monkeypatch, spy):
    # One set would take ~20 s on this (pretend) slow machine: over the automatic budget (3x a
    # schedule this quick), within the 120 s limit: verified on the two kept sets, not skipped.
    model = conv_bn_residual()
    cost = verify_plan.estimate_cost(verify_plan.light_model(model), {"x": np.zeros((1, 4, 4, 4), np.float32)},
                                     0, 2)
    monkeypatch.setattr(verify_plan, "machine_slowdown", lambda: 20.0 / cost.seconds(1))
    _, report = onnxrefine.optimize_with_report(model, verify=VerifySettings())
    assert report.verification["status"] == "verified"
    assert report.verification["input_sets"] == ["random0", "stress:inf_nan"]
    # the plan says the kept sets do not fit the budget either, rather than that they were cut to fit it
    assert "3 more set(s) left out, and the 2 kept (the fewest auto mode verifies on) still over the budget of" \
        in report.verification["plan"]
    assert len(spy) == 1


def test_a_plan_cut_to_its_budget_says_so_and_one_still_over_it_says_that():
    kwargs = dict(forced=False, trials=1, seed=0, dims=None, inputs=None, weight_bytes=0, limit_s=1e6)
    over = verify_plan.make_plan(conv_bn_residual(), budget_s=0.0, **kwargs)
    assert len(over.sets) == 2 and "still over the budget of 0 s" in over.text
    fits = verify_plan.make_plan(conv_bn_residual(), budget_s=over.estimate_s * 1.01, **kwargs)
    assert len(fits.sets) == 2 and "left out to fit the budget of" in fits.text and "still over" not in fits.text


def test_the_estimate_grows_with_the_work():
    small = verify_plan.make_plan(conv_bn_residual(), budget_s=1e6, forced=False, trials=1, seed=0, dims=None,
                                  inputs=None, weight_bytes=0)
    large = verify_plan.make_plan(big_conv(), budget_s=1e6, forced=False, trials=1, seed=0, dims=None, inputs=None,
                                  weight_bytes=64 * 64 * 9 * 4)
    assert large.estimate_s > 3 * small.estimate_s
    assert "0.9 GFLOP a run" in large.text  # 2 * 64*112*112 outputs * 64*3*3 products


def test_cli_prints_the_plan_before_the_result(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(conv_bn_residual(), path)
    assert main(["optimize", str(path), "--verify-budget", "0.000001"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.index("verification: skipped: verification on 2 input sets would take") \
        < out.index("onnxrefine optimize")
    assert main(["optimize", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"verification: verifying end to end on [2-5] input set\(s\)", out)
    assert out.index("verification: verifying end to end on") < out.index("onnxrefine optimize")
    assert "rounding (end to end" in out


# -- bisect and roll back ------------------------------------------------------------------------


def flip_conv_b(m, ctx):
    """Deliberately wrong 'exact' rule: negates the weight of the Conv named conv2."""
    if m.root.name != "conv2" or m["w"].const_value is None:
        return None
    weight = ctx.constant(-m["w"].const_value.numpy(), "flipped_w", derived_from=[m["w"]])
    node = ctx.node("Conv", [m["x"], weight], m.root.attributes.values())
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


@pytest.fixture
def planted_rule(monkeypatch):
    rule = Rule("flip_conv_weight", Op("Conv", Var("x"), Var("w")), flip_conv_b, kind=EXACT)
    spec = PassSpec("planted_flip_conv", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    return spec.name


def flip_head_pass(pctx) -> int:
    """Deliberately wrong 'exact' graph pass: replaces the head's weight G by its negation, once."""
    graph = pctx.model.graph
    value = graph.initializers.get("G")
    if value is None:
        return 0
    import onnx_ir as ir

    flipped = ir.Value(name="G_flipped", type=value.type, shape=value.shape,
                       const_value=ir.Tensor(-value.const_value.numpy(), name="G_flipped"))
    graph.register_initializer(flipped)
    value.replace_all_uses_with(flipped)
    graph.initializers.pop("G")
    return 1


@pytest.fixture
def planted_graph_pass(monkeypatch):
    spec = PassSpec("planted_flip_head", "test only", run=flip_head_pass, kind=EXACT, phase=GRAPH, order=50,
                    default=False)
    plant_pass(monkeypatch, spec)
    return spec.name


def _check_close(model, optimized):
    x = np.random.default_rng(5).standard_normal((1, 4, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_wrong_rewrite_is_found_by_bisection_and_rolled_back(planted_rule, spy):
    model = conv_bn_residual()
    passes = default_pass_names() + [planted_rule]
    # The rule's certificate refuses it before it applies (tests/test_certificates.py); with
    # certificates off, end-to-end verification must find and roll it back on its own.
    certified, refused = onnxrefine.optimize_with_report(model, passes)
    assert "flip_conv_weight" not in refused.log.counts()
    unverified, plain = onnxrefine.optimize_with_report(model, passes, certify=False)
    assert plain.log.counts()["flip_conv_weight"] == 1  # control: without verification it goes through
    optimized, report = onnxrefine.optimize_with_report(model, passes, verify=VerifySettings(), certify=False)
    [rollback] = report.rolled_back
    assert (rollback["rule"], rollback["pass"], rollback["root"]) == ("flip_conv_weight", planted_rule,
                                                                       "conv2 (Conv)")
    assert rollback["verdict"] == "mismatch" and rollback["outputs"] == ["y"]
    assert report.verification["verdict"] in ("exact", "rounding")
    counts = report.log.counts()
    assert "flip_conv_weight" not in counts
    assert {rule: n for rule, n in counts.items()} == {
        rule: n for rule, n in plain.log.counts().items() if rule != "flip_conv_weight"}
    assert 1 < len(spy) <= 2 + 2 * 4  # final + bisection (log2 of the steps, two levels) + re-check
    _check_close(model, optimized)


def test_a_wrong_graph_pass_is_disabled_and_the_rest_kept(planted_graph_pass):
    model = conv_bn_residual()
    passes = default_pass_names() + [planted_graph_pass]
    optimized, report = onnxrefine.optimize_with_report(model, passes, verify=VerifySettings())
    assert [(r["pass"], r["what"]) for r in report.rolled_back] == [(planted_graph_pass, "pass")]
    assert report.log.counts()["conv_bn"] == 2
    assert report.verification["verdict"] in ("exact", "rounding")
    _check_close(model, optimized)


def test_cli_reports_the_rollback(tmp_path, planted_rule, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(conv_bn_residual(), path)
    assert main(["optimize", str(path), "--passes", f"fuse_bn_into_conv,{planted_rule}", "--explain",
                 "--no-certify"]) == 0
    out = capsys.readouterr().out
    assert "rolled back rewrite flip_conv_weight at conv2 (Conv)" in " ".join(out.split())
    assert out.index("verification: verifying end to end") < out.index("rolled back rewrite")


def test_an_automatic_budget_keeps_a_random_and_an_inf_nan_set():
    """No floor in seconds (a small model's verification costs what the model costs), but a budget
    below one set's cost still runs random0 and the inf/NaN stress set."""
    model = conv_bn_residual()
    tiny = verify_plan.make_plan(model, budget_s=1e-9, forced=False, trials=1, seed=0, dims=None, inputs=None,
                                 weight_bytes=0, limit_s=1e6)
    assert [label for label, _ in tiny.sets] == ["random0", "stress:inf_nan"]


def _embedding_model() -> onnx.ModelProto:
    """Integer ids into an embedding and a MatMul: no floating-point graph input."""
    rng = np.random.default_rng(0)
    return make_model([helper.make_node("Gather", ["E", "ids"], ["h"]),
                       helper.make_node("MatMul", ["h", "W"], ["y"])],
                      [value_info("ids", TensorProto.INT64, [1, 8])], [value_info("y", shape=[1, 8, 4])],
                      [tensor("E", rng.standard_normal((16, 4)).astype(np.float32)),
                       tensor("W", rng.standard_normal((4, 4)).astype(np.float32))])


def test_without_a_float_input_the_stress_sets_are_random_draws_and_one_set_is_kept():
    """A model whose inputs are all integers gets stress sets drawn as its random set is (nothing
    float to stress): under a budget below one set, auto mode keeps random0 alone; with room, the
    others run as before; a model with a float input still keeps the inf/NaN set."""
    model = _embedding_model()
    plans = [verify_plan.make_plan(model, budget_s=budget, forced=False, trials=1, seed=0, dims=None,
                                   inputs=None, weight_bytes=0, limit_s=1e6) for budget in (1e-9, 1e6)]
    assert [label for label, _ in plans[0].sets] == ["random0"]
    assert len(plans[1].sets) > 2 and plans[1].sets[1][0] == "stress:inf_nan"
    for _, feeds in plans[1].sets:  # what makes the rule hold: integer sets have no stress values
        assert set(feeds) == {"ids"} and feeds["ids"].dtype == np.int64
    assert verify_plan.min_auto_sets(model) == 1
    assert verify_plan.min_auto_sets(conv_bn_residual()) == verify_plan.MIN_AUTO_SETS == 2


def test_sets_at_two_sizes_keep_both_without_a_float_input():
    """Where the generated sets alternate between two assignments of the symbolic dims (the default
    sizes do not run), the second set is at the other sizes: both are kept for a model without a
    float input too."""
    rng = np.random.default_rng(0)
    model = make_model([helper.make_node("Gather", ["E", "ids"], ["y"])],
                       [value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                       [value_info("y", shape=["batch", "seq", 4])],
                       [tensor("E", rng.standard_normal((10, 4)).astype(np.float32))])
    plan = verify_plan.make_plan(model, budget_s=1e-9, forced=False, trials=1, seed=0,
                                 dims=[{"batch": 1, "seq": 3}, {"batch": 2, "seq": 5}], inputs=None,
                                 weight_bytes=0, limit_s=100)
    assert [(label, feeds["ids"].shape) for label, feeds in plan.sets] == [("random0", (1, 3)),
                                                                         ("stress:inf_nan", (2, 5))]
