"""Static facts about a model that verification needs.

Which inputs a model takes (and what feeds them), which float types it computes in, and, per
output, how deep and how wide the arithmetic behind it is (the `n` of the rounding bound in
verdict.py). Nothing here runs the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxrefine.ir import contained
from onnxrefine.ir.protofacts import np_dtype, pin_input_shapes

# Ops whose result jumps when an input moves by one ulp: they make a graph "discrete".
DISCRETE_OPS = frozenset({
    "ArgMax", "ArgMin", "Floor", "Ceil", "Round", "Sign", "TopK", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Mod", "NonZero", "Unique", "QuantizeLinear",
    "DynamicQuantizeLinear", "IsInf", "IsNaN", "BitShift", "Hardmax",
})

# (op_type, input index) pairs whose value is an index into another tensor.
INDEX_INPUTS = {
    ("Gather", 1), ("GatherElements", 1), ("GatherND", 1), ("ScatterElements", 1),
    ("ScatterND", 1), ("Scatter", 1), ("OneHot", 0), ("TakeAlongAxis", 1),
}
# (domain, op_type, input index) of onnxruntime's attention masks: a raw 0/1 mask or end positions,
# never negative (onnxruntime refuses a negative mask_index), generated in [0, 2) as an index
MASK_INPUTS = {("com.microsoft", "Attention", 3), ("com.microsoft", "MultiHeadAttention", 4),
               ("com.microsoft", "PackedAttention", 3), ("com.microsoft", "DecoderMaskedMultiHeadAttention", 4)}
# (op_type, input index) pairs whose value is a shape, count, axis or bound.
SHAPE_LIKE_INPUTS = {
    ("Reshape", 1), ("Expand", 1), ("Tile", 1), ("Slice", 1), ("Slice", 2), ("Slice", 3),
    ("Slice", 4), ("ConstantOfShape", 0), ("Range", 0), ("Range", 1), ("Range", 2),
    ("Resize", 3), ("Upsample", 1), ("OneHot", 1), ("TopK", 1), ("Pad", 1), ("Unsqueeze", 1),
    ("Squeeze", 1), ("Split", 1), ("ReduceSum", 1), ("ReduceMean", 1), ("ReduceMax", 1),
    ("ReduceMin", 1), ("ReduceProd", 1), ("ReduceL1", 1), ("ReduceL2", 1),
    ("ReduceLogSumExp", 1), ("ReduceSumSquare", 1), ("CumSum", 1), ("Trilu", 1),
    ("CenterCropPad", 1), ("Col2Im", 1), ("Col2Im", 2),
}
_PASS_THROUGH_OPS = frozenset({"Identity", "Cast", "CastLike", "Squeeze", "Unsqueeze", "Flatten"})

UNKNOWN_DIM = 64  # what a dimension nobody can tell us counts as in accumulation lengths


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple  # ints, dim names (str) or None for unknown; None overall for unknown rank
    elem_type: int


def is_float_dtype(dtype) -> bool:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return True
    return dtype.kind == "V" and dtype.name in {"bfloat16", "float8_e4m3fn", "float8_e5m2",
                                                "float8_e4m3fnuz", "float8_e5m2fnuz"}


def unit_roundoff(dtype) -> float:
    """u = eps/2: 2^-24 float32, 2^-11 float16, 2^-8 bfloat16, 2^-53 float64."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps) / 2.0


def graph_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    initializer_names = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializer_names:
            continue
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            specs.append(InputSpec(value.name, np.dtype(object), None, 0))
            continue
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(
                dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or None)
                for dim in tensor_type.shape.dim
            )
        specs.append(InputSpec(value.name, np_dtype(tensor_type.elem_type), shape,
                               tensor_type.elem_type))
    return specs


