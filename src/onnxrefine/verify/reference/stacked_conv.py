"""The bound's stacked float32 convolutions (bound_nn.py) in onnxruntime's Conv kernel.

The per-element bound of a Conv needs convolutions of nonnegative operands with |W| (and W^2): the
carried bounds, the coherent bound, the magnitude |A||W| and the probable pass's squares. They run
in float32 and are made upper bounds again by bound_nn._stacked_nonnegative's inflation, which
holds for any evaluation that sums each output's n nonnegative products in float32, in any order,
with or without fused multiply-adds. onnxruntime's CPU Conv at ORT_DISABLE_ALL is such an
evaluation (MLAS: an im2col and a single-precision GEMM, or a direct depthwise or pointwise
kernel); it runs all the stacked operands in one call, 1.1-4.4x faster than numpy's im2col and
matmul (depthwise the most; `python bench/reference_ops.py`). The float64 reference's own values
never come from here: only bounds, and only where every operand is finite in float32.

The geometry is the float64 kernel's (kernels/nn.py `geometry`: auto_pad resolved to explicit
pads), so both read the same windows; a session is kept per geometry, not per shape. Where
onnxruntime is not importable, cannot run the call or gives another output shape, the caller
falls back to numpy (None).
"""

from __future__ import annotations

import numpy as np

from onnxrefine.verify.reference.kernels.nn import geometry

MAX_SESSIONS = 64
_sessions: dict[tuple, object] = {}


def stacked_conv(stacked: np.ndarray, right: np.ndarray, attrs) -> np.ndarray | None:
    """Conv(stacked[i], right) for each i (float32, no bias), or None (see the module docstring)."""
    if stacked.dtype != np.float32 or right.dtype != np.float32 or right.ndim < 3 or stacked.ndim != right.ndim + 1:
        return None
    count, batch = stacked.shape[:2]
    x = np.ascontiguousarray(stacked.reshape((count * batch,) + stacked.shape[2:]))
    kernel = right.shape[2:]
    strides, dilations, effective, begins, ends = geometry(lambda name, default=None: attrs.get(name, default),
                                                           x.shape[2:], kernel)
    group = int(attrs.get("group", 1) or 1)
    sizes = [(x.shape[2 + i] + begins[i] + ends[i] - effective[i]) // strides[i] + 1 for i in range(len(kernel))]
    if min(sizes, default=1) < 1 or x.shape[1] != right.shape[1] * group:
        return None
    session = _session((len(kernel), tuple(int(s) for s in strides), tuple(int(d) for d in dilations),
                        tuple(int(p) for p in (*begins, *ends)), group))
    if session is None:
        return None
    try:
        (out,) = session.run(None, {"x": x, "w": np.ascontiguousarray(right)})
    except Exception:  # noqa: BLE001 - onnxruntime raises many types: numpy computes it instead
        return None
    if out.shape != (count * batch, right.shape[0], *sizes) or out.dtype != np.float32:
        return None
    return out.reshape((count, batch) + out.shape[1:])


def _session(key: tuple):
    if key in _sessions:
        return _sessions[key]
    try:
        from onnx import TensorProto, helper

        from onnxrefine.runtime import strict_session

        rank, strides, dilations, pads, group = key
        node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(strides), dilations=list(dilations),
                                pads=list(pads), group=group)
        graph = helper.make_graph([node], "stacked_conv",
                                  [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * (rank + 2))
                                   for name in ("x", "w")],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * (rank + 2))])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
        session = strict_session(model.SerializeToString())
    except Exception:  # noqa: BLE001 - no onnxruntime, or it cannot make this Conv: numpy computes it
        session = None
    if len(_sessions) >= MAX_SESSIONS:
        _sessions.pop(next(iter(_sessions)))
    _sessions[key] = session
    return session
