"""The one bisector: the first step of the schedule's replay whose prefix is bad.

The schedule (passes/pipeline.py) is deterministic, so the model after its first k steps is always
the same model (`run_passes(..., max_steps=k)`), and "is the prefix of k steps bad?" is a question
about k alone. Both bisecting commands ask it here, each with its own `is_bad` (replay the prefix,
verify it, judge the verdict): optimization with verification (verified.py) bisects the whole
schedule to veto the culprit, and `onnxrefine bisect` (triage/bisect.py) narrows a failing pass to
its one culprit rewrite.

The search takes the prefix of no steps (the original) as good and the whole schedule as bad, and
narrows pass runs first (one driver run of a round holds all that round's rule rewrites; a
graph-level pass run is one step), then the steps inside the culprit run: a model whose verdict
turns inside a run is found in about log2(runs) + log2(steps of that run) replays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from onnxrefine.passes.pipeline import Step


def first_bad(good: int, bad: int, is_bad: Callable[[int], bool]) -> int:
    """The least count in (good, bad] at which `is_bad` holds, by halving: `good` is known good,
    `bad` known bad (neither is asked again)."""
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (good, middle) if is_bad(middle) else (middle, bad)
    return bad


def first_bad_step(steps: Sequence[Step], is_bad: Callable[[int], bool]) -> Step:
    """The step of `steps` (the whole replay, in order) whose prefix is the first bad one: pass runs
    first, then steps inside the run. `is_bad(count)` judges the prefix of `count` steps; the prefix
    of all of them is known bad."""
    ends = [0] + [step.index for position, step in enumerate(steps)
                  if position + 1 == len(steps) or run_of(steps[position + 1]) != run_of(step)]
    run = first_bad(0, len(ends) - 1, lambda position: is_bad(ends[position]))
    return steps[first_bad(ends[run - 1], ends[run], is_bad) - 1]


def run_of(step: Step) -> tuple:
    """The pass run a step belongs to: all rule rewrites of a round come from one driver run."""
    return (step.round, "rules") if step.rule is not None else (step.round, step.pass_name, step.index)