def consumers(model: onnx.ModelProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Value name -> (node, input index) of each main-graph node reading it."""
    found: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            if name:
                found.setdefault(name, []).append((node, index))
    return found


def integer_role(model: onnx.ModelProto, name: str, known_shapes: Mapping[str, tuple],
                 users: Mapping[str, list] | None = None) -> tuple:
    """How an integer input is used: ("index", dim or None), ("shape",) or ("plain",).

    Follows pass-through ops (Cast, Identity, Squeeze...) so an index that is cast first still
    counts as an index. `users`: `consumers(model)`, when the caller asks of several inputs.
    """
    users = consumers(model) if users is None else users
    # (name, summed): a value summed on the way (a mask's end positions are its ReduceSum) counts
    # only where it reaches a mask
    pending, seen = [(name, False)], set()
    role: tuple = ("plain",)
    while pending:
        current, summed = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for node, index in users.get(current, []):
            if (node.domain, node.op_type, index) in MASK_INPUTS:
                if role[0] != "index":
                    role = ("index", None)
            elif node.op_type == "ReduceSum" and index == 0 or summed:
                if node.op_type in _PASS_THROUGH_OPS | {"ReduceSum"} and index == 0:
                    pending.extend((out, True) for out in node.output)
            elif (node.op_type, index) in INDEX_INPUTS:
                dim = _indexed_dim(node, known_shapes)
                if role[0] != "index" or (dim is not None and (role[1] is None or dim < role[1])):
                    role = ("index", dim)
            elif (node.op_type, index) in SHAPE_LIKE_INPUTS and role[0] != "index":
                role = ("shape",)
            elif node.op_type in _PASS_THROUGH_OPS and index == 0:
                pending.extend((out, False) for out in node.output)
    return role


def _indexed_dim(node: onnx.NodeProto, known_shapes: Mapping[str, tuple]) -> int | None:
    data_shape = known_shapes.get(node.input[0])
    if not data_shape:
        return None
    axis = 0
    for attr in node.attribute:
        if attr.name == "axis":
            axis = attr.i
    if node.op_type == "GatherND":
        axis = 0
    if node.op_type == "OneHot":
        return None
    try:
        dim = data_shape[axis]
    except IndexError:
        return None
    return dim if isinstance(dim, int) and dim > 0 else None


def static_shapes(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None
                  ) -> dict[str, tuple]:
    """Value name -> shape tuple (ints where known, None elsewhere), with inputs pinned to feeds."""
    # A copy without the large weights' bytes (dims kept): shape inference needs none, and copying
    # and serializing them was most of the time (and memory) on big models.
    from onnxrefine.ir.protofacts import light_model

    pinned = light_model(model)
    if feeds:
        pin_input_shapes(pinned, feeds)
    try:
        inferred = contained.infer_shapes(pinned, strict_mode=False)  # pinned shapes may be impossible
    except Exception:  # shape inference is a help here, never a requirement
        inferred = pinned
    shapes: dict[str, tuple] = {}
    graph = inferred.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            shapes[value.name] = tuple(
                dim.dim_value if dim.HasField("dim_value") else None for dim in tensor_type.shape.dim
            )
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
    if feeds:
        for name, array in feeds.items():
            shapes[name] = tuple(np.shape(array))
    return shapes


def float_dtypes(model: onnx.ModelProto) -> set[np.dtype]:
    """Every float type the model declares anywhere: values, initializers and Cast targets."""
    elem_types = set()
    graph = model.graph
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.HasField("tensor_type"):
            elem_types.add(value.type.tensor_type.elem_type)
    for init in graph.initializer:
        elem_types.add(init.data_type)
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to":
                elem_types.add(attr.i)
            if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                elem_types.add(attr.t.data_type)
    found = set()
    for elem_type in elem_types:
        try:
            dtype = np_dtype(elem_type)
        except Exception:
            continue
        if is_float_dtype(dtype):
            found.add(dtype)
    return found


def _dims_product(dims) -> int:
    total = 1
    for dim in dims:
        total *= dim if isinstance(dim, int) and dim > 0 else UNKNOWN_DIM
    return total


def _attr(node: onnx.NodeProto, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def reduction_length(node: onnx.NodeProto, shapes: Mapping[str, tuple],
                     constants: Mapping[str, np.ndarray]) -> int:
    """How many terms one output element of `node` accumulates (1 for elementwise ops)."""
    op = node.op_type

    def shape_of(index):
        if index < len(node.input) and node.input[index] in shapes:
            return shapes[node.input[index]]
        return None

    if op in ("Conv", "ConvInteger", "QLinearConv"):
        weight = shape_of(1 if op != "QLinearConv" else 3)
        return _dims_product(weight[1:]) if weight else UNKNOWN_DIM
    if op == "ConvTranspose":
        weight = shape_of(1)
        return _dims_product((weight[0],) + tuple(weight[2:])) if weight else UNKNOWN_DIM
    if op in ("MatMul", "MatMulInteger", "Gemm", "FusedMatMul"):
        a_shape = shape_of(0)
        if not a_shape:
            return UNKNOWN_DIM
        k = a_shape[0] if (op == "Gemm" and _attr(node, "transA", 0)) else a_shape[-1]
        return _dims_product([k])
    if op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
        data = shape_of(0)
        if data is None:
            return UNKNOWN_DIM
        axes = _attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1] in constants:
            axes = constants[node.input[1]].tolist()
        if not axes:
            return _dims_product(data)
        return _dims_product([data[a] for a in axes if -len(data) <= a < len(data)])
    if op in ("Softmax", "LogSoftmax", "Hardmax", "CumSum", "LayerNormalization"):
        data = shape_of(0)
        if data is None:
            return UNKNOWN_DIM
        axis = _attr(node, "axis", -1)
        if op == "CumSum":
            axis = int(constants[node.input[1]]) if node.input[1] in constants else -1
        if not -len(data) <= axis < len(data):
            return UNKNOWN_DIM
        return _dims_product(data[axis:]) if op == "LayerNormalization" else _dims_product([data[axis]])
    if op in ("GlobalAveragePool", "GlobalLpPool", "InstanceNormalization", "GroupNormalization"):
        data = shape_of(0)
        return _dims_product(data[2:]) if data else UNKNOWN_DIM
    if op in ("AveragePool", "LpPool"):
        return _dims_product(_attr(node, "kernel_shape", []) or [UNKNOWN_DIM])
    if op in ("Sum", "Mean"):
        return max(1, len(node.input))
    if op in ("Einsum", "Attention", "MultiHeadAttention"):
        return UNKNOWN_DIM
    return 1


def accumulation_depths(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None
                        ) -> dict[str, tuple[int, int]]:
    """Output name -> (longest path in nodes, largest reduction length) over its ancestors."""
    shapes = static_shapes(model, feeds)
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer
                 if _dims_product(init.dims) <= 64}
    depth: dict[str, int] = {}
    widest: dict[str, int] = {}
    for node in model.graph.node:  # ONNX requires topological order
        if node.op_type == "Constant":
            for out in node.output:
                value = _attr(node, "value")
                if value is not None and _dims_product(value.dims) <= 64:
                    constants[out] = numpy_helper.to_array(value)
        in_depth = max((depth.get(name, 0) for name in node.input if name), default=0)
        in_width = max((widest.get(name, 1) for name in node.input if name), default=1)
        try:
            width = reduction_length(node, shapes, constants)
        except Exception:
            width = UNKNOWN_DIM
        for out in node.output:
            depth[out] = in_depth + 1
            widest[out] = max(in_width, width)
    return {out.name: (max(1, depth.get(out.name, 1)), max(1, widest.get(out.name, 1)))
            for out in model.graph.output}


def finite_max(dtype) -> float:
    return float(ml_dtypes.finfo(np.dtype(dtype)).max)


def underflow_floor(dtype) -> float:
    """A rounding's absolute error below the normal range: half a 16-bit float type's smallest
    subnormal (rounding to nearest, also of a float32 result converted: at most u*|y| more), a wider
    type's smallest normal (a run may flush its subnormals)."""
    info = ml_dtypes.finfo(np.dtype(dtype))
    return float(info.smallest_subnormal) / 2 if np.dtype(dtype).itemsize <= 2 else float(info.tiny)


# Ops whose output can move far more than the rounding of their inputs (condition number >> 1
# somewhere in their domain): a root or logarithm near 0, a division by a value near 0, a power,
# exp of a large argument, a normalization by a small spread. Only outputs behind one of these get
# the measured-sensitivity allowance of the verdict (see verdict.py, rule "ill-conditioned").
ILL_CONDITIONED_OPS = frozenset({
    "Sqrt", "Log", "Div", "Pow", "Reciprocal", "Softmax", "LogSoftmax", "Exp", "Tan", "Asin",
    "Acos", "Acosh", "Atanh", "ReduceL2", "ReduceLogSumExp", "LpNormalization", "LpPool",
    "GlobalLpPool", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
    "MeanVarianceNormalization", "BatchNormalization", "RMSNormalization", "Mod", "Einsum",
})


@dataclass(frozen=True)
class Accumulation:
    """The arithmetic behind one value: what the rounding bound of verdict.py is sized from.

    depth      longest path in nodes from the inputs
    width      largest reduction length among the ancestors (and the node itself)
    path_sum   largest, over the paths from the inputs, of the summed reduction lengths of the
               nodes on the path (an elementwise node counts 1): how many roundings can pile up
               on one element, path by path, instead of depth x widest reduction
    amplifiers the ill-conditioned op types (ILL_CONDITIONED_OPS) among the ancestors
    jumps      the discontinuous op types among the ancestors (DISCRETE_OPS, Cast to int/bool):
               where a float value can jump under a few-ulp input move
    """

    depth: int
    width: int
    path_sum: int
    amplifiers: tuple = ()
    jumps: tuple = ()


def _is_ill_conditioned(node: onnx.NodeProto, constant_names) -> bool:
    if node.op_type == "Div":
        # a division by a constant is as well-conditioned as a multiplication
        return len(node.input) > 1 and node.input[1] not in constant_names
    if node.op_type == "BatchNormalization":
        # inference mode with constant statistics is an affine map
        return not all(name in constant_names for name in node.input[1:5])
    return node.op_type in ILL_CONDITIONED_OPS


def is_jump(node: onnx.NodeProto) -> bool:
    if node.op_type == "Cast":
        to = _attr(node, "to")
        return to is not None and not is_float_dtype(np_dtype(to))
    return node.op_type in DISCRETE_OPS


def _subgraph_ops(node: onnx.NodeProto, kind) -> set:
    found = set()
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for graph in graphs:
            for inner in graph.node:
                if kind(inner):
                    found.add(inner.op_type)
                found |= _subgraph_ops(inner, kind)
    return found


def accumulation_profile(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None,
                         names=None) -> dict[str, Accumulation]:
    """Value name -> Accumulation for the graph outputs (or for `names`, any main-graph values)."""
    shapes = static_shapes(model, feeds)
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer
                 if _dims_product(init.dims) <= 64}
    constant_names = {init.name for init in model.graph.initializer}
    profile: dict[str, Accumulation] = {}
    for node in model.graph.node:  # ONNX requires topological order
        if node.op_type == "Constant":
            constant_names.update(node.output)
            for out in node.output:
                value = _attr(node, "value")
                if value is not None and _dims_product(value.dims) <= 64:
                    constants[out] = numpy_helper.to_array(value)
        parents = [profile[name] for name in node.input if name in profile]
        try:
            width = reduction_length(node, shapes, constants)
        except Exception:
            width = UNKNOWN_DIM
        amplifiers, jumps = set(), set()
        for parent in parents:
            amplifiers.update(parent.amplifiers)
            jumps.update(parent.jumps)
        if node.op_type != "Constant" and all(name in constant_names for name in node.input if name):
            constant_names.update(node.output)  # a function of constants only: nothing to amplify
        else:
            if _is_ill_conditioned(node, constant_names):
                amplifiers.add(node.op_type)
            if is_jump(node):
                jumps.add(node.op_type)
            amplifiers |= _subgraph_ops(node, lambda inner: inner.op_type in ILL_CONDITIONED_OPS)
            jumps |= _subgraph_ops(node, is_jump)
        entry = Accumulation(
            depth=max((p.depth for p in parents), default=0) + 1,
            width=max([width] + [p.width for p in parents]),
            path_sum=max((p.path_sum for p in parents), default=0) + max(1, width),
            amplifiers=tuple(sorted(amplifiers)), jumps=tuple(sorted(jumps)))
        for out in node.output:
            if out:
                profile[out] = entry
    wanted = names if names is not None else [out.name for out in model.graph.output]
    return {name: profile.get(name, Accumulation(1, 1, 1)) for name in wanted}


