"""The constant budget: rewrites may not blow up the size of a model's constants.

Two limits, both configurable:
- per tensor: a generated constant may not be larger than `max(per_tensor_bytes, largest constant
  it is derived from)`. Rescaling a 400 MB weight in place is fine; broadcasting a small constant
  up to a large one is not.
- in total: constants the run adds minus those it frees may not exceed `(growth_ratio - 1)` times
  the model's constant bytes at the start, plus `slack_bytes` so tiny models can still gain a bias.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_PER_TENSOR_BYTES = 16 * 1024 * 1024
DEFAULT_GROWTH_RATIO = 1.10
DEFAULT_SLACK_BYTES = 1024 * 1024


@dataclass
class ConstantBudget:
    initial_bytes: int = 0
    per_tensor_bytes: int = DEFAULT_PER_TENSOR_BYTES
    growth_ratio: float = DEFAULT_GROWTH_RATIO
    slack_bytes: int = DEFAULT_SLACK_BYTES
    added_bytes: int = field(default=0, init=False)
    freed_bytes: int = field(default=0, init=False)
    # Rewrites refused by either limit: a refusal is often forgotten by the log (the node goes
    # another way), so without this count a run stopped by the budget looked finished.
    refusals: int = field(default=0, init=False)

    @property
    def allowed_growth(self) -> float:
        return (self.growth_ratio - 1.0) * self.initial_bytes + self.slack_bytes

    def tensor_refusal(self, size: int, source_bytes: int) -> str | None:
        """Why one generated constant of `size` bytes, derived from constants of at most
        `source_bytes` bytes, is too large, or None when it fits."""
        cap = max(self.per_tensor_bytes, source_bytes)
        if size > cap:
            self.refusals += 1
            return f"a generated constant of {size} bytes exceeds the per-tensor cap of {cap} bytes"
        return None

    def growth_refusal(self, new_sizes: list[int], freed: int) -> str | None:
        """Why adding constants of `new_sizes` bytes while freeing `freed` bytes would exceed the
        total growth allowed, or None when it fits."""
        growth = self.added_bytes + sum(new_sizes) - self.freed_bytes - freed
        if growth > self.allowed_growth:
            self.refusals += 1
            return (
                f"total constant growth of {growth} bytes would exceed the budget of "
                f"{int(self.allowed_growth)} bytes (growth ratio {self.growth_ratio})"
            )
        return None

    def charge(self, new_sizes: list[int], freed: int) -> None:
        self.added_bytes += sum(new_sizes)
        self.freed_bytes += freed

    def summary(self) -> dict:
        """What the report and the CLI summary say about the budget."""
        return {"refused": self.refusals, "growth_bytes": self.added_bytes - self.freed_bytes,
                "allowed_growth_bytes": int(self.allowed_growth), "per_tensor_bytes": self.per_tensor_bytes}
