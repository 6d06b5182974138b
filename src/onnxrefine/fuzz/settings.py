"""What a fuzz campaign runs (`CampaignSettings`, stored in the campaign folder by journal.py) and
the `--target` syntax that names its optimizer and passes."""

from __future__ import annotations

from dataclasses import dataclass

from onnxrefine.fuzz.generator import DEFAULT_MAX_NODES, DEFAULT_OPSET


@dataclass(frozen=True)
class CampaignSettings:
    optimizer: str = "onnxrefine"
    passes: tuple[str, ...] | None = None
    cases: int = 100
    seed: int = 0
    opset: int = DEFAULT_OPSET
    max_nodes: int = DEFAULT_MAX_NODES
    trials: int = 2
    targeted: float = 0.8   # fraction of cases grown around the step's pattern
    time_budget_s: float | None = 20.0   # per verification


def parse_target(text: str) -> tuple[str, tuple[str, ...] | None]:
    """'onnxoptimizer:fuse_pad_into_pool,eliminate_nop_pad' -> ('onnxoptimizer', (...))."""
    from onnxrefine.triage.adapters import get_adapter

    name, _, passes = text.partition(":")
    get_adapter(name.strip())
    chosen = tuple(p.strip() for p in passes.split(",") if p.strip()) or None
    return name.strip(), chosen
