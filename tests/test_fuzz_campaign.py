"""onnxrefine fuzz and onnxrefine reduce: campaign bookkeeping, bundles, and the reducer on a
planted bug (a wrong Pad-into-MaxPool fold, defined only here)."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

from onnxrefine.cli.main import main
from onnxrefine.fuzz.campaign import run_campaign, write_bundle
from onnxrefine.fuzz.settings import CampaignSettings
from onnxrefine.fuzz.generator import generate_model
from onnxrefine.fuzz.graphquery import has_chain
from onnxrefine.fuzz.reduce import reduce_model, still_fails


def wrong_pad_into_maxpool(model: onnx.ModelProto) -> onnx.ModelProto:
    """The onnxoptimizer 0.4.2 bug: a zero constant Pad folded into MaxPool's pads (which pad
    with -inf), wrong whenever a window sees only negative values and padding."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    for node in list(graph.node):
        pad = producers.get(node.input[0]) if node.op_type == "MaxPool" else None
        if pad is None or pad.op_type != "Pad" or pad.input[1] not in inits:
            continue
        mode = [a.s for a in pad.attribute if a.name == "mode"]
        if mode and mode[0] != b"constant" or len(pad.input) > 2 and pad.input[2]:
            continue
        pads = inits[pad.input[1]].tolist()
        rank = len(pads) // 2
        if pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
            continue
        old = [a for a in node.attribute if a.name == "pads"]
        current = list(old[0].ints) if old else [0] * (2 * (rank - 2))
        merged = [c + p for c, p in zip(current, pads[2:rank] + pads[rank + 2:])]
        for attr in old:
            node.attribute.remove(attr)
        node.attribute.append(onnx.helper.make_attribute("pads", merged))
        node.input[0] = pad.input[0]
        return model
    return model


def _failing_case():
    for seed in range(200):
        case = generate_model(seed, target="fuse_pad_into_pool", max_nodes=14)
        if not has_chain(case.model, ("Pad", "MaxPool")):
            continue
        if still_fails(case.model, wrong_pad_into_maxpool, case.input_dims, seed, 2) is not None:
            return case
    raise AssertionError("no generated case exposes the planted bug")


def test_reducer_shrinks_planted_bug_to_a_handful_of_nodes():
    case = _failing_case()
    result = reduce_model(case.model, wrong_pad_into_maxpool, dims=case.input_dims,
                          seed=case.seed, max_checks=120)
    assert result.nodes_after <= 3, [n.op_type for n in result.model.graph.node]
    assert has_chain(result.model, ("Pad", "MaxPool"))
    onnx.checker.check_model(result.model, full_check=True)
    assert still_fails(result.model, wrong_pad_into_maxpool, case.input_dims, case.seed, 2) is not None


def test_campaign_counts_cases_and_writes_a_summary(tmp_path):
    settings = CampaignSettings(optimizer="onnxrefine", passes=("eliminate_nop_transpose",),
                                cases=4, seed=11)
    summary = run_campaign(settings, str(tmp_path))
    assert summary.cases == 4
    assert sum(summary.statuses[s] for s in ("exact", "rounding", "not_fired", "mismatch",
                                             "unstable", "optimizer_error")) == 4
    assert summary.per_step["eliminate_nop_transpose"]["cases"] == 4
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["cases"] == 4 and "per_step" in saved


def test_bundle_layout_and_reduce_cli(tmp_path, monkeypatch):
    case = _failing_case()
    candidate = wrong_pad_into_maxpool(case.model)
    from onnxrefine.verify import verify_models

    report = verify_models(case.model, candidate, seed=case.seed, dims=case.input_dims, trials=2)
    assert report.verdict == "mismatch"
    result = {"index": 0, "seed": case.seed, "step": "fuse_pad_into_pool", "pattern": case.target,
              "signature": "test", "input_dims": case.input_dims, "opset": case.opset,
              "max_nodes": 14, "model": case.model.SerializeToString(),
              "candidate": candidate.SerializeToString(), "report": report.to_dict()}
    settings = CampaignSettings(optimizer="onnxrefine", passes=("fuse_pad_into_pool",))
    bundle = write_bundle(str(tmp_path), settings, result)
    assert sorted(os.listdir(bundle)) == ["README.md", "inputs.npz", "model.onnx", "model.opt.onnx",
                                          "report.json"]
    assert "onnxrefine reduce" in (tmp_path / os.path.basename(bundle) / "README.md").read_text()
    assert np.load(os.path.join(bundle, "inputs.npz")).files
    # onnxrefine's own fuse_pad_into_pool is correct, so its step must not reproduce the mismatch:
    # reduce refuses with a one-line error (exit 2) instead of a traceback.
    assert main(["reduce", bundle, "--max-checks", "5"]) == 2


@pytest.mark.parametrize("argv", [
    ["fuzz", "--target", "no_such_optimizer", "--cases", "1"],
    ["fuzz", "--target", "onnxrefine:no_such_pass", "--cases", "1"],
    ["fuzz", "--cases", "0"],
    ["reduce", "/nonexistent/bundle"],
])
def test_bad_input_is_one_line_exit_2(argv, tmp_path, capsys):
    assert main(argv + (["--out", str(tmp_path / "o")] if argv[0] == "fuzz" else [])) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().count("\n") == 0
