"""The layer order README.md states ("Layout"), checked on every import statement in src/,
function-level ones included: a lower layer never imports a higher one, and verify/ imports
nothing of the passes (the verifier judges a rewrite without sharing the code that made it)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "onnxrefine"

# layer -> the layers it must not import (directly, at any depth of its code)
FORBIDDEN = {
    "ir": {"rewrite", "passes", "verify", "verify_plan", "verified", "api", "triage", "fuzz", "batch", "cli"},
    "rewrite": {"passes", "verify", "verify_plan", "verified", "api", "triage", "fuzz", "batch", "cli"},
    "verify": {"passes", "rewrite", "verified", "api", "triage", "fuzz", "batch", "cli"},
    "passes": {"verified", "api", "triage", "fuzz", "batch", "cli"},
    "api": {"triage", "fuzz", "batch", "cli"},
    "verified": {"triage", "fuzz", "batch", "cli"},
    "triage": {"fuzz", "batch", "cli"},
    "fuzz": {"batch", "cli"},
    "errors": {"*"},
    "atomic": {"*"},
    "runtime": {"*"},
}
LEAF_IMPORTS = {"errors": set(), "atomic": {"errors"}, "runtime": {"errors"}}
# The one crossing: verify/certificate/certifier.py implements the rule engine's certificate hook, so it
# reads the hook's request/outcome types (and the EXACT class name) from rewrite/rule.py.
ALLOWED = {("verify/certificate/certifier.py", "onnxrefine.rewrite.rule"): {"EXACT", "CertificateOutcome", "CertificateRequest"},
           ("verify/certificate/model.py", "onnxrefine.rewrite.rule"): {"EXACT", "CertificateRequest"}}


def imports_of(source: str) -> list[tuple[str, set[str], int]]:
    """(module, names imported from it, line) for every onnxrefine import in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {alias.name for alias in node.names}
            if node.module == "onnxrefine":  # `from onnxrefine import resources`
                found += [(f"onnxrefine.{name}", set(), node.lineno) for name in names]
            elif node.module.startswith("onnxrefine."):
                found.append((node.module, names, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append(("(relative)", set(), node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, set(), node.lineno) for alias in node.names if alias.name.startswith("onnxrefine")]
    return found


def _layer(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else path.stem


def _violations() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        layer, rel = _layer(path), path.relative_to(SRC).as_posix()
        forbidden = FORBIDDEN.get(layer, set())
        for module, names, line in imports_of(path.read_text()):
            if module == "(relative)":
                bad.append(f"{rel}:{line}: relative import (the layer check reads absolute ones)")
                continue
            target = module.split(".")[1] if "." in module else module
            if target == layer:
                continue
            if "*" in forbidden and target not in LEAF_IMPORTS.get(layer, set()):
                bad.append(f"{rel}:{line}: the leaf module {layer} imports {module}")
            elif target in forbidden:
                allowed = ALLOWED.get((rel, module))
                if allowed is None or not names <= allowed:
                    bad.append(f"{rel}:{line}: {layer} imports {module} {sorted(names)}")
    return bad


def test_layers_import_only_downwards():
    assert not _violations(), "\n".join(_violations())


@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n    from onnxrefine.passes import registry\n", ["onnxrefine.passes"]),
    ("import onnxrefine.cli.main\n", ["onnxrefine.cli.main"]),
    ("from onnxrefine import verified\n", ["onnxrefine.verified"]),
    ("from . import x\n", ["(relative)"]),
    ("import os\nfrom onnx import helper\n", []),
])
def test_the_scan_sees_every_kind_of_import(source, expected):
    """The check can fail: imports inside functions, plain `import`, `from onnxrefine import x`."""
    assert [module for module, _, _ in imports_of(source)] == expected


def test_a_forbidden_import_is_reported(tmp_path, monkeypatch):
    fake = tmp_path / "onnxrefine"
    (fake / "verify").mkdir(parents=True)
    (fake / "verify" / "bad.py").write_text("def f():\n    from onnxrefine.passes.registry import all_passes\n")
    (fake / "verify" / "certificate").mkdir()
    (fake / "verify" / "certificate" / "certifier.py").write_text("from onnxrefine.rewrite.rule import EXACT, Rule\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", fake)
    assert _violations() == [
        "verify/bad.py:2: verify imports onnxrefine.passes.registry ['all_passes']",
        "verify/certificate/certifier.py:1: verify imports onnxrefine.rewrite.rule ['EXACT', 'Rule']",
    ]
