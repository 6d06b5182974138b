"""Typed values, dimensions and the graph under construction, for the random model generator.

Every value carries its element type and, per axis, a `Dim`: the concrete size for the case's
symbolic bindings plus an identity key. Static dims have an int key, graph-input symbols a string
key, and computed dims (a symbolic dim merged with others, a conv over a symbolic width) a fresh
object. Two dims are statically known equal only when their keys are equal; the generator uses
that to build shapes that are valid by construction, and declares them to ONNX the same way
(dim_value, dim_param, or an unnamed dim).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F16, F64, I64, I32, BOOL = (
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
    TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
)
FLOATS = frozenset({F32, F16, F64})
NUMERIC = frozenset({F32, F16, F64, I64})
ALL_TYPES = frozenset({F32, F16, F64, I64, BOOL})
NP_TYPES = {F32: np.float32, F16: np.float16, F64: np.float64, I64: np.int64, I32: np.int32, BOOL: np.bool_}

MAX_NUMEL = 2048
MAX_RANK = 6


class _ComputedKey:
    """Identity of a dim computed at run time; equal only to itself."""

    __slots__ = ()


@dataclass(frozen=True)
class Dim:
    size: int
    key: object

    @staticmethod
    def static(size: int) -> Dim:
        return Dim(int(size), int(size))

    @staticmethod
    def computed(size: int) -> Dim:
        return Dim(int(size), _ComputedKey())

    @property
    def is_static(self) -> bool:
        return isinstance(self.key, int)

    def times(self, other: Dim) -> Dim:
        if self.is_static and other.is_static:
            return Dim.static(self.size * other.size)
        if self.is_static and self.size == 1:
            return other
        if other.is_static and other.size == 1:
            return self
        return Dim.computed(self.size * other.size)


def product(dims) -> Dim:
    result = Dim.static(1)
    for dim in dims:
        result = result.times(dim)
    return result


@dataclass(eq=False)
class Value:
    name: str
    dtype: int
    dims: tuple[Dim, ...]
    # For 1-D int64 tensors whose contents are known dims (Shape outputs and what is computed from them).
    shape_vals: tuple[Dim, ...] | None = None
    # Unsqueeze of a vector: ONNX data propagation (1.23) then flattens it in Add/Sub/Mul and
    # rejects partners whose element counts differ, even though broadcasting is valid.
    flat_data: bool = False

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def numel(self) -> int:
        return int(np.prod([d.size for d in self.dims], dtype=np.int64))

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def is_static(self) -> bool:
        return all(d.is_static for d in self.dims)


def broadcast_dims(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """Multidirectional broadcast, accepted only where it is valid for every symbol binding."""
    rank = max(len(a), len(b))
    a = (Dim.static(1),) * (rank - len(a)) + tuple(a)
    b = (Dim.static(1),) * (rank - len(b)) + tuple(b)
    out = []
    for da, db in zip(a, b):
        if da.key == db.key:
            out.append(da)
        elif da.is_static and da.size == 1:
            out.append(db)
        elif db.is_static and db.size == 1:
            out.append(da)
        else:
            return None
    return tuple(out)


def declared_type(value: Value) -> onnx.TypeProto:
    shape = []
    for dim in value.dims:
        if dim.is_static:
            shape.append(dim.size)
        elif isinstance(dim.key, str):
            shape.append(dim.key)
        else:
            shape.append(None)
    return helper.make_tensor_type_proto(value.dtype, shape)


@dataclass
class _Scope:
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)


class GraphBuilder:
    """The graph being grown: a pool of usable values, nodes, constants, and the seeded RNG."""

    def __init__(self, rng: np.random.Generator, opset: int):
        self.rng = rng
        self.opset = opset
        self.inputs: list[Value] = []
        self.pool: list[Value] = []
        self.consumers: dict[str, int] = {}
        self.extra_outputs: list[Value] = []
        self.no_output: set[str] = set()
        self.input_dims: dict[str, int] = {}
        self._scopes = [_Scope()]
        self._counter = 0
        self.node_count = 0
        self.allow_constant_nodes = True
        self.allow_empty = False   # set only by patterns that build on zero-size tensors

    # --- random helpers -------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi], both ends included."""
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, items):
        items = list(items)
        return items[int(self.rng.integers(len(items)))]

    def weighted(self, items_and_weights):
        items = [item for item, _ in items_and_weights]
        weights = np.array([w for _, w in items_and_weights], dtype=np.float64)
        return items[int(self.rng.choice(len(items), p=weights / weights.sum()))]

    def sample(self, items, k: int) -> list:
        items = list(items)
        picked = self.rng.choice(len(items), size=k, replace=False)
        return [items[int(i)] for i in picked]

    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}_{self._counter}"

    # --- pool --------------------------------------------------------------------------------
    def add_input(self, dtype: int, dims: tuple[Dim, ...]) -> Value:
        value = Value(f"in{len(self.inputs)}", dtype, tuple(dims))
        self.inputs.append(value)
        self.pool.append(value)
        for dim in dims:
            if isinstance(dim.key, str):
                self.input_dims[dim.key] = dim.size
        return value

    def symbol(self, name: str, low: int = 2, high: int = 3) -> Dim:
        """The graph-input symbol `name`, bound once per case."""
        if name not in self.input_dims:
            self.input_dims[name] = self.randint(low, high)
        return Dim(self.input_dims[name], name)

    def pick(self, accept) -> Value | None:
        """A pool value accepted by `accept`, preferring recent values nothing consumes yet.

        Zero-size values are never picked: only patterns that mean to make them (Reshape of an
        empty tensor) use them, since most ops (reductions, pools, ArgMax) reject them."""
        candidates = [(i, v) for i, v in enumerate(self.pool) if v.numel != 0 and accept(v)]
        if not candidates:
            return None
        n = len(self.pool)
        weights = [
            (1.0 + i / n) * (3.0 if self.consumers.get(v.name, 0) == 0 else 1.0)
            for i, v in candidates
        ]
        return self.weighted([(v, w) for (_, v), w in zip(candidates, weights)])

    @property
    def in_subgraph(self) -> bool:
        return len(self._scopes) > 1

    # --- emission -----------------------------------------------------------------------------
    def const(self, array: np.ndarray, hint: str = "c") -> str:
        """A constant input: an initializer, or now and then a Constant node."""
        name = self.fresh(hint)
        array = np.asarray(array)
        # np.ascontiguousarray would turn a 0-d array into shape (1,)
        tensor = numpy_helper.from_array(array if array.flags.c_contiguous else array.copy(), name)
        if self.allow_constant_nodes and self.chance(0.15):
            self._scopes[-1].nodes.append(
                helper.make_node("Constant", [], [name], name=f"n_{name}", value=tensor))
        else:
            self._scopes[-1].initializers.append(tensor)
        return name

    def ints(self, values, hint: str = "i") -> str:
        return self.const(np.array(values, dtype=np.int64), hint)

    def random_array(self, dtype: int, shape, scale: float = 1.0) -> np.ndarray:
        if dtype == BOOL:
            return np.asarray(self.rng.random(shape) < 0.5)
        if dtype in (I64, I32):
            return np.asarray(self.rng.integers(-4, 5, size=shape), dtype=NP_TYPES[dtype])
        return np.asarray(self.rng.standard_normal(shape) * scale, dtype=NP_TYPES[dtype])

    def node(self, op: str, inputs: list[str], out_types, **attrs) -> list[Value]:
        """Emit one node. `out_types` is a list of (dtype, dims) or (dtype, dims, shape_vals)."""
        outputs = []
        for spec in out_types:
            dtype, dims = spec[0], tuple(spec[1])
            shape_vals = spec[2] if len(spec) > 2 else None
            # Empty tensors are kept out on purpose: shape rules here assume every dim >= 1.
            assert self.allow_empty or all(d.size >= 1 for d in dims), \
                f"{op}: empty output {[d.size for d in dims]}"
            outputs.append(Value(self.fresh(op.lower()), dtype, dims, shape_vals))
        name = self.fresh(f"n_{op}")
        self._scopes[-1].nodes.append(
            helper.make_node(op, inputs, [v.name for v in outputs], name=name, **attrs))
        for used in inputs:
            if used:
                self.consumers[used] = self.consumers.get(used, 0) + 1
        self.node_count += 1
        if not self.in_subgraph:
            self.pool.extend(outputs)
        return outputs

    def node1(self, op: str, inputs: list[str], dtype: int, dims, shape_vals=None, **attrs) -> Value:
        return self.node(op, inputs, [(dtype, dims, shape_vals)], **attrs)[0]

    def subgraph(self, name: str, build) -> onnx.GraphProto:
        """Build a branch graph: `build()` emits nodes and returns the values it outputs."""
        self._scopes.append(_Scope())
        try:
            outputs = build()
        finally:
            scope = self._scopes.pop()
        return helper.make_graph(
            scope.nodes, name, [],
            [helper.make_value_info(v.name, declared_type(v)) for v in outputs],
            initializer=scope.initializers)

    # --- result -------------------------------------------------------------------------------
    def output_values(self) -> list[Value]:
        input_names = {v.name for v in self.inputs}
        chosen, seen = [], set()
        for value in self.pool:
            if value.name in input_names or value.name in self.no_output:
                continue
            if self.consumers.get(value.name, 0) == 0 or value in self.extra_outputs:
                if value.name not in seen:
                    seen.add(value.name)
                    chosen.append(value)
        return chosen

    def to_model(self, graph_name: str = "fuzz") -> onnx.ModelProto:
        scope = self._scopes[0]
        graph = helper.make_graph(
            scope.nodes, graph_name,
            [helper.make_value_info(v.name, declared_type(v)) for v in self.inputs],
            [helper.make_value_info(v.name, declared_type(v)) for v in self.output_values()],
            initializer=scope.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="onnxrefine.fuzz")
        model.ir_version = helper.find_min_ir_version_for(opsets)
        return model


@dataclass(frozen=True)
class OpSpec:
    op: str
    dtypes: frozenset
    ranks: tuple[int, int]
    build: Callable[[GraphBuilder, Value], "list[Value] | None"]
    weight: float = 1.0
    min_opset: int = 13

    def accepts(self, value: Value) -> bool:
        return value.dtype in self.dtypes and self.ranks[0] <= value.rank <= self.ranks[1]


def numel(dims) -> int:
    return int(np.prod([d.size for d in dims], dtype=np.int64))


def maybe_negative(g: GraphBuilder, axis: int, rank: int) -> int:
    """axis, or its negative spelling; an axis equal to rank (Flatten) has none."""
    return axis - rank if axis < rank and g.chance(0.4) else axis


def scalar(g: GraphBuilder, dtype: int, value) -> str:
    return g.const(np.array(value, dtype=NP_TYPES[dtype]))
