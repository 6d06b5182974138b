"""Layer-wise localisation: intermediate values both models name alike are judged, the first bad
one is named, and a bad fold diluted at the output is a mismatch."""

from __future__ import annotations

import json

import numpy as np
import onnx
from helpers import make_model, plant_pass, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.cli.main import main
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import REASSOCIATING, Replacement, Rule
from onnxrefine.triage.bisect import bisect
from onnxrefine.verify import verify_models
from onnxrefine.verify.localize.layerwise import batches_of, find_pairs, localize
from onnxrefine.verify.reference.evaluator import evaluate_float64

EPS = 1e-5
# One channel per BatchNormalization has a variance of SMALL_VAR: there a fold that drops epsilon
# is off by eps / (2 * var) = 5e-4 relative, well beyond an intermediate's rounding bound (the
# output check alone already calls that a mismatch). With DILUTED_VAR it is off by ~1.7e-5: still
# beyond an intermediate's bound, but the skip connections and the pooled output dilute it into
# the output's bound, which is what localisation exists for.
SMALL_VAR = 1e-2
DILUTED_VAR = 0.3


def residual_net(*, blocks=8, channels=8, size=12, bad_block=None, keep_bn_names=True,
                 fold_blocks=None, seed=0, small_var_blocks=None, var_range=(0.5, 2.0), small_var=SMALL_VAR):
    """(original, candidate): `blocks` x [Conv -> BN -> Add(skip) -> Relu], GlobalAveragePool.

    The candidate folds each BN of `fold_blocks` (default all) into its Conv, in float64 rounded
    once; at `bad_block` the fold drops epsilon. keep_bn_names: the fused Conv keeps the BN's
    output name (as onnxoptimizer and onnxsim do); else it gets a new one (as onnxrefine does).
    """
    rng = np.random.default_rng(seed)
    fold_blocks = range(blocks) if fold_blocks is None else fold_blocks
    orig_nodes, cand_nodes, orig_inits, cand_inits = [], [], [], []
    current = "x"
    for i in range(blocks):
        weight = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(channels * 9)).astype(np.float32)
        bias = (rng.standard_normal(channels) * 0.1).astype(np.float32)
        gamma = (rng.uniform(0.5, 1.5, channels) * 0.1).astype(np.float32)
        beta = (rng.standard_normal(channels) * 0.1).astype(np.float32)
        mean = (rng.standard_normal(channels) * 0.1).astype(np.float32)
        var = rng.uniform(*var_range, channels).astype(np.float32)
        if small_var_blocks is None or i in small_var_blocks:
            var[i % channels] = small_var
        params = {f"W{i}": weight, f"B{i}": bias, f"gamma{i}": gamma, f"beta{i}": beta,
                  f"mean{i}": mean, f"var{i}": var}
        orig_inits += [tensor(name, value) for name, value in params.items()]
        conv = helper.make_node("Conv", [current, f"W{i}", f"B{i}"], [f"conv{i}"], name=f"conv{i}_node",
                                pads=[1, 1, 1, 1])
        bn = helper.make_node("BatchNormalization", [f"conv{i}", f"gamma{i}", f"beta{i}", f"mean{i}", f"var{i}"],
                              [f"bn{i}"], name=f"bn{i}_node", epsilon=EPS)
        orig_nodes += [conv, bn]
        if i in fold_blocks:
            scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + (0.0 if i == bad_block else EPS))
            cand_inits += [tensor(f"W{i}_folded", (weight * scale[:, None, None, None]).astype(np.float32)),
                           tensor(f"B{i}_folded", ((bias - mean.astype(np.float64)) * scale + beta).astype(np.float32))]
            fused = f"bn{i}" if keep_bn_names else f"fused{i}"
            cand_nodes.append(helper.make_node("Conv", [current, f"W{i}_folded", f"B{i}_folded"], [fused],
                                               name=f"conv{i}_node", pads=[1, 1, 1, 1]))
        else:
            cand_inits += [tensor(name, value) for name, value in params.items()]
            cand_nodes += [conv, bn]
            fused = f"bn{i}"
        for nodes, branch in ((orig_nodes, f"bn{i}"), (cand_nodes, fused)):
            nodes += [helper.make_node("Add", [current, branch], [f"add{i}"], name=f"add{i}_node"),
                      helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"relu{i}_node")]
        current = f"relu{i}"
    models = []
    for nodes, inits in ((orig_nodes, orig_inits), (cand_nodes, cand_inits)):
        nodes = nodes + [helper.make_node("GlobalAveragePool", [current], ["y"], name="pool")]
        models.append(make_model(nodes, [value_info("x", shape=[1, channels, size, size])],
                                 [value_info("y", shape=[1, channels, 1, 1])], inits))
    return models[0], models[1]


