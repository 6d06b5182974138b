"""Judging a candidate's values against the original's: the verdict and its formula (verdict.py),
the named rules that excuse a difference (rules.py), the element-wise comparison (compare.py),
discrete-decision boundaries (decisions.py), and the two exemptions that ask onnxruntime itself
(runtime_artefacts.py, spec_identity.py). The face below is what the rest of the package uses."""

from onnxrefine._deferred import lazy_face

# Imported on first use: the certificates need `bit_identical` alone, not the verdict's rules and
# the exemptions that load the float64 reference.
__getattr__ = lazy_face(globals(), {
    "onnxrefine.verify.judge.compare": ("bit_identical", "compare_arrays", "merge", "ulp_distance"),
    "onnxrefine.verify.judge.decisions": ("ARG_OPS", "COMPARISON_OPS", "DECISION_OPS", "ROUNDING_OPS", "DecisionEvidence",
                                          "exact_decisions", "exact_values"),
    "onnxrefine.verify.judge.runtime_artefacts": ("ArtefactCheck",),
    "onnxrefine.verify.judge.spec_identity": ("excuse_float16_runtime",),
    "onnxrefine.verify.judge.verdicts": ("EXACT", "MISMATCH", "ROUNDING", "UNSTABLE", "VERDICTS", "Verdict"),
    "onnxrefine.verify.judge.perturbation": ("nonfinite_replaced", "perturb"),
    "onnxrefine.verify.judge.verdict": ("RoundingBound", "SetEvidence", "judge_output", "lowest_precision_u", "moved_u",
                                        "perturbation_runs", "worst"),
})

__all__ = ["EXACT", "MISMATCH", "ROUNDING", "UNSTABLE", "VERDICTS", "Verdict", "worst", "RoundingBound", "SetEvidence",
           "judge_output", "lowest_precision_u", "moved_u", "nonfinite_replaced", "perturb", "perturbation_runs", "bit_identical",
           "compare_arrays", "merge", "ulp_distance", "ARG_OPS", "DECISION_OPS", "COMPARISON_OPS", "ROUNDING_OPS", "DecisionEvidence",
           "exact_decisions", "exact_values", "ArtefactCheck",
           "excuse_float16_runtime"]
