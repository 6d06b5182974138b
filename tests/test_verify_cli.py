"""`onnxrefine verify`: exit codes, the last line, --json, --html, bad input."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import make_model, tensor, value_info
from onnxrefine.cli.arguments import parse_dims
from onnxrefine.cli.verify_cmd import register
from onnxrefine.errors import BadInputError


def _run_cli(argv):
    """Run only the verify subcommand in-process, the way cli.main does (exit 2 on BadInputError)."""
    import argparse

    parser = argparse.ArgumentParser(prog="onnxrefine")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BadInputError as exc:
        print(f"onnxrefine: error: {exc}", file=sys.stderr)
        return 2


@pytest.fixture()
def models(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    x_info = [value_info("x", TensorProto.FLOAT, ["batch", 6])]
    y_info = [value_info("y", TensorProto.FLOAT, None)]
    original = make_model([helper.make_node("MatMul", ["x", "W"], ["m"]),
                           helper.make_node("Add", ["m", "b"], ["y"])], x_info, y_info,
                          [tensor("W", weight), tensor("b", bias)])
    gemm = make_model([helper.make_node("Gemm", ["x", "W", "b"], ["y"])], x_info, y_info,
                      [tensor("W", weight), tensor("b", bias)])
    no_bias = make_model([helper.make_node("MatMul", ["x", "W"], ["y"])], x_info, y_info, [tensor("W", weight)])
    paths = {}
    for name, model in (("original", original), ("gemm", gemm), ("no_bias", no_bias)):
        paths[name] = str(tmp_path / f"{name}.onnx")
        onnx.save(model, paths[name])
    return paths


def test_same_model_is_exact_and_last_line(models, capsys):
    code = _run_cli(["verify", models["original"], models["original"]])
    out = capsys.readouterr().out
    assert code == 0
    assert out.rstrip("\n").splitlines()[-1] == "verdict: exact"


def test_matmul_add_to_gemm_passes(models, capsys):
    code = _run_cli(["verify", models["original"], models["gemm"], "--dims", "batch=3"])
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert code == 0
    assert last in ("verdict: exact", "verdict: rounding")


def test_dropped_bias_is_mismatch_with_json_and_html(models, tmp_path, capsys):
    json_path, html_path = tmp_path / "report.json", tmp_path / "report.html"
    code = _run_cli(["verify", models["original"], models["no_bias"], "--json", str(json_path),
                     "--html", str(html_path), "--trials", "2", "--seed", "5"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.rstrip("\n").splitlines()[-1] == "verdict: mismatch"
    data = json.loads(json_path.read_text())
    assert data["verdict"] == "mismatch" and data["exit_code"] == 1
    assert data["outputs"][0]["name"] == "y" and data["outputs"][0]["verdict"] == "mismatch"
    assert data["settings"]["seed"] == 5
    page = html_path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "verdict" in page and "mismatch" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_npz_inputs_are_used(models, tmp_path, capsys):
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.ones((5, 6), np.float32))
    code = _run_cli(["verify", models["original"], models["original"], "--inputs", str(path),
                     "--json", str(tmp_path / "r.json")])
    assert code == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["input_sets"] == ["given0"] and data["outputs"][0]["shape"] == [5, 4]
    capsys.readouterr()


@pytest.mark.parametrize("problem", ["missing", "not_onnx", "wrong_inputs", "pickle", "dims"])
def test_bad_input_exits_2_with_one_line(models, tmp_path, capsys, problem):
    argv = ["verify", models["original"], models["gemm"]]
    if problem == "missing":
        argv[2] = str(tmp_path / "nope.onnx")
    elif problem == "not_onnx":
        garbage = tmp_path / "garbage.onnx"
        garbage.write_bytes(b"this is not a protobuf \x00\xff\xfe" * 10)
        argv[1] = str(garbage)
    elif problem == "wrong_inputs":
        path = tmp_path / "wrong.npz"
        np.savez(path, not_x=np.ones((2, 6), np.float32))
        argv += ["--inputs", str(path)]
    elif problem == "pickle":
        path = tmp_path / "oracle.pkl"
        path.write_bytes(pickle.dumps({"input": {"x": np.ones((2, 6), np.float32)}}))
        argv += ["--inputs", str(path)]
    elif problem == "dims":
        argv += ["--dims", "batch"]
    code = _run_cli(argv)
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxrefine: error:")
    assert "Traceback" not in captured.err
    assert "verdict:" not in captured.out


def test_trusted_pickle_is_accepted(models, tmp_path, capsys):
    path = tmp_path / "oracle.pkl"
    path.write_bytes(pickle.dumps({"input": {"x": np.ones((2, 6), np.float32)}}))
    code = _run_cli(["verify", models["original"], models["original"], "--inputs", str(path),
                     "--trust-pickle"])
    assert code == 0
    capsys.readouterr()


def test_parse_dims():
    assert parse_dims("N=2, batch=1") == {"N": 2, "batch": 1}
    assert parse_dims("") == {}
    with pytest.raises(BadInputError):
        parse_dims("N=two")


def test_real_command_has_no_traceback(models, tmp_path):
    """The real entry point in a fresh process: bad input is one line on stderr, exit 2."""
    env = dict(os.environ)
    command = [sys.executable, "-c", "import sys; from onnxrefine.cli.main import main; sys.exit(main())",
               "verify", models["original"], str(tmp_path / "missing.onnx")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    if "invalid choice: 'verify'" in done.stderr:
        pytest.skip("verify subcommand not registered in this checkout")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
