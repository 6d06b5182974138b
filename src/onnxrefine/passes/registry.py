"""The pass registry: every pass by name, with its class and a one-line summary.

A pass is either a set of rewrite rules (run by the worklist driver) or a graph-level function.
Pass modules register themselves on import; `onnxrefine.passes` imports them all.
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


@dataclass
class PassContext:
    """Shared by every pass of one optimization run."""

    model: ir.Model
    names: NameAllocator
    budget: ConstantBudget
    log: RewriteLog = field(default_factory=RewriteLog)


@dataclass(frozen=True)
class PassSpec:
    name: str
    kind: str
    summary: str
    rules: tuple[Rule, ...] = ()
    # A graph-level pass: returns how many changes it made (0 = nothing to do).
    run: Callable[[PassContext], int] | None = None
    default: bool = True
    # Where this pass sits in the default order; lower runs first within a round.
    order: int = 100

    def __post_init__(self):
        if self.kind not in (EXACT, REASSOCIATING):
            raise ValueError(f"pass {self.name}: unknown kind {self.kind}")
        if bool(self.rules) == (self.run is not None):
            raise ValueError(f"pass {self.name}: give rules or a run function, not both or neither")
        for rule in self.rules:
            if self.kind == EXACT and rule.kind != EXACT:
                raise ValueError(f"pass {self.name} is exact but rule {rule.name} is {rule.kind}")


_REGISTRY: dict[str, PassSpec] = {}
_ALIASES: dict[str, str] = {}


def register(spec: PassSpec, *, aliases: tuple[str, ...] = ()) -> PassSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"pass {spec.name} registered twice")
    _REGISTRY[spec.name] = spec
    for alias in aliases:
        _ALIASES[alias] = spec.name
    return spec


def get_pass(name: str) -> PassSpec:
    _load_pass_modules()
    name = _ALIASES.get(name, name)
    if name not in _REGISTRY:
        raise BadInputError(f"unknown pass '{name}' (see `onnxrefine optimize --list-passes`)")
    return _REGISTRY[name]


def all_passes() -> list[PassSpec]:
    _load_pass_modules()
    return sorted(_REGISTRY.values(), key=lambda s: (s.order, s.name))


def default_pass_names() -> list[str]:
    return [spec.name for spec in all_passes() if spec.default]


def _load_pass_modules() -> None:
    import onnxrefine.passes  # noqa: F401  (registers every pass module)
