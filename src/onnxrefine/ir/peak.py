"""What evaluating a model holds at once, estimated from shapes (`estimate_peak`): intermediate
values alive at the same time, in graph order, each freed after its last use, plus sparse
initializers (densified when loaded). Weights are not counted: they stay memory-mapped from their
file. A Loop or Scan makes the estimate uncertain; a Loop with a constant trip count over
`resources.MAX_LOOP_TRIPS` is recorded as huge. What the budget decides from an estimate is
resources.py's (check_runnable, reference_refusal, needs_watch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import onnx

from onnxrefine.ir import contained
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.protofacts import light_model, pin_input_shapes
from onnxrefine.resources import MAX_LOOP_TRIPS, ResourceLimitError, format_bytes, memory_budget

# Operators whose output size depends on input values, not only shapes; shape inference leaves
# their outputs unknown, and so does everything downstream.


_LOOPS = ("Loop", "Scan")


@dataclass
class PeakEstimate:
    """Peak bytes of intermediate values in one evaluation (onnxruntime's element types, and as
    the float64 reference holds them), the largest value, and why the figure may be low."""

    peak_bytes: int = 0
    float64_bytes: int = 0
    largest: tuple[str, int] = ("", 0)
    uncertain: list[str] = field(default_factory=list)
    huge_loops: list[tuple[str, int]] = field(default_factory=list)

    def describe(self) -> str:
        text = f"~{format_bytes(self.peak_bytes)} of tensors at once"
        if self.largest[1]:
            text += f" (largest: {self.largest[0]!r}, {format_bytes(self.largest[1])})"
        return text


def estimate_peak(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None) -> PeakEstimate:
    """Estimate from shapes alone (no weights read, nothing evaluated); `feeds` pins the inputs'
    shapes (their values are not read)."""
    estimate = PeakEstimate()
    light = light_model(model)
    if feeds:
        pin_input_shapes(light, feeds)
    try:
        inferred = infer_shapes_bounded(light)
    except Exception as exc:
        estimate.uncertain.append(f"shape inference failed ({str(exc).splitlines()[0][:120] if str(exc) else 'error'})")
        inferred = light
    graph = inferred.graph
    types: dict[str, tuple[int, tuple | None]] = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.HasField("tensor_type"):
            tensor_type = value.type.tensor_type
            shape = None
            if tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tensor_type.shape.dim):
                shape = tuple(d.dim_value for d in tensor_type.shape.dim)
            types[value.name] = (tensor_type.elem_type, shape)
    for name, array in (feeds or {}).items():
        types[name] = (types.get(name, (onnx.TensorProto.FLOAT, None))[0], tuple(np.shape(array)))
    constants = {init.name for init in graph.initializer}
    fixed = sum(_nbytes(sparse.values.data_type, tuple(sparse.dims)) for sparse in graph.sparse_initializer)
    fixed64 = sum(_nbytes(sparse.values.data_type, tuple(sparse.dims), float64=True)
                  for sparse in graph.sparse_initializer)
    for sparse in graph.sparse_initializer:
        size = _nbytes(sparse.values.data_type, tuple(sparse.dims))
        if size > estimate.largest[1]:
            estimate.largest = (sparse.values.name, size)
    outputs = {out.name for out in graph.output}
    last_use: dict[str, int] = {}
    nodes = list(graph.node)
    for index, node in enumerate(nodes):
        for name in (*node.input, *_subgraph_reads(node)):
            last_use[name] = index
    live: dict[str, tuple[int, int]] = {}
    total = [0, 0]  # running sums of `live` (a sum per node would be quadratic on wide graphs)

    def hold(name, elem, shape):
        drop(name)
        live[name] = (_nbytes(elem, shape), _nbytes(elem, shape, float64=True))
        total[0] += live[name][0]
        total[1] += live[name][1]

    def drop(name):
        sizes = live.pop(name, None)
        if sizes is not None:
            total[0] -= sizes[0]
            total[1] -= sizes[1]

    for name in (feeds or {}):
        elem, shape = types.get(name, (onnx.TensorProto.FLOAT, None))
        if shape is not None:
            hold(name, elem, shape)
    peak = peak64 = 0
    unknown = 0
    for index, node in enumerate(nodes):
        _check_loop(node, graph, estimate)
        for name in node.output:
            if not name:
                continue
            elem, shape = types.get(name, (0, None))
            if shape is None:
                unknown += 1
                continue
            hold(name, elem, shape)
            if live[name][0] > estimate.largest[1]:
                estimate.largest = (name, live[name][0])
        peak, peak64 = max(peak, total[0]), max(peak64, total[1])
        for name in node.input:
            if last_use.get(name) == index and name not in outputs and name not in constants:
                drop(name)
        for name in node.output:  # a value nobody reads (dead code) is freed once computed
            if name and name not in last_use and name not in outputs:
                drop(name)
    if unknown:
        estimate.uncertain.append(f"{unknown} value(s) of unknown shape")
    estimate.peak_bytes, estimate.float64_bytes = peak + fixed, peak64 + fixed64
    return estimate


# onnx's data propagation holds the values it propagates (one protobuf message per element): a
# Concat doubling a 4 KiB constant 15 times took 25 s and grows with the size. Shape tensors are
# small; above this many elements a value is no shape, and propagation is not attempted.
DATA_PROP_MAX_ELEMENTS = 4096


_DATA_PROP_OPS = frozenset("Concat Add Sub Mul Div Cast Gather Slice Squeeze Unsqueeze Shape Size Range".split())


def infer_shapes_bounded(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx shape inference with data propagation (exporters compute Reshape targets from
    Shape->Gather->Concat chains) unless a plain pass shows a 0-D/1-D value of a propagating
    operator larger than DATA_PROP_MAX_ELEMENTS: then the plain pass's result."""
    plain = contained.infer_shapes(model, strict_mode=False)
    if not any(node.op_type in _DATA_PROP_OPS for node in model.graph.node):
        return plain  # nothing to propagate: one pass (a 200,000-node Relu chain: 7 s a pass here)
    sizes = {}
    for value in list(plain.graph.value_info) + list(plain.graph.output):
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            dims = tensor_type.shape.dim
            if len(dims) <= 1 and all(d.HasField("dim_value") for d in dims):
                sizes[value.name] = math.prod(d.dim_value for d in dims)
    for init in plain.graph.initializer:
        if len(init.dims) <= 1:
            sizes[init.name] = math.prod(init.dims)
    for node in plain.graph.node:
        if node.op_type in _DATA_PROP_OPS and any(sizes.get(name, 0) > DATA_PROP_MAX_ELEMENTS
                                                  for name in (*node.input, *node.output)):
            return plain
    return contained.infer_shapes(model, strict_mode=False, data_prop=True)


