"""Faults lose nothing: a full disk, a permission, a closed pipe, a signal, a name too long, a locale
that cannot encode the summary, an internal error. Each ends in one line and a documented exit code
(cli/main.py), never a traceback, never a half-written output, never a lost earlier output.

A full disk is simulated by a fault-injecting shim on `os.fsync` (every staged file is fsync-ed before
it is renamed): the named file's write fails with ENOSPC exactly as a full file system makes it fail.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from helpers import aborting_inference_model

from onnxrefine.cli.main import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERNAL, main

ROOT = Path(__file__).resolve().parent.parent


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def full_disk_for(monkeypatch):
    """full_disk_for(name): every later fsync of a temp file staged for the output `name` fails with
    ENOSPC (the temp file is `.<name>.<random>.tmp`)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell which file an fsync is for")
    real_fsync = os.fsync

    def arm(name: str) -> None:
        def fsync(fd):
            if os.path.basename(_fd_path(fd)).startswith(f".{name}."):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    return arm


def _run(*argv) -> int:
    return main([str(a) for a in argv])


def _folder_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_full_report_folder_keeps_the_existing_output(example, tmp_path, full_disk_for, capsys):
    """The report cannot be written: the new model must not replace the old one (it used to, and
    then was deleted, so the earlier output was lost)."""
    out = tmp_path / "out.onnx"
    assert _run("optimize", example, "-o", out, "--no-verify") == 0
    before = _digest(out)
    report = tmp_path / "report.json"
    report.write_text('{"old": true}')
    capsys.readouterr()
    full_disk_for("report.json")
    code = _run("optimize", example, "-o", out, "--no-verify", "--report", report)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "report.json" in err and "No space left on device" in err
    assert _digest(out) == before and report.read_text() == '{"old": true}'
    assert _folder_names(tmp_path) == sorted(["out.onnx", "report.json", example.name])


def test_full_output_folder_is_one_line_and_leaves_nothing(example, tmp_path, full_disk_for, capsys):
    out = tmp_path / "out.onnx"
    full_disk_for("out.onnx")
    code = _run("optimize", example, "-o", out, "--no-verify")
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1
    assert "out.onnx" in err and "No space left on device" in err
    assert _folder_names(tmp_path) == [example.name]


def test_full_disk_for_a_verify_report(example, tmp_path, full_disk_for, capsys):
    """verify's reports: the JSON cannot be written, so neither report replaces anything, and the
    exit code says 'environment' (2), not 'the models differ' (1)."""
    html = tmp_path / "r.html"
    html.write_text("old page")
    full_disk_for("r.json")
    code = _run("verify", example, example, "--json", tmp_path / "r.json", "--html", html, "--trials", "1")
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "No space left on device" in err
    assert html.read_text() == "old page" and not (tmp_path / "r.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old"))]


def test_an_output_that_cannot_be_replaced_loses_nothing(example, tmp_path, monkeypatch, capsys):
    """An immutable existing report (chattr +i: neither linked nor replaced): one line, and the model
    already written in the same run is not left in place of the old one."""
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    out.write_bytes(b"previous model")
    report.write_text("previous report")
    real_link = os.link

    def link(src, dst, *args, **kwargs):
        if os.path.basename(src) == "report.json":
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), src)
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    code = _run("optimize", example, "-o", out, "--no-verify", "--report", report)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and "report.json" in err
    assert out.read_bytes() == b"previous model" and report.read_text() == "previous report"
    assert _folder_names(tmp_path) == sorted(["out.onnx", "report.json", example.name])


def test_a_failed_rename_restores_the_outputs_already_replaced(tmp_path, monkeypatch):
    """The second of two renames fails: the first target gets its old content back."""
    from onnxrefine import atomic

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    real_replace = os.replace

    def replace(src, dst):
        if os.path.basename(dst) == "b.txt":
            raise OSError(errno.EIO, os.strerror(errno.EIO), dst)
        return real_replace(src, dst)

    with pytest.raises(OSError):
        with atomic.staging():
            atomic.write_atomic(a, "new a")
            atomic.write_atomic(b, "new b")
            monkeypatch.setattr(os, "replace", replace)
    assert a.read_text() == "old a" and b.read_text() == "old b"
    assert _folder_names(tmp_path) == ["a.txt", "b.txt"]


def test_nothing_is_visible_before_the_commit(tmp_path):
    from onnxrefine import atomic

    with atomic.staging() as stage:
        atomic.write_atomic(tmp_path / "r.json", "{}")
        assert not (tmp_path / "r.json").exists()
        stage.commit()
        assert (tmp_path / "r.json").read_text() == "{}"


