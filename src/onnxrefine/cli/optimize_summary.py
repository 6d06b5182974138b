"""What `onnxrefine optimize` prints after a run: rewrites per rule (with the pass that holds
each rule, the name --passes and --disable take), nodes per operator before and after, sizes,
time, and the verification's outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxrefine.cli.output import Col, PlainConsole, fitted_table, group
from onnxrefine.input_shapes import describe as describe_input_shapes
from onnxrefine.plain import plain

if TYPE_CHECKING:  # rich is imported where a terminal is printed to
    from rich.console import Console

# Verdicts of a verification that passed (onnxrefine.verify.judge.verdicts' success words).
PASSING = ("exact", "rounding")


def input_shapes_line(summary: dict) -> str:
    folded = ", ".join(f"{rule} {n}" for rule, n in summary["folded"].items()) or "nothing"
    return f"input shapes fixed: {describe_input_shapes(summary['fixed'])}; then folded (rewrites): {folded}"


def describe_rollback(rollback: dict) -> str:
    outputs = ", ".join(rollback.get("outputs") or []) or "?"
    if rollback.get("rule"):
        return (f"rewrite {rollback['rule']} at {rollback['root']} (pass {rollback['pass']}): "
                f"{rollback['verdict']} on {outputs}")
    return f"pass {rollback['pass']}: {rollback['verdict']} on {outputs}"


def _wide_console() -> PlainConsole:
    """Where no console is given: tables laid out as for a pipe (printable by rich as well)."""
    import sys

    return PlainConsole(sys.stdout)


def rules_table(report, console: Console | PlainConsole | None = None):
    from onnxrefine.passes.registry import pass_of_rule

    counts, refusals = report.log.counts(), report.log.refusal_counts()
    rows = [(plain(rule), plain(pass_of_rule(rule) or "-"), str(counts.get(rule, 0)), str(refusals.get(rule, 0)))
            for rule in sorted(set(counts) | set(refusals))]
    columns = [Col("rule", name=True), Col("pass", name=True, drop=1), Col("rewrites", "right"),
               Col("refused", "right")]
    return fitted_table(console or _wide_console(), "onnxrefine optimize", columns, rows)


def operators_table(report, console: Console | PlainConsole | None = None):
    """Nodes per operator before and after, as onnxsim and onnxslim print them."""
    from onnxrefine.api import operator_table

    rows = [(plain(row["op"]), str(row["before"]), str(row["after"]),
             "" if row["before"] == row["after"] else f"{row['after'] - row['before']:+d}")
            for row in operator_table(report.operators_before, report.operators_after)]
    total_before, total_after = sum(report.operators_before.values()), sum(report.operators_after.values())
    rows.append(("all", str(total_before), str(total_after),
                 "" if total_before == total_after else f"{total_after - total_before:+d}"))
    columns = [Col("operator", name=True), Col("before", "right"), Col("after", "right"),
               Col("change", "right", drop=1)]
    return fitted_table(console or _wide_console(), "nodes per operator", columns, rows,
                        section_before=(len(rows) - 1,))


def summary_lines(report, size_before: int, size_after: int, seconds: float, external: bool = False) -> list[str]:
    size = f"{_size(size_before)} -> {_size(size_after)}"
    if external:
        size += " (external data included)"
    lines = [f"nodes: {report.nodes_before} -> {report.nodes_after}", f"file size: {size}",
             f"seconds: {seconds:.2f}"]
    budget = getattr(report, "constant_budget", None) or {}
    if budget.get("refused"):  # the run stopped short of what the rules could do: say so
        lines.append(f"constant budget: {budget_text(budget)}")
    lines.append(f"verification: {verification_text(report)}")
    lines.append(f"certificates: {coverage_text(report.certificates)}")
    return lines


def coverage_text(certificates: dict | None) -> str:
    """What stands behind the applied rewrites (rewrite/log.py EVIDENCE), and how many were
    refused for want of a certificate."""
    if certificates is None:
        return "off (--no-certify): rewrites applied unchecked"
    c = certificates["coverage"]
    text = f"{c['certified']} certified, {c['proved']} proved, {c['refused']} refused"
    if c["deferred"]:
        text += f", {c['deferred']} left to end-to-end verification"
    if c["unchecked"]:
        text += f", {c['unchecked']} unchecked"
    return text


def verification_text(report) -> str:
    verification = report.verification or {"status": "off"}
    if verification.get("status") == "verified" and verification.get("verifications") == 0:
        return "passed: exact (unchanged: no rewrite applied)"
    if verification.get("status") == "verified":
        sets = len(verification.get("input_sets") or [])
        verdict = verification["verdict"]
        text = f"{'passed: ' if verdict in PASSING else ''}{verdict} (end to end, against onnxruntime and " \
               f"float64, {sets} input set(s))"
        if report.rolled_back:
            text += f"; {len(report.rolled_back)} rolled back"
        return text
    if verification.get("status") == "skipped":
        return f"skipped: {verification['reason']}"
    return "off (--no-verify)"


def summary_table(report, size_before: int, size_after: int, seconds: float, external: bool = False,
                  console: Console | PlainConsole | None = None):
    """The whole summary: the rules table, the operators table, then one line per figure."""
    console = console or _wide_console()
    lines = summary_lines(report, size_before, size_after, seconds, external)
    return group(console, rules_table(report, console), operators_table(report, console),
                 *(plain(line) for line in lines))


def budget_text(budget: dict) -> str:
    return (f"{budget['refused']} rewrite(s) refused: new constants may add "
            f"{_size(budget['allowed_growth_bytes'])} in all (--growth-ratio; used {_size(max(0, budget['growth_bytes']))}) "
            f"and {_size(budget['per_tensor_bytes'])} each (--max-tensor-bytes)")


def refusals_table(report, console: Console | PlainConsole | None = None):
    rows = [(plain(r.rule), plain(r.node), plain(getattr(r, "guard", None) or "-"), plain(r.reason))
            for r in report.log.refused.values()]
    columns = [Col("rule", name=True), Col("node", name=True, drop=2), Col("guard", name=True, drop=1),
               Col("reason", wrap=True)]
    return fitted_table(console or _wide_console(), "refused rewrites", columns, rows)


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)