def test_a_bad_fold_deep_inside_is_diluted_at_the_output():
    # The premise of localisation: judged at the output only, the diluted dropped epsilon passes.
    original, candidate = residual_net(bad_block=5, small_var=DILUTED_VAR)
    assert verify_models(*residual_net(bad_block=5), localize=False).verdict == "mismatch"  # undiluted
    report = verify_models(original, candidate, localize=False)
    assert report.outputs[0].differing > 0
    assert report.verdict in ("exact", "rounding")
    assert report.localisation is None


def test_a_bad_fold_deep_inside_is_a_mismatch_and_named():
    original, candidate = residual_net(bad_block=5, small_var=DILUTED_VAR)
    report = verify_models(original, candidate)
    assert report.outputs[0].verdict in ("exact", "rounding")  # diluted at the output
    assert report.verdict == "mismatch" and report.exit_code == 1
    first = report.first_bad_value
    assert first["name"] == "bn5" and first["op"] == "BatchNormalization" and first["node"] == "bn5_node"
    assert first["candidate_op"] == "Conv" and first["verdict"] == "mismatch"
    section = report.localisation
    assert section["status"] == "done" and section["verdict"] == "mismatch"
    values = {v["name"]: v for v in section["values"]}
    # Blocks before the bad fold are correct folds: judged (they differ by rounding), not bad.
    for i in range(5):
        assert values[f"bn{i}"]["differing"] > 0 and values[f"bn{i}"]["verdict"] == "rounding"
    assert values["bn5"]["cand_err_max"] > 30 * values["bn5"]["orig_err_max"]


def test_correct_folds_stay_rounding():
    original, candidate = residual_net(bad_block=None)
    report = verify_models(original, candidate)
    assert report.verdict == "rounding"
    section = report.localisation
    assert section["first_bad"] is None and section["verdict"] == "rounding"
    assert section["checked"] == 8 * 3  # bn, add, relu per block (conv_i is gone in the candidate)


def test_renamed_fused_outputs_are_paired_by_role():
    # onnxrefine's own folds give the fused Conv a new name; the residual Add kept by both reads it
    # where the original reads the BatchNormalization's output, so the two are paired.
    original, candidate = residual_net(bad_block=5, keep_bn_names=False)
    report = verify_models(original, candidate)
    assert report.verdict == "mismatch"
    first = report.first_bad_value
    assert (first["name"], first["candidate_name"], first["op"]) == ("bn5", "fused5", "BatchNormalization")
    assert report.localisation["paired_by_role"] == 8


def test_a_name_that_now_holds_another_value_is_paired_by_role():
    # onnxoptimizer's fuse_bn_into_conv: the fused Conv keeps the *Conv's* output name, which now
    # holds what the BatchNormalization computed. Compared by name it would be a false mismatch.
    original, candidate = residual_net(bad_block=None, keep_bn_names=False)
    renames = {f"fused{i}": f"conv{i}" for i in range(8)}
    for node in candidate.graph.node:
        node.output[:] = [renames.get(name, name) for name in node.output]
        node.input[:] = [renames.get(name, name) for name in node.input]
    report = verify_models(original, candidate)
    section = report.localisation
    values = {v["name"]: v for v in section["values"]}
    assert "conv3" not in values and values["bn3"]["candidate_name"] == "conv3"
    assert section["names_reused"] == 8
    assert report.verdict == "rounding", section["first_bad"]


def test_values_computed_identically_are_not_judged():
    # Only block 5 is folded (badly): everything before it is the same computation in both models.
    original, candidate = residual_net(bad_block=5, fold_blocks=[5])
    pairs, stats = find_pairs(original, candidate, {"x": np.zeros((1, 8, 12, 12), np.float32)}, 2.0 ** -24)
    names = [pair.name for pair in pairs]
    assert stats["identical_computation"] == 5 * 4  # conv, bn, add, relu of blocks 0-4
    assert names[0] == "bn5" and "conv5" not in names and "relu4" not in names
    report = verify_models(original, candidate)
    assert report.first_bad_value["name"] == "bn5"
    assert report.localisation["identical_computation"] == 20


