"""What every family module shares: the fact types (Sym, Elements), the dim arithmetic, the rule
tables and the `Site` a rule reads its node through.

A rule is a small function `rule(site) -> fact | None`, registered in one of three tables keyed by
(domain, op_type): SHAPE_RULES (symbolic shape of an output), DTYPE_RULES (element type) and
VALUE_RULES (partial value of a small integer tensor). Each table holds at most one rule per
operator, so the oracle never chooses between rules; registering a second one for the same key
is an error at import time (two families claiming an operator would silently shadow each other).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxrefine.ir.attrs import attr

STANDARD_DOMAIN = ""
CONTRIB_DOMAIN = "com.microsoft"
MAX_ELEMENTS = 64


class Sym:
    """An unknown run-time size; equal only to itself."""

    __slots__ = ("label",)

    def __init__(self, label: str = ""):
        self.label = label

    def __repr__(self) -> str:
        return f"Sym({self.label})"


@dataclass(frozen=True)
class Elements:
    """The partial value of a rank-0 or rank-1 integer tensor."""

    items: tuple
    scalar: bool
    dtype: ir.DataType

    def known(self) -> bool:
        return all(isinstance(e, int) for e in self.items)

    def array(self) -> np.ndarray:
        array = np.array([int(e) for e in self.items], dtype=self.dtype.numpy())
        return array.reshape(()) if self.scalar else array


# -- the rule tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleEntry:
    fn: Callable[[Site], object]
    # Most rules describe output 0 only; the oracle answers None for the other outputs unless
    # the rule says it handles every output (Split, Dropout's mask, ...) and reads `site.index`.
    all_outputs: bool = False


SHAPE_RULES: dict[tuple[str, str], RuleEntry] = {}
DTYPE_RULES: dict[tuple[str, str], RuleEntry] = {}
VALUE_RULES: dict[tuple[str, str], RuleEntry] = {}


def canonical_domain(domain: str) -> str:
    return STANDARD_DOMAIN if domain == "ai.onnx" else domain


def _register(table: dict, ops, domain: str, all_outputs: bool):
    if isinstance(ops, str):
        ops = ops.split()

    def decorate(fn):
        for op in ops:
            key = (canonical_domain(domain), op)
            if key in table:
                raise ValueError(f"two rules for {key}: {table[key].fn.__qualname__} and {fn.__qualname__}")
            table[key] = RuleEntry(fn, all_outputs)
        return fn

    return decorate


def shape_rule(ops, *, domain: str = STANDARD_DOMAIN, all_outputs: bool = False):
    """Register the decorated function as the shape rule of `ops` (names, or one space-separated string)."""
    return _register(SHAPE_RULES, ops, domain, all_outputs)


def dtype_rule(ops, *, domain: str = STANDARD_DOMAIN, all_outputs: bool = False):
    return _register(DTYPE_RULES, ops, domain, all_outputs)


def value_rule(ops, *, domain: str = STANDARD_DOMAIN):
    return _register(VALUE_RULES, ops, domain, False)


class Site:
    """Output `index` of `node`, as a rule sees it: its inputs' facts (asked one level deeper)
    and the node's attributes."""

    __slots__ = ("oracle", "node", "index", "depth")

    def __init__(self, oracle, node: ir.Node, index: int, depth: int):
        self.oracle = oracle
        self.node = node
        self.index = index
        self.depth = depth

    @property
    def op(self) -> str:
        return self.node.op_type

    @property
    def inputs(self):
        return self.node.inputs

    def present(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] is not None

    def shape(self, i: int) -> tuple | None:
        return self.oracle.symbolic_shape(self.node.inputs[i], self.depth + 1) if self.present(i) else None

    def dtype(self, i: int) -> ir.DataType | None:
        return self.oracle.dtype(self.node.inputs[i], self.depth + 1) if self.present(i) else None

    def elements(self, i: int) -> Elements | None:
        return self.oracle.elements(self.node.inputs[i], self.depth + 1) if self.present(i) else None

    def static(self, i: int) -> tuple | None:
        return self.oracle.static_shape(self.node.inputs[i]) if self.present(i) else None

    def attr(self, name: str, default=None):
        return attr(self.node, name, default)


# -- dim arithmetic -----------------------------------------------------------------------------


def normalize_axis(axis: int, rank: int) -> int | None:
    axis = int(axis)
    if axis < 0:
        axis += rank
    return axis if 0 <= axis < rank else None


def broadcast_dims(a, b):
    """The broadcast of two dims, given that the model runs (so they are compatible)."""
    if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
        return a
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None  # incompatible: the model would fail here
    if isinstance(a, int):
        return a  # b is unknown; it must be a or 1, so the result is a
    if isinstance(b, int):
        return b
    return Sym("broadcast")


def broadcast_shapes(shapes) -> tuple | None:
    if not shapes or any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    result = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        for i, d in enumerate(padded):
            merged = broadcast_dims(result[i], d)
            if merged is None:
                return None
            result[i] = merged
    return tuple(result)


def product(dims):
    total = 1
    for d in dims:
        if not isinstance(d, int):
            return Sym("product")
        total *= d
    return total
