"""Patterns are data: a tree of operator nodes over captured values, matched from a root node.

    Op("BatchNormalization", Op("Conv", Var("x"), Const("w"), Opt(Const("b")), name="conv"),
       Const("scale"), Const("bias"), Const("mean"), Const("var"), name="bn")

Commutative operators (Add, Mul, ...) match their two operands in either order. Sub-matches are
memoised per (pattern node, value) within one match attempt, so trying both orders at every
commutative level costs time linear in the pattern size, not exponential in its depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS as _STANDARD_DOMAINS

COMMUTATIVE_OPS = frozenset({"Add", "Mul", "Max", "Min", "And", "Or", "Xor", "Equal"})


class Pattern:
    """Base of the pattern vocabulary; each subclass matches one input slot."""


@dataclass(frozen=True, eq=False)
class Var(Pattern):
    """Any present value; captured under `name`."""

    name: str


@dataclass(frozen=True, eq=False)
class Const(Pattern):
    """A value that is a true constant (initializer that is not an input, or Constant output)."""

    name: str


@dataclass(frozen=True, eq=False)
class Opt(Pattern):
    """An optional input slot: absent (captured as None) or matching `inner`."""

    inner: Pattern


@dataclass(frozen=True, eq=False)
class Rest(Pattern):
    """Last slot only: any number (zero or more) of further inputs, captured as a list under
    `name` (variadic operators such as Concat)."""

    name: str


@dataclass(frozen=True, eq=False)
class Op(Pattern):
    """A value produced by output `output` of a node whose op type is one of `op`."""

    op: str | tuple[str, ...]
    inputs: tuple[Pattern, ...] = field(default=())
    name: str | None = None
    output: int = 0
    domain: str = ""

    def __init__(self, op, *inputs: Pattern, name: str | None = None, output: int = 0, domain: str = ""):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "output", output)
        object.__setattr__(self, "domain", domain)

    @property
    def op_types(self) -> tuple[str, ...]:
        return (self.op,) if isinstance(self.op, str) else tuple(self.op)


class Match:
    """The result of a successful match: captured values and nodes, and all matched nodes."""

    def __init__(self, root: ir.Node, bindings: dict[str, object], nodes: list[ir.Node]):
        self.root = root
        self.bindings = bindings
        self.nodes = nodes  # producers first, root last

    def __getitem__(self, name: str):
        return self.bindings[name]

    def get(self, name: str, default=None):
        return self.bindings.get(name, default)

    def array(self, name: str):
        """The constant array captured under `name` (None for an absent optional)."""
        return constant_array(self.bindings.get(name))


_FAIL = object()


class _Matcher:
    def __init__(self):
        self._memo: dict[tuple[int, int], object] = {}

    def match_node(self, pattern: Op, node: ir.Node) -> tuple[dict, list[ir.Node]] | None:
        if node.op_type not in pattern.op_types:
            return None
        if node.domain not in (_STANDARD_DOMAINS if pattern.domain == "" else (pattern.domain,)):
            return None
        inputs = list(node.inputs)
        patterns = pattern.inputs
        rest_binding: dict[str, object] = {}
        if patterns and isinstance(patterns[-1], Rest):
            patterns = patterns[:-1]
            rest_binding = {pattern.inputs[-1].name: inputs[len(patterns):]}
            inputs = inputs[: len(patterns)]
        required = sum(1 for p in patterns if not isinstance(p, Opt))
        while inputs and inputs[-1] is None and len(inputs) > required:
            inputs.pop()
        if len(inputs) < required or len(inputs) > len(patterns):
            return None
        inputs += [None] * (len(patterns) - len(inputs))
        orders = [inputs]
        if node.op_type in COMMUTATIVE_OPS and len(inputs) == 2 and not rest_binding:
            orders.append([inputs[1], inputs[0]])
        for ordered in orders:
            result = self._match_inputs(patterns, ordered)
            if result is not None:
                bindings, nodes = result
                bindings = {**bindings, **rest_binding}
                if pattern.name is not None:
                    if pattern.name in bindings:
                        continue
                    bindings = {**bindings, pattern.name: node}
                return bindings, nodes + [node]
        return None

    def _match_inputs(self, patterns, values) -> tuple[dict, list[ir.Node]] | None:
        bindings: dict[str, object] = {}
        nodes: list[ir.Node] = []
        for sub, value in zip(patterns, values):
            result = self._match_value(sub, value)
            if result is None:
                return None
            sub_bindings, sub_nodes = result
            for key, bound in sub_bindings.items():
                if key in bindings and bindings[key] is not bound:
                    return None
                bindings[key] = bound
            for node in sub_nodes:
                if node in nodes:
                    return None  # a node may appear once in a tree pattern
                nodes.append(node)
        return bindings, nodes

    def _match_value(self, pattern: Pattern, value: ir.Value | None):
        if isinstance(pattern, Opt):
            if value is None:
                return ({}, []) if not _names(pattern.inner) else ({n: None for n in _names(pattern.inner)}, [])
            return self._match_value(pattern.inner, value)
        if value is None:
            return None
        if isinstance(pattern, Var):
            return {pattern.name: value}, []
        if isinstance(pattern, Const):
            return ({pattern.name: value}, []) if constant_array_available(value) else None
        assert isinstance(pattern, Op)
        key = (id(pattern), id(value))
        cached = self._memo.get(key)
        if cached is None:
            producer = value.producer()
            if producer is None or value.index() != pattern.output:
                cached = _FAIL
            else:
                found = self.match_node(pattern, producer)
                cached = _FAIL if found is None else found
            self._memo[key] = cached
        return None if cached is _FAIL else cached


def constant_array_available(value: ir.Value) -> bool:
    if value.is_graph_input():
        return False
    if value.const_value is not None:
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant" and "value" in producer.attributes


def _names(pattern: Pattern) -> list[str]:
    if isinstance(pattern, (Var, Const, Rest)):
        return [pattern.name]
    if isinstance(pattern, Opt):
        return _names(pattern.inner)
    if isinstance(pattern, Op):
        own = [pattern.name] if pattern.name else []
        return own + [n for p in pattern.inputs for n in _names(p)]
    return []


def match(pattern: Op, node: ir.Node) -> Match | None:
    found = _Matcher().match_node(pattern, node)
    if found is None:
        return None
    bindings, nodes = found
    return Match(node, bindings, nodes)
