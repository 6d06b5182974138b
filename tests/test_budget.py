"""The resource budget (resources.py): bombs are refused from an estimate, never allocated.

Every bomb here is ~200 MB against a --memory-budget of 50MB: a test that passes never allocates
the bomb (the estimate refuses it first); one that fails would allocate 200-400 MB, not gigabytes.
"""

from __future__ import annotations

import json
import os
import re
import zipfile

import numpy as np
import onnx
import pytest
from hostile.bombs import bomb_cases, loop_case, loop_scan_case

from onnxrefine import resources
from onnxrefine.ir import peak
from onnxrefine.cli.main import main
from onnxrefine.errors import BadInputError
from onnxrefine.verify.ort import ModelRunner

BOMB_BYTES = 200 << 20
FEEDS = {"x": np.ones((2, 3), np.float32)}
CASES = bomb_cases(BOMB_BYTES)


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("onnxrefine: error: "), err
    assert "Traceback" not in err
    return lines[-1]


@pytest.mark.parametrize("text,size", [("50MB", 50_000_000), ("2GiB", 2 << 30), ("1.5K", 1500),
                                       ("4096", 4096), ("200 mib", 200 << 20)])
def test_parse_bytes(text, size):
    assert resources.parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-5MB", "0", "5XB"])
def test_parse_bytes_refuses(text):
    with pytest.raises(BadInputError, match="--memory-budget"):
        resources.parse_bytes(text)


def test_default_budget_is_a_capped_fraction_of_available_memory(monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: 1 << 30)
    assert resources.default_memory_budget() == 512 << 20
    monkeypatch.setattr(resources, "available_memory", lambda: 64 << 30)
    assert resources.default_memory_budget() == resources.DEFAULT_BUDGET_CAP


@pytest.mark.parametrize("name,model,expected", CASES, ids=[case[0] for case in CASES])
def test_estimate_sees_every_bomb(name, model, expected):
    estimate = peak.estimate_peak(model, FEEDS)
    assert estimate.peak_bytes >= expected["peak_bytes"] * 0.9, estimate.describe()
    with pytest.raises(resources.ResourceLimitError, match="memory budget"):
        resources.check_runnable(estimate, name, budget=50 << 20)
    resources.check_runnable(estimate, name, budget=8 * expected["peak_bytes"])  # fits a larger budget


@pytest.mark.parametrize("name,model,expected", CASES, ids=[case[0] for case in CASES])
def test_optimize_skips_verification_of_a_bomb(tmp_path, capsys, name, model, expected):
    source, out, report = tmp_path / f"{name}.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save(model, source)
    code = main(["optimize", str(source), "-o", str(out), "--memory-budget", "50MB", "--report", str(report)])
    captured = capsys.readouterr()
    if name == "sparse":  # densifying the sparse initializer is refused at load
        assert code == 2
        assert "memory budget" in _one_line_error(captured.err)
        assert not out.exists()
        return
    assert code == 0, captured.err
    verification = json.loads(report.read_text())["verification"]
    assert verification["status"] == "skipped"
    assert "memory budget" in verification["reason"]
    onnx.checker.check_model(onnx.load(out))


def test_forced_verification_of_a_bomb_is_refused(tmp_path, capsys):
    name, model, _ = CASES[0]
    source, out = tmp_path / f"{name}.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    assert main(["optimize", str(source), "-o", str(out), "--memory-budget", "50MB", "--verify"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "cannot verify" in line and "memory budget" in line and "'bomb'" in line
    assert not out.exists()


@pytest.mark.parametrize("command", ["verify", "bisect"])
def test_verify_and_bisect_refuse_a_bomb(tmp_path, capsys, command):
    name, model, _ = next(case for case in CASES if case[0] == "tile_dead")
    source = tmp_path / f"{name}.onnx"
    onnx.save(model, source)
    args = [command, str(source)] + ([str(source)] if command == "verify" else ["--out", str(tmp_path / "b")])
    assert main(args + ["--memory-budget", "50MB"]) == 2
    assert "memory budget" in _one_line_error(capsys.readouterr().err)


