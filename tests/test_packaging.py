"""What pyproject.toml declares holds: the Python floor, the extras' floors (a published
onnxruntime-gpu, the same version .ci/run's minimum-versions run installs), the license, the
version's single source, the typed marker."""

import subprocess
import sys
import tomllib
from pathlib import Path

import onnxrefine

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "minimums.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    return pins


def _floor(requirement: str) -> str:
    return requirement.split(">=")[1].split(",")[0]


def _release(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_python_floor_is_one_the_code_runs_on():
    # enum.StrEnum (3.11) is imported on every optimize path.
    assert PROJECT["requires-python"] == ">=3.11"
    versions = [c.rsplit(":: ", 1)[1] for c in PROJECT["classifiers"] if c.startswith("Programming Language :: Python :: 3.")]
    assert versions and all(tuple(map(int, v.split("."))) >= (3, 11) for v in versions)


def test_both_onnxruntime_extras_have_the_floor_the_minimum_run_tests():
    extras = PROJECT["optional-dependencies"]
    cpu, gpu = extras["cpu"][0], extras["gpu"][0]
    assert cpu.startswith("onnxruntime>=") and gpu.startswith("onnxruntime-gpu>=")
    # 1.31.1 is the newest onnxruntime-gpu published; a higher floor makes `.[gpu]` uninstallable.
    assert _floor(cpu) == _floor(gpu) == _pins()["onnxruntime"] == "1.31.1"


def test_every_dependency_floor_is_pinned_in_the_minimum_run():
    pins = _pins()
    for requirement in PROJECT["dependencies"]:
        name = requirement.split(">=")[0]
        assert name in pins and _release(pins[name]) == _release(_floor(requirement)), requirement


def test_private_apis_have_an_upper_bound():
    # onnx.reference.ops._op_list, onnx_ir._core.TensorBase, onnx_ir._symbolic_shapes
    bounded = {r.split(">=")[0]: r for r in PROJECT["dependencies"]}
    assert ",<" in bounded["onnx"] and ",<" in bounded["onnx-ir"]


def test_license_is_an_spdx_string_with_the_apache_text():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_package_is_marked_typed_and_ships_the_marker():
    assert (Path(onnxrefine.__file__).parent / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["onnxrefine"]


def test_version_has_one_source():
    assert "version" in PROJECT["dynamic"] and "version" not in PROJECT
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "onnxrefine.version.__version__"}
    printed = subprocess.run([sys.executable, "-m", "onnxrefine", "--version"], capture_output=True, text=True,
                             check=True).stdout
    assert printed.strip() == f"onnxrefine {onnxrefine.__version__}"
