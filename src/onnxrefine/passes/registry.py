"""The pass registry: every pass declared once, next to its rules, and read from there by everything.

Each pass module ends with `PASSES = (PassSpec(...), ...)`. A declaration holds all there is to
know about a pass: its name and summary; its rules (run by the worklist driver) or its graph-level
run function; its class, derived from its rules (a graph-level pass declares it); the phase of the
schedule it runs in and its place there; whether it is on by default; and the fuzz generator's
pattern for it, or why it has none. The schedule (pipeline.py), `onnxrefine optimize
--list-passes`, README's pass table and the fuzz targets (fuzz/patterns.py) all read these
declarations; `onnxrefine.passes.PASS_MODULES` lists the modules that hold them (handed to
`PASS_MODULES` here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxrefine.errors import BadInputError
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.rewrite.log import RewriteLog
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING, Rule

# The phases of one round of the schedule, in the order they run (pipeline.run_passes).
RULES = "rules"      # every rule of every chosen pass, in one worklist driver run
GRAPH = "graph"      # graph-level rewrites: constant folding, shape folding, inlining, ...
CLEANUP = "cleanup"  # graph-level removal of what the phases before left dead or duplicated
PHASES = (RULES, GRAPH, CLEANUP)
# No phase runs before the rules: inlining and constant extraction have always run after them in
# each round (their old `order` 5 only placed them among graph-level passes), and moving them ahead
# would change what the default pipeline outputs.

# The reason given by passes that the targeted fuzz generator has no pattern for yet.
NO_PATTERN_YET = "no targeted pattern yet: fuzzed only on random graphs and graphs grown for other passes"


@dataclass
class PassContext:
    """Shared by every pass of one optimization run."""

    model: ir.Model
    names: NameAllocator
    budget: ConstantBudget
    log: RewriteLog = field(default_factory=RewriteLog)


@dataclass(frozen=True)
class PassSpec:
    """One pass, declared once. Give `rules` or `run`, not both.

    `kind`: a rule pass's class is derived (reassociating iff any of its rules is) and must not be
    given; a graph-level pass declares it. `phase`: a rule pass runs in RULES (the default); a
    graph-level pass names GRAPH or CLEANUP. `order`: its place within its phase (lower first;
    equal orders run in the order the passes were asked for, the default list's by name).
    `fuzz`: the name of its pattern in fuzz/patterns.PATTERNS, or `not_fuzzed`: why it has none.
    """

    name: str
    summary: str
    rules: tuple[Rule, ...] = ()
    # A graph-level pass: returns how many changes it made (0 = nothing to do).
    run: Callable[[PassContext], int] | None = None
    phase: str | None = None
    order: int = 100
    default: bool = True
    kind: str | None = None
    fuzz: str | None = None
    not_fuzzed: str = ""

    def __post_init__(self):
        if bool(self.rules) == (self.run is not None):
            raise ValueError(f"pass {self.name}: give rules or a run function, not both or neither")
        if self.rules:
            if self.kind is not None:
                raise ValueError(f"pass {self.name}: a rule pass's class is derived from its rules, not declared")
            if self.phase not in (None, RULES):
                raise ValueError(f"pass {self.name}: rules run in phase {RULES!r}, not {self.phase!r}")
            kind = REASSOCIATING if any(rule.kind == REASSOCIATING for rule in self.rules) else EXACT
            object.__setattr__(self, "kind", kind)
            object.__setattr__(self, "phase", RULES)
        else:
            if self.kind not in (EXACT, REASSOCIATING):
                raise ValueError(f"pass {self.name}: a graph-level pass declares its class "
                                 f"({EXACT!r} or {REASSOCIATING!r}), not {self.kind!r}")
            if self.phase not in PHASES or self.phase == RULES:
                raise ValueError(f"pass {self.name}: a graph-level pass declares its phase "
                                 f"({', '.join(repr(p) for p in PHASES[1:])}), not {self.phase!r}")
        if self.fuzz is not None and self.not_fuzzed:
            raise ValueError(f"pass {self.name}: give a fuzz pattern or a reason it has none, not both")

    @property
    def schedule_key(self) -> tuple[int, int]:
        """Where the schedule runs this pass in a round: its phase, then its order."""
        return PHASES.index(self.phase), self.order


_REGISTRY: dict[str, PassSpec] = {}
_loaded = False
# The modules that declare passes, in module order. passes/__init__.py lists them and hands them over
# here once imported: the registry cannot import them itself, each of them imports its types.
PASS_MODULES: tuple = ()


def set_pass_modules(modules: tuple) -> None:
    global PASS_MODULES
    PASS_MODULES = tuple(modules)


def declared_passes() -> list[PassSpec]:
    """Every declaration of every pass module, in module order (duplicates and undecided fuzzing
    refused: each pass says which pattern fuzzes it, or why none does)."""
    seen: set[str] = set()
    specs = []
    for module in PASS_MODULES:
        for spec in module.PASSES:
            if spec.name in seen:
                raise ValueError(f"pass {spec.name} declared twice")
            if spec.fuzz is None and not spec.not_fuzzed:
                raise ValueError(f"pass {spec.name}: name its fuzz pattern or say why it has none (not_fuzzed)")
            seen.add(spec.name)
            specs.append(spec)
    return specs


def get_pass(name: str) -> PassSpec:
    _load_pass_modules()
    if name not in _REGISTRY:
        raise BadInputError(f"unknown pass '{name}' (see `onnxrefine optimize --list-passes`)")
    return _REGISTRY[name]


def all_passes() -> list[PassSpec]:
    """Every pass, in the order the schedule runs them (phase, order, then name)."""
    _load_pass_modules()
    return sorted(_REGISTRY.values(), key=lambda s: (s.schedule_key, s.name))


def default_pass_names() -> list[str]:
    """The default passes, by (order, name): the order this list had before phases existed, kept
    because reports print it and per-pass fuzz campaigns rotate through it by case index (the
    schedule re-sorts any list by phase: pipeline.ordered_specs)."""
    _load_pass_modules()
    return [s.name for s in sorted(_REGISTRY.values(), key=lambda s: (s.order, s.name)) if s.default]


def _load_pass_modules() -> None:
    global _loaded
    if not _loaded:
        _REGISTRY.update((spec.name, spec) for spec in declared_passes())
        _loaded = True