def test_huge_loop_is_never_run(tmp_path, capsys):
    """10^9 iterations: refused from the constant trip count, whatever the memory budget."""
    name, model, _ = loop_case(10**9)
    source, out, report = tmp_path / "loop.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save(model, source)
    assert main(["optimize", str(source), "-o", str(out), "--report", str(report)]) == 0
    verification = json.loads(report.read_text())["verification"]
    assert verification["status"] == "skipped" and "1000000000 iterations" in verification["reason"]
    assert main(["verify", str(source), str(out)]) == 2
    assert "Loop 'loop' runs 1000000000 iterations" in _one_line_error(capsys.readouterr().err)


def test_small_loop_runs():
    _, model, _ = loop_case(10)
    with ModelRunner(model) as runner:
        assert np.all(runner.run(FEEDS)["y"] == 11.0)


def test_watched_run_is_stopped_at_the_memory_cap():
    """A Loop whose scan output grows to 400 MB: no shape tells, so the run is watched (a child
    process) and stopped once it passes the budget; this process goes on."""
    _, model, _ = loop_scan_case(100_000, 1024)
    estimate = peak.estimate_peak(model, FEEDS)
    assert estimate.uncertain and resources.needs_watch(estimate)
    with resources.limits(memory_budget=50 << 20):
        with ModelRunner(model) as runner:
            assert runner.watched is not None
            with pytest.raises(resources.ResourceLimitError, match="onnxruntime stopped while running.*memory budget"):
                runner.run(FEEDS)
    _, small, _ = loop_scan_case(10, 4)
    with ModelRunner(small) as runner:  # a fresh child after the stopped one
        assert np.all(runner.run(FEEDS)["y"] == 41.0)


def test_watched_run_is_stopped_at_the_time_limit():
    _, model, _ = loop_scan_case(1_000_000, 1)
    with resources.limits(time_limit_s=0.01):
        with pytest.raises(resources.ResourceLimitError, match="time limit"):
            with ModelRunner(model) as runner:
                runner.run(FEEDS)


