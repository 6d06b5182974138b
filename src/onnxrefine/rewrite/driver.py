"""The greedy worklist driver: rules applied to a fixed point, in time linear in graph size.

Each graph (the main graph, every If/Loop/Scan body, every model-local function) gets a worklist
seeded with its nodes. A node popped from it is offered to the rules whose root operator it is,
highest benefit first; the first rule that applies rewrites it, and only the nodes the rewrite
touched (new nodes, readers of replaced values, producers of removed inputs) go back on the
worklist. No match triggers a rescan of the graph. A final sweep catches rewrites in one graph
that enable rewrites in another (a subgraph dropping its capture of an outer value).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import signed_zero, tensordata
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.rewrite.log import RewriteLog, node_label
from onnxrefine.rewrite.pattern import match
from onnxrefine.rewrite.rule import (
    CertificateOutcome,
    CertificateRequest,
    Certifier,
    Replacement,
    RewriteContext,
    Rule,
)

MAX_SWEEPS = 8


def owners(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    """Every graph and function of the model that holds nodes, outermost first."""
    yield model.graph
    yield from model.graph.subgraphs()
    for function in model.functions.values():
        yield function
        yield from function.subgraphs()


class RewriteDriver:
    def __init__(
        self,
        model: ir.Model,
        rules: Sequence[Rule],
        *,
        budget: ConstantBudget | None = None,
        names: NameAllocator | None = None,
        log: RewriteLog | None = None,
        max_rewrites: int | None = None,
        on_progress: Callable[[int], None] | None = None,
        certifier: Certifier | None = None,
    ):
        self.model = model
        # Checks each rewrite on its own matched subgraph before it is applied (None: no check).
        self.certifier = certifier
        self.rules_by_op: dict[str, list[Rule]] = {}
        for rule in sorted(rules, key=lambda r: -r.benefit):
            for op_type in rule.pattern.op_types:
                self.rules_by_op.setdefault(op_type, []).append(rule)
        self.names = names or NameAllocator(model)
        self.budget = budget or ConstantBudget()
        self.log = log or RewriteLog()
        self.max_rewrites = max_rewrites
        self.on_progress = on_progress
        self.ctx = RewriteContext(model, self.names, self.budget)
        self.rewrites = 0

    def run(self) -> RewriteLog:
        for _ in range(MAX_SWEEPS):
            before = self.rewrites
            for owner in list(owners(self.model)):
                self._run_owner(owner)
                if self._exhausted():
                    return self.log
            if self.rewrites == before:
                break
        return self.log

    def _exhausted(self) -> bool:
        return self.max_rewrites is not None and self.rewrites >= self.max_rewrites

    def _run_owner(self, owner: ir.Graph | ir.Function) -> None:
        graph = owner.graph if isinstance(owner, ir.Function) else owner
        queue: deque[ir.Node] = deque(node for node in graph if node.op_type in self.rules_by_op)
        queued = {id(node) for node in queue}
        processed = 0
        while queue and not self._exhausted():
            node = queue.popleft()
            queued.discard(id(node))
            processed += 1
            if self.on_progress is not None and processed % 512 == 0:
                self.on_progress(processed)
            if node.graph is not graph:
                continue  # removed (or moved) since it was queued
            for rule in self.rules_by_op.get(node.op_type, ()):
                touched = self._try(rule, node, owner, graph)
                if touched is not None:
                    self.rewrites += 1
                    for other in touched:
                        if other.graph is graph and id(other) not in queued and other.op_type in self.rules_by_op:
                            queue.append(other)
                            queued.add(id(other))
                    break

    def _try(self, rule: Rule, node: ir.Node, owner, graph: ir.Graph) -> list[ir.Node] | None:
        found = match(rule.pattern, node)
        if found is None:
            return None
        # The rule (is this scale all ones?) and its certificate may read the matched weights:
        # unmap their pages after, or every layer's reads would stay resident. (Listed now: an
        # applied rewrite disconnects the matched nodes.)
        weights = [v.const_value for n in found.nodes for v in n.inputs if v is not None and v.const_value is not None]
        try:
            return self._try_match(rule, node, owner, graph, found)
        finally:
            tensordata.drop_pages(weights)

    def _try_match(self, rule: Rule, node: ir.Node, owner, graph: ir.Graph, found) -> list[ir.Node] | None:
        if any(matched.graph is not graph for matched in found.nodes):
            return None  # part of the match lives in an enclosing graph; rewrite it there, not here
        try:
            if not rule.keeps_intermediates:
                _refuse_shared_intermediates(found.nodes)
            self.ctx.begin(owner, rule.name)
            replacement = rule.rewrite(found, self.ctx)
            if replacement is None:
                return None
            matched = _with_extra_nodes(found.nodes, replacement.also_removed, graph)
            self._check_replacement(replacement, matched, graph)
            freed = _freed_bytes(matched)
            new_sizes = [pending.array.nbytes for pending in self.ctx.pending_constants]
            reason = self.budget.growth_refusal(new_sizes, freed)
            if reason is not None:
                raise RewriteRefused("budget.growth", reason)
            certificate = self._certify(rule, matched, replacement, owner)
        except RewriteRefused as refusal:
            self.log.refuse(rule.name, graph.name or "", node_label(node), str(refusal), refusal.guard)
            return None
        self.budget.charge(new_sizes, freed)
        return self._apply(rule, matched, replacement, owner, graph, certificate)

    def _certify(self, rule: Rule, matched: list[ir.Node], replacement: Replacement, owner) -> str:
        """The certifier's note for the log; raises RewriteRefused when the certificate fails."""
        if self.certifier is None:
            return ""
        outcome: CertificateOutcome = self.certifier(
            CertificateRequest(
                rule=rule.name, kind=rule.kind, model=self.model, owner=owner, matched=list(matched),
                replacement=list(replacement.nodes), outputs=list(replacement.outputs.items()),
                inputs=_boundary_inputs(matched, replacement.nodes, self.ctx.pending_constants),
                new_constants=[pending.value for pending in self.ctx.pending_constants], context=self.ctx,
                sign_insensitive=list(replacement.sign_insensitive) + list(self.ctx.sign_insensitive),
            )
        )
        if outcome.status == "refused":
            raise RewriteRefused("certificate.failed", f"certificate failed: {outcome.detail}")
        return f"{outcome.status}: {outcome.detail}" if outcome.detail else outcome.status

    def _check_replacement(self, replacement: Replacement, matched: list[ir.Node], graph: ir.Graph) -> None:
        matched_outputs = {id(v) for n in matched for v in n.outputs}
        pending = {id(p.value) for p in self.ctx.pending_constants}
        for old, new in replacement.outputs.items():
            if id(old) not in matched_outputs:
                raise AssertionError(f"rule replaced {old.name!r}, which it did not match")
            if old.is_graph_output():
                aliasing = new.is_graph_input() or new.is_graph_output() or new.is_initializer()
                if aliasing or (new.producer() is None and id(new) not in pending):
                    raise RewriteRefused("driver.output_alias",
                        f"graph output '{old.name}' would become an alias of '{new.name}'"
                    )
                producer = new.producer()
                if producer is not None and producer.graph is not None and producer.graph is not graph:
                    # Renaming it to the output's name would rename a value of the enclosing graph.
                    raise RewriteRefused("driver.output_outer_scope", f"graph output '{old.name}' would become the outer-scope value '{new.name}'")
            if old.type is not None and new.type is not None and old.dtype != new.dtype:
                raise AssertionError(f"rule changed the dtype of {old.name!r}")

    def _apply(self, rule: Rule, matched: list[ir.Node], replacement: Replacement, owner, graph: ir.Graph,
               certificate: str = ""):
        root = matched[-1]
        new_nodes = list(replacement.nodes)
        for pending in self.ctx.pending_constants:
            if isinstance(owner, ir.Function):
                constant = ir.Node(
                    "", "Constant", [], [ir.AttrTensor("value", pending.value.const_value)],
                    outputs=[pending.value], name=self.names.fresh(f"{pending.value.name}_constant"),
                )
                new_nodes.insert(0, constant)
            else:
                graph.register_initializer(pending.value)
        if new_nodes:
            graph.insert_before(root, new_nodes)
        touched: list[ir.Node] = list(new_nodes)
        for old, new in replacement.outputs.items():
            # The replacement computes the same tensor, so what was declared about it still holds.
            if new.type is None:
                new.type = old.type
            if new.shape is None and old.shape is not None:
                new.shape = old.shape
            if old.is_graph_output():
                output_name = old.name
                old.name = self.names.fresh(f"{output_name}_replaced")
                new.name = output_name
                for index, output in enumerate(graph.outputs):
                    if output is old:
                        graph.outputs[index] = new
            touched.extend(use.node for use in old.uses())
            old.replace_all_uses_with(new)
        removed = []
        for node in reversed(matched):
            if any(out.uses() or out.is_graph_output() for out in node.outputs):
                continue
            inputs = [v for v in node.inputs if v is not None]
            graph.remove(node, safe=True)
            removed.append(node)
            for value in inputs:
                touched.extend(_release(value))
        # Values that gained readers (or became outputs): the signed-zero analysis drops its
        # "not observable" answers upstream of them (ir/signed_zero.py).
        signed_zero.note_new_uses(
            self.ctx, [v for n in new_nodes for v in n.inputs] + list(replacement.outputs.values())
        )
        for node in removed:
            self.log.forget_node(graph.name or "", node_label(node))
        self.log.apply(
            rule=rule.name,
            kind=rule.kind,
            graph=graph.name or "",
            root=node_label(root),
            removed=[node_label(n) for n in removed],
            added=[node_label(n) for n in new_nodes],
            certificate=certificate,
        )
        return touched


