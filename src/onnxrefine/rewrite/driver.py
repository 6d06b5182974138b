"""The greedy worklist driver: rules applied to a fixed point, in time linear in graph size.

Each graph (the main graph, every If/Loop/Scan body, every model-local function) gets a worklist
seeded with its nodes. A node popped from it is offered to the rules whose root operator it is,
highest benefit first; the first rule that applies rewrites it, and only the nodes whose match
could have changed go back on a worklist: the producers and readers of every value the rewrite
edited (read or made by a new node, replaced, or read by a removed one), and the readers below
them as far as the deepest pattern reaches, in whichever graph they live (a subgraph reading an
outer value, the node holding a subgraph that changed). No match triggers a rescan of the graph,
and no sweep confirms the fixed point: the driver ends when every worklist is empty.

The schedule runs one driver in every round (passes/pipeline.py). A later run takes up where the
model changed since the last: the nodes graph-level passes added, removed, rewired or changed go
back on the worklists as a rewrite's would, and the facts every edit since may have changed
(ir/facts/) are derived again, in graph order and only as far as they come out different, the
readers of each value whose facts changed going back too. Nodes
none of that reached are not offered again: what they were refused on is as it was.

Graphs are visited in ir/traversal.py's order; every edit goes through ir/edit.py, the same API
the graph-level passes use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from onnxrefine.errors import CertificatePostponed, RewriteRefused
from onnxrefine.ir import edit, signed_zero, tensordata, traversal
from onnxrefine.ir.attrs import references
from onnxrefine.rewrite import bindings
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.rewrite.log import CERTIFIED, DEFERRED, PROVED, UNCHECKED, RewriteLog, node_label
from onnxrefine.rewrite.pattern import match
from onnxrefine.rewrite.worklist import Worklist, around, changes, depth, snapshot
from onnxrefine.rewrite.rule import (
    CertificateOutcome,
    CertificateRequest,
    Certifier,
    Replacement,
    RewriteContext,
    Rule,
)

# Passes over the graphs' worklists (each pass empties every worklist it reaches; work queued in a
# graph already passed waits for the next).
MAX_SWEEPS = 8


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
        self._limit: int | None = None
        # The model as the last run left it (None before the first), and the values that run's
        # rewrites edited: what the next run starts from.
        self._seen: dict[int, tuple] | None = None
        self._edited: list[ir.Value | None] = []
        # How far below an edited value a match can reach: the deepest pattern, plus the one step
        # further a rule reads on its own (the producer of a captured input, the readers of a
        # matched value).
        self.reach = 1 + max((depth(rule.pattern) for rule in rules), default=0)
        self._worklists: dict[int, Worklist] = {}
        # True once every worklist is empty: every node whose match could have changed since it
        # was last offered has been offered again, so a new driver with these rules on this model
        # would find nothing (the schedule skips it, passes/pipeline.py).
        self.settled = False
        # Nodes whose first rule's certificate was postponed (CertificatePostponed), offered again
        # on the first run that does not postpone.
        self.postponed: list[ir.Node] = []
        self._postpone = False

    def run(self, max_rewrites: int | None = None, *, postpone: bool = False) -> RewriteLog:
        """Rewrite to the fixed point, or until `max_rewrites` more rewrites (default: the
        driver's own cap). With `postpone`, a certificate that would need a run of the model
        for shapes no fact gives is not made now: its node waits in `postponed` (the schedule
        runs the graph-level passes, whose shape folding may give them, then runs again)."""
        limit = self.max_rewrites if max_rewrites is None else max_rewrites
        self._limit = None if limit is None else self.rewrites + limit
        self.settled = False
        self._postpone = postpone
        if self._seen is not None:
            self._catch_up()
        if not postpone and self.postponed:
            for node in self.postponed:
                self._requeue(node)
            self.postponed = []
        try:
            for _ in range(MAX_SWEEPS):
                for site in list(traversal.graphs(self.model)):
                    self._run_owner(site, self._worklist(site.graph))
                    if self._exhausted():
                        return self.log
                if not any(self._worklist(site.graph).queue for site in traversal.graphs(self.model)):
                    self.settled = not self.postponed
                    break
        finally:
            self._seen = snapshot(self.model)
        return self.log

    def _catch_up(self) -> None:
        """Before a later run: re-queue what changed since the last one, and derive again the
        facts every edit since may have changed (each run's rules see facts as a new oracle
        would derive them)."""
        changed, edited = changes(self._seen, snapshot(self.model))
        refreshed = self._refresh_facts(changed + around([], edited + self._edited, 1))
        self._edited = []
        self.ctx = RewriteContext(self.model, self.names, self.budget, facts=self.ctx.facts)
        # In graph order, as a new driver would offer them (the names a rewrite passes on follow
        # the order rewrites apply in).
        wanted = {id(node) for node in around(changed, edited + refreshed, self.reach)}
        for site in traversal.graphs(self.model):
            for node in site.graph:
                if id(node) in wanted:
                    self._requeue(node)

    def _refresh_facts(self, seeds: list[ir.Node]) -> list[ir.Value]:
        """Derive again the facts of the outputs of `seeds` (nodes an edit reached) and, in graph
        order, of every node reading a value whose facts came out different: a fact is derived
        from its node and the facts of the node's inputs alone (ir/facts/), so where those are as
        they were, so is everything below. Returns the values whose facts changed."""
        pending = {id(node) for node in seeds}
        changed: list[ir.Value] = []
        for site in traversal.graphs(self.model):
            for node in site.graph:
                if id(node) not in pending:
                    continue
                different = self.ctx.facts.refresh(node.outputs)
                changed.extend(different)
                pending.update(id(use.node) for value in different for use in value.uses())
        return changed

    def _worklist(self, graph: ir.Graph) -> Worklist:
        """The graph's worklist; a graph seen for the first time (new, or first reached) is
        seeded with every node a rule could root at."""
        worklist = self._worklists.get(id(graph))
        if worklist is None or worklist.graph is not graph:
            worklist = Worklist(graph, (node for node in graph if node.op_type in self.rules_by_op))
            self._worklists[id(graph)] = worklist
        return worklist

    def _requeue(self, node: ir.Node) -> None:
        graph = node.graph
        if graph is None or node.op_type not in self.rules_by_op:
            return
        worklist = self._worklists.get(id(graph))
        if worklist is not None and worklist.graph is graph:
            worklist.add(node)  # a graph not reached yet is seeded whole when it is

    def _exhausted(self) -> bool:
        return self._limit is not None and self.rewrites >= self._limit

    def _run_owner(self, site: traversal.GraphSite, worklist: Worklist) -> None:
        graph = site.graph
        processed = 0
        while worklist.queue and not self._exhausted():
            node = worklist.pop()
            processed += 1
            if self.on_progress is not None and processed % 512 == 0:
                self.on_progress(processed)
            if node.graph is not graph:
                continue  # removed (or moved) since it was queued
            for rule in self.rules_by_op.get(node.op_type, ()):
                try:
                    applied = self._try(rule, node, site)
                except CertificatePostponed:
                    self.postponed.append(node)  # no later rule is tried before this one's turn
                    break
                if applied is not None:
                    self.rewrites += 1
                    self._edited.extend(applied[1])
                    for other in around(*applied, self.reach):
                        self._requeue(other)
                    if site.node is not None:
                        self._requeue_holders(site)
                    break

    def _requeue_holders(self, site: traversal.GraphSite) -> None:
        """The nodes holding the edited subgraph, out to its body: what they capture changed."""
        holders = {id(inner.graph): inner for inner in traversal.graphs(self.model) if inner.node is not None}
        current: traversal.GraphSite | None = site
        while current is not None and current.node is not None:
            self._requeue(current.node)
            current = holders.get(id(current.parent))

    def _try(self, rule: Rule, node: ir.Node, site: traversal.GraphSite) -> tuple[list[ir.Node], list[ir.Value]] | None:
        found = match(rule.pattern, node)
        if found is None:
            return None
        # The rule (is this scale all ones?) and its certificate may read the matched weights:
        # unmap their pages after, or every layer's reads would stay resident. (Listed now: an
        # applied rewrite disconnects the matched nodes.)
        weights = [v.const_value for n in found.nodes for v in n.inputs if v is not None and v.const_value is not None]
        try:
            return self._try_match(rule, node, site, found)
        finally:
            tensordata.drop_pages(weights)

    def _try_match(self, rule: Rule, node: ir.Node, site: traversal.GraphSite, found) -> tuple[list[ir.Node], list[ir.Value]] | None:
        graph = site.graph
        if any(matched.graph is not graph for matched in found.nodes):
            return None  # part of the match lives in an enclosing graph; rewrite it there, not here
        try:
            if not rule.keeps_intermediates:
                _refuse_shared_intermediates(found.nodes)
            if not rule.resolves_references and any(references(n) for n in found.nodes):
                attempt = self._rewrite_per_call(rule, found, site)
            else:
                attempt = self._rewrite(rule, found, site)
                if attempt is not None:
                    attempt = (*attempt, self._certify(rule, attempt[1], attempt[0], site.owner))
        except RewriteRefused as refusal:
            self.log.refuse(rule.name, graph.name or "", node_label(node), str(refusal), refusal.guard)
            return None
        if attempt is None:
            return None
        replacement, matched, new_sizes, freed, evidence = attempt
        self.budget.charge(new_sizes, freed)
        return self._apply(rule, matched, replacement, site, evidence)

    def _rewrite(self, rule: Rule, found, site: traversal.GraphSite):
        """(replacement, matched nodes, new constants' sizes, bytes freed); None where the rule does
        not apply, RewriteRefused where a guard refuses."""
        self.ctx.begin(site.owner, rule.name)
        replacement = rule.rewrite(found, self.ctx)
        if replacement is None:
            return None
        matched = _with_extra_nodes(found.nodes, replacement.also_removed, site.graph)
        if not rule.resolves_references:
            _refuse_attribute_references(matched)
        self._check_replacement(replacement, matched, site.graph)
        freed = edit.freed_bytes(matched)
        new_sizes = [pending.array.nbytes for pending in self.ctx.pending_constants]
        # The per-tensor cap was checked when the rule made each constant (RewriteContext).
        reason = edit.over_budget(self.budget, new_sizes, freed)
        if reason is not None:
            raise RewriteRefused("budget.growth", reason)
        return replacement, matched, new_sizes, freed

    def _rewrite_per_call(self, rule: Rule, found, site: traversal.GraphSite):
        """A match carrying attribute references (a function body's `perm=@perm`), rewritten at each
        call site with the references bound to that call's values (rewrite/bindings.py) and
        certified there: applied only when every call site gives the same replacement."""
        function = site.owner
        calls = bindings.call_bindings(self.model, function) if isinstance(function, ir.Function) else \
            "the graph is not a function's body"
        if isinstance(calls, str):
            _refuse_attribute_references(found.nodes, calls)
        first = kept = shape = None
        notes = []
        for call, binding in calls:
            try:
                with bindings.bound(function, binding):
                    attempt = self._rewrite(rule, found, site)
                    if attempt is None:
                        return None
                    this = bindings.structure(attempt[0], self.ctx.pending_constants)
                    if first is None:
                        first, shape = attempt, this
                        kept = (self.ctx.pending_constants, self.ctx.pending_nodes, self.ctx.sign_insensitive)
                    elif this != shape:
                        raise RewriteRefused("driver.reference_differs",
                                             f"the rewrite differs between call sites ({node_label(call)} binds "
                                             f"{', '.join(sorted(binding))} to other values): the function is kept")
                    notes.append(self._certify(rule, attempt[1], attempt[0], function, calls=[call]))
            finally:
                # Facts read with the references bound hold at that call only.
                self.ctx.facts.forget_bodies()
        self.ctx.pending_constants, self.ctx.pending_nodes, self.ctx.sign_insensitive = kept
        kinds = {evidence for evidence, _ in notes}
        evidence = DEFERRED if DEFERRED in kinds else (PROVED if kinds == {PROVED} else CERTIFIED)
        suffix = f" (attribute references bound at each of its {len(notes)} call sites)"
        return (*first, (evidence, notes[0][1] + suffix))

    def _certify(self, rule: Rule, matched: list[ir.Node], replacement: Replacement, owner,
                 calls=None) -> tuple[str, str]:
        """(evidence, note) for the log (rewrite/log.py EVIDENCE); raises RewriteRefused when the
        certificate fails, or when none could be made and no end-to-end verdict will judge it."""
        if self.certifier is None:
            return UNCHECKED, ""
        outcome: CertificateOutcome = self.certifier(
            CertificateRequest(
                rule=rule.name, kind=rule.kind, model=self.model, owner=owner, matched=list(matched),
                replacement=list(replacement.nodes), outputs=list(replacement.outputs.items()),
                inputs=_boundary_inputs(matched, replacement.nodes, self.ctx.pending_constants),
                new_constants=[pending.value for pending in self.ctx.pending_constants], context=self.ctx,
                sign_insensitive=list(replacement.sign_insensitive) + list(self.ctx.sign_insensitive),
                calls=calls, may_postpone=self._postpone,
            )
        )
        if outcome.status == "refused":
            raise RewriteRefused("certificate.failed", f"certificate failed: {outcome.detail}")
        if outcome.status == "skipped":
            raise RewriteRefused("certificate.uncertifiable", f"no certificate: {outcome.detail}")
        note = f"{outcome.status}: {outcome.detail}" if outcome.detail else outcome.status
        if outcome.status == "deferred":
            return DEFERRED, note
        return (PROVED if outcome.proved else CERTIFIED), note

    def _check_replacement(self, replacement: Replacement, matched: list[ir.Node], graph: ir.Graph) -> None:
        matched_outputs = {id(v) for n in matched for v in n.outputs}
        pending = {id(p.value) for p in self.ctx.pending_constants}
        for old, new in replacement.outputs.items():
            if id(old) not in matched_outputs:
                raise AssertionError(f"rule replaced {old.name!r}, which it did not match")
            edit.refuse_output_alias(old, new, graph, fresh=id(new) in pending)
            edit.refuse_capture_beside_shape(old, new)
            if old.type is not None and new.type is not None and old.dtype != new.dtype:
                raise AssertionError(f"rule changed the dtype of {old.name!r}")

    def _apply(self, rule: Rule, matched: list[ir.Node], replacement: Replacement, site: traversal.GraphSite,
               evidence: tuple[str, str] = (UNCHECKED, "")):
        """Apply the rewrite; returns the nodes it touched (new nodes, readers of replaced values,
        producers of released constants) and the values it edited, for the worklists."""
        graph = site.graph
        root = matched[-1]
        edited = [v for n in matched for v in (*n.inputs, *n.outputs)]
        # Constants first, in the form the graph allows (Constant nodes inside a function), then
        # the new nodes, all before the root: every new node comes after what it reads.
        new_nodes = [
            holder
            for pending in self.ctx.pending_constants
            if (holder := edit.place_constant(self.names, graph, site.in_function, pending.value, before=root))
        ]
        if replacement.nodes:
            edit.insert_nodes(graph, list(replacement.nodes), before=root)
        new_nodes.extend(replacement.nodes)
        touched: list[ir.Node] = list(new_nodes)
        for old, new in replacement.outputs.items():
            touched.extend(edit.replace_value(self.names, graph, old, new))
        producers = {id(old): old.producer() for old in replacement.outputs}
        removed, revisit = edit.remove_unread(graph, reversed(matched))
        touched.extend(revisit)
        _keep_names(replacement, producers, removed, new_nodes,
                    [pending.value for pending in self.ctx.pending_constants])
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
            evidence=evidence[0],
            certificate=evidence[1],
        )
        edited += [v for n in new_nodes for v in (*n.inputs, *n.outputs)] + list(replacement.outputs.values())
        return touched, edited


def _keep_names(replacement: Replacement, producers: dict[int, ir.Node | None], removed: list[ir.Node],
                new_nodes: list[ir.Node], new_constants: list[ir.Value]) -> None:
    """Each value the rewrite made in place of a removed one takes the old value's name, and the
    new node producing it takes the removed producer's name: calibration tables, per-layer
    precision settings and name-keyed comparisons read the optimized model by the original's
    names. Only names whose holder left the graph are passed on (a producer kept alive for its
    other outputs keeps its names), each node name once, and only to what this rewrite made (a
    value that already existed keeps its own name). Graph outputs are kept by edit.replace_value;
    new intermediates that no original value stands for keep their fresh names."""
    gone = {id(node) for node in removed}
    made_nodes = {id(node) for node in new_nodes}
    made_values = {id(out) for node in new_nodes for out in node.outputs} | {id(v) for v in new_constants}
    named: set[int] = set()
    for old, new in replacement.outputs.items():
        producer = producers[id(old)]
        if producer is None or id(producer) not in gone or old.is_graph_output():
            continue
        if id(new) not in made_values:
            continue
        edit.pass_on_name(old, new)
        maker = new.producer()
        if maker is not None and id(maker) in made_nodes and id(maker) not in named and producer.name:
            named.add(id(maker))
            maker.name = producer.name


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


def _refuse_attribute_references(matched: list[ir.Node], why: str = "") -> None:
    """A matched node inside a function body whose attribute refers to the caller's (`perm=@perm`)
    computes what each call site says: where no call site binds it (`why`), it cannot be known."""
    for node in matched:
        names = references(node)
        if names:
            raise RewriteRefused("driver.attribute_reference",
                                 f"{node_label(node)} has attribute reference(s) {', '.join(names)} (function body)"
                                 + (f": {why}" if why else ""))


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


def run_rules(model: ir.Model, rules: Sequence[Rule], **kwargs) -> RewriteLog:
    return RewriteDriver(model, rules, **kwargs).run()
