"""The seams of verification: the reference's leaf module and kernel registry, the
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
    """The import circle of reference*.py is gone: kernels import the leaf, never reference/evaluator.py."""
    modules = sorted((VERIFY / "reference" / "kernels").glob("[!_]*.py")) + [VERIFY / "reference" / "base.py"]
    assert len(modules) >= 6
    for path in modules:
        assert "onnxrefine.verify.reference.evaluator" not in _imports(path), path.name
    assert not {name for name in _imports(VERIFY / "reference" / "base.py") if name.startswith("onnxrefine.verify")}


def test_every_kernel_module_registers_into_the_one_table():
    from onnxrefine.verify.reference import evaluator as reference
    from onnxrefine.verify.reference.base import KERNELS

    assert reference._NATIVE is KERNELS
    for op_type in ("Add", "Conv", "Reshape", "Resize", "LRN", "GroupNormalization", "If", "Loop", "Scan",
                    "Constant"):
        assert op_type in KERNELS, op_type
    assert reference.native_op_types() == frozenset(KERNELS)


def test_a_second_kernel_for_one_op_is_refused():
    from onnxrefine.verify.reference.base import KERNELS, kernel

    with pytest.raises(RuntimeError, match="two float64 kernels registered for Relu"):
        kernel("Relu")(lambda call: [call.inputs[0]])
    assert KERNELS["Relu"].__name__ != "<lambda>"


def test_a_kernel_refuses_through_the_leaf_error_type():
    import numpy as np
    from onnx import helper

    from helpers import make_model, value_info
    from onnxrefine.verify.reference.evaluator import UnsupportedOperatorError, evaluate_float64

    model = make_model([helper.make_node("Dropout", ["x", "r", "t"], ["y"])],
                       [value_info("x", shape=[2]), value_info("r", shape=[]),
                        value_info("t", 9, shape=[])], [value_info("y", shape=[2])])
    feeds = {"x": np.ones(2, np.float32), "r": np.array(0.5, np.float32), "t": np.array(True)}
    with pytest.raises(UnsupportedOperatorError, match="training mode"):
        evaluate_float64(model, feeds)


# ------------------------------------------------------------------ the injected reference

def _pair():
    from test_verify_report_golden import golden_pair

    return golden_pair()


def test_the_injected_reference_is_the_one_every_step_uses():
    """Output check, decision evidence and localisation all evaluate through the session's reference."""
    from onnxrefine.verify import VerificationSession, float64_reference

    calls = []

    def counting(model, feeds, **kwargs):
        calls.append(sorted(kwargs))
        return float64_reference(model, feeds, **kwargs)

    original, candidate = _pair()
    report = VerificationSession(trials=2, seed=3, reference=counting).verify(original, candidate)
    assert report.verdict == "rounding"
    assert report.outputs[0].reference == "float64"
    assert ["observe", "outputs"] in calls  # the output check (watched by localisation)
    assert report.localisation["reference"] == "float64"
    assert len(calls) == len(report.input_sets)  # every set differs: localisation shares those evaluations


def test_localisation_on_its_own_uses_the_injected_reference():
    import numpy as np

    from onnxrefine.verify import DECLINING_REFERENCE
    from onnxrefine.verify.localize.layerwise import localize

    original, candidate = _pair()
    sets = [("given0", {"x": np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)})]
    own = localize(original, candidate, sets, u=2.0 ** -24, perturb_count=0, seed=0)
    declined = localize(original, candidate, sets, u=2.0 ** -24, perturb_count=0, seed=0,
                        reference=DECLINING_REFERENCE)
    assert own["reference"] == "float64"
    assert declined["reference"] != "float64"
    assert any("declined by the caller" in note for note in declined["notes"])


def test_a_failing_reference_falls_back_and_says_why():
    from onnxrefine.verify import verify_models

    def broken(model, feeds, **kwargs):
        raise RuntimeError("planted reference bug")

    original, candidate = _pair()
    report = verify_models(original, candidate, trials=2, seed=3, reference=broken, localize=False)
    assert report.verdict == "rounding"
    assert report.outputs[0].reference == "no float64 reference"
    assert any("float64 evaluator failed: RuntimeError: planted reference bug" in note for note in report.notes)


def test_declining_reference_through_run_settings_and_explicit_argument_wins():
    from onnxrefine.verify import DECLINING_REFERENCE, float64_reference, run_settings, verify_models

    original, candidate = _pair()
    with run_settings(reference=DECLINING_REFERENCE):
        declined = verify_models(original, candidate, trials=1, seed=3, localize=False, deployment=None)
        chosen = verify_models(original, candidate, trials=1, seed=3, localize=False, deployment=None,
                               reference=float64_reference)
    assert any(note.startswith("no float64 reference (declined by the caller)") for note in declined.notes)
    assert declined.outputs[0].reference == "no float64 reference"
    assert chosen.outputs[0].reference == "float64"


# ------------------------------------------------------------------ the enums

def test_verdict_enum_reads_as_its_string_everywhere():
    import json

    from onnxrefine.verify import VERDICTS, Verdict
    from onnxrefine.verify.judge.verdict import worst

    assert [str(v) for v in VERDICTS] == ["exact", "rounding", "unstable", "mismatch"]
    assert Verdict.MISMATCH == "mismatch" and f"{Verdict.ROUNDING}" == "rounding"
    assert json.dumps({"verdict": Verdict.UNSTABLE}) == '{"verdict": "unstable"}'
    assert json.dumps([Verdict.EXACT], indent=1) == '[\n "exact"\n]'
    assert worst(["rounding", Verdict.UNSTABLE, "exact"]) == Verdict.UNSTABLE
    assert [v for v in Verdict if v.accepted] == [Verdict.EXACT, Verdict.ROUNDING]


def test_verified_and_bisect_read_the_enum():
    from onnxrefine import verified
    from onnxrefine.triage import bisect
    from onnxrefine.verify import Verdict

    assert verified.ACCEPTED == ("exact", "rounding")
    for path in (pathlib.Path(verified.__file__), pathlib.Path(bisect.__file__)):
        text = path.read_text()
        for literal in ('"exact"', '"rounding"', '"unstable"', '"mismatch"'):
            assert literal not in text, (path.name, literal)
    assert bisect.BisectResult(verdict=Verdict.MISMATCH).to_dict()["verdict"] == "mismatch"


def test_value_classes_are_the_rules_classes():
    import numpy as np

    from onnxrefine.verify.judge import rules
    from onnxrefine.verify.judge import verdict
    from onnxrefine.verify.judge.compare import ValueClass, value_class

    assert (rules.FIN, rules.PINF, rules.NINF, rules.NAN) == tuple(int(c) for c in ValueClass)
    assert verdict.FIN == ValueClass.FINITE
    assert value_class(np.array([1.0, np.inf, -np.inf, np.nan])).tolist() == [c.value for c in ValueClass]