def _with_extra_nodes(matched: list[ir.Node], extra, graph: ir.Graph) -> list[ir.Node]:
    """The pattern's nodes plus the rule's `also_removed` nodes of this graph, root still last."""
    inside = {id(n) for n in matched}
    extra = [n for n in dict.fromkeys(extra) if id(n) not in inside and n.graph is graph]
    return extra + list(matched)


def _boundary_inputs(matched: Sequence[ir.Node], new_nodes: Sequence[ir.Node], pending) -> list[ir.Value]:
    """Values read by either side of a rewrite that neither side computes (each once)."""
    inside = {id(v) for n in list(matched) + list(new_nodes) for v in n.outputs}
    inside |= {id(p.value) for p in pending}
    found: dict[int, ir.Value] = {}
    for node in list(matched) + list(new_nodes):
        for value in node.inputs:
            if value is not None and id(value) not in inside:
                found.setdefault(id(value), value)
    return list(found.values())


def _refuse_shared_intermediates(matched: list[ir.Node]) -> None:
    inside = {id(n) for n in matched}
    for node in matched[:-1]:
        for value in node.outputs:
            if value.is_graph_output():
                raise RewriteRefused("driver.intermediate_output", f"intermediate '{value.name}' is a graph output")
            for use in value.uses():
                if id(use.node) not in inside:
                    where = " inside a subgraph" if use.node.graph is not node.graph else ""
                    raise RewriteRefused("driver.intermediate_shared",
                        f"intermediate '{value.name}' is also read by {node_label(use.node)}{where}"
                    )


