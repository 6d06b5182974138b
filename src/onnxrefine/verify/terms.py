"""The magnitude of terms, made only for the input sets whose judgement reads it.

The float64 reference's per-element magnitude of terms (reference/bound.py's magnitude pass) costs
about a third of its bounds, and the verdict reads it only at a differing element with a finite
reference and no bound in force (judge/rules.py: within-bound, ill-conditioned), as it reads a
float16 candidate's own bounds only there (float16-skipped-rounding). Every rule that reads either
only excuses, and no other rule reads them, so the session (session.py check_outputs) evaluates the
reference without them, judges, and evaluates again with them only the sets whose judgement read
them (SetEvidence.magnitude_read): the verdict is that of a single evaluation with them. The
controls (add_controls) are decided after that judgement, on the same evidence as in a single pass.

Where the graph holds an op no bound rule covers (a Resize), no bound is in force behind it, the
judgement reads the magnitude almost surely, and the deferral would only add an evaluation: such a
model's reference is made with it at once (`reads_magnitudes`; a cost choice, the verdict is the
same either way).
"""

from __future__ import annotations

from onnxrefine.ir.opsets import STANDARD_DOMAINS

_NO_VALUE_OPS = frozenset({"Constant"})  # its value is exact: no bound needed behind it


def sets_reading(run) -> dict[int, set]:
    """Input set index -> the outputs its float64 evaluation gave, for each set whose judgement read
    the magnitude of terms and that was not yet evaluated with it (recorded as evaluated now)."""
    again: dict[int, set] = {}
    for track in run.tracks:
        for index, set_evidence in enumerate(track.set_evidence):
            read = any(item.magnitude_read for item in set_evidence.values())
            if read and index in run.referenced and index not in run.with_magnitudes:
                again.setdefault(index, set()).update(run.referenced[index])
    run.with_magnitudes.update(again)
    return again


def reads_magnitudes(model) -> bool:
    """Whether the main graph of `model` (a ModelProto) has an op without a bound rule
    (reference/bound.py: a standard op outside its rules, a contrib or custom op; a model-local
    function's body is tracked as the graph is): the output check then reads the magnitude of terms
    behind it."""
    from onnxrefine.verify.reference import derived_op_types

    derived = derived_op_types()
    local = {(function.domain, function.name) for function in model.functions}
    for node in model.graph.node:
        standard = (node.domain or "") in STANDARD_DOMAINS
        if standard and node.op_type not in derived and node.op_type not in _NO_VALUE_OPS:
            return True
        if not standard and (node.domain, node.op_type) not in local:
            return True
    return False
