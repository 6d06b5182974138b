"""Float64-reference kernels for Constant and the control-flow ops (If, Loop, Scan).

Subgraphs run through ``call.evaluator.run_subgraph`` in the node's scope (outer values visible).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnxrefine.errors import OnnxRefineError
from onnxrefine.verify.reference.kernels import tensor as _tensor
from onnxrefine.verify.reference.base import NodeCall, kernel


@kernel("Constant")
def _run_constant(call: NodeCall) -> list:
    for key in ("value", "sparse_value"):
        if key in call.attrs:
            return [call.attrs[key]]
    scalar_kinds = {
        "value_float": np.float64, "value_int": np.int64,
    }
    for key, dtype in scalar_kinds.items():
        if key in call.attrs:
            return [np.array(call.attrs[key], dtype=dtype)]
    if "value_floats" in call.attrs:
        return [np.array(call.attrs["value_floats"], dtype=np.float64)]
    if "value_ints" in call.attrs:
        return [np.array(call.attrs["value_ints"], dtype=np.int64)]
    if "value_string" in call.attrs:
        return [np.array(call.attrs["value_string"], dtype=object)]
    if "value_strings" in call.attrs:
        return [np.array(call.attrs["value_strings"], dtype=object)]
    raise OnnxRefineError(f"Constant node {call.node.name!r} has no value attribute")


@kernel("If")
def _run_if(call: NodeCall) -> list:
    cond = bool(np.asarray(call.inputs[0]).reshape(-1)[0])
    branch = call.attrs["then_branch" if cond else "else_branch"]
    return call.evaluator.run_subgraph(branch, [], call.scope, tracked_by=call.node)


@kernel("Loop")
def _run_loop(call: NodeCall) -> list:
    body = call.attrs["body"]
    max_trip = call.input(0)
    cond = call.input(1)
    carried = list(call.inputs[2:])
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    scan_values: list[list[Any]] = [[] for _ in range(n_scan)]
    trip_limit = int(np.asarray(max_trip).reshape(-1)[0]) if max_trip is not None else None
    keep_going = bool(np.asarray(cond).reshape(-1)[0]) if cond is not None else True
    iteration = 0
    while keep_going and (trip_limit is None or iteration < trip_limit):
        cond_in = np.array(keep_going, dtype=bool)
        outs = call.evaluator.run_subgraph(
            body, [np.array(iteration, dtype=np.int64), cond_in, *carried], call.scope
        )
        # Like onnxruntime, the body's condition output is honoured even when the cond input is omitted.
        keep_going = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = list(outs[1 : 1 + n_carried])
        for k in range(n_scan):
            scan_values[k].append(outs[1 + n_carried + k])
        iteration += 1
    stacked = []
    for k, values in enumerate(scan_values):
        if values:
            stacked.append(np.stack([np.asarray(v) for v in values]))
        else:
            stacked.append(_empty_scan_output(body.output[1 + n_carried + k]))
    return carried + stacked


def _empty_scan_output(value_info: onnx.ValueInfoProto) -> np.ndarray:
    elem = value_info.type.tensor_type.elem_type
    dtype = _tensor.internal_dtype_for(elem) if elem else np.float64
    dims = [d.dim_value for d in value_info.type.tensor_type.shape.dim] if value_info.type.tensor_type.HasField("shape") else []
    return np.zeros([0, *dims], dtype=dtype)


def _run_scan_opset8(call: NodeCall, body, num_scan_inputs: int) -> list:
    """Scan-8: every input has a leading batch axis; each batch element is scanned on its own."""
    lens, *rest = call.inputs
    n_state = len(rest) - num_scan_inputs
    directions = call.attr("directions") or [0] * num_scan_inputs
    batch = rest[0].shape[0]
    per_batch = []
    for b in range(batch):
        state = [s[b] for s in rest[:n_state]]
        length = rest[n_state].shape[1] if lens is None else int(lens[b])
        scans = [x[b][:length][::-1] if d else x[b][:length] for x, d in zip(rest[n_state:], directions)]
        collected: list[list[Any]] = []
        for t in range(length):
            outs = call.evaluator.run_subgraph(body, [*state, *(s[t] for s in scans)], call.scope)
            state = outs[:n_state]
            if not collected:
                collected = [[] for _ in outs[n_state:]]
            for k, value in enumerate(outs[n_state:]):
                collected[k].append(value)
        per_batch.append((state, [np.stack(c) for c in collected]))
    finals = [np.stack([pb[0][k] for pb in per_batch]) for k in range(n_state)]
    n_scan_out = len(body.output) - n_state
    scanned = [np.stack([pb[1][k] for pb in per_batch]) for k in range(n_scan_out)]
    return finals + scanned


@kernel("Scan")
def _run_scan(call: NodeCall) -> list:
    body = call.attrs["body"]
    num_scan_inputs = call.attr("num_scan_inputs")
    if call.opset < 9:
        return _run_scan_opset8(call, body, num_scan_inputs)
    inputs = list(call.inputs)
    n_state = len(inputs) - num_scan_inputs
    state = inputs[:n_state]
    scans = inputs[n_state:]
    in_axes = call.attr("scan_input_axes") or [0] * num_scan_inputs
    in_dirs = call.attr("scan_input_directions") or [0] * num_scan_inputs
    n_scan_out = len(body.output) - n_state
    out_axes = call.attr("scan_output_axes") or [0] * n_scan_out
    out_dirs = call.attr("scan_output_directions") or [0] * n_scan_out
    moved = []
    for x, axis, direction in zip(scans, in_axes, in_dirs):
        x = np.moveaxis(x, axis % x.ndim, 0)
        moved.append(x[::-1] if direction else x)
    length = moved[0].shape[0] if moved else 0
    collected: list[list[Any]] = [[] for _ in range(n_scan_out)]
    for t in range(length):
        outs = call.evaluator.run_subgraph(body, [*state, *(m[t] for m in moved)], call.scope)
        state = outs[:n_state]
        for k in range(n_scan_out):
            collected[k].append(outs[n_state + k])
    results = list(state)
    for k in range(n_scan_out):
        values = collected[k][::-1] if out_dirs[k] else collected[k]
        stacked = np.stack(values) if values else _empty_scan_output(body.output[n_state + k])
        axis = out_axes[k] % stacked.ndim
        results.append(np.moveaxis(stacked, 0, axis))
    return results
