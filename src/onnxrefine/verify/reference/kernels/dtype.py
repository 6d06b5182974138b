"""Where the float64 reference rounds to a narrow float type, and how.

The reference carries every float as float64 and treats float32 and float64 as real arithmetic: the
verdict measures a float32 run's rounding against that ideal. Formats narrower than float32 are
different: their range is small enough (float16 overflows at 65504) that rounding and overflow are
part of what the model means, and the ONNX spec defines them:

- a Cast (or CastLike) to float16 / bfloat16 / float8 / float4 rounds to that type, to nearest even,
  overflowing to inf, or for float8 as the Cast's ``saturate`` attribute and the spec's table say;
- every node output the spec types as float16 or bfloat16 holds a value of that type, so it is rounded
  there (to nearest even, overflow to inf). What happens *inside* one op (a MatMul's accumulation)
  the spec leaves open; the reference keeps it in float64.

Rounding is done from the float64 value directly (one rounding), not through float32: onnxruntime's
Cast from double to float16 goes through float32 and can round twice (2049.0000001 -> 2048, where the
correctly rounded float16 is 2050); the reference follows the spec, not that artefact.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx

_T = onnx.TensorProto
# (explicit fraction bits, minimum normal exponent, largest finite value) of IEEE-like formats that
# the reference rounds to itself, correctly from float64.
_IEEE_FORMATS = {
    _T.FLOAT16: (10, -14, 65504.0),
    _T.BFLOAT16: (7, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
}
_FLOAT8 = {
    name: getattr(_T, name)
    for name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1")
    if hasattr(_T, name)
}
# float8 types with no inf: saturate maps +-inf to +-max for these two (spec table), NaN for the FNUZ ones.
_INF_SATURATES = {_FLOAT8.get("FLOAT8E4M3FN"), _FLOAT8.get("FLOAT8E5M2")} - {None}

# Node outputs of these types are rounded at every node (see the module docstring).
NODE_ROUNDED_TYPES = frozenset(_IEEE_FORMATS)


def narrow_float_type(elem_type: int | None) -> bool:
    """Whether the reference rounds a Cast to `elem_type` (a float type narrower than float32)."""
    return elem_type in _IEEE_FORMATS or elem_type in _FLOAT8.values()


def round_ieee(x: np.ndarray, fraction_bits: int, emin: int, max_finite: float) -> np.ndarray:
    """float64 `x` rounded once to nearest even in a binary format with `fraction_bits` explicit
    fraction bits, normal exponents from `emin`, subnormals below, and overflow to +-inf."""
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    finite = np.isfinite(x) & (x != 0)
    if not np.any(finite):
        return out
    values = x[finite]
    _, exponent = np.frexp(np.abs(values))  # |v| = m * 2**exponent, m in [0.5, 1)
    lead = np.maximum(exponent - 1, emin)  # exponent of the leading bit; subnormals share emin's quantum
    quantum = np.ldexp(1.0, lead - fraction_bits)
    rounded = np.rint(values / quantum) * quantum  # both steps exact: scaling by powers of two
    rounded = np.where(np.abs(rounded) > max_finite, np.copysign(np.inf, values), rounded)
    out[finite] = np.copysign(rounded, values)  # a value that rounds to zero keeps its sign
    return out


def _float8(x: np.ndarray, elem_type: int, saturate: bool) -> np.ndarray:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    biggest = float(ml_dtypes.finfo(dtype).max)
    with np.errstate(all="ignore"):
        if saturate:
            # Spec (Cast, saturate=1): |x| > max -> +-max; +-inf -> +-max for E4M3FN/E5M2, NaN otherwise.
            clipped = np.where(np.isfinite(x), np.clip(x, -biggest, biggest), x)
            if elem_type in _INF_SATURATES:
                clipped = np.where(np.isinf(x), np.copysign(biggest, x), clipped)
            else:
                clipped = np.where(np.isinf(x), np.nan, clipped)
            x = clipped
        # saturate=0: ml_dtypes overflows to inf (E5M2) or NaN (types without inf), as the spec says.
        return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def round_to(x: np.ndarray, elem_type: int, saturate: bool = True) -> np.ndarray:
    """float64 `x` as the value it has in ONNX element type `elem_type` (carried as float64)."""
    if elem_type == _T.FLOAT16:
        with np.errstate(over="ignore"):  # numpy converts float64 -> float16 directly, rounding once
            return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)
    if elem_type in _IEEE_FORMATS:
        return round_ieee(x, *_IEEE_FORMATS[elem_type])
    if elem_type in _FLOAT8.values():
        return _float8(np.asarray(x, dtype=np.float64), elem_type, saturate)
    return x


def narrow_value_types(model: onnx.ModelProto) -> dict[str, int]:
    """Names of values (all graphs) whose element type is float16/bfloat16, by the operator type rules.

    Types come from onnx's inference on a copy whose declared value_info is dropped, so they follow
    from the graph inputs, initializers and op schemas, never from annotations. Values whose type
    inference cannot tell are absent (kept in float64). Function bodies are not typed here."""
    if not _mentions_narrow_type(model):
        return {}
    types = inferred_types(model)
    return {} if types is None else {name: elem for name, elem in types.items() if elem in NODE_ROUNDED_TYPES}


def inferred_types(model: onnx.ModelProto) -> dict[str, int] | None:
    """Element type of every value the graphs produce, by onnx's inference on a copy whose
    declared value_info is dropped; None when inference fails. Function bodies are not typed."""
    # Types need no weight data: the initializers become typed inputs, so no large tensor is copied.
    graph = model.graph
    stripped_graph = onnx.helper.make_graph(
        list(graph.node), graph.name, list(graph.input) + [
            onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            for init in graph.initializer if init.name not in {i.name for i in graph.input}
        ], list(graph.output))
    for sub in _subgraphs(stripped_graph):
        _strip_value_info(sub)
    stripped = onnx.helper.make_model(stripped_graph, opset_imports=list(model.opset_import),
                                      functions=list(model.functions))
    stripped.ir_version = model.ir_version
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - an untypable model is evaluated in float64 throughout
        return None
    types: dict[str, int] = {}
    _collect(inferred.graph, types)
    return types


def _mentions_narrow_type(model: onnx.ModelProto) -> bool:
    """Cheap pre-check: any float16/bfloat16 input, initializer, Cast target or Constant (main graph)."""
    graph = model.graph
    if any(i.type.tensor_type.elem_type in NODE_ROUNDED_TYPES for i in graph.input):
        return True
    if any(init.data_type in NODE_ROUNDED_TYPES for init in graph.initializer):
        return True
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.INT and attr.name == "to" and attr.i in NODE_ROUNDED_TYPES:
                return True
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in NODE_ROUNDED_TYPES:
                return True
            if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return True  # a subgraph may hold any of these; let inference decide
    return bool(model.functions)


def _subgraphs(graph: onnx.GraphProto):
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield attr.g
            elif attr.type == onnx.AttributeProto.GRAPHS:
                yield from attr.graphs


def _strip_value_info(graph: onnx.GraphProto) -> None:
    del graph.value_info[:]
    for sub in _subgraphs(graph):
        _strip_value_info(sub)


def _collect(graph: onnx.GraphProto, types: dict[str, int]) -> None:
    produced = {name for node in graph.node for name in node.output if name}
    for info in list(graph.value_info) + list(graph.output):
        elem = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") else 0
        if info.name in produced and elem:
            types[info.name] = elem
    for sub in _subgraphs(graph):
        _collect(sub, types)
