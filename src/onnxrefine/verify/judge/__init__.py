"""Judging a candidate's values against the original's: the verdict and its formula (verdict.py),
the named rules that excuse a difference (rules.py), the element-wise comparison (compare.py),
discrete-decision boundaries (decisions.py), and the two exemptions that ask onnxruntime itself
(runtime_artefacts.py, spec_identity.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.judge.compare import bit_identical, compare_arrays, merge, ulp_distance
from onnxrefine.verify.judge.decisions import (COMPARISON_OPS, DECISION_OPS, ROUNDING_OPS, DecisionEvidence,
                                               exact_decisions, exact_values)
from onnxrefine.verify.judge.runtime_artefacts import ArtefactCheck
from onnxrefine.verify.judge.spec_identity import excuse_float16_runtime
from onnxrefine.verify.judge.verdict import (EXACT, MISMATCH, ROUNDING, UNSTABLE, VERDICTS, RoundingBound, SetEvidence,
                                             Verdict, judge_output, lowest_precision_u, nonfinite_replaced, perturb,
                                             perturbation_runs, worst)

__all__ = ["EXACT", "MISMATCH", "ROUNDING", "UNSTABLE", "VERDICTS", "Verdict", "worst", "RoundingBound", "SetEvidence",
           "judge_output", "lowest_precision_u", "nonfinite_replaced", "perturb", "perturbation_runs", "bit_identical",
           "compare_arrays", "merge", "ulp_distance", "DECISION_OPS", "COMPARISON_OPS", "ROUNDING_OPS", "DecisionEvidence",
           "exact_decisions", "exact_values", "ArtefactCheck",
           "excuse_float16_runtime"]
