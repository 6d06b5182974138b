"""Facts about a model read from its proto alone, below everything that needs them: element types
as numpy dtypes, the model without its large weights' bytes (for shape inference and input
generation), and a model's declared input shapes pinned to one input set's."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

SMALL_INITIALIZER_BYTES = 1024  # kept with their data for shape inference (Reshape targets)


def light_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its large initializers' bytes (dims and types kept): shape inference
    and input generation need no weights, and copying them is what costs on big models."""
    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(model.graph, light.graph, skip="initializer")
    for init in model.graph.initializer:
        if _tensor_bytes(init) <= SMALL_INITIALIZER_BYTES:
            light.graph.initializer.append(init)
        else:
            stub = light.graph.initializer.add()
            stub.name, stub.data_type = init.name, init.data_type
            stub.dims.extend(init.dims)
    return light


def _copy_fields(source, target, *, skip: str) -> None:
    for descriptor, value in source.ListFields():
        if descriptor.name == skip:
            continue
        if descriptor.is_repeated:
            getattr(target, descriptor.name).extend(value)
        elif descriptor.type == descriptor.TYPE_MESSAGE:
            getattr(target, descriptor.name).CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)


def _tensor_bytes(init: onnx.TensorProto) -> int:
    try:
        itemsize = np.dtype(np_dtype(init.data_type)).itemsize
    except Exception:
        itemsize = 4
    return math.prod(init.dims) * itemsize


def np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def pin_input_shapes(model: onnx.ModelProto, feeds) -> None:
    """Set the main graph's declared input shapes (in place) to those of one input set's arrays,
    so shape inference works from the sizes actually fed."""
    for value in model.graph.input:
        if value.name in feeds and value.type.HasField("tensor_type"):
            shape = value.type.tensor_type.shape
            shape.ClearField("dim")
            for size in np.shape(feeds[value.name]):
                shape.dim.add().dim_value = int(size)
