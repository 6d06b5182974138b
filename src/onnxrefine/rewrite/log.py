"""What the engine did and what it declined to do, for the report and `--explain`."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import onnx_ir as ir


def node_label(node: ir.Node) -> str:
    return f"{node.name or '<unnamed>'} ({node.op_type})"


# What stands behind an applied rewrite (`AppliedRewrite.evidence`, the report's applied[].evidence):
CERTIFIED = "certified"  # checked on its own subgraph in onnxruntime (or cross-checked against it)
PROVED = "proved"        # a proof, no run for this rewrite (its reading checked once in the run)
DEFERRED = "deferred"    # no certificate could be made; the run's end-to-end verdict judges it
UNCHECKED = "unchecked"  # certificates off (--no-certify), or a pass that records no evidence
EVIDENCE = (CERTIFIED, PROVED, DEFERRED, UNCHECKED)


@dataclass(frozen=True)
class AppliedRewrite:
    rule: str
    kind: str
    graph: str
    root: str
    removed: list[str]
    added: list[str]
    # The certificate's or proof's note ("certified: bit-identical on 6 input sets", "deferred:
    # why no certificate"); "" when none was asked for.
    certificate: str = ""
    evidence: str = UNCHECKED

    def __post_init__(self):
        if self.evidence not in EVIDENCE:
            raise ValueError(f"rewrite {self.rule}: unknown evidence {self.evidence!r}")


@dataclass(frozen=True)
class RefusedRewrite:
    rule: str
    graph: str
    node: str
    reason: str
    # The refusing guard's id (errors.RewriteRefused.guard), e.g. "bn.spatial"; "" for a refusal
    # that is not a guard's (none today) or a log built before ids existed.
    guard: str = ""


@dataclass
class RewriteLog:
    applied: list[AppliedRewrite] = field(default_factory=list)
    refused: dict[tuple[str, str, str], RefusedRewrite] = field(default_factory=dict)
    _refused_by_node: dict[tuple[str, str], set[str]] = field(default_factory=dict, repr=False)

    def apply(self, **fields) -> None:
        self.applied.append(AppliedRewrite(**fields))

    def refuse(self, rule: str, graph: str, node: str, reason: str, guard: str = "") -> None:
        # The same node may be offered to a rule again after a neighbour changed; keep the latest.
        self.refused[(rule, graph, node)] = RefusedRewrite(rule, graph, node, reason, guard)
        self._refused_by_node.setdefault((graph, node), set()).add(rule)

    def forget_node(self, graph: str, node: str) -> None:
        """A node another rewrite removed: its earlier refusals no longer describe the model."""
        for rule in self._refused_by_node.pop((graph, node), ()):
            self.refused.pop((rule, graph, node), None)

    def counts(self) -> Counter:
        return Counter(entry.rule for entry in self.applied)

    def coverage(self) -> dict[str, int]:
        """Applied rewrites by evidence, and the standing refusals of rewrites no certificate
        vouched for (failed, or none could be made): the report's certificates.coverage."""
        counts = Counter(entry.evidence for entry in self.applied)
        result = {name: counts.get(name, 0) for name in EVIDENCE}
        result["refused"] = sum(1 for r in self.refused.values() if r.guard.startswith("certificate."))
        return result

    def refusal_guards(self, rule: str | None = None) -> set[str]:
        """The guard ids of the recorded refusals (of `rule` only, when given)."""
        return {r.guard for r in self.refused.values() if rule is None or r.rule == rule}

    def refusal_counts(self) -> Counter:
        return Counter(entry.rule for entry in self.refused.values())

    def extend(self, other: RewriteLog) -> None:
        self.applied.extend(other.applied)
        for refusal in other.refused.values():
            self.refuse(refusal.rule, refusal.graph, refusal.node, refusal.reason, refusal.guard)

    def to_dict(self) -> dict:
        return {
            "applied": [asdict(a) for a in self.applied],
            "refused": [asdict(r) for r in self.refused.values()],
        }
