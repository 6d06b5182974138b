"""Seeded random ONNX models, valid by construction, for differential fuzzing of optimizers.

`generate_model(seed)` grows a graph from one to three graph inputs (float32 mostly, also float16,
float64, int64 and bool; static dims and symbolic ones such as "N") by repeatedly choosing an
operator spec (see `opspecs`) and a pool value it accepts. Intermediates are sometimes exposed as
extra graph outputs, because optimizers must keep those. With `target=<pass name>` the graph is grown
around the pattern that pass looks for (see `patterns.TARGET_PATTERNS`). The same seed, opset and
target always give byte-identical models.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxrefine.fuzz.graphbuilder import (
    BOOL, F16, F32, F64, I64, MAX_NUMEL, NP_TYPES, Dim, GraphBuilder,
)
from onnxrefine.fuzz.graphquery import all_op_types
from onnxrefine.fuzz.opspecs import OP_SPECS
from onnxrefine.fuzz.patterns import TARGET_PATTERNS, pattern_for
from onnxrefine.ir import contained

DEFAULT_OPSET = 18
MIN_OPSET, MAX_OPSET = 13, 21
DEFAULT_MAX_NODES = 20


@dataclass
class GeneratedCase:
    model: onnx.ModelProto
    input_dims: dict[str, int]
    seed: int
    opset: int
    target: str | None = None
    pattern_ops: tuple[str, ...] = field(default_factory=tuple)
    # Concrete shape of every main-graph value under `input_dims`, as the generator computed it.
    value_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def random_inputs(self, seed: int | None = None) -> dict[str, np.ndarray]:
        return random_inputs(self.model, self.input_dims, self.seed if seed is None else seed)


def _rng_for(seed: int, target: str | None) -> np.random.Generator:
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF]
    if target is not None:
        words.append(zlib.crc32(target.encode()))
    return np.random.default_rng(words)


def _input_dims(g: GraphBuilder) -> tuple[Dim, ...]:
    rank = g.weighted([(0, 0.03), (1, 0.1), (2, 0.3), (3, 0.2), (4, 0.37)])
    dims = []
    for axis in range(rank):
        if axis == 0 and rank >= 2 and g.chance(0.4):
            dims.append(g.symbol("N"))
        elif axis == rank - 1 and rank >= 3 and g.chance(0.15):
            dims.append(g.symbol("L", 3, 6))
        elif rank == 4 and axis == 1:
            dims.append(Dim.static(g.randint(1, 4)))
        else:
            dims.append(Dim.static(g.choice([1, 2, 3, 4, 5, 6, 8] if rank < 4 else [1, 3, 4, 5, 6])))
    while int(np.prod([d.size for d in dims])) > MAX_NUMEL // 4:
        dims = dims[1:]
    return tuple(dims)


def _add_inputs(g: GraphBuilder) -> None:
    for index in range(g.weighted([(1, 0.5), (2, 0.35), (3, 0.15)])):
        dtype = F32 if index == 0 and g.chance(0.8) else g.weighted(
            [(F32, 0.55), (F16, 0.15), (F64, 0.1), (I64, 0.12), (BOOL, 0.08)])
        g.add_input(dtype, _input_dims(g))


def _grow(g: GraphBuilder, node_budget: int) -> None:
    specs = [s for s in OP_SPECS if s.min_opset <= g.opset]
    weights = [s.weight for s in specs]
    attempts = 0
    while g.node_count < node_budget and attempts < 6 * node_budget + 20:
        attempts += 1
        spec = g.weighted(list(zip(specs, weights)))
        x = g.pick(spec.accepts)
        if x is None:
            continue
        spec.build(g, x)


def generate_model(seed: int, *, max_nodes: int = DEFAULT_MAX_NODES, opset: int = DEFAULT_OPSET,
                   target: str | None = None) -> GeneratedCase:
    """A random valid model; `target` names an optimizer pass whose pattern the graph must contain."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset {opset} outside the supported range {MIN_OPSET}..{MAX_OPSET}")
    pattern = pattern_for(target) if target is not None else None
    g = GraphBuilder(_rng_for(seed, target), opset)
    _add_inputs(g)
    budget = g.randint(max(2, max_nodes // 3), max(2, max_nodes))
    if pattern is not None:
        _grow(g, g.randint(0, budget // 3))
        for _ in range(g.randint(1, 2)):
            pattern.build(g)
        _grow(g, g.node_count + g.randint(0, budget // 2))
    else:
        _grow(g, budget)
    if not g.output_values():
        x = g.inputs[0]
        g.node1("Identity", [x.name], x.dtype, x.dims)
    inputs = {v.name for v in g.inputs}
    for value in g.pool:
        if value.name not in inputs and g.consumers.get(value.name) and g.chance(0.08):
            g.extra_outputs.append(value)
    model = g.to_model()
    return GeneratedCase(model, dict(g.input_dims), seed, opset, target,
                         pattern.ops if pattern is not None else (),
                         {v.name: v.sizes for v in g.pool})


def _concrete_shape(value_info: onnx.ValueInfoProto, input_dims: dict[str, int]) -> list[int]:
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else input_dims[d.dim_param] for d in dims]


def random_inputs(model: onnx.ModelProto, input_dims: dict[str, int], seed: int) -> dict:
    """Inputs with negatives, zeros and a spread of magnitudes (not only [0, 1))."""
    rng = np.random.default_rng(seed)
    feeds = {}
    initializers = {t.name for t in model.graph.initializer}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        dtype = info.type.tensor_type.elem_type
        shape = _concrete_shape(info, input_dims)
        if dtype == BOOL:
            feeds[info.name] = np.asarray(rng.random(shape) < 0.5)
        elif dtype == I64:
            feeds[info.name] = np.asarray(rng.integers(-6, 7, size=shape), dtype=np.int64)
        else:
            scale = rng.choice([1.0, 1.0, 4.0, 30.0])
            feeds[info.name] = np.asarray(rng.standard_normal(shape) * scale, dtype=NP_TYPES[dtype])
    return feeds


def _session(model: onnx.ModelProto):
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    from onnxrefine.verify.ort import inference_session

    return inference_session(model, options)


def check_case(case: GeneratedCase, *, run: bool = True, intermediates: bool = False) -> None:
    """Raise if the model fails the checker, strict shape inference, or an onnxruntime run.

    With `intermediates`, every main-graph value is also fetched and its runtime shape compared
    with the one the generator computed (a check on the generator's own shape rules).
    """
    onnx.checker.check_model(case.model, full_check=True)
    contained.infer_shapes(case.model, check_type=True, strict_mode=True, data_prop=True)  # random models may abort it
    if not run:
        return
    model = case.model
    if intermediates:
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        declared = {o.name for o in model.graph.output} | {i.name for i in model.graph.input}
        for name in case.value_shapes:
            if name not in declared:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
    session = _session(model)
    names = [o.name for o in session.get_outputs()]
    results = session.run(None, case.random_inputs())
    for name, result in zip(names, results):
        expected = case.value_shapes.get(name)
        if expected is not None and tuple(result.shape) != tuple(expected):
            raise AssertionError(f"{name}: generator computed shape {list(expected)}, "
                                 f"onnxruntime gave {list(result.shape)}")


__all__ = ["GeneratedCase", "generate_model", "random_inputs", "check_case", "all_op_types",
           "TARGET_PATTERNS", "DEFAULT_OPSET"]
