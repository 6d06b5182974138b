"""The fallbacks of onnxrefine.portable, each with its missing service simulated: what macOS and
Windows lack (os.pread/os.pwrite, /proc, resource, fcntl, the kernel copies) must not turn a
valid model into "not a readable ONNX model", or a memory limit into one that never fires."""

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine import portable, resources
from onnxrefine.cli.main import main as cli_main
from onnxrefine.ir import tensordata

HIDDEN = 64


def _external_model(path):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32), "W")
    one = numpy_helper.from_array(np.float32(1.0), "one")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Mul", ["m", "one"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, HIDDEN])], [weight, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)
    return path


def _run(path):
    x = np.random.default_rng(1).standard_normal((2, HIDDEN)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _without_positioned_io(monkeypatch):
    for name in ("pread", "pwrite", "copy_file_range", "sendfile"):
        monkeypatch.delattr(os, name, raising=False)


def test_pread_and_pwrite_without_the_os_calls(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(200)))
    fd = os.open(path, os.O_RDWR)
    try:
        expected = os.pread(fd, 10, 100)
        _without_positioned_io(monkeypatch)
        assert portable.pread(fd, 10, 100) == expected == bytes(range(100, 110))
        assert portable.pwrite(fd, b"\xff\xfe", 5) == 2
        assert portable.pread(fd, 3, 4) == bytes([4, 0xFF, 0xFE])
    finally:
        os.close(fd)


def test_external_data_model_optimizes_without_pread_pwrite_or_kernel_copies(tmp_path, monkeypatch):
    source = _external_model(tmp_path / "m.onnx")
    expected = _run(source)
    _without_positioned_io(monkeypatch)
    out = tmp_path / "out.onnx"
    assert cli_main(["optimize", str(source), "-o", str(out), "--no-verify"]) == 0
    assert (tmp_path / "out.onnx.data").is_file()  # the weights went through the pread/pwrite fallback
    assert np.array_equal(_run(out), expected)


def test_copy_range_falls_back_to_reads_and_writes(tmp_path, monkeypatch):
    source = tmp_path / "s.bin"
    source.write_bytes(os.urandom(3 * tensordata.CHUNK_BYTES + 17))
    _without_positioned_io(monkeypatch)
    fd = os.open(source, os.O_RDONLY)
    try:
        with open(tmp_path / "d.bin", "wb") as dest:
            dest.write(b"head")
            tensordata.copy_range(fd, dest, 5, 2 * tensordata.CHUNK_BYTES + 3)
    finally:
        os.close(fd)
    assert (tmp_path / "d.bin").read_bytes() == b"head" + source.read_bytes()[5:5 + 2 * tensordata.CHUNK_BYTES + 3]


def _no_proc(monkeypatch, psutil=None):
    monkeypatch.setattr(portable, "has_proc", lambda: False)
    monkeypatch.setattr(portable, "psutil_module", lambda: psutil)


@pytest.mark.skipif(portable.shutil.which("ps") is None, reason="no ps on this machine")
def test_memory_is_measured_by_ps_without_proc_or_psutil(monkeypatch):
    from_proc = portable.process_rss(os.getpid())
    _no_proc(monkeypatch)
    from_ps = portable.process_rss(os.getpid())
    assert from_proc and from_ps and 0.5 < from_ps / from_proc < 2
    assert portable.tree_rss(os.getpid()) >= from_ps