def test_watched_and_direct_runs_agree(example, monkeypatch):
    feeds = {"image": np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    with ModelRunner(example) as direct:
        assert direct.watched is None
        expected = direct.run(feeds)
    monkeypatch.setenv("ONNXREFINE_WATCH", "always")
    with ModelRunner(example) as watched:
        assert watched.watched is not None
        got = watched.run(feeds)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_float64_reference_refused_over_the_budget():
    name, model, expected = CASES[0]
    estimate = peak.estimate_peak(model, FEEDS)
    assert resources.reference_refusal(estimate, budget=4 * expected["peak_bytes"]) is None
    refusal = resources.reference_refusal(estimate, budget=expected["peak_bytes"] * 3 // 2)
    assert refusal and "float64 reference" in refusal  # float32 values held as float64: twice the bytes


def test_data_propagation_is_not_attempted_on_large_values(monkeypatch):
    """onnx's data propagation materializes propagated values: a Concat doubling of a 4 KiB
    constant took 25 s at 128 MiB. Above DATA_PROP_MAX_ELEMENTS it is left out."""
    calls = []
    real = peak.contained.infer_shapes  # onnx's inference, run where an abort is contained

    def spy(model, *args, **kwargs):
        calls.append(kwargs.get("data_prop", False))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(peak.contained, "infer_shapes", spy)
    _, doubling, _ = next(case for case in bomb_cases(64 << 20) if case[0] == "concat_doubling")
    peak.infer_shapes_bounded(doubling)
    assert calls == [False]
    calls.clear()
    _, loop, _ = loop_case(10)
    peak.infer_shapes_bounded(loop)
    assert calls == [False, True]


def test_fused_concat_is_capped():
    """Concat(c, c) chains: fusing them repeats inputs, 2^depth of them without the cap."""
    from onnxrefine import optimize

    _, doubling, _ = next(case for case in bomb_cases(4 << 20) if case[0] == "concat_doubling")
    result = optimize(doubling, ["fuse_consecutive_concats"])
    widest = max(len(node.input) for node in result.graph.node if node.op_type == "Concat")
    assert 2 < widest <= 1024


# -- inputs files ---------------------------------------------------------------------------------

def test_npz_zip_bomb_is_refused_before_reading(tmp_path, capsys, example):
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("input.npy", "w", force_zip64=True) as stream:
            np.lib.format.write_array(stream, np.zeros((200 << 20) // 4, np.float32))
    assert os.path.getsize(bomb) < 1 << 20
    code = main(["verify", str(example), str(example), "--inputs", str(bomb), "--memory-budget", "50MB"])
    assert code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "uncompressed" in line and "memory budget" in line


def test_npz_header_larger_than_its_data_is_refused(tmp_path):
    from onnxrefine.verify.inputs import load_inputs

    header = np.lib.format.header_data_from_array_1_0(np.ones(6, np.float32))
    header["shape"] = (2**40,)
    with open(tmp_path / "h.npy", "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(np.ones(6, np.float32).tobytes())
    with zipfile.ZipFile(tmp_path / "lie.npz", "w") as archive:
        archive.write(tmp_path / "h.npy", "x.npy")
    with pytest.raises(BadInputError, match=r"declares shape \(1099511627776,\)"):
        load_inputs(tmp_path / "lie.npz")
    np.savez_compressed(tmp_path / "ok.npz", x=np.ones((2, 3), np.float32), n=np.arange(4))
    assert load_inputs(tmp_path / "ok.npz")[0]["n"].tolist() == [0, 1, 2, 3]


def test_bad_memory_budget_option(example, capsys):
    assert main(["optimize", str(example), "--memory-budget", "plenty"]) == 2
    assert "--memory-budget: not a size" in _one_line_error(capsys.readouterr().err)


def test_certificate_windows_within_the_budget(tmp_path, capsys):
    """A rewrite whose matched subgraph holds a large tensor is not certified (a certificate runs
    several input sets through both sides), so without verification it is refused; the small ones
    are still certified."""
    _, doubling, _ = next(case for case in bomb_cases(16 << 20) if case[0] == "concat_doubling")
    source, out, report = tmp_path / "d.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(doubling, source)
    assert main(["optimize", str(source), "-o", str(out), "--no-verify", "--memory-budget", "50MB",
                 "--report", str(report)]) == 0
    written = json.loads(report.read_text())
    certificates = [entry.get("certificate", "") for entry in written["applied"]]
    skipped = [r["reason"] for r in written["refused"]
               if r["guard"] == "certificate.uncertifiable" and "1/8 of --memory-budget for a certificate" in r["reason"]]
    assert skipped and any(text.startswith("certified") for text in certificates), certificates


def test_reduce_refuses_a_bomb_bundle(tmp_path, capsys):
    bundle = tmp_path / "case_0_seed0"
    bundle.mkdir()
    onnx.save(CASES[0][1], bundle / "model.onnx")
    (bundle / "report.json").write_text(json.dumps({"optimizer": "onnxrefine", "step": "eliminate_identity",
                                                    "seed": 0}))
    assert main(["reduce", str(bundle), "--memory-budget", "50MB"]) == 2
    assert "memory budget" in _one_line_error(capsys.readouterr().err)
    assert not (bundle / "reduced").exists()


def test_loop_with_a_computed_trip_count_stops_at_the_verification_guard(tmp_path, capsys):
    """Size(x) * 10^8 iterations: the trip count is no constant, so the run is watched and
    stopped at auto mode's time guard (--verify-budget 1: about a second), not left to run."""
    from hostile.bombs import loop_dynamic_case

    _, model, _ = loop_dynamic_case()
    source, out, report = tmp_path / "loop.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(model, source)
    assert main(["optimize", str(source), "-o", str(out), "--verify-budget", "1", "--report", str(report)]) == 0
    verification = json.loads(report.read_text())["verification"]
    assert verification["status"] == "skipped", verification
    limit = re.search(r"stopped while running: over the time limit of ([0-9.]+) s", verification["reason"])
    assert limit and float(limit.group(1)) < 30, verification  # the guard, not the 300 s default


def test_bisect_of_onnxruntime_refuses_a_bomb(tmp_path, capsys):
    """onnxruntime's offline optimization folds constants while loading: checked first."""
    source = tmp_path / "bomb.onnx"
    onnx.save(CASES[0][1], source)
    assert main(["bisect", str(source), "--optimizer", "ort", "--out", str(tmp_path / "b"),
                 "--memory-budget", "50MB"]) == 2
    assert "offline optimization needs" in _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "b").exists()


def test_verify_time_budget_bounds_a_watched_run(tmp_path, capsys):
    from hostile.bombs import loop_dynamic_case

    source = tmp_path / "loop.onnx"
    onnx.save(loop_dynamic_case()[1], source)
    assert main(["verify", str(source), str(source), "--time-budget", "1"]) == 2
    assert "over the time limit of 1 s" in _one_line_error(capsys.readouterr().err)


def _window(nodes, inputs, output):
    helper = onnx.helper
    graph = helper.make_graph(nodes, "window", [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
                              [helper.make_tensor_value_info(output, onnx.TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_certificate_window_of_bounded_concats_needs_no_estimate(monkeypatch):
    """A Reshape target's shape arithmetic (Shape, Gather, Unsqueeze, Concat of a few integers)
    outputs no more than its inputs bound: no shape inference is run for its budget; a Concat
    doubling its own output has no such bound, and is estimated and skipped over the budget."""
    from onnxrefine.verify.certificate.bound import CertificateSkip
    from onnxrefine.verify.certificate.model import Side
    from onnxrefine.verify.certificate.window_budget import check_budget

    estimated = []
    original = peak.estimate_peak
    monkeypatch.setattr(peak, "estimate_peak", lambda *a, **k: estimated.append(a) or original(*a, **k))
    helper, INT64 = onnx.helper, onnx.TensorProto.INT64
    activation = [Side(None, "a0", dtype=np.dtype(np.float32), shape=(1, 24, 20, 20))]
    fed = {"k0": np.array([0]), "k1": np.array([-1, 4], np.int64)}
    arithmetic = _window([helper.make_node("Shape", ["a0"], ["s"]), helper.make_node("Gather", ["s", "k0"], ["g"]),
                          helper.make_node("Concat", ["g", "k1"], ["target"], axis=0)],
                         [("a0", onnx.TensorProto.FLOAT, [1, 24, 20, 20]), ("k0", INT64, [1]), ("k1", INT64, [2])],
                         "target")
    check_budget(arithmetic, activation, fed)
    assert estimated == []
    doubling = [helper.make_node("Concat", ["k1", "k1"], ["d0"], axis=0)] + [
        helper.make_node("Concat", [f"d{i}", f"d{i}"], [f"d{i + 1}"], axis=0) for i in range(20)]
    chain = _window(doubling, [("k1", INT64, [2])], "d20")
    with resources.limits(memory_budget=8 << 20), pytest.raises(CertificateSkip, match="1/8 of --memory-budget"):
        check_budget(chain, [], {"k1": fed["k1"]})
    assert len(estimated) == 1


def test_the_watched_child_loads_numpy_with_one_blas_thread(example, monkeypatch):
    """The child's numpy only holds arrays: OpenBLAS on one thread there, whatever this process has
    (a pool's threads spin at load, CPU every run pays)."""
    from onnxrefine.verify.ort import child

    monkeypatch.setenv("ONNXREFINE_WATCH", "always")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with ModelRunner(example) as watched:
        pid = watched.watched.worker.process.pid
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environment = dict(entry.split(b"=", 1) for entry in handle.read().split(b"\0") if b"=" in entry)
    assert environment.get(b"OPENBLAS_NUM_THREADS") == b"1"
    assert "OPENBLAS_NUM_THREADS" not in os.environ  # this process's own is left as it was
    assert child._child_environment()["OPENBLAS_NUM_THREADS"] == "1"


# A runner closed soon after a few runs (`scoped`: a shape observation's cut) is watched in a fork
# of this process, not in a new interpreter; the same limits hold and the child ends with it.
def _forked(runner):
    from onnxrefine.verify.ort import child

    assert runner.watched is not None and isinstance(runner.watched.worker.process, child._Forked)
    return runner.watched.worker.process


def test_a_scoped_watched_run_is_a_fork_stopped_at_the_memory_cap():
    _, model, _ = loop_scan_case(100_000, 1024)
    with resources.limits(memory_budget=50 << 20):
        with ModelRunner(model, scoped=True) as runner:
            _forked(runner)
            with pytest.raises(resources.ResourceLimitError, match="onnxruntime stopped while running.*memory budget"):
                runner.run(FEEDS)


def test_a_scoped_watched_run_is_stopped_at_the_time_limit():
    _, model, _ = loop_scan_case(1_000_000, 1)
    with resources.limits(time_limit_s=0.01):
        with pytest.raises(resources.ResourceLimitError, match="time limit"):
            with ModelRunner(model, scoped=True) as runner:
                _forked(runner)
                runner.run(FEEDS)


def test_a_scoped_watched_run_agrees_and_its_child_ends_with_it(example, monkeypatch):
    feeds = {"image": np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    with ModelRunner(example) as direct:
        expected = direct.run(feeds)
    monkeypatch.setenv("ONNXREFINE_WATCH", "always")
    with ModelRunner(example, scoped=True) as watched:
        process = _forked(watched)
        # nothing of this process's stays open through the child but its own two pipes
        held = {int(fd): os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.pid}/fd")}
        assert all(target == os.devnull for fd, target in held.items() if fd not in (3, 4)), held
        assert held[3].startswith("pipe:") and held[4].startswith("pipe:")
        got = watched.run(feeds)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    assert process.poll() is not None  # stopped and reaped by close()
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)


def test_a_scoped_child_that_dies_is_a_resource_problem_and_the_next_one_runs(monkeypatch):
    import signal

    monkeypatch.setenv("ONNXREFINE_WATCH", "always")
    _, small, _ = loop_scan_case(10, 4)
    with ModelRunner(small, scoped=True) as runner:
        os.kill(_forked(runner).pid, signal.SIGKILL)
        with pytest.raises(resources.ResourceLimitError, match="died"):
            runner.run(FEEDS)
    with ModelRunner(small, scoped=True) as runner:
        assert np.all(runner.run(FEEDS)["y"] == 41.0)


def test_verification_sessions_of_small_weights_are_watched_by_forks(example, monkeypatch):
    """A watched session of verification makes a few runs and is closed: with small weights its
    child is a fork (no interpreter's imports to pay); with large ones a new interpreter (a fork
    would copy every page this process writes while it lives)."""
    from onnxrefine.verify import runs, verify_models
    from onnxrefine.verify.ort import child

    monkeypatch.setenv("ONNXREFINE_WATCH", "always")
    kinds = []

    class Recording(ModelRunner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            kinds.append(type(self.watched.worker.process) if self.watched is not None else None)

    monkeypatch.setattr(runs, "ModelRunner", Recording)
    report = verify_models(example, example, trials=1, stress=False)
    assert report.verdict == "exact" and kinds and all(kind is child._Forked for kind in kinds), kinds
    kinds.clear()
    monkeypatch.setattr(runs, "KEEP_OPEN_MAX_BYTES", 0)
    report = verify_models(example, example, trials=1, stress=False)
    assert report.verdict == "exact" and kinds and all(kind is not None and kind is not child._Forked
                                                       for kind in kinds), kinds
