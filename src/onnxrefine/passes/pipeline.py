"""Running a list of passes: all their rules in one worklist driver, graph-level passes between
driver runs, repeated until a whole round changes nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.passes.registry import PassContext, PassSpec, get_pass
from onnxrefine.rewrite.driver import RewriteDriver
from onnxrefine.rewrite.log import RewriteLog
from onnxrefine.rewrite.rule import Certifier

MAX_ROUNDS = 16


def run_passes(
    model: ir.Model,
    pass_names: Sequence[str],
    *,
    budget: ConstantBudget,
    fixed_point: bool = True,
    log: RewriteLog | None = None,
    names: NameAllocator | None = None,
    on_progress: Callable[[int], None] | None = None,
    max_rewrites: int | None = None,
    certifier: Certifier | None = None,
) -> RewriteLog:
    """Run the passes; `max_rewrites` caps rule rewrites (bisection replays a prefix of them);
    `certifier` checks each rule rewrite on its matched subgraph (graph-level passes are not)."""
    specs: list[PassSpec] = sorted((get_pass(n) for n in dict.fromkeys(pass_names)), key=lambda s: s.order)
    log = log if log is not None else RewriteLog()
    context = PassContext(model, names or NameAllocator(model), budget, log)
    rules = [rule for spec in specs for rule in spec.rules]
    graph_passes = [spec for spec in specs if spec.run is not None]
    rewrites_done = 0
    for _ in range(MAX_ROUNDS):
        changes = 0
        if rules:
            remaining = None if max_rewrites is None else max_rewrites - rewrites_done
            if remaining is not None and remaining <= 0:
                break
            driver = RewriteDriver(
                model, rules, budget=budget, names=context.names, log=log, on_progress=on_progress,
                max_rewrites=remaining, certifier=certifier,
            )
            driver.run()
            changes += driver.rewrites
            rewrites_done += driver.rewrites
        # A capped replay is a prefix of rule rewrites only; graph passes would blur it.
        for spec in graph_passes if max_rewrites is None else ():
            changes += spec.run(context)
        if not fixed_point or changes == 0:
            break
    return log