def test_long_output_names(example, tmp_path, capsys):
    """A 250-byte name is valid and works (the temp name is short whatever the target's); a
    256-byte one is refused in one line before any work."""
    ok = tmp_path / ("m" * 245 + ".onnx")
    assert _run("optimize", example, "-o", ok, "--no-verify") == 0
    assert ok.exists()
    too_long = tmp_path / ("m" * 251 + ".onnx")
    capsys.readouterr()
    code = _run("optimize", example, "-o", too_long, "--no-verify")
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and "file name too long" in err


def _subprocess(args, tmp_path, **env_changes):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.update(env_changes)
    return [sys.executable, "-m", "onnxrefine", *map(str, args)], env


def test_closed_pipe_keeps_the_output_and_exits_quietly(example, tmp_path):
    """`onnxrefine optimize ... | head -1`: the output is complete and stays, stderr says nothing,
    the exit code is 141 (the reader went away)."""
    out = tmp_path / "out.onnx"
    command, env = _subprocess(["optimize", example, "-o", out, "--no-verify", "--explain"], tmp_path,
                               ONNXREFINE_PROGRESS="off", COLUMNS="80")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()  # as `head -1` does once it has its line
    code = process.wait(timeout=120)
    err = process.stderr.read().decode()
    assert code in (0, EXIT_BROKEN_PIPE), err
    assert "Traceback" not in err and err.strip() == "", err
    onnx.checker.check_model(onnx.load(out))


