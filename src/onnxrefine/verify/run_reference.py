"""The reference as onnxruntime computes where it departs from the spec (rule maxpool-lowest-run):
SetEvidence.run_reference, beside the spec's reference, for the values onnxruntime's float32 MaxPool
lowest may have reached.

Only main-graph MaxPools are evaluated so (a float32 MaxPool inside a function or a branch keeps the
spec's -inf), and only on input sets holding inf/NaN or extreme values: a window of only -inf made
from ordinary inputs (a Log of zeros) is not looked for. Both omissions can only leave a legitimate
difference unexplained, never excuse one.
"""

from __future__ import annotations

import numpy as np

from onnxrefine.verify import graphinfo, judge
from onnxrefine.verify.evidence import comparable


def attach_run_reference(reference, proto, feeds, items, base_dir=None) -> None:
    """SetEvidence.run_reference of the [(name, item)] of one set: the reference once more, as
    onnxruntime's float32 MaxPool computes (evaluate_float64's `as_onnxruntime`; no bounds: the rule
    judges by each element's own magnitude), for the values that may_depart, when the original has a
    MaxPool. A reference without that option (a caller's) adds nothing, nor does one that fails."""
    if not any(node.op_type == "MaxPool" for node in proto.graph.node):
        return
    items = [(name, item) for name, item in items if item is not None and may_depart(item)]
    if not items:
        return
    extra = {"base_dir": base_dir} if base_dir is not None else {}
    try:
        values = reference(proto, feeds, outputs=sorted({name for name, _ in items}), as_onnxruntime=True,
                           error_bounds=False, **extra)
    except Exception:  # noqa: BLE001 - the spec's reference stands: this one only adds an excuse
        return
    for name, item in items:
        value = values.get(name)
        if value is not None and np.shape(value) == item.reference.shape \
                and not np.all(judge.bit_identical(np.asarray(value, dtype=np.float64), item.reference)):
            item.run_reference = np.asarray(value, dtype=np.float64)


def may_depart(item) -> bool:
    """A float value with a reference on a set holding inf/NaN or extreme values, differing where a run
    or the reference is not finite (where onnxruntime's -FLT_MAX out of a MaxPool can have led)."""
    if item.reference is None or not (item.nonfinite_inputs or item.extreme) or not comparable(item) \
            or not graphinfo.is_float_dtype(item.original.dtype):
        return False
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(item.original.astype(np.float64)) & np.isfinite(item.candidate.astype(np.float64)) \
            & np.isfinite(item.reference)
    return bool(np.any(~judge.bit_identical(item.candidate, item.original) & ~finite))
