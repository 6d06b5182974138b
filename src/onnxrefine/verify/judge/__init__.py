"""Judging a candidate's values against the original's: the verdict and its formula (verdict.py),
the named rules that excuse a difference (rules.py), the element-wise comparison (compare.py),
discrete-decision boundaries (decisions.py), and the two exemptions that ask onnxruntime itself
(runtime_artefacts.py, spec_identity.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.judge.compare import bit_identical
from onnxrefine.verify.judge.runtime_artefacts import ArtefactCheck
from onnxrefine.verify.judge.spec_identity import excuse_float16_runtime
from onnxrefine.verify.judge.verdict import EXACT, MISMATCH, ROUNDING, UNSTABLE, VERDICTS, Verdict, worst

__all__ = ["EXACT", "MISMATCH", "ROUNDING", "UNSTABLE", "VERDICTS", "Verdict", "worst", "bit_identical",
           "ArtefactCheck", "excuse_float16_runtime"]
