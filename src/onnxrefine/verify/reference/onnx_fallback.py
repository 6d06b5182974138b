"""Standard ops without a native float64 kernel, run by onnx.reference on the float64 arrays.

Each node is wrapped in a one-node model whose inputs are typed as the values it reads (float64
for floats), and its ReferenceEvaluator is kept per node, input types and resolved attributes: the
same node inside a model-local function runs with each call's attributes. A result narrower than
float64 from float64 inputs is warned about (ReferencePrecisionWarning).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxrefine.verify.reference.base import NodeCall, ReferencePrecisionWarning, UnsupportedOperatorError
from onnxrefine.verify.reference.kernels import tensor as _tensor
from onnxrefine.verify.reference.kernels.tensor import to_internal

__all__ = ["run_with_onnx_reference"]


def run_with_onnx_reference(call: NodeCall, cache: dict) -> list:
    from onnx.reference import ReferenceEvaluator

    node = call.node
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        raise UnsupportedOperatorError(
            f"operator {node.op_type} (node {node.name!r}) has subgraphs and no native float64 kernel"
        )
    value_infos = []
    feed = {}
    in_names = []
    for index, value in enumerate(call.inputs):
        if value is None:
            in_names.append("")
            continue
        name = f"in{index}"
        in_names.append(name)
        value_infos.append(_value_info_for(name, value))
        feed[name] = value
    out_names = [f"out{i}" if name else "" for i, name in enumerate(node.output)]
    # a node inside a function takes attribute references from each call: they are part of the key
    referenced = tuple(sorted((name, repr(value)) for name, value in call.attrs.items())) \
        if any(attr.ref_attr_name for attr in node.attribute) else ()
    cache_key = (id(node), tuple((v.dtype.str, v.ndim) if isinstance(v, np.ndarray) else type(v)
                                 for v in feed.values()), referenced)
    session = cache.get(cache_key)
    if session is None:
        attrs = []
        for attr in node.attribute:
            if attr.ref_attr_name:
                continue
            attrs.append(attr)
        single = helper.make_node(node.op_type, in_names, out_names, domain=node.domain)
        single.attribute.extend(attrs)
        for name, value in call.attrs.items():
            if not any(a.name == name for a in attrs):
                single.attribute.append(_make_attribute(name, value))
        graph = helper.make_graph(
            [single], "fallback", value_infos,
            [helper.make_empty_tensor_value_info(n) for n in out_names if n],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", call.opset)])
        model.ir_version = onnx.IR_VERSION
        try:
            session = ReferenceEvaluator(model)
        except Exception as exc:  # noqa: BLE001 - any failure here means "cannot evaluate"
            raise UnsupportedOperatorError(
                f"operator {node.op_type} (node {node.name!r}) has no float64 kernel and onnx.reference "
                f"cannot load it: {exc}"
            ) from exc
        cache[cache_key] = session
    try:
        results = session.run(None, feed)
    except Exception as exc:  # noqa: BLE001
        raise UnsupportedOperatorError(
            f"operator {node.op_type} (node {node.name!r}): onnx.reference fallback failed: {exc}"
        ) from exc
    had_float_input = any(isinstance(v, np.ndarray) and v.dtype == np.float64 for v in feed.values())
    outs = []
    results_iter = iter(results)
    for name in out_names:
        if not name:
            outs.append(None)
            continue
        value = next(results_iter)
        if isinstance(value, np.ndarray) and _tensor.is_floating(value.dtype) and value.dtype != np.float64:
            if had_float_input:
                warnings.warn(
                    f"onnx.reference's {node.op_type} returned {value.dtype} for float64 inputs; "
                    "its result is less precise than the rest of the reference",
                    ReferencePrecisionWarning,
                    stacklevel=2,
                )
        outs.append(to_internal(value) if isinstance(value, np.ndarray) else value)
    return outs




def _value_info_for(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, list):
        elem = value[0].dtype if value else np.dtype(np.float64)
        elem_type = helper.np_dtype_to_tensor_dtype(elem)
        return helper.make_tensor_sequence_value_info(name, elem_type, None)
    if value.dtype == object:
        return helper.make_tensor_value_info(name, onnx.TensorProto.STRING, None)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), None)


def _make_attribute(name: str, value: Any) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    return helper.make_attribute(name, value)