def _use_count(value: ir.Value) -> int:
    """len(value.uses()) without the copy: onnx-ir copies a value's whole use list on every
    uses() call, so asking about a constant read by every node of a long chain made each rewrite
    O(nodes) and the run quadratic (bench/engine_scaling.py --big-chain)."""
    uses = getattr(value, "_uses", None)
    return len(uses) if isinstance(uses, dict) else len(value.uses())


def _freed_bytes(matched: list[ir.Node]) -> int:
    """Bytes of initializers that only the matched nodes read (gone once they are removed)."""
    inside = {id(n) for n in matched}
    slots = sum(len(n.inputs) for n in matched)
    seen: set[int] = set()
    freed = 0
    for node in matched:
        for value in node.inputs:
            if value is None or id(value) in seen or not value.is_initializer() or value.const_value is None:
                continue
            seen.add(id(value))
            if value.is_graph_input() or value.is_graph_output():
                continue
            if _use_count(value) <= slots and all(id(use.node) in inside for use in value.uses()):
                freed += value.const_value.nbytes
    return freed


def _release(value: ir.Value) -> Iterable[ir.Node]:
    """Drop an initializer or Constant that lost its last reader; return nodes worth revisiting."""
    if _use_count(value) or value.is_graph_output() or value.is_graph_input():
        return ()
    producer = value.producer()
    if producer is None:
        if value.is_initializer() and value.graph is not None:
            value.graph.initializers.pop(value.name, None)
        return ()
    if producer.op_type == "Constant" and producer.graph is not None:
        producer.graph.remove(producer, safe=True)
        return ()
    return (producer,)


def run_rules(model: ir.Model, rules: Sequence[Rule], **kwargs) -> RewriteLog:
    return RewriteDriver(model, rules, **kwargs).run()
