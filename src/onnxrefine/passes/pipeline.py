"""The schedule: the one way passes run, verified or not.

A round runs the phases of registry.PHASES in turn: "rules" (every rule of the chosen passes in one
run of the worklist driver, the same driver every round: a later run offers again only what changed
since the last, rewrite/driver.py), then "graph" and "cleanup" (their graph-level passes, each
phase's by its declared order); rounds repeat until one changes nothing (or `fixed_point=False`).
A unit (the driver run, a graph pass) that found nothing is not run again until the model changes,
and the rounds end once every unit has found nothing in the model as it is: the round that would
only confirm it is not run. The "interface" passes run once after the last round.
Verification, progress and bisection are hooks on this schedule, never a second pipeline:

- `on_event(kind, **info)` is called as the schedule goes: "round" (round), "step" (one
  rewrite or graph-pass run that changed the model: `step=Step`), "pass" (round, name, changes,
  seconds; name "rules" for the driver run with `passes=` its rule passes), "done" (rounds, steps,
  seconds).
- `max_steps` stops the schedule after that many steps. The schedule is deterministic, so the
  model after `max_steps=k` is the model the full run had after its k-th step: bisection replays
  prefixes of it.
- `vetoed` names rewrites (rule, graph, root label) that are refused, so a culprit found by
  bisection is rolled back and the rest of the schedule still runs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from onnxrefine import progress
from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.passes.registry import INTERFACE, PassContext, PassSpec, get_pass
from onnxrefine.rewrite.driver import RewriteDriver
from onnxrefine.rewrite.log import PROVED, UNCHECKED, RewriteLog, node_label
from onnxrefine.rewrite.rule import Rule
from onnxrefine.rewrite.rule import Certifier

MAX_ROUNDS = 16

EventHook = Callable[..., None]


@dataclass(frozen=True)
class Step:
    """One unit a replay can stop after: a rule rewrite (rule set) or a graph-pass run."""

    index: int  # 1-based position in the schedule
    round: int
    pass_name: str
    rule: str | None = None  # None: a graph-level pass run (all its changes are one step)
    graph: str = ""
    root: str = ""

    @property
    def rewrite_key(self) -> tuple[str, str, str] | None:
        return None if self.rule is None else (self.rule, self.graph, self.root)


def ordered_specs(pass_names: Sequence[str]) -> list[PassSpec]:
    """The passes named, in the order a round runs them: by phase, then order within the phase
    (equal ones as named: the sort is stable)."""
    return sorted((get_pass(n) for n in dict.fromkeys(pass_names)), key=lambda s: s.schedule_key)


@progress.in_phase("rewrite")
def run_passes(
    model: ir.Model,
    pass_names: Sequence[str],
    *,
    budget: ConstantBudget,
    fixed_point: bool = True,
    log: RewriteLog | None = None,
    names: NameAllocator | None = None,
    on_progress: Callable[[int], None] | None = None,
    max_steps: int | None = None,
    vetoed: Collection[tuple[str, str, str]] = (),
    on_event: EventHook | None = None,
    certifier: Certifier | None = None,
) -> RewriteLog:
    """Run the schedule on `model` in place and return its log.

    `max_steps` caps steps of the whole schedule (see the module docstring; passes/bisection.py
    replays prefixes with it);
    `certifier` checks each rule rewrite on its matched subgraph; graph-level passes that check
    their own rewrites read it from the pass context, the others' rewrites stand on their declared
    reason for being exact.
    """
    specs = ordered_specs(pass_names)
    log = log if log is not None else RewriteLog()
    emit = on_event or (lambda kind, **info: None)
    context = PassContext(model, names or NameAllocator(model), budget, log, certifier)
    pass_of_rule = {rule.name: spec.name for spec in specs for rule in spec.rules}
    rules = [_vetoable(rule, frozenset(vetoed)) if vetoed else rule for spec in specs for rule in spec.rules]
    # Phase "rules" is the driver run below; the graph-level passes are the later phases' ("graph",
    # then "cleanup"), already in their order since `specs` is sorted by phase.
    graph_passes = [spec for spec in specs if spec.run is not None and spec.phase != INTERFACE]
    interface_passes = [spec for spec in specs if spec.phase == INTERFACE]
    started = time.perf_counter()
    steps = rounds = 0

    def room() -> int | None:
        return None if max_steps is None else max_steps - steps

    # The schedule's units (the driver run, each graph pass) and the model's version when each
    # last ran and changed nothing: on the same version it would find nothing again (the model is
    # the same; a unit decides from the model alone), so it is skipped, and the rounds end when
    # every unit is settled on the current version (the round that would only confirm it is not run).
    version = 0
    settled: dict[str, int] = {}
    # One driver for every round: each run takes up where the model changed since the last
    # (rewrite/driver.py), not a new sweep over every node.
    driver = RewriteDriver(model, rules, budget=budget, names=context.names, log=log, on_progress=on_progress,
                           certifier=certifier) if rules else None
    units = (["rules"] if rules else []) + [spec.name for spec in graph_passes]
    postpone = fixed_point and certifier is not None and bool(graph_passes)
    for round_index in range(1, MAX_ROUNDS + 1):
        if room() is not None and room() <= 0:
            break
        rounds = round_index
        emit("round", round=round_index)
        changes = 0
        if driver is not None and settled.get("rules") != version:
            progress.report(detail=f"round {round_index}: {len(rules)} rewrite rules")
            first, pass_started = len(log.applied), time.perf_counter()
            before = driver.rewrites
            # In the first round, before shape folding has run, a certificate that needs a run of
            # the model only for shapes waits for it (bert-base, vit_b_16: a Reshape's shape
            # computed from Shape ops, which fold_shapes folds): the next round offers it again.
            driver.run(max_rewrites=room(), postpone=postpone and round_index == 1)
            made = driver.rewrites - before
            changes += made
            version += made
            if driver.settled:  # every node its worklists held has been offered on the model as it is now
                settled["rules"] = version
            for entry in log.applied[first:]:
                steps += 1
                emit("step", step=Step(steps, round_index, pass_of_rule.get(entry.rule, entry.rule), entry.rule,
                                       entry.graph, entry.root))
            emit("pass", round=round_index, name="rules", passes=[s.name for s in specs if s.rules],
                 changes=made, seconds=time.perf_counter() - pass_started)
        for spec in graph_passes:
            if settled.get(spec.name) == version:
                continue
            progress.report(done=graph_passes.index(spec), total=len(graph_passes),
                            detail=f"round {round_index}: {spec.name}")
            if room() is not None and room() <= 0:
                break
            pass_started, first = time.perf_counter(), len(log.applied)
            made = spec.run(context)
            if certifier is not None:
                _record_exactness(log, first, spec)
            changes += made
            if made:
                steps += 1
                version += made
                emit("step", step=Step(steps, round_index, spec.name))
            else:
                settled[spec.name] = version
            emit("pass", round=round_index, name=spec.name, changes=made,
                 seconds=time.perf_counter() - pass_started)
        waiting = driver is not None and bool(driver.postponed)
        if not fixed_point or (changes == 0 and not waiting) or all(settled.get(unit) == version for unit in units):
            break
    for spec in interface_passes:
        if room() is not None and room() <= 0:
            break
        pass_started = time.perf_counter()
        made = spec.run(context)
        if made:
            steps += 1
            emit("step", step=Step(steps, rounds, spec.name))
        emit("pass", round=rounds, name=spec.name, changes=made, seconds=time.perf_counter() - pass_started)
    emit("done", rounds=rounds, steps=steps, seconds=time.perf_counter() - started)
    return log


def _record_exactness(log: RewriteLog, first: int, spec: PassSpec) -> None:
    """Every rewrite the graph-level pass logged from `first` on without evidence of its own
    stands on the pass's declared reason for being exact (PassSpec.exactness): a proof."""
    if not spec.exactness:
        return
    for index in range(first, len(log.applied)):
        entry = log.applied[index]
        if entry.evidence == UNCHECKED:
            log.applied[index] = dataclasses.replace(entry, evidence=PROVED, certificate=f"proof: {spec.exactness}")


def _vetoable(rule: Rule, vetoed: frozenset) -> Rule:
    """The rule, refusing the rewrites named in `vetoed` (found wrong by verification)."""
    inner = rule.rewrite

    def rewrite(found, ctx):
        root = found.root
        graph = root.graph.name if root.graph is not None else ""
        if (rule.name, graph or "", node_label(root)) in vetoed:
            raise RewriteRefused("verify.rolled_back", "rolled back: verification found that this rewrite changes the model's outputs")
        return inner(found, ctx)

    return dataclasses.replace(rule, rewrite=rewrite)
