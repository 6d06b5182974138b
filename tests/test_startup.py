"""The CLI's import graph: heavy modules are imported only where they are used (start-up time).

Structural, not timed: each check runs a fresh interpreter and looks at sys.modules. The timing
itself is bench/startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onnxrefine.cli.main import SUBCOMMANDS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"
# sympy's stand-in (onnxrefine._deferred) is never in sys.modules once onnx_ir is imported, and the
# real sympy always imports sympy.core: either name means sympy was loaded.
PROBES = {"sympy": "sympy.core", "onnxruntime": "onnxruntime", "rich": "rich", "api": "onnxrefine.api"}


def loaded_after(code: str, probes: dict = PROBES) -> dict:
    """Run `code` in a fresh interpreter; which of `probes` it imported, and its stdout."""
    script = code + (
        "\nimport json, sys\n"
        f"print('@@' + json.dumps({{k: v in sys.modules for k, v in {probes!r}.items()}}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), ONNXREFINE_PROGRESS="off")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    marker = [line for line in done.stdout.splitlines() if line.startswith("@@")][-1]
    return {**json.loads(marker[2:]), "stdout": done.stdout}


def test_cli_module_imports_no_heavy_module():
    loaded = loaded_after("import onnxrefine.cli.main")
    assert not loaded["sympy"] and not loaded["onnxruntime"] and not loaded["rich"]


def test_parser_with_every_subcommand_imports_no_heavy_module():
    loaded = loaded_after("from onnxrefine.cli.main import build_parser\nbuild_parser().format_help()")
    assert not loaded["sympy"] and not loaded["onnxruntime"] and not loaded["rich"]


def test_version_does_not_import_the_optimizer():
    loaded = loaded_after("from onnxrefine.cli.main import main\nassert main(['--version']) == 0")
    assert "onnxrefine 0.1.0" in loaded["stdout"]
    assert not loaded["api"] and not loaded["sympy"] and not loaded["onnxruntime"]


def test_optimize_without_verification_does_not_import_sympy(tmp_path):
    code = (
        "from onnxrefine.cli.main import main\n"
        f"argv = ['optimize', {str(EXAMPLE)!r}, '-o', {str(tmp_path / 'out.onnx')!r}, '--no-verify', '--no-certify']\n"
        "assert main(argv) == 0\n"
    )
    loaded = loaded_after(code)
    assert (tmp_path / "out.onnx").is_file()
    # onnxruntime is imported once the model is written: a session checks that it loads.
    assert not loaded["sympy"]


# What `optimize --no-verify` never runs on a model with nothing to fold and only exact rewrites:
# the verifier, its float64 reference, its verdict rules, its report and its localization.
VERIFIER = {name: f"onnxrefine.verify.{name}" for name in
            ("session", "inputs", "reference", "judge.verdict", "judge.spec_identity", "report", "localize")}
# Heavy modules of other packages such a run has no use for, with stdout a pipe (as here): rich
# draws for a terminal only; sympy is deferred (onnxrefine._deferred); onnx's reference evaluator,
# process pools and the fuzzer's Ray are other commands' tools.
HEAVY = {"sympy": "sympy.core", "rich": "rich", "onnx.reference": "onnx.reference",
         "multiprocessing": "multiprocessing", "ray": "ray", "torch": "torch"}


def test_optimize_without_verification_loads_no_verifier(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
                               helper.make_node("Sigmoid", ["i"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    code = (
        "from onnxrefine.cli.main import main\n"
        f"assert main(['optimize', {str(tmp_path / 'm.onnx')!r}, '-o', {str(tmp_path / 'o.onnx')!r}, '--no-verify']) == 0\n"
    )
    others = {name: module for name, module in SUBCOMMANDS.items() if name != "optimize"}
    loaded = loaded_after(code, {**VERIFIER, **others, **HEAVY, "certificates": "onnxrefine.verify.certificate"})
    assert "1 proved" in loaded["stdout"] and "┃ rule" in loaded["stdout"]  # the Identity went, on a proof
    assert loaded.pop("certificates")
    assert not [name for name in [*VERIFIER, *others, *HEAVY] if loaded[name]]


def test_a_terminal_still_gets_rich(tmp_path):
    """The other side of printing without rich in a pipe: on a terminal the summary is rich's."""
    from helpers import on_a_terminal

    script = ("import sys\nfrom onnxrefine.cli.main import main\n"
              f"assert main(['optimize', {str(EXAMPLE)!r}, '-o', {str(tmp_path / 'o.onnx')!r}, '--no-verify']) == 0\n"
              "print('@@', 'rich.table' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), ONNXREFINE_PROGRESS="off", TERM="xterm")
    exit_code, text = on_a_terminal([sys.executable, "-c", script], env)
    assert exit_code == 0 and "@@ True" in text


def test_api_import_does_not_load_sympy():
    loaded = loaded_after("import onnxrefine\nfrom onnxrefine import optimize, VerifySettings")
    assert not loaded["sympy"] and not loaded["onnxruntime"]


def test_symbolic_dim_arithmetic_still_works_after_deferral():
    pytest.importorskip("sympy", reason="this onnx-ir does not use sympy: nothing is deferred")
    # onnx-ir keeps sympy's stand-in; arithmetic on a symbolic dim imports the real sympy.
    loaded = loaded_after(
        "import onnxrefine, sys\n"
        "import onnx_ir as ir\n"
        "assert 'sympy' not in sys.modules\n"
        "d = ir.SymbolicDim('N') * 2 + 1\n"
        "assert str(d) == '2*N + 1', str(d)\n"
        "import sympy\n"
        "assert type(sympy).__name__ == 'module' and sympy.Symbol('x').is_Symbol\n"
    )
    assert loaded["sympy"]


def test_sympy_imported_first_is_left_alone():
    pytest.importorskip("sympy", reason="this onnx-ir does not use sympy: nothing is deferred")
    loaded = loaded_after(
        "import sympy, onnxrefine, sys\n"
        "import onnx_ir as ir\n"
        "assert sys.modules['sympy'] is sympy\n"
        "assert str(ir.SymbolicDim('N') + 1) == 'N + 1'\n"
    )
    assert loaded["sympy"]


def test_only_the_commands_own_process_freezes_its_start_up(tmp_path):
    """`python -m onnxrefine` freezes what start-up made (no full collection traverses it again);
    main() called in a caller's process (these tests) leaves the caller's objects collectable."""
    out = str(tmp_path / "out.onnx")
    code = (
        "import gc\nfrom onnxrefine.cli.main import main\n"
        f"assert main(['optimize', {str(EXAMPLE)!r}, '-o', {out!r}, '--no-verify']) == 0\n"
        "assert gc.get_freeze_count() == 0\n"
        "gc.disable()\n"  # as __main__.run leaves it while start-up imports
        f"assert main(['optimize', {str(EXAMPLE)!r}, '-o', {out!r}, '--no-verify'], freeze_startup=True) == 0\n"
        "assert gc.get_freeze_count() > 10000, gc.get_freeze_count()\n"
        "assert gc.isenabled()\n"  # the run itself collects
    )
    loaded_after(code)


def test_importing_the_package_leaves_garbage_collection_as_it_found_it():
    """Collection is held off while the package imports (its objects are no garbage), then put back
    as the caller had it, on or off."""
    loaded_after("import gc, onnxrefine\nassert gc.isenabled()\n")
    loaded_after("import gc\ngc.disable()\nimport onnxrefine\nassert not gc.isenabled()\n")


_SIGNAL_DURING_IMPORTS = """
import builtins, os, signal, sys
real_import = builtins.__import__

def importing(name, *args, **kwargs):
    if name == "onnxrefine.cli.main":
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return real_import(name, *args, **kwargs)

builtins.__import__ = importing
from onnxrefine.__main__ import run
sys.exit(run())
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_start_up_imports_is_one_line_and_128_plus_its_number(name):
    import signal

    done = subprocess.run([sys.executable, "-c", _SIGNAL_DURING_IMPORTS, name], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 128 + getattr(signal, name), done.stderr
    # held in the worker until the command's handlers take it: its own word for the signal
    said = {"SIGINT": "interrupted", "SIGTERM": "terminated"}[name]
    assert done.stderr.strip() == f"onnxrefine: {said}", done.stderr



_BLAS_PROBE = (
    "import json, os\n"
    "import {module}\n"
    "getattr({module}, 'load_native', lambda: None)()  # the command's worker loads them so\n"
    "import numpy  # (an onnx-ir without the layout sympy's deferral reads imports none at first)\n"
    "from onnxrefine.portable import _openblas_threads\n"
    "env = os.environ.pop('OPENBLAS_NUM_THREADS', None)  # _openblas_threads asks only where it is unset\n"
    "threads = _openblas_threads()\n"
    "print('@@' + json.dumps({{'env': env, 'threads': None if threads is None else threads[0]()}}))\n"
)


def _blas_after_import(tmp_path, script_name: str, module: str = "onnxrefine", env: dict | None = None) -> dict:
    """OpenBLAS's thread count after `import module` in a script called `script_name` (the console
    script is called onnxrefine), and OPENBLAS_NUM_THREADS as the import left it."""
    script = tmp_path / script_name
    script.write_text(_BLAS_PROBE.format(module=module), encoding="utf-8")
    run_env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    run_env.update(PYTHONPATH=str(ROOT / "src"), **(env or {}))
    done = subprocess.run([sys.executable, str(script)], env=run_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("@@")][-1][2:])


def test_the_command_loads_numpy_with_one_blas_thread_and_gives_the_environment_back(tmp_path):
    found = _blas_after_import(tmp_path, "onnxrefine")
    assert found["env"] is None  # the processes the command starts see the user's environment
    if found["threads"] is None:
        pytest.skip("no OpenBLAS to ask")
    assert found["threads"] == 1


def test_a_library_import_leaves_numpy_s_threads_alone(tmp_path):
    plain = _blas_after_import(tmp_path, "plain.py", module="numpy")
    found = _blas_after_import(tmp_path, "user.py")
    assert found == plain


def test_the_users_blas_thread_count_is_kept_by_the_command(tmp_path):
    found = _blas_after_import(tmp_path, "onnxrefine", env={"OPENBLAS_NUM_THREADS": "2"})
    assert found["env"] == "2"
    if found["threads"] is not None:
        assert found["threads"] == 2


def test_the_commands_supervisor_forks_before_the_native_libraries_load(tmp_path):
    """The command's process imports the package without numpy, onnx or onnx-ir: its worker loads
    them after the fork (a fork of a process holding them costs the worker a page fault per page)."""
    script = tmp_path / "onnxrefine"
    script.write_text("import json, sys\nimport onnxrefine.__main__\n"
                      "print('@@' + json.dumps([m for m in ('numpy', 'onnx', 'onnx_ir') if m in sys.modules]))\n",
                      encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads([line for line in done.stdout.splitlines() if line.startswith("@@")][-1][2:]) == []
