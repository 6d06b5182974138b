"""Helpers for the guard tests (tests/test_guards_*.py): optimize, assert which guard refused.

tests/test_guard_coverage.py finds the guard ids these tests assert by reading the literal id
passed to `expect_guard` / `expect_refused`, so an id must be written out at the call.
"""

from __future__ import annotations

import numpy as np
import onnx
from helpers import run
from passutil import assert_bit_identical, complete_output_types

import onnxrefine
from onnxrefine.errors import RewriteRefused


def refusals(report) -> list[tuple[str, str, str]]:
    return [(r.rule, r.guard, r.reason) for r in report.log.refused.values()]


def expect_guard(model: onnx.ModelProto, passes, guard: str, feeds: dict[str, np.ndarray] | None = None, *,
                 rule: str | None = None, **options):
    """Optimize `model` with `passes`; assert that guard `guard` refused a rewrite (of `rule`,
    when given) and, with `feeds`, that onnxruntime computes bit-identical outputs before and
    after. Returns (optimized model, report)."""
    if isinstance(passes, str):
        passes = [passes]
    complete_output_types(model)
    optimized, report = onnxrefine.optimize_with_report(model, list(passes), **options)
    assert guard in report.log.refusal_guards(rule), f"{guard} did not refuse; refusals: {refusals(report)}"
    if feeds is not None:
        assert_bit_identical(run(model, feeds), run(optimized, feeds))
    return optimized, report


def expect_refused(guard: str, call, *args, **kwargs) -> RewriteRefused:
    """Call `call(*args, **kwargs)` (a guard's helper, for guards no small model reaches through a
    pass alone) and assert it raises RewriteRefused with id `guard`."""
    try:
        call(*args, **kwargs)
    except RewriteRefused as refusal:
        assert refusal.guard == guard, f"refused by {refusal.guard} ({refusal}), not {guard}"
        return refusal
    raise AssertionError(f"{guard} did not refuse")