def _nbytes(elem_type: int, shape: tuple, float64: bool = False) -> int:
    count = math.prod(shape)
    if float64:
        return count * 8  # the float64 reference holds floats as float64, integers as int64
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except Exception:
        itemsize = 8
    return count * max(1, itemsize)


def _subgraph_reads(node: onnx.NodeProto) -> set:
    names: set = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            for inner in graph.node:
                names.update(inner.input)
                names |= _subgraph_reads(inner)
    return names


def _check_loop(node: onnx.NodeProto, graph: onnx.GraphProto, estimate: PeakEstimate) -> None:
    """A Loop or Scan (its memory and time depend on its trip count): uncertain; a Loop whose
    constant trip count exceeds MAX_LOOP_TRIPS is recorded as huge (never run)."""
    if node.op_type not in _LOOPS or node.domain not in STANDARD_DOMAINS:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                for inner in sub.node:
                    _check_loop(inner, sub, estimate)
        return
    label = node.name or node.output[0]
    estimate.uncertain.append(f"{node.op_type} {label!r}")
    if node.op_type == "Loop" and node.input and node.input[0]:
        trips = _constant_int(graph, node.input[0])
        if trips is not None and trips > MAX_LOOP_TRIPS:
            estimate.huge_loops.append((label, trips))


def _constant_int(graph: onnx.GraphProto, name: str) -> int | None:
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name and math.prod(init.dims) == 1:
            return int(numpy_helper.to_array(init).reshape(-1)[0])
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value" and math.prod(attr.t.dims) == 1:
                    return int(numpy_helper.to_array(attr.t).reshape(-1)[0])
                if attr.name == "value_int":
                    return int(attr.i)
    return None


def check_sparse(model: onnx.ModelProto, budget: int | None = None) -> None:
    """ResourceLimitError when the model's sparse initializers, made dense (onnx-ir holds no sparse
    tensors), exceed the memory budget: a few stored values can declare a multi-GB shape."""
    budget = memory_budget() if budget is None else budget
    graphs, total, largest = [model.graph], 0, ("", 0)
    while graphs:
        graph = graphs.pop()
        for sparse in graph.sparse_initializer:
            size = _nbytes(sparse.values.data_type, tuple(sparse.dims))
            total += size
            largest = max(largest, (sparse.values.name, size), key=lambda item: item[1])
        for node in graph.node:
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
    if total > budget:
        raise ResourceLimitError(f"sparse initializer(s) would take {format_bytes(total)} made dense (largest: "
                                 f"{largest[0]!r}, {format_bytes(largest[1])}): over the memory budget of "
                                 f"{format_bytes(budget)} (--memory-budget)")
