"""Every guard has an id, and every id a test.

A guard is a `raise RewriteRefused("<id>", reason)` in src, or a refusal logged with a literal
`guard="<id>"`. The tests assert ids through tests/guardutil.py's `expect_guard` / `expect_refused`
(or a wrapper also named `expect_...`), whose literal id arguments this test reads. Ids that no test can reach are listed in UNREACHABLE,
each with the reason; nothing else may be left untested.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

from onnxrefine.errors import GUARD_ID

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "onnxrefine"
TESTS = ROOT / "tests"


# id -> why no test reaches it. Keep short: a guard here is defensive only.
UNREACHABLE: dict[str, str] = {
    "fold.not_tensor": "only outputs onnx's inference types as tensors are evaluated (fold.dtype_unknown "
                       "refuses the rest), and both evaluators return arrays for tensor outputs",
    "fold.shape_inference": "infer_shapes runs with strict_mode=False, which reports a node's errors by "
                            "leaving its outputs untyped (fold.dtype_unknown); it raises only on faults of its own",
    "fold.shape_mismatch": "cross-checks onnx's inferred static shape against the evaluated result; no operator "
                           "is known where onnxruntime or onnx's reference evaluator disagree with inference",
}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


@functools.cache
def guard_sites() -> dict[str, list[str]]:
    """guard id -> the places (file:line) that raise or log it; fails on a non-literal id."""
    sites: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            ids = []
            if _name(node.func) == "RewriteRefused":
                assert node.args, f"{where}: RewriteRefused without a guard id"
                ids.append(node.args[0])
            ids += [kw.value for kw in node.keywords if kw.arg == "guard"]
            for arg in ids:
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), \
                    f"{where}: the guard id must be a string literal"
                assert GUARD_ID.fullmatch(arg.value), f"{where}: {arg.value!r} is not a guard id"
                sites[arg.value].append(where)
    return dict(sites)


@functools.cache
def asserted_ids() -> frozenset[str]:
    found = set()
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and (_name(node.func) or "").startswith("expect_"):
                found.update(a.value for a in [*node.args, *(k.value for k in node.keywords)]
                             if isinstance(a, ast.Constant) and isinstance(a.value, str) and GUARD_ID.fullmatch(a.value))
    return frozenset(found)


def test_guard_ids_are_literal_and_one_per_site():
    sites = guard_sites()
    assert len(sites) > 100  # the scan found the guards (a broken scan would pass everything below)
    shared = {guard: places for guard, places in sites.items() if len(places) > 1}
    assert not shared, f"guard ids used at more than one site: {shared}"


def test_every_guard_id_is_asserted_by_a_test():
    untested = sorted(set(guard_sites()) - asserted_ids() - set(UNREACHABLE))
    assert not untested, f"guard ids no test asserts: {untested}"


def test_the_unreachable_list_names_only_untested_guards_in_the_code():
    sites, tested = guard_sites(), asserted_ids()
    assert not set(UNREACHABLE) - set(sites), "UNREACHABLE names ids that are not in the code"
    assert not set(UNREACHABLE) & tested, "UNREACHABLE names ids a test now asserts: remove them"


def test_a_refusal_reads_as_its_reason_and_keeps_its_id():
    import pickle

    import pytest

    from onnxrefine.errors import RewriteRefused
    from onnxrefine.rewrite.log import RewriteLog

    refusal = RewriteRefused("bn.spatial", "BatchNormalization with spatial=0 has per-element statistics")
    assert str(refusal) == "BatchNormalization with spatial=0 has per-element statistics"  # what --explain shows
    copy = pickle.loads(pickle.dumps(refusal))
    assert (copy.guard, str(copy)) == ("bn.spatial", str(refusal))
    with pytest.raises(ValueError, match="guard id"):
        RewriteRefused("a reason without an id", "")
    log = RewriteLog()
    log.refuse("conv_bn", "g", "bn (BatchNormalization)", str(refusal), refusal.guard)
    merged = RewriteLog()
    merged.extend(log)
    assert merged.to_dict()["refused"] == [{"rule": "conv_bn", "graph": "g", "node": "bn (BatchNormalization)",
                                            "reason": str(refusal), "guard": "bn.spatial"}]