def test_small_batches_split_the_runs_and_agree():
    original, candidate = residual_net(bad_block=5, blocks=6)
    sets = [("random0", {"x": np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)})]
    kwargs = {"u": 2.0 ** -24, "perturb_count": 2, "seed": 0}
    whole = localize(original, candidate, sets, **kwargs)
    value_bytes = 8 * 12 * 12 * 4
    split = localize(original, candidate, sets, max_batch_bytes=2 * value_bytes, **kwargs)
    assert whole["batches"] == 1
    assert split["batches"] == (split["checked"] + 1) // 2 > 1
    assert split["runs"] > whole["runs"]
    assert split["first_bad"]["name"] == whole["first_bad"]["name"] == "bn5"
    assert [v["verdict"] for v in split["values"]] == [v["verdict"] for v in whole["values"]]
    assert whole["sessions"] == 2 and split["sessions"] == 2 * split["batches"]  # a session pair per batch
    # While everything fits in 4 batches, one session pair exposes it all and runs fetch per batch.
    shared = localize(original, candidate, sets, max_batch_bytes=(split["checked"] // 4 + 1) * value_bytes,
                      **kwargs)
    assert shared["batches"] > 1 and shared["sessions"] == 2
    assert [v["verdict"] for v in shared["values"]] == [v["verdict"] for v in whole["values"]]


def test_batches_of_bounds_bytes_and_keeps_order():
    original, candidate = residual_net(blocks=3)
    pairs, _ = find_pairs(original, candidate, {"x": np.zeros((1, 8, 12, 12), np.float32)}, 2.0 ** -24)
    assert all(pair.est_bytes == 8 * 12 * 12 * 4 for pair in pairs)
    batches = batches_of(pairs, 3 * 8 * 12 * 12 * 4)
    assert [len(b) for b in batches] == [3, 3, 3]
    assert [p.name for b in batches for p in b] == [p.name for p in pairs]
    assert len(batches_of(pairs, 1)) == len(pairs)  # a value larger than the cap is a batch alone


def test_a_name_holding_a_different_shape_is_not_comparable():
    # The candidate reuses the name "t" for a transposed value: not the same value, not judged
    # (the summed output is the same).
    def build(transposed):
        nodes = [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]) if transposed
                 else helper.make_node("Relu", ["r"], ["t"]),
                 helper.make_node("ReduceSum", ["t"], ["y"], keepdims=0)]
        return make_model(nodes, [value_info("x", shape=[2, 3])], [value_info("y", shape=[])])

    original, candidate = build(False), build(True)
    report = verify_models(original, candidate)
    assert "t" in report.localisation["not_comparable"]
    assert report.first_bad_value is None


