"""The seams of verification (issue 14, item 5): the reference's leaf module and kernel registry, the
injected reference of VerificationSession, and the Verdict / value-class enums."""

from __future__ import annotations

import ast
import pathlib

import pytest

VERIFY = pathlib.Path(__file__).resolve().parent.parent / "src" / "onnxrefine" / "verify"


# ------------------------------------------------------------------ the reference's import graph

def _imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_kernel_modules_and_the_leaf_never_import_the_evaluator():
    """The import circle of reference*.py is gone: kernels import the leaf, never reference.py."""
    modules = sorted(VERIFY.glob("reference_kernels_*.py")) + [VERIFY / "reference_base.py"]
    assert len(modules) >= 6
    for path in modules:
        assert "onnxrefine.verify.reference" not in _imports(path), path.name
    assert not {name for name in _imports(VERIFY / "reference_base.py") if name.startswith("onnxrefine.verify")}


def test_every_kernel_module_registers_into_the_one_table():
    from onnxrefine.verify import reference
    from onnxrefine.verify.reference_base import KERNELS

    assert reference._NATIVE is KERNELS
    for op_type in ("Add", "Conv", "Reshape", "Resize", "LRN", "GroupNormalization", "If", "Loop", "Scan",
                    "Constant"):
        assert op_type in KERNELS, op_type
    assert reference.native_op_types() == frozenset(KERNELS)


def test_a_second_kernel_for_one_op_is_refused():
    from onnxrefine.verify.reference_base import KERNELS, kernel

    with pytest.raises(RuntimeError, match="two float64 kernels registered for Relu"):
        kernel("Relu")(lambda call: [call.inputs[0]])
    assert KERNELS["Relu"].__name__ != "<lambda>"


def test_a_kernel_refuses_through_the_leaf_error_type():
    import numpy as np
    from onnx import helper

    from helpers import make_model, value_info
    from onnxrefine.verify.reference import UnsupportedOperatorError, evaluate_float64

    model = make_model([helper.make_node("Dropout", ["x", "r", "t"], ["y"])],
                       [value_info("x", shape=[2]), value_info("r", shape=[]),
                        value_info("t", 9, shape=[])], [value_info("y", shape=[2])])
    feeds = {"x": np.ones(2, np.float32), "r": np.array(0.5, np.float32), "t": np.array(True)}
    with pytest.raises(UnsupportedOperatorError, match="training mode"):
        evaluate_float64(model, feeds)