def test_version_into_a_closed_pipe_exits_quietly(tmp_path):
    """`onnxrefine --version | head -0`: the reader is gone before the line is written; it was a
    traceback and exit 3."""
    command, env = _subprocess(["--version"], tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `head -0` does before reading
    try:
        done = subprocess.run(command, env=env, stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    err = done.stderr.decode()
    assert done.returncode == EXIT_BROKEN_PIPE and err.strip() == "", (done.returncode, err)


def test_posix_locale_cannot_break_the_summary(example, tmp_path):
    """Under LC_ALL=POSIX without UTF-8 mode stdout is ASCII: the table's box characters and
    ellipses are escaped, not a UnicodeEncodeError."""
    out = tmp_path / "out.onnx"
    command, env = _subprocess(["optimize", example, "-o", out, "--no-verify", "--explain"], tmp_path,
                               LC_ALL="POSIX", LANG="POSIX", PYTHONUTF8="0", PYTHONIOENCODING="",
                               ONNXREFINE_PROGRESS="off", COLUMNS="40")
    result = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert b"Traceback" not in result.stderr and out.exists()


def test_internal_error_is_one_line_exit_3_and_debug_shows_it(example, tmp_path, monkeypatch, capsys):
    import onnxrefine.cli.optimize_cmd as optimize_cmd

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(optimize_cmd, "optimize_ir", broken)
    code = _run("optimize", example, "-o", tmp_path / "o.onnx", "--no-verify")
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL and err.count("\n") == 1
    assert "internal error: RuntimeError: a bug" in err and "--debug" in err
    with pytest.raises(RuntimeError, match="a bug"):
        _run("--debug", "optimize", example, "-o", tmp_path / "o.onnx", "--no-verify")
    assert not (tmp_path / "o.onnx").exists()


def test_verify_internal_error_is_not_a_mismatch(example, monkeypatch, capsys):
    import onnxrefine.verify as verify

    def broken(*args, **kwargs):
        raise ValueError("a bug in verification")

    monkeypatch.setattr(verify, "verify_models", broken)
    assert _run("verify", example, example) == EXIT_INTERNAL
    assert "internal error" in capsys.readouterr().err


def test_memory_error_names_the_phase(example, tmp_path, monkeypatch, capsys):
    import onnxrefine.cli.optimize_cmd as optimize_cmd

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(optimize_cmd, "optimize_ir", exhausted)
    code = _run("optimize", example, "-o", tmp_path / "o.onnx", "--no-verify")
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1
    assert "not enough memory during optimize tiny.onnx" in err


def test_onnxruntime_that_cannot_be_mapped_is_one_line(failing_onnxruntime_import):
    """Under a tight address-space limit the dynamic loader fails to map onnxruntime's library:
    a one-line 'not enough memory to load onnxruntime', not an ImportError traceback."""
    from onnxrefine import runtime
    from onnxrefine.errors import BadInputError

    failing_onnxruntime_import(ImportError("libonnxruntime.so: failed to map segment from shared object"))
    with pytest.raises(BadInputError, match="not enough memory to load onnxruntime"):
        runtime.require_onnxruntime()


def test_graph_input_of_undefined_type_is_bad_input(tmp_path, capsys):
    """A flipped byte can zero an input's element type; verification then failed with KeyError: 0
    deep inside generating inputs. It is a one-line refusal when the model is loaded."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.UNDEFINED
    path = tmp_path / "undefined.onnx"
    path.write_bytes(model.SerializeToString())
    for argv in (["optimize", path, "-o", tmp_path / "o.onnx"], ["verify", path, path]):
        assert _run(*argv) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "element type is UNDEFINED" in err, err


def test_training_info_is_not_dropped_silently(example, tmp_path, capsys):
    """onnx-ir holds no training_info: the output is an inference model, and the summary and the
    report say the training part is not kept. Metadata and doc strings are kept."""
    import json

    model = onnx.load(example)
    info = model.training_info.add()
    info.algorithm.name = "train"
    model.metadata_props.add(key="author", value="someone")
    model.doc_string = "what it is"
    path = tmp_path / "with_training.onnx"
    onnx.save(model, path)
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    assert _run("optimize", path, "-o", out, "--no-verify", "--report", report) == 0
    printed = capsys.readouterr().out
    assert "not kept: training_info (1 entry)" in printed
    assert json.loads(report.read_text())["dropped"][0].startswith("training_info (1 entry)")
    saved = onnx.load(out)
    assert {p.key: p.value for p in saved.metadata_props}["author"] == "someone"
    assert saved.doc_string == "what it is"


def _relu_model(output: str, path: Path) -> Path:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], [output])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_verify_outputs_named_differently_are_an_interface_mismatch(tmp_path, capsys):
    """y in one model and z in the other used to be matched by position and called exact; a
    consumer reading `y` finds nothing. By name it is a mismatch; --match-outputs position pairs
    them on purpose."""
    a, b = _relu_model("y", tmp_path / "a.onnx"), _relu_model("z", tmp_path / "b.onnx")
    assert _run("verify", a, b, "--trials", "1") == 1
    out = capsys.readouterr().out
    assert "verdict: mismatch" in out and "interface mismatch" in out
    assert _run("verify", a, b, "--trials", "1", "--match-outputs", "position") == 0
    assert "verdict: exact" in capsys.readouterr().out


def _pool_then_strided_slice(path: Path) -> Path:
    """A model whose pool has a 3x3 window: with H or W at 1 its output would have a negative size,
    and onnx's C++ shape inference then asserts in a strided Slice (SIGABRT, no handler runs)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3]),
             helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Slice", ["t", "st", "en", "ax", "sp"], ["y"])]
    inits = [helper.make_tensor(name, TensorProto.INT64, [1], [value])
             for name, value in (("st", 0), ("en", 2), ("ax", 1), ("sp", 2))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_abort_in_shape_inference_is_contained(tmp_path):
    """Estimates pin symbolic dims (to 1 where --dims does not say): onnx's inference aborted on the
    impossible shapes and took optimize and verify with it (exit 134). It runs contained now: the
    estimate is only less certain, and both commands finish."""
    model = _pool_then_strided_slice(tmp_path / "pool.onnx")
    for args in (["verify", model, model, "--trials", "1"], ["optimize", model, "-o", tmp_path / "o.onnx"]):
        command, env = _subprocess(args, tmp_path, ONNXREFINE_PROGRESS="off")
        result = subprocess.run(command, env=env, capture_output=True, timeout=300)
        assert result.returncode == 0, result.stderr.decode()[-500:]
        assert b"Assertion" not in result.stderr


def test_contained_inference_reports_the_crash_and_passes_errors_through():
    from onnx import TensorProto, helper

    from onnxrefine.ir import contained

    with pytest.raises(contained.NativeCrash, match="SIGABRT"):
        contained.infer_shapes(aborting_inference_model(), strict_mode=False)
    mixed = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "i"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.shape_inference.InferenceError):  # the same exception the onnx call raises
        contained.infer_shapes(mixed, check_type=True, strict_mode=True)


def test_start_up_without_memory_for_native_libraries_is_one_line(tmp_path):
    """Under an address-space limit the loader cannot map ml_dtypes' or numpy's extension while the
    package starts: the command says so in one line and exits 2 (an ImportError traceback before).
    Simulated: the start-up import fails as it does there, under a (generous) finite limit."""
    script = tmp_path / "start.py"
    script.write_text(
        "import resource, sys, types\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (64 << 30, hard))\n"
        "fake = types.ModuleType('onnxrefine._deferred')\n"
        "def import_onnx_ir():\n"
        "    raise ImportError('_multiarray_umath.so: failed to map segment from shared object')\n"
        "fake.import_onnx_ir = import_onnx_ir\n"
        "sys.modules['onnxrefine._deferred'] = fake\n"
        "from onnxrefine.__main__ import run\n"
        "sys.exit(run())\n")
    command, env = _subprocess([], tmp_path)
    result = subprocess.run([sys.executable, str(script), "optimize", "m.onnx"], env=env, capture_output=True,
                            timeout=120)
    err = result.stderr.decode()
    assert result.returncode == EXIT_BAD_INPUT, err
    assert err.count("\n") == 1 and "not enough memory to load" in err and "Traceback" not in err
