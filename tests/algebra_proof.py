"""The harness of the exhaustive algebra proofs: a Proof collects what was checked and the first
counterexamples; stubs let a rule's own rewrite function run without a model; symbolic dims are
made concrete in every small way.

A proof enumerates every attribute combination a rule's algebra can meet (ranks up to 5, small
dims, every axis spelled positive and negative, symbolic dims), runs the function the rule calls
(looked up on its module at each call, so a planted wrong function is what runs), and compares
what the rewritten node computes with what the original subgraph computes under the ONNX
semantics of tests/onnx_semantics.py. A combination the original rejects proves nothing and is
skipped; one the rule refuses is counted but not compared.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.facts import Sym
from onnxrefine.rewrite.rule import Replacement, _attribute

import onnx_semantics as sem

# A symbolic dim may be any size at run time; these stand for "empty", "one" and "several".
SYM_SIZES = (0, 1, 3)
MAX_RANK = 5
MAX_COUNTEREXAMPLES = 5


@dataclass
class Proof:
    family: str
    checked: int = 0  # combinations the rule's algebra was asked about
    compared: int = 0  # of those, rewrites compared with the original (concretisations counted)
    counterexamples: list = field(default_factory=list)

    def ask(self, call, *args, **kwargs):
        """The algebra's answer, or REFUSED when it raises RewriteRefused."""
        self.checked += 1
        try:
            return call(*args, **kwargs)
        except RewriteRefused:
            return REFUSED

    def compare(self, case, original, rewritten, strict: bool = False) -> None:
        """`original` and `rewritten` are thunks of the ONNX semantics; an original the operator
        rejects proves nothing (there is no output to keep) unless `strict`, where the rewrite must
        be rejected too; a rewrite that fails where the original runs is a counterexample."""
        try:
            expected = original()
        except sem.Invalid as invalid:
            if strict:
                try:
                    rewritten()
                except sem.Invalid:
                    return
                self.fail(case, f"the rewrite runs where the original is rejected ({invalid})")
            return
        self.compared += 1
        try:
            actual = rewritten()
        except sem.Invalid as invalid:
            self.fail(case, f"the rewrite is rejected ({invalid}) where the original runs")
            return
        if not _same(expected, actual):
            self.fail(case, f"original {_text(expected)}, rewrite {_text(actual)}")

    def fail(self, case, why: str) -> None:
        if len(self.counterexamples) < MAX_COUNTEREXAMPLES:
            self.counterexamples.append((case, why))
        if _stop_at_first:
            raise _Caught(self)

    @property
    def holds(self) -> bool:
        return not self.counterexamples

    def summary(self) -> str:
        return f"{self.family}: {self.checked} combinations, {self.compared} rewrites compared"


REFUSED = object()
_stop_at_first = False


class _Caught(Exception):
    def __init__(self, proof: Proof):
        self.proof = proof


def until_caught(prove) -> Proof:
    """Run `prove` up to its first counterexample (a planted wrong rule need not be enumerated
    to the end); the Proof it returns holds only if there was none."""
    global _stop_at_first
    _stop_at_first = True
    try:
        return prove()
    except _Caught as caught:
        return caught.proof
    finally:
        _stop_at_first = False


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _text(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape}"
    return repr(value)


def data(shape) -> np.ndarray:
    """Distinct values, so any element out of place shows."""
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(tuple(shape))


def signed_spellings(axes: Iterable[int], rank: int) -> list[list[int]]:
    """Every way of writing `axes` (non-negative, of a tensor of `rank`) with each axis positive
    or negative."""
    return [list(choice) for choice in itertools.product(*[(a, a - rank) for a in axes])]


def axis_choices(rank: int, ordered: bool = False, max_count: int | None = None) -> list[list[int]]:
    """Every selection of distinct axes of `rank` (in every order when `ordered`), each spelled
    every way."""
    count = rank if max_count is None else min(rank, max_count)
    pick = itertools.permutations if ordered else itertools.combinations
    return [spelled for k in range(count + 1) for chosen in pick(range(rank), k)
            for spelled in signed_spellings(chosen, rank)]