def test_json_html_and_text_carry_the_localisation(tmp_path, capsys):
    original, candidate = residual_net(bad_block=5, small_var=DILUTED_VAR)
    onnx.save(original, tmp_path / "orig.onnx")
    onnx.save(candidate, tmp_path / "cand.onnx")
    code = main(["verify", str(tmp_path / "orig.onnx"), str(tmp_path / "cand.onnx"),
                 "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("first bad value:"))
    assert line.startswith("first bad value: bn5 (BatchNormalization node bn5_node; candidate: Conv) mismatch")
    assert out.strip().splitlines()[-1] == "verdict: mismatch"
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["verdict"] == "mismatch"
    assert data["localisation"]["first_bad"]["name"] == "bn5"
    assert any(v["name"] == "relu7" for v in data["localisation"]["values"])
    html = (tmp_path / "r.html").read_text()
    assert 'id="localisation"' in html and "first bad value" in html and "bn5" in html

    code = main(["verify", str(tmp_path / "orig.onnx"), str(tmp_path / "cand.onnx"), "--no-localize",
                 "--json", str(tmp_path / "off.json")])
    out = capsys.readouterr().out
    assert code == 0 and "first bad value" not in out
    assert json.loads((tmp_path / "off.json").read_text())["localisation"] is None


def test_reference_reports_each_intermediate_as_computed():
    original, _ = residual_net(blocks=2)
    seen = []
    feeds = {"x": np.ones((1, 8, 12, 12), np.float32)}
    result = evaluate_float64(original, feeds, observe=lambda name, value: seen.append((name, value.dtype)))
    assert [name for name, _ in seen] == [out for node in original.graph.node for out in node.output]
    assert all(dtype == np.float64 for _, dtype in seen)
    assert set(result) == {"y"}


def test_integer_intermediates_are_judged_exactly():
    # A shared integer value that changes (an ArgMax index) is a mismatch, however small the change.
    def build(offset):
        nodes = [helper.make_node("Add", ["x", "c"], ["s"]),
                 helper.make_node("ArgMax", ["s"], ["idx"], axis=1, keepdims=0),
                 helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["f", "zero"], ["y"])]
        c = np.zeros((1, 4), np.float32)
        c[0, 3] = offset
        return make_model(nodes, [value_info("x", shape=[2, 4])], [value_info("y", shape=[2])],
                          [tensor("c", c), tensor("zero", np.float32(0.0))])

    x = np.array([[0.0, 1.0, 2.0, 3.0], [3.0, 0.0, 0.0, 0.0]], np.float32)
    report = verify_models(build(0.0), build(-5.0), inputs=[{"x": x}])
    assert report.outputs[0].verdict == "exact"  # the output multiplies the change away
    assert report.verdict == "mismatch"
    assert report.first_bad_value["name"] == "s"


def test_peer_output_with_shared_names_only_downstream(tmp_path):
    # A peer that keeps only some names: the first shared, changed value is named, none is missed.
    original, candidate = residual_net(bad_block=2, blocks=4)
    keep = {"add2", "relu3"}
    renames = {}
    for node in candidate.graph.node:
        for index, name in enumerate(node.output):
            if name != "y" and name not in keep:
                renames[name] = f"peer_{name}"
                node.output[index] = renames[name]
    for node in candidate.graph.node:
        for index, name in enumerate(node.input):
            node.input[index] = renames.get(name, name)
    report = verify_models(original, candidate)
    section = report.localisation
    # add2 and relu3 by name; add3 is not paired: a Relu is no witness (Relu(Relu(x)) -> Relu(x)
    # is what eliminations do), it only marks peer_add3 as holding some original value.
    assert (section["paired"], section["paired_by_role"]) == (2, 0)
    assert report.first_bad_value["name"] == "add2"


def test_float16_intermediates_use_their_own_roundoff():
    # A float16 graph's intermediates differ by float16 rounding after a reassociation: rounding.
    def build(split):
        nodes = ([helper.make_node("Add", ["x", "c1"], ["a"]), helper.make_node("Add", ["a", "c2"], ["b"])]
                 if split else [helper.make_node("Add", ["x", "c"], ["b"])])
        nodes += [helper.make_node("Relu", ["b"], ["r"]), helper.make_node("Mul", ["r", "x"], ["y"])]
        inits = ([tensor("c1", np.float16(0.3)), tensor("c2", np.float16(0.7))] if split
                 else [tensor("c", np.float16(1.0))])
        return make_model(nodes, [value_info("x", TensorProto.FLOAT16, [64])],
                          [value_info("y", TensorProto.FLOAT16, [64])], inits)

    report = verify_models(build(False), build(True))
    values = {v["name"]: v for v in report.localisation["values"]}
    assert values["b"]["differing"] > 0
    assert report.verdict in ("rounding", "exact"), report.localisation["first_bad"]


def test_an_intermediate_behind_a_sqrt_near_zero_gets_the_originals_sensitivity():
    # The fuzz case 7012 shape, one level in: s = Sqrt(x + 1) is shared, the candidate computes
    # x + 1 as (x + 1/3) + 2/3 under new names. Rounding near 0 grows behind the square root beyond
    # gamma * |s|; the original's own few-ulp input sensitivity (perturbation runs, which
    # localisation adds only for values that fail without them) explains it.
    third = np.float32(1 / 3)
    x = np.array([-0.9997454, -0.9988056, -0.999744, -0.999556, 0.0, 1.0, 2.0, 0.5], np.float32)
    original = make_model([helper.make_node("Add", ["x", "one"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"]),
                           helper.make_node("Mul", ["s", "two"], ["y"])],
                          [value_info("x", shape=[8])], [value_info("y", shape=[8])],
                          [tensor("one", np.float32(1.0)), tensor("two", np.float32(2.0))])
    candidate = make_model([helper.make_node("Add", ["x", "c0"], ["p0"]), helper.make_node("Add", ["p0", "c1"], ["p1"]),
                            helper.make_node("Sqrt", ["p1"], ["s"]), helper.make_node("Mul", ["s", "two"], ["y"])],
                           [value_info("x", shape=[8])], [value_info("y", shape=[8])],
                           [tensor("c0", third), tensor("c1", np.float32(1) - third), tensor("two", np.float32(2.0))])
    report = verify_models(original, candidate, inputs=[{"x": x}], trials=2)
    values = {v["name"]: v for v in report.localisation["values"]}
    assert values["s"]["differing"] > 0
    assert report.verdict == "rounding", report.localisation["first_bad"]
    # without the perturbation runs too: the magnitude of terms behind the Sqrt (its derivative carries
    # it) lets the accumulation cap's u*M_i allow what the derived bound allows
    section = localize(original, candidate, [("given0", {"x": x})], u=2.0 ** -24, perturb_count=0, seed=0)
    assert section["first_bad"] is None


def drop_bn_epsilon(m, ctx):
    """Wrong on purpose: BatchNormalization with epsilon 0 (what a fold that forgets it computes)."""
    epsilon = m.root.attributes.get("epsilon")
    if epsilon is not None and epsilon.value == 0.0:
        return None
    node = ctx.node("BatchNormalization", list(m.root.inputs), {"epsilon": 0.0})
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def test_bisect_names_the_rewrite_and_the_value_it_broke(tmp_path, monkeypatch, capsys):
    rule = Rule("drop_bn_epsilon", Op("BatchNormalization", Var("x"), Var("s"), Var("b"), Var("m"), Var("v")),
                drop_bn_epsilon, kind=REASSOCIATING)
    spec = PassSpec("planted_drop_bn_epsilon", "test only", rules=(rule,))
    plant_pass(monkeypatch, spec)
    # Only block 5 has a near-degenerate variance: dropping epsilon elsewhere is rounding.
    original, _ = residual_net(small_var_blocks={5}, var_range=(5.0, 20.0))
    out = tmp_path / "bundle"
    result = bisect(original, optimizer="onnxrefine", passes=[spec.name], out_dir=out)
    assert result.verdict == "mismatch"
    assert result.rewrite["rule"] == "drop_bn_epsilon" and result.rewrite["root"] == "bn5_node (BatchNormalization)"
    # The rewritten BatchNormalization has a new output name, paired with bn5 by role.
    assert result.first_bad_value["name"] == "bn5"
    report = json.loads((out / "report.json").read_text())
    assert report["first_bad_value"]["name"] == "bn5"
    assert report["verification"]["localisation"]["first_bad"]["name"] == "bn5"
    assert "first bad value: bn5 (BatchNormalization node bn5_node)" in (out / "README.md").read_text()

    onnx.save(original, tmp_path / "resnet.onnx")
    code = main(["bisect", str(tmp_path / "resnet.onnx"), "--passes", spec.name, "--out", str(tmp_path / "cli")])
    printed = capsys.readouterr().out
    assert code == 1
    assert "first bad value: bn5 (BatchNormalization node bn5_node) mismatch" in printed


def test_where_the_reference_stops_later_values_use_the_fallback(monkeypatch):
    from onnxrefine.verify.reference import evaluator as reference

    kernel = reference._NATIVE["Relu"]

    def refuse_relu3(call):
        if call.node.name == "relu3_node":
            raise reference.UnsupportedOperatorError("planted: relu3 not evaluated")
        return kernel(call)

    monkeypatch.setitem(reference._NATIVE, "Relu", refuse_relu3)
    original, candidate = residual_net(bad_block=1, blocks=6)
    report = verify_models(original, candidate)
    section = report.localisation
    values = {v["name"]: v for v in section["values"]}
    assert values["bn1"]["reference"] and not values["bn4"]["reference"]
    assert section["reference"] == "partial" and any("planted" in note for note in section["notes"])
    assert report.first_bad_value["name"] == "bn1"


def test_both_branches_of_an_add_fused_under_conv_names_are_not_compared_by_name():
    # A residual Add whose two branches (Conv -> BN each) were folded the onnxoptimizer way: each
    # fused Conv keeps its Conv's name. Which operand is which is unknown, but neither name holds
    # its old value any more.
    rng = np.random.default_rng(3)
    nodes, folded, inits, cand_inits = [], [], [], []
    for k in (1, 2):
        weight = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
        gamma, beta = rng.uniform(0.5, 2, 4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        mean, var = rng.standard_normal(4).astype(np.float32), rng.uniform(0.5, 2, 4).astype(np.float32)
        inits += [tensor(f"w{k}", weight), tensor(f"g{k}", gamma), tensor(f"b{k}", beta), tensor(f"m{k}", mean),
                  tensor(f"v{k}", var)]
        nodes += [helper.make_node("Conv", ["x", f"w{k}"], [f"c{k}"]),
                  helper.make_node("BatchNormalization", [f"c{k}", f"g{k}", f"b{k}", f"m{k}", f"v{k}"], [f"n{k}"])]
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
        cand_inits += [tensor(f"fw{k}", (weight * scale[:, None, None, None]).astype(np.float32)),
                       tensor(f"fb{k}", (beta - mean * scale).astype(np.float32))]
        folded.append(helper.make_node("Conv", ["x", f"fw{k}", f"fb{k}"], [f"c{k}"]))
    tail = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    io = ([value_info("x", shape=[1, 4, 5, 5])], [value_info("y", shape=[])])
    original = make_model(nodes + [helper.make_node("Add", ["n1", "n2"], ["a"])] + tail, *io, inits)
    candidate = make_model(folded + [helper.make_node("Add", ["c1", "c2"], ["a"])] + tail, *io, cand_inits)
    report = verify_models(original, candidate)
    judged = {v["name"] for v in report.localisation["values"]}
    assert judged == {"a", "r"}
    assert report.verdict == "rounding", report.localisation["first_bad"]


def test_a_kept_node_whose_attributes_changed_says_nothing_about_its_inputs():
    # fuse_transpose_into_gemm: Gemm(Transpose(a), B) -> Gemm(a, B, transA=1). The Gemm is kept by
    # name, but its first slot now reads a, not a's transpose (same shape: square).
    b = tensor("B", np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32))
    io = ([value_info("x", shape=[3, 3])], [value_info("y", shape=[3, 3])])
    original = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Transpose", ["a"], ["t"]),
                           helper.make_node("Gemm", ["t", "B"], ["g"]), helper.make_node("Neg", ["g"], ["y"])],
                          *io, [b])
    candidate = make_model([helper.make_node("Relu", ["x"], ["a"]),
                            helper.make_node("Gemm", ["a", "B"], ["g"], transA=1),
                            helper.make_node("Neg", ["g"], ["y"])], *io, [b])
    report = verify_models(original, candidate)
    assert report.verdict in ("exact", "rounding"), report.localisation["first_bad"]
    assert {v["name"] for v in report.localisation["values"]} <= {"g"}


def test_a_change_seen_only_at_the_output_is_the_first_bad_value():
    io = ([value_info("x", shape=[4])], [value_info("y", shape=[4])])
    original = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])], *io)
    candidate = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Abs", ["r"], ["y"])], *io)
    report = verify_models(original, candidate)
    first = report.first_bad_value
    assert (first["name"], first["op"], first["output"]) == ("y", "Neg", True)
    assert report.localisation["checked"] == 0  # r is computed identically


