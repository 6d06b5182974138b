"""Verification under deployment settings: both models run at onnxruntime's default level (or the
user's level/providers), judged apart in the report's `deployment` section, counted in the verdict;
the optional --atol/--rtol hard bound; one-line errors for bad flags."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.cli.main import main
from onnxrefine.verify import RunSettings, run_settings, verify_models

K, N = 64, 32


def qdq_model(weight_folded: bool) -> onnx.ModelProto:
    """x -> Q -> DQ -> MatMul(W) with W = DequantizeLinear(int8 weight), or (a 'candidate' that
    folded the weight's DequantizeLinear) W as the float tensor DQ computes. Bit-identical with
    optimizations off; at the default level onnxruntime fuses the original's QDQ MatMul into an
    integer kernel, which it cannot do for the folded weight."""
    rng = np.random.default_rng(0)
    wq = rng.integers(-127, 128, (K, N)).astype(np.int8)
    ws = np.float32(0.02)
    inits = [numpy_helper.from_array(np.array(np.float32(0.05)), "xs"),
             numpy_helper.from_array(np.array(np.uint8(128)), "xz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])]
    if weight_folded:
        inits.append(numpy_helper.from_array(wq.astype(np.float32) * ws, "wd"))
    else:
        inits += [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(ws), "ws"),
                  numpy_helper.from_array(np.array(np.int8(0)), "wz")]
        nodes.append(helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]))
    nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["y"]))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def inputs():
    return [{"x": np.random.default_rng(1).standard_normal((4, K)).astype(np.float32)}]


def test_difference_only_under_the_default_level_is_reported_in_the_deployment_section():
    report = verify_models(qdq_model(False), qdq_model(True), inputs=inputs(), trials=2)
    strict, = report.outputs
    deployed, = report.deployment
    assert strict.verdict == "exact" and strict.differing == 0
    assert deployed.differing > 0 and deployed.verdict != "exact"
    assert report.settings["deployment"]["level"] == "all"
    assert report.to_dict()["deployment"][0]["differing"] == deployed.differing


def test_deployment_level_disable_sees_no_difference_and_none_turns_it_off():
    settings = RunSettings(level="disable")
    report = verify_models(qdq_model(False), qdq_model(True), inputs=inputs(), deployment=settings)
    assert report.verdict == "exact" and report.deployment[0].differing == 0
    report = verify_models(qdq_model(False), qdq_model(True), inputs=inputs(), deployment=None)
    assert report.verdict == "exact" and report.deployment == []


def test_deployment_differences_count_in_the_verdict():
    """With a zero hard bound, any difference is a mismatch: here only the deployment runs differ."""
    report = verify_models(qdq_model(False), qdq_model(True), inputs=inputs(), atol=0.0, rtol=0.0)
    assert report.outputs[0].verdict == "exact"
    assert report.deployment[0].verdict == "mismatch"
    assert report.verdict == "mismatch" and report.exit_code == 1
    assert report.failing_outputs == ["y (deployment)"]


def conv_bn(folded: bool) -> onnx.ModelProto:
    """Conv + BatchNormalization, or the same folded into the Conv (reassociating: rounding)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    scale, bias = rng.uniform(0.5, 2, 4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    mean, var = rng.standard_normal(4).astype(np.float32), rng.uniform(0.5, 2, 4).astype(np.float32)
    if folded:
        factor = (scale / np.sqrt(var.astype(np.float64) + 1e-5))
        inits = [numpy_helper.from_array((w * factor[:, None, None, None]).astype(np.float32), "w"),
                 numpy_helper.from_array((bias - mean * factor).astype(np.float32), "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    else:
        inits = [numpy_helper.from_array(a, n) for a, n in
                 ((w, "w"), (scale, "s"), (bias, "b"), (mean, "m"), (var, "v"))]
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_hard_bound_turns_rounding_beyond_it_into_mismatch_and_leaves_exact_alone():
    feeds = [{"x": np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    derived = verify_models(conv_bn(False), conv_bn(True), inputs=feeds, deployment=None)
    assert derived.verdict == "rounding"
    tight = verify_models(conv_bn(False), conv_bn(True), inputs=feeds, deployment=None, atol=0.0, rtol=1e-9)
    assert tight.verdict == "mismatch"
    assert any("hard bound" in note for note in tight.outputs[0].notes)
    loose = verify_models(conv_bn(False), conv_bn(True), inputs=feeds, deployment=None, atol=1e-3, rtol=1e-3)
    assert loose.verdict == "rounding"
    same = verify_models(conv_bn(False), conv_bn(False), inputs=feeds, atol=0.0, rtol=0.0)
    assert same.verdict == "exact"


def test_run_settings_block_supplies_defaults_for_verify_models():
    with run_settings(deployment=None, atol=0.0, rtol=0.0):
        report = verify_models(qdq_model(False), qdq_model(True), inputs=inputs())
        assert report.deployment == [] and report.verdict == "exact"
        explicit = verify_models(qdq_model(False), qdq_model(True), inputs=inputs(), deployment=RunSettings())
        assert explicit.verdict == "mismatch"


def test_cli_reports_the_deployment_section(tmp_path, capsys):
    original, candidate = tmp_path / "o.onnx", tmp_path / "c.onnx"
    onnx.save(qdq_model(False), str(original))
    onnx.save(qdq_model(True), str(candidate))
    code = main(["verify", str(original), str(candidate), "--no-stress", "--trials", "1"])
    out = capsys.readouterr().out
    assert "deployment: level all, CPUExecutionProvider" in out
    assert out.strip().splitlines()[-1] == "verdict: rounding" and code == 0
    code = main(["verify", str(original), str(candidate), "--no-stress", "--trials", "1", "--atol", "0", "--rtol", "0"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == "verdict: mismatch" and code == 1
    code = main(["verify", str(original), str(candidate), "--no-stress", "--trials", "1", "--ort-level", "basic",
                 "--atol", "0", "--rtol", "0"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == "verdict: exact" and code == 0
    code = main(["verify", str(original), str(candidate), "--no-stress", "--trials", "1", "--no-deployment-check",
                 "--atol", "0", "--rtol", "0"])
    out = capsys.readouterr().out
    assert "deployment:" not in out and out.strip().splitlines()[-1] == "verdict: exact" and code == 0


@pytest.mark.parametrize("flags, message", [
    (["--providers", "NoSuchExecutionProvider"], "unknown execution provider 'NoSuchExecutionProvider'"),
    (["--providers", "TensorrtExecutionProvider"], "TensorrtExecutionProvider is not available"),
    (["--custom-op-library", "/no/such/libops.so"], "--custom-op-library: no such file"),
    (["--ort-level", "max"], "--ort-level: unknown level 'max'"),
    (["--atol", "-1"], "--atol must be a non-negative number"),
])
@pytest.mark.parametrize("command", ["verify", "optimize"])
def test_bad_run_settings_are_one_line_errors(tmp_path, capsys, flags, message, command):
    model = tmp_path / "m.onnx"
    onnx.save(conv_bn(False), str(model))
    argv = [command, str(model)] + ([str(model)] if command == "verify" else ["-o", str(tmp_path / "o.onnx")])
    assert main(argv + flags) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists()


def test_custom_op_library_that_is_not_a_library_is_a_one_line_error(tmp_path, capsys):
    model, fake = tmp_path / "m.onnx", tmp_path / "libfake.so"
    onnx.save(conv_bn(False), str(model))
    fake.write_bytes(b"not a shared library")
    assert main(["verify", str(model), str(model), "--custom-op-library", str(fake)]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not load" in err and len(err.splitlines()) == 1


def test_html_report_has_the_deployment_section(tmp_path, capsys):
    original, candidate = tmp_path / "o.onnx", tmp_path / "c.onnx"
    onnx.save(qdq_model(False), str(original))
    onnx.save(qdq_model(True), str(candidate))
    main(["verify", str(original), str(candidate), "--no-stress", "--trials", "1", "--html", str(tmp_path / "r.html")])
    html = (tmp_path / "r.html").read_text()
    assert 'id="deployment"' in html and "level all, CPUExecutionProvider" in html
    main(["verify", str(original), str(candidate), "--no-stress", "--trials", "1", "--no-deployment-check",
          "--html", str(tmp_path / "off.html")])
    assert 'id="deployment"' not in (tmp_path / "off.html").read_text()


@pytest.mark.parametrize("settings", [RunSettings(), RunSettings(threads=2), RunSettings.strict()])
def test_sessions_pool_threads_sleep_rather_than_spin(settings):
    """Spinning pool threads change no output but take CPU from the thread that works (about half
    a default-threads run's CPU on a loaded 2-core machine): every verification session turns it off."""
    from onnxrefine.verify.ort.settings import session_options

    assert session_options(settings).get_session_config_entry("session.intra_op.allow_spinning") == "0"


def transposed_weight(folded: bool, m: int = 8, k: int = 256, n: int = 256) -> onnx.ModelProto:
    """x @ W^T with the Transpose computed (the weight is no initializer of the MatMul) or folded
    into the initializer: an exact rewrite, the same products summed the same way."""
    weight = np.random.default_rng(2).standard_normal((n, k)).astype(np.float32)
    if folded:
        nodes, inits = [helper.make_node("MatMul", ["x", "wt"], ["y"])], [
            numpy_helper.from_array(np.ascontiguousarray(weight.T), "wt")]
    else:
        nodes = [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
        inits = [numpy_helper.from_array(weight, "w")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _strict_outputs(model, settings):
    import onnxruntime as ort

    from onnxrefine.verify.ort.settings import session_options

    session = ort.InferenceSession(model.SerializeToString(), session_options(settings),
                                   providers=["CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(3).standard_normal((8, 256)).astype(np.float32)}
    return session.run(None, feeds)[0]


def test_strict_runs_do_not_prepack_so_a_folded_transpose_stays_exact():
    """A prepacked weight takes another blocking of the sum: with prepacking (onnxruntime's default)
    folding a Transpose into a MatMul's weight changes the rounding, and the strict track would
    send an exact rewrite to the float64 reference. Strict sessions turn it off."""
    original, folded = transposed_weight(False), transposed_weight(True)
    strict = RunSettings.strict()
    assert not strict.prepacking and "no weight prepacking" in strict.describe()
    assert np.array_equal(_strict_outputs(original, strict), _strict_outputs(folded, strict))
    report = verify_models(original, folded, trials=1, stress=False, deployment=None)
    assert report.verdict == "exact" and report.outputs[0].differing == 0
    assert report.settings["strict"]["prepacking"] is False
    packed = RunSettings(level="disable", threads=1)
    if np.array_equal(_strict_outputs(original, packed), _strict_outputs(folded, packed)):
        pytest.skip("this onnxruntime build's prepacked MatMul sums as the unpacked one here: "
                    "the case shows nothing")


def test_certificate_sessions_do_not_prepack():
    from onnxrefine.runtime import strict_session

    session = strict_session(transposed_weight(True).SerializeToString())
    assert session.get_session_options().get_session_config_entry("session.disable_prepacking") == "1"
