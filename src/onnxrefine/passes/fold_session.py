"""Constant folding's onnxruntime evaluations of one sweep in one session (`evaluate_sweep`).

A sweep of fold_constants (folding.py) evaluates, in graph order, every node whose inputs are
constants, and a node reading only what earlier nodes folded is evaluated on their results. One
session per node cost ~2 ms each (llama-kv: 106 of them); here every node the sweep may evaluate
is an output of one model, run once, and folding.py takes a node's outputs from that run only
where its inputs are the very values the run computed them from (`SweepResults.outputs`). Every
guard of folding.py is still asked per node before the run's outputs stand in for its session,
its element type and shape those the sweep's shape inference gave the node (inference of each
node's own single-node model again cost 0.3-0.5 ms a node, a fifth of llama-kv's folding): what
changes is only where its outputs are computed: the same onnxruntime kernel, on the same input
values, under the same session options.

Before anything runs, ONNX shape inference over the sweep's model (data propagation bounded as
in `ir/peak.py`, in the contained child) must give every output of a node its element type and a
static shape within the per-tensor cap, the sweep's outputs together at most SWEEP_BYTES: a node
it cannot so bound (and every node reading it) is left to its own session, whose guards refuse
it or evaluate it as before. Also left to their own session: nodes onnxruntime may run through
inserted float32 Casts (float16, bfloat16: folding.py asks the runtime for its placed graph),
strings, and operators whose kernel may take a constant input another way than a computed one
(prepacked weights: every fold's session turns prepacking off, as verification's strict runs do,
and these stay apart all the same). A sweep whose model fails to load or run falls back to a
session per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.verify.ort import inference_session

# Inputs up to this many elements are handed to shape inference as data (shapes, axes, repeats).
DATA_FOR_INFERENCE = 4096
# The outputs of one sweep's run, held at once.
SWEEP_BYTES = 64 << 20
# onnxruntime's CPU kernels for these prepack a constant weight when the session is made: an
# input computed in the same run takes the other path.
_PREPACKING = frozenset("""MatMul Gemm Conv ConvTranspose ConvInteger MatMulInteger QLinearConv QLinearMatMul
    LSTM GRU RNN""".split())


def session_options():
    """onnxruntime's settings for a fold: CPU, graph optimizations off, one thread, no weight
    prepacking (a folded MatMul's value is the one verification's strict runs of the original
    compute: runtime.DISABLE_PREPACKING)."""
    from onnxrefine.runtime import DISABLE_PREPACKING, require_onnxruntime
    ort = require_onnxruntime()  # here, not at module level: the CLI's start-up

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry(DISABLE_PREPACKING, "1")
    options.log_severity_level = 4
    return options


def is_low_precision(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


@dataclass
class SweepResults:
    """What one run of a sweep's nodes computed, and from what."""

    # id(node) -> (node, its inputs: a constant Value or the name of a value the run computed, its outputs)
    planned: dict[int, tuple] = field(default_factory=dict)
    computed: dict[str, np.ndarray] = field(default_factory=dict)  # run's value name -> array
    # id(folded constant) -> (the constant, the run's name of the value it replaced)
    folded: dict[int, tuple[ir.Value, str]] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # id(output of a planned node) -> run's name
    # run's value name -> (dtype, static shape) shape inference gave it over the sweep's model
    types: dict[str, tuple[np.dtype, tuple]] = field(default_factory=dict)

    def outputs(self, node: ir.Node) -> list[np.ndarray] | None:
        """The node's named outputs as the run computed them, where each of its inputs is the
        constant the run read or the folded constant of a value the run computed; else None."""
        plan = self.planned.get(id(node))
        if plan is None or plan[0] is not node or len(plan[1]) != len(node.inputs):
            return None
        for value, source in zip(node.inputs, plan[1]):
            if isinstance(source, str):
                folded = self.folded.get(id(value)) if value is not None else None
                if folded is None or folded[0] is not value or folded[1] != source:
                    return None
            elif value is not source:
                return None
        return [self.computed[name] for name in plan[2]]

    def inferred(self, node: ir.Node) -> list[tuple[np.dtype, tuple]]:
        """(dtype, static shape) of each named output of a planned node, as the sweep's shape
        inference gave them (what its own single-node model's inference would be asked for)."""
        return [self.types[name] for name in self.planned[id(node)][2]]

    def record(self, replaced: ir.Value, constant: ir.Value) -> None:
        """`constant` (folded) stands for `replaced`, a value the run computed."""
        name = self.names.get(id(replaced))
        if name is not None:
            self.folded[id(constant)] = (constant, name)


def evaluate_sweep(nodes: list[ir.Node], arrays: dict[int, np.ndarray], opset_imports: dict[str, int],
                   ir_version: int, per_tensor_bytes: int) -> SweepResults | None:
    """One run of the sweep's candidate `nodes` (graph order; each reads constants, whose
    arrays `arrays` holds by id(value), or outputs of earlier candidates). None when fewer than
    two can be run together, or the run fails."""
    names = {id(v): f"v{i}_{j}" for i, node in enumerate(nodes) for j, v in enumerate(node.outputs) if v.name}
    model, feeds = _sweep_model(nodes, names, arrays, opset_imports, ir_version)
    planned = _plan(model, nodes, names, arrays, per_tensor_bytes)
    if planned is None or len(planned.planned) < 2:
        return None
    if len(planned.planned) < len(nodes):  # what was left out is not run
        model, feeds = _sweep_model([plan[0] for plan in planned.planned.values()], planned.names, arrays,
                                    opset_imports, ir_version)
    wanted = [name for plan in planned.planned.values() for name in plan[2]]
    try:
        session = inference_session(model, session_options())
        planned.computed = dict(zip(wanted, session.run(wanted, feeds)))
    except Exception:  # noqa: BLE001 - any node onnxruntime cannot run: each gets its own session
        return None
    if any(not isinstance(planned.computed[name], np.ndarray) for name in wanted):
        return None
    return planned