def test_a_kept_node_whose_name_was_reused_is_no_witness():
    # Fuzz case 16 (onnxoptimizer fuse_bn_into_conv): the weight comes from a Constant node and the
    # fused Conv, which keeps the Conv's name, reads a scaled copy (Mul) of it in its one changed
    # slot (the bias is zero before and after). That Conv computes another value now (its name is
    # read where the original reads the BatchNormalization's output), so it is no witness that
    # the scaled weight is the original weight.
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((3, 3, 1, 1)).astype(np.float32)
    gamma, var = rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    zeros = np.zeros(3, np.float32)
    scale = (gamma / np.sqrt(var + np.float32(1e-5))).astype(np.float32)
    constant = helper.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(weight))
    io = ([value_info("x", shape=[1, 3, 4, 4])], [value_info("y", shape=[1, 3, 4, 4])])
    original = make_model([constant, helper.make_node("Conv", ["x", "w", "z"], ["c"]),
                           helper.make_node("BatchNormalization", ["c", "g", "z", "z", "v"], ["n"]),
                           helper.make_node("Add", ["n", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                          *io, [tensor("g", gamma), tensor("z", zeros), tensor("v", var)])
    candidate = make_model([constant, helper.make_node("Mul", ["w", "s"], ["ws"]),
                            helper.make_node("Conv", ["x", "ws", "z"], ["c"]),
                            helper.make_node("Add", ["c", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                           *io, [tensor("s", scale.reshape(3, 1, 1, 1)), tensor("z", zeros)])
    report = verify_models(original, candidate)
    values = {v["name"]: v for v in report.localisation["values"]}
    assert "w" not in values and "c" not in values and values["n"]["candidate_name"] == "c"
    assert report.verdict == "rounding", report.localisation["first_bad"]


def _pair(nodes_a, nodes_b, inputs, outputs, inits=()):
    return make_model(nodes_a, inputs, outputs, list(inits)), make_model(nodes_b, inputs, outputs, list(inits))


def test_eliminations_through_a_node_are_not_role_pairs():
    # onnxoptimizer fuzz cases 395, 514, 662: each output is exact; a kept node now reads another
    # value, which must not be judged as the value it used to read.
    x = [value_info("x", shape=[3, 4])]
    cases = {
        "idempotent": _pair(   # Relu(Relu(c)) -> Relu(c): r1 is not c
            [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Relu", ["c"], ["r1"]),
             helper.make_node("Relu", ["r1"], ["y"])],
            [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Relu", ["c"], ["r1"]),
             helper.make_node("Relu", ["c"], ["y"])], x, [value_info("y", shape=[3, 4])]),
        "monotone": _pair(     # ArgMax(Exp(c)) -> ArgMax(c): e is not c
            [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Exp", ["c"], ["e"]),
             helper.make_node("ArgMax", ["e"], ["y"], axis=1)],
            [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("ArgMax", ["c"], ["y"], axis=1)],
            x, [value_info("y", TensorProto.INT64, [3, 1])]),
        "where": _pair(        # Where(Not(k), a, b) -> Where(k, b, a): n is not k
            [helper.make_node("Less", ["x", "zero"], ["k"]), helper.make_node("Not", ["k"], ["n"]),
             helper.make_node("Cos", ["x"], ["a"]), helper.make_node("Where", ["n", "a", "x"], ["y"])],
            [helper.make_node("Less", ["x", "zero"], ["k"]),
             helper.make_node("Cos", ["x"], ["a"]), helper.make_node("Where", ["k", "x", "a"], ["y"])],
            x, [value_info("y", shape=[3, 4])], [tensor("zero", np.float32(0.0))]),
    }
    # The same elimination with the upstream computed differently (equal values, other digest):
    # only the Relu not being a witness keeps r1 from being paired with c.
    cases["idempotent, upstream changed"] = (cases["idempotent"][0], make_model(
        [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Cos", ["i"], ["c"]),
         helper.make_node("Relu", ["c"], ["y"])], x, [value_info("y", shape=[3, 4])]))
    for label, (original, candidate) in cases.items():
        report = verify_models(original, candidate)
        assert report.verdict == "exact", (label, report.localisation["first_bad"])


def test_a_value_computed_like_another_original_value_is_not_paired_by_role():
    # A wrong elimination Exp(Relu(c)) -> Exp(c): the Exp is a witness with one changed slot, but
    # the candidate's c is provably the original's c, not its Relu: the bad value is the output.
    x = [value_info("x", shape=[3, 4])]
    original, candidate = _pair(
        [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Exp", ["r"], ["y"])],
        [helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Exp", ["c"], ["y"])],
        x, [value_info("y", shape=[3, 4])])
    report = verify_models(original, candidate)
    assert report.verdict == "mismatch"
    assert report.first_bad_value["name"] == "y" and report.first_bad_value["output"]


def test_dead_values_are_not_judged():
    # onnxoptimizer fuzz case 3409: a BatchNormalization nothing reads, folded into its Conv, which
    # keeps the Conv's name. No kept reader tells the name now holds another value; but the value
    # reaches no output in either model, so it changes nothing.
    original, candidate = residual_net(blocks=2, keep_bn_names=False)
    for model in (original, candidate):
        model.graph.node.extend([helper.make_node("Conv", ["x", "W1", "B1"], ["side"], pads=[1, 1, 1, 1])])
        if model is original:
            model.graph.node.extend([helper.make_node(
                "BatchNormalization", ["side", "gamma1", "beta1", "mean1", "var1"], ["side_bn"])])
    candidate.graph.node[-1].input[1:] = ["W1_folded", "B1_folded"]  # the fused Conv keeps "side"
    report = verify_models(original, candidate)
    assert report.localisation["dead"] >= 1
    assert "side" not in {v["name"] for v in report.localisation["values"]}
    assert report.verdict == "rounding", report.localisation["first_bad"]


def _shape_of_a_scaled_value(factor, also_read=False):
    """y = ConstantOfShape(Shape(x * k)): x * k reaches the output through its shape alone (or, with
    `also_read`, also as a summand of a second output)."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Shape", ["m"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["y"])]
    outputs = [value_info("y", shape=None)]
    if also_read:
        nodes.append(helper.make_node("Add", ["m", "x"], ["z"]))
        outputs.append(value_info("z", shape=None))
    return make_model(nodes, [value_info("x", shape=[3, 4])], outputs, [tensor("k", np.float32(factor))])


def test_a_value_only_a_shape_reads_is_dead():
    # fuzz campaign of seed 900000, case 5332: a ConvTranspose after a Log(Softmax) fusion, read only by
    # a Shape; the original was inf where the fused candidate was right, and the value raised the verdict
    report = verify_models(_shape_of_a_scaled_value(2.0), _shape_of_a_scaled_value(3.0))
    assert report.verdict == "exact"
    assert report.localisation is None or "m" not in {v["name"] for v in report.localisation["values"]}


def test_a_value_a_shape_and_an_op_read_is_judged():
    report = verify_models(_shape_of_a_scaled_value(2.0, also_read=True), _shape_of_a_scaled_value(3.0, also_read=True))
    assert report.verdict == "mismatch"
    assert report.first_bad_value["name"] == "m"


def test_a_name_an_if_branch_now_captures_is_suspect():
    # onnxoptimizer fuzz case 3409: the folded BatchNormalization's only readers are If branches,
    # which now capture the fused Conv's output under the Conv's old name.
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((3, 3, 1, 1)).astype(np.float32)
    gamma, var = rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    zeros = np.zeros(3, np.float32)
    scale = (gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5))

    def branches(name):
        out = [value_info("o", shape=[1, 3, 4, 4])]
        return {"then_branch": helper.make_graph([helper.make_node("Neg", [name], ["o"])], "t", [], out),
                "else_branch": helper.make_graph([helper.make_node("Abs", [name], ["o"])], "e", [], out)}

    cond = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["k"])]
    io = ([value_info("x", shape=[1, 3, 4, 4])], [value_info("y", shape=[1, 3, 4, 4])])
    shared = [tensor("zero", np.float32(0.0)), tensor("z", zeros)]
    original = make_model(cond + [helper.make_node("Conv", ["x", "w"], ["c"]),
                                  helper.make_node("BatchNormalization", ["c", "g", "z", "z", "v"], ["n"]),
                                  helper.make_node("If", ["k"], ["y"], **branches("n"))], *io,
                          shared + [tensor("w", weight), tensor("g", gamma), tensor("v", var)])
    candidate = make_model(cond + [helper.make_node("Conv", ["x", "wf", "z"], ["c"]),
                                   helper.make_node("If", ["k"], ["y"], **branches("c"))], *io,
                           shared + [tensor("wf", (weight * scale[:, None, None, None]).astype(np.float32))])
    report = verify_models(original, candidate)
    assert "c" not in {v["name"] for v in report.localisation["values"]}
    assert report.verdict == "rounding", report.localisation["first_bad"]


def test_a_producer_that_absorbed_its_reader_under_its_own_name_is_suspect():
    # onnxoptimizer fuzz case 1966: Conv -> BN -> Conv -> BN folded into two Convs named like the
    # first Conv and the last BatchNormalization; no kept node reads the first Conv's name.
    rng = np.random.default_rng(11)
    io = ([value_info("x", shape=[1, 3, 5, 5])], [value_info("n2", shape=[1, 3, 5, 5])])
    orig_nodes, cand_nodes, orig_inits, cand_inits, current = [], [], [], [], "x"
    for k, conv_name, out_name in ((1, "c1", "c1"), (2, "c2", "n2")):
        weight = rng.standard_normal((3, 3, 1, 1)).astype(np.float32)
        gamma, var = rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
        orig_inits += [tensor(f"w{k}", weight), tensor(f"g{k}", gamma), tensor(f"v{k}", var)]
        cand_inits.append(tensor(f"wf{k}", (weight * scale[:, None, None, None]).astype(np.float32)))
        orig_nodes += [helper.make_node("Conv", [current if k == 1 else "n1", f"w{k}"], [conv_name]),
                       helper.make_node("BatchNormalization", [conv_name, f"g{k}", "z", "z", f"v{k}"], [f"n{k}"])]
        cand_nodes.append(helper.make_node("Conv", [current, f"wf{k}"], [out_name]))
        current = out_name
    zeros = [tensor("z", np.zeros(3, np.float32))]
    original = make_model(orig_nodes, *io, orig_inits + zeros)
    candidate = make_model(cand_nodes, *io, cand_inits)
    report = verify_models(original, candidate)
    assert report.localisation["status"] == "done"
    assert "c1" not in {v["name"] for v in report.localisation["values"]}
    assert report.verdict == "rounding", report.localisation["first_bad"]