def test_memory_limit_is_refused_where_memory_cannot_be_measured(tmp_path, monkeypatch, capsys):
    _no_proc(monkeypatch)
    monkeypatch.setattr(portable.shutil, "which", lambda name: None)
    assert portable.process_rss(os.getpid()) is None and portable.tree_rss(os.getpid()) is None
    source = _external_model(tmp_path / "m.onnx")
    assert cli_main(["optimize", str(source), "--batch", "--memory-limit", "500", "--out-dir",
                     str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--memory-limit: resident memory cannot be measured" in err


def test_budget_without_resource_or_proc(monkeypatch):
    monkeypatch.setitem(sys.modules, "resource", None)  # `import resource` raises ImportError
    assert portable.rlimit_headroom() == []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: (_ for _ in ()).throw(FileNotFoundError(path))
                        if str(path).startswith(("/proc", "/sys")) else real_open(path, *a, **k))
    monkeypatch.setattr(portable, "psutil_module", lambda: None)
    assert resources.available_memory() is None
    assert resources.default_memory_budget() == resources.DEFAULT_BUDGET_CAP


def test_link_data_without_fcntl_copies_and_says_so(tmp_path, monkeypatch, capsys):
    source = _external_model(tmp_path / "m.onnx")
    monkeypatch.setitem(sys.modules, "fcntl", None)
    out = tmp_path / "out.onnx"
    assert cli_main(["optimize", str(source), "-o", str(out), "--no-verify", "--link-data"]) == 0
    assert "no reflink of m.onnx.data here (no ioctl on this platform)" in capsys.readouterr().out
    assert np.array_equal(_run(out), _run(source))


def test_reference_without_onnx_private_op_list(monkeypatch):
    from onnxrefine.verify.reference import evaluator as reference

    monkeypatch.setitem(sys.modules, "onnx.reference.ops._op_list", None)
    monkeypatch.setattr(reference, "_FALLBACK_CACHE", None)
    assert reference.fallback_op_types() == frozenset()  # those ops are refused, not guessed
    assert reference.native_op_types() <= reference.supported_op_types()


def test_kill_group_without_killpg_kills_the_child(monkeypatch):
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    monkeypatch.delattr(os, "killpg")
    portable.kill_group(child)
    assert child.wait(timeout=10) != 0


_BLAS_THREADS = """
import ctypes, json, os, sys
import numpy
from onnxrefine import portable

def threads():
    for path in sorted({line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()}):
        library = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                     "openblas_get_num_threads64_", "openblas_get_num_threads"):
            if hasattr(library, name):
                return getattr(library, name)()
    return None

before = threads()
changed = portable.single_threaded_blas()
print(json.dumps([before, changed, threads()]))
"""


@pytest.mark.skipif(not portable.has_proc(), reason="finds numpy's OpenBLAS through /proc/self/maps")
@pytest.mark.parametrize("user_setting", [None, "2"])
def test_the_command_line_runs_blas_on_one_thread_unless_the_user_says(user_setting):
    import json
    import subprocess

    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    env["OPENBLAS_NUM_THREADS" if user_setting else "UNUSED_SETTING"] = user_setting or ""
    done = subprocess.run([sys.executable, "-c", _BLAS_THREADS], env=env, capture_output=True, text=True,
                          timeout=120)
    before, changed, after = json.loads(done.stdout.strip().splitlines()[-1])
    if before is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    if user_setting:
        assert (changed, after) == (False, int(user_setting))
    else:
        assert changed and after == 1


def test_the_command_line_asks_for_one_blas_thread(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(portable, "single_threaded_blas", lambda: calls.append(True) or True)
    assert cli_main(["optimize", "--list-passes"]) == 0
    assert calls == [True]


def test_a_library_callers_optimization_without_verification_runs_its_passes_on_one_blas_thread(monkeypatch):
    """The certificates' float64 evaluations run inside the schedule; a library caller's process
    keeps OpenBLAS's default threads otherwise (the command line sets one for the whole process)."""
    import contextlib

    import onnxrefine
    from onnxrefine import api

    inside, seen = [], []

    @contextlib.contextmanager
    def one_thread():
        inside.append(True)
        try:
            yield
        finally:
            inside.pop()

    real_run_passes = api.run_passes
    monkeypatch.setattr(portable, "one_blas_thread", one_thread)
    monkeypatch.setattr(api, "run_passes", lambda *a, **k: seen.append(bool(inside)) or real_run_passes(*a, **k))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    onnxrefine.optimize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), verify=False)
    assert seen == [True]


_VERIFY_BLAS_THREADS = """
import ctypes, json
import numpy as np
from onnx import TensorProto, helper
from onnxrefine.verify import verify_models
from onnxrefine.verify.session import DecliningReference

def openblas(verb):
    for path in sorted({line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()}):
        library = ctypes.CDLL(path)
        for name in ("scipy_openblas_%s_num_threads64_", "scipy_openblas_%s_num_threads",
                     "openblas_%s_num_threads64_", "openblas_%s_num_threads"):
            if hasattr(library, name % verb):
                return getattr(library, name % verb)
    return None

def model(scale):
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [scale])])
    # IR version 10: every supported onnxruntime reads it (onnx writes a newer one by default)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)

class Recording(DecliningReference):
    seen = []

    def __call__(self, *args, **kwargs):
        self.seen.append(openblas("get")())
        return super().__call__(*args, **kwargs)

if openblas("get") is None:
    print(json.dumps(None))
else:
    openblas("set")(2)
    verify_models(model(3.0), model(3.001), inputs={"x": np.ones(4, np.float32)}, localize=False,
                  reference=Recording())
    print(json.dumps([Recording.seen, openblas("get")()]))
"""


@pytest.mark.skipif(not portable.has_proc(), reason="finds numpy's OpenBLAS through /proc/self/maps")
def test_verification_runs_its_float64_work_on_one_blas_thread_and_restores_the_callers(tmp_path):
    """A library caller gets what the command line sets for the whole process (one thread: many
    small float64 products), only while verification runs."""
    import json
    import subprocess

    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", _VERIFY_BLAS_THREADS], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    seen, after = result
    assert seen and set(seen) == {1}
    assert after == 2