def _plan(model: onnx.ModelProto, nodes, names, arrays, per_tensor_bytes) -> SweepResults | None:
    """The candidates (`model`: all of them) shape inference bounds, with their inputs' sources
    and outputs' names."""
    from onnxrefine.ir import peak

    try:
        inferred = peak.infer_shapes_bounded(model)
    except Exception:  # noqa: BLE001 - inference failing (or crashing, contained) bounds nothing
        return None
    types = {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        tensor_type = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tensor_type is None or tensor_type.elem_type == 0 or not tensor_type.HasField("shape"):
            continue
        if all(d.HasField("dim_value") for d in tensor_type.shape.dim):
            types[value.name] = (onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type),
                                 tuple(d.dim_value for d in tensor_type.shape.dim))
    result, total = SweepResults(), 0
    sizes: dict[str, int] = {}  # run's value name -> bytes, for the planned nodes' outputs
    for node in nodes:
        sources, input_bytes, dtypes = [], [], []
        for value in node.inputs:
            if value is None:
                sources.append(None)
            elif id(value) in arrays:
                sources.append(value)
                input_bytes.append(arrays[id(value)].nbytes)
                dtypes.append(arrays[id(value)].dtype)
            elif names.get(id(value)) in sizes:
                sources.append(names[id(value)])
                input_bytes.append(sizes[names[id(value)]])
                dtypes.append(types[names[id(value)]][0])
            else:
                break  # read from a node left out
        else:
            outputs = [names[id(v)] for v in node.outputs if v.name]
            if node.op_type in _PREPACKING or not outputs or any(name not in types for name in outputs):
                continue
            out_types = [types[name] for name in outputs]
            out_bytes = [math.prod(shape) * max(np.dtype(dtype).itemsize, 1) for dtype, shape in out_types]
            cap = max([per_tensor_bytes, *input_bytes])
            if any(size > cap for size in out_bytes) or total + sum(out_bytes) > SWEEP_BYTES:
                continue
            if any(is_low_precision(d) or np.dtype(d).kind in "OSU" for d in dtypes + [t[0] for t in out_types]):
                continue
            total += sum(out_bytes)
            sizes.update(zip(outputs, out_bytes))
            result.planned[id(node)] = (node, sources, outputs)
    result.names = {key: name for key, name in names.items() if name in sizes}
    result.types = {name: types[name] for name in sizes}
    return result


def _sweep_model(nodes, names, arrays, opset_imports, ir_version) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The nodes as one model: constants as in a single-node model (small ones initializers,
    the others fed), every named output of a node a model output."""
    constants: dict[int, str] = {}
    graph_inputs, initializers, feeds, protos = [], [], {}, []
    for node in nodes:
        proto = ir.serde.serialize_node(node)
        del proto.input[:]
        for value in node.inputs:
            if value is None:
                proto.input.append("")
            elif id(value) in names:
                proto.input.append(names[id(value)])
            else:
                if id(value) not in constants:
                    constants[id(value)] = f"c{len(constants)}"
                    add_constant(constants[id(value)], arrays[id(value)], graph_inputs, initializers, feeds)
                proto.input.append(constants[id(value)])
        del proto.output[:]
        proto.output.extend(names.get(id(v), "") if v.name else "" for v in node.outputs)
        proto.name = f"fold{len(protos)}"
        protos.append(proto)
    return fold_model(protos, graph_inputs, initializers, opset_imports, ir_version), feeds


def add_constant(name: str, array: np.ndarray, graph_inputs: list, initializers: list, feeds: dict) -> None:
    """A constant input of a fold's model: an initializer when shape inference may read it as
    data (DATA_FOR_INFERENCE), else a graph input fed at run time."""
    if array.size <= DATA_FOR_INFERENCE:
        initializers.append(onnx.numpy_helper.from_array(array, name))
    else:
        elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        graph_inputs.append(onnx.helper.make_tensor_value_info(name, elem, array.shape))
        feeds[name] = array


def fold_model(protos: list[onnx.NodeProto], graph_inputs: list, initializers: list, opset_imports: dict[str, int],
               ir_version: int) -> onnx.ModelProto:
    """A fold's model of the nodes `protos` (their domains "ai.onnx" written ""), each named
    output of them a model output."""
    for proto in protos:
        if proto.domain == "ai.onnx":
            proto.domain = ""
    outputs = [onnx.ValueInfoProto(name=name) for proto in protos for name in proto.output if name]
    graph = onnx.helper.make_graph(protos, "fold", graph_inputs, outputs, initializers)
    opsets = [onnx.helper.make_opsetid(d, v) for d, v in opset_imports.items() if d != "ai.onnx"]
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    model.ir_version = max(ir_version, 4)
    return model