def symbolic_shapes(rank: int, dims=(0, 1, 2, "sym"), max_syms: int | None = None) -> list[tuple]:
    """Every shape of `rank` over `dims` (with at most `max_syms` symbolic dims), each "sym" a
    distinct symbolic dim."""
    return [tuple(Sym(f"d{i}") if d == "sym" else d for i, d in enumerate(choice))
            for choice in itertools.product(dims, repeat=rank)
            if max_syms is None or choice.count("sym") <= max_syms]


def concretisations(*shapes) -> list[tuple[tuple, ...]]:
    """Every assignment of SYM_SIZES to the symbolic dims (Syms) of `shapes` (one Sym one size,
    shared where the same Sym appears twice), as concrete shapes."""
    symbols = []
    for shape in shapes:
        for d in shape:
            if not isinstance(d, int) and all(d is not s for s in symbols):
                symbols.append(d)
    result = []
    for sizes in itertools.product(SYM_SIZES, repeat=len(symbols)):
        def size(d, sizes=sizes):
            return d if isinstance(d, int) else sizes[next(i for i, s in enumerate(symbols) if s is d)]
        result.append(tuple(tuple(size(d) for d in shape) for shape in shapes))
    return result


def unknown_as_none(shape: tuple) -> tuple:
    """A symbolic shape as `ctx.facts.shape` gives it: None for a dim not known (concretise the
    symbolic shape, give the rule this)."""
    return tuple(d if isinstance(d, int) else None for d in shape)


# --- stubs: a rule's rewrite function run on values that are only what it reads ----------------


class StubFacts:
    """ctx.facts for a rule whose input `x` has `shape` (ints and Syms) and `dtype`."""

    def __init__(self, shape: tuple | None, dtype=ir.DataType.FLOAT):
        self._shape, self._dtype = shape, dtype

    def symbolic_shape(self, value):
        return self._shape

    def shape(self, value):
        return None if self._shape is None else unknown_as_none(self._shape)

    def rank(self, value):
        return None if self._shape is None else len(self._shape)

    def dtype(self, value):
        return self._dtype


class StubContext:
    def __init__(self, facts: StubFacts, opset: int = 18):
        self.facts, self._opset = facts, opset

    def opset(self, domain: str = "") -> int:
        return self._opset

    def constant(self, array, hint: str = "") -> ir.Value:
        return constant(array, hint)

    def node(self, op_type, inputs, attributes=None, *, num_outputs: int = 1, hint=None, domain: str = "") -> ir.Node:
        attributes = attributes or {}
        if isinstance(attributes, dict):
            attributes = [_attribute(k, a) for k, a in attributes.items()]
        return ir.Node(domain, op_type, inputs, attributes, num_outputs=num_outputs)


class StubMatch(dict):
    """A Match: nodes and values by name; `array` reads a constant value."""

    def array(self, key: str):
        value = self.get(key)
        return None if value is None or value.const_value is None else value.const_value.numpy()


def constant(array, name: str = "c") -> ir.Value:
    return ir.Value(name=name, const_value=ir.tensor(np.asarray(array)))


def node(op_type: str, inputs=(), **attributes) -> ir.Node:
    """A node with the given attributes (None: left out)."""
    attrs = [ir.AttrInt64s(k, list(v)) if isinstance(v, (list, tuple)) else _attribute(k, v)
             for k, v in attributes.items() if v is not None]
    return ir.Node("", op_type, list(inputs), attrs)


def forwarded(result) -> bool:
    """Whether a rewrite function's result replaces the node by its own input (a no-op removal)."""
    return isinstance(result, Replacement) and not result.nodes


def attribute(n: ir.Node, name: str, default=None):
    found = n.attributes.get(name)
    return default if found is None else found.value


def int_input(n: ir.Node, index: int):
    value = n.inputs[index] if index < len(n.inputs) else None
    return None if value is None else [int(v) for v in value.const_value.numpy().reshape(-1)]
