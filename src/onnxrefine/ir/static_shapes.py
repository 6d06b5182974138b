"""Static shapes and small integer values we can vouch for, derived from trusted facts only.

Trusted: the main graph's input types (onnxruntime checks every feed against the declared static
dims; a symbolic dim is checked against nothing), constant tensors, and the shape rules of the
operators below. Declared value_info shapes are never used.

A shape is a tuple of dims, or None when even the rank is unknown. A dim is an int, or a `Sym`:
an opaque token standing for "the run-time size of this axis". Two dims that are the same Sym
object are equal at run time (same axis of the same tensor, or carried through a shape-preserving
operator), which is what lets a Reshape target such as Concat(Shape(x)[0:1], [12, 64]) become
[0, 12, 64] while the batch size stays symbolic.

Small integer tensors (rank 0 or 1, as produced by Shape, Gather, Concat, ...) also get a partial
value: a tuple of elements, each an int, a Sym (a dim whose size is unknown) or None (unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxrefine.ir.contrib_shapes import CONTRIB_DOMAIN, contrib_dtype, contrib_shape
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS as _STANDARD_DOMAINS
from onnxrefine.ir.quantization import QUANTIZED_SHAPE_OPS, quantized_op_dtype, quantized_op_shape

_MAX_DEPTH = 64
MAX_ELEMENTS = 64
_INT_DTYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})


class Sym:
    """An unknown run-time size; equal only to itself."""

    __slots__ = ("label",)

    def __init__(self, label: str = ""):
        self.label = label

    def __repr__(self) -> str:
        return f"Sym({self.label})"


Dim = "int | Sym"


@dataclass(frozen=True)
class Elements:
    """The partial value of a rank-0 or rank-1 integer tensor."""

    items: tuple
    scalar: bool
    dtype: ir.DataType

    def known(self) -> bool:
        return all(isinstance(e, int) for e in self.items)

    def array(self) -> np.ndarray:
        array = np.array([int(e) for e in self.items], dtype=self.dtype.numpy())
        return array.reshape(()) if self.scalar else array


_SAME_SHAPE = frozenset(
    """Relu LeakyRelu Sigmoid Tanh Exp Log Sqrt Abs Neg Erf Gelu Softplus Softsign Elu Selu Celu
    HardSigmoid HardSwish Clip Identity Cast CastLike Dropout InstanceNormalization LayerNormalization
    BatchNormalization Softmax LogSoftmax Hardmax Floor Ceil Round Sign Reciprocal Not IsNaN IsInf
    LRN CumSum Mish Trilu Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh ThresholdedRelu
    Shrink BitwiseNot MeanVarianceNormalization EyeLike QuantizeLinear DequantizeLinear
    GroupNormalization RMSNormalization""".split()
)
_BROADCASTING = frozenset(
    """Add Sub Mul Div Pow Mod Max Min Sum Mean Where Equal Less Greater LessOrEqual GreaterOrEqual
    And Or Xor PRelu BitShift BitwiseAnd BitwiseOr BitwiseXor""".split()
)
_REDUCE = frozenset(
    """ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceSumSquare""".split()
)
_INT64_RESULT = frozenset("Shape Size ArgMax ArgMin NonZero".split())
_BOOL_RESULT = frozenset("Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not IsNaN IsInf".split())
_SAME_DTYPE = (_SAME_SHAPE - {"Cast", "CastLike", "Not", "IsNaN", "IsInf", "EyeLike", "QuantizeLinear",
                              "DequantizeLinear"}) | frozenset(
    """Transpose Reshape Flatten Squeeze Unsqueeze Concat Gather GatherElements GatherND Slice Expand
    Tile Pad Split MatMul Gemm Conv ConvTranspose MaxPool AveragePool LpPool GlobalAveragePool
    GlobalMaxPool GlobalLpPool Resize DepthToSpace SpaceToDepth ReverseSequence TopK Einsum""".split()
)
# Opset from which each reduction takes its axes as an input instead of an attribute.
_REDUCE_AXES_INPUT_OPSET = {name: (13 if name == "ReduceSum" else 18) for name in _REDUCE}


def _attr(node: ir.Node, name: str, default=None):
    attr = node.attributes.get(name)
    if attr is None or attr.is_ref():
        return default
    return attr.value


def broadcast_dims(a, b):
    """The broadcast of two dims, given that the model runs (so they are compatible)."""
    if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
        return a
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None  # incompatible: the model would fail here
    if isinstance(a, int):
        return a  # b is unknown; it must be a or 1, so the result is a
    if isinstance(b, int):
        return b
    return Sym("broadcast")


def normalize_axes(axes, rank: int | None) -> list[int] | None:
    """Axes made non-negative; None when the rank is unknown or an axis is out of range."""
    if rank is None:
        return None
    result = [_normalize_axis(a, rank) for a in axes]
    return None if any(a is None for a in result) else result


def static_oracle(ctx) -> StaticShapes:
    """The oracle shared by one rewrite context (one driver run) or pass context."""
    oracle = getattr(ctx, "_static_shapes", None)
    if oracle is None or oracle.model is not ctx.model:
        oracle = StaticShapes(ctx.model)
        ctx._static_shapes = oracle
    return oracle


def _normalize_axis(axis: int, rank: int) -> int | None:
    axis = int(axis)
    if axis < 0:
        axis += rank
    return axis if 0 <= axis < rank else None


class StaticShapes:
    """Shapes and partial integer values, memoised per value.

    Facts are semantic (what the tensor is at run time), so a rewrite that keeps values cannot
    make a recorded fact wrong; it can only make an unknown one knowable, which `forget` allows.
    """

    def __init__(self, model: ir.Model):
        self._main_inputs = {id(v) for v in model.graph.inputs}
        self.model = model
        self._shapes: dict[int, tuple[ir.Value, object]] = {}
        self._elements: dict[int, tuple[ir.Value, object]] = {}
        self._dtypes: dict[int, tuple[ir.Value, object]] = {}
        self._warming = False

    def _warm(self, value: ir.Value, memo: dict, compute) -> None:
        """Compute `compute` for the producers behind `value` bottom-up, without recursion, so
        that a query deep in a long network never runs into the recursion depth limit."""
        self._warming = True
        try:
            order: list[ir.Value] = []
            seen: set[int] = set()
            stack = [(value, False)]
            while stack:
                current, expanded = stack.pop()
                if expanded:
                    order.append(current)
                    continue
                if id(current) in seen or (id(current) in memo and memo[id(current)][0] is current):
                    continue
                seen.add(id(current))
                stack.append((current, True))
                node = current.producer()
                if node is not None and id(current) not in self._main_inputs:
                    stack.extend((i, False) for i in node.inputs if i is not None)
            for ancestor in order[:-1]:
                compute(ancestor)
        finally:
            self._warming = False

    def forget(self) -> None:
        self._shapes.clear()
        self._elements.clear()
        self._dtypes.clear()

    # -- element types --------------------------------------------------------------------

    def dtype(self, value: ir.Value | None, _depth: int = 0) -> ir.DataType | None:
        """The element type, from trusted facts only (None when not known)."""
        if value is None:
            return None
        hit = self._dtypes.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        if not self._warming:
            self._warm(value, self._dtypes, self.dtype)
        result = None
        if _depth < _MAX_DEPTH:
            try:
                result = self._infer_dtype(value, _depth)
            except (TypeError, ValueError, IndexError):
                result = None
        self._dtypes[id(value)] = (value, result)
        return result

    def _infer_dtype(self, value: ir.Value, depth: int) -> ir.DataType | None:
        if id(value) in self._main_inputs:
            return value.dtype if isinstance(value.type, ir.TensorType) else None
        if value.is_graph_input():
            return None
        if value.const_value is not None and value.producer() is None:
            return value.const_value.dtype
        array = constant_array(value)
        if array is not None:
            return ir.DataType.from_numpy(array.dtype)
        node = value.producer()
        if node is not None and node.domain == CONTRIB_DOMAIN:  # onnxruntime's contrib ops (ir/contrib_shapes.py)
            return contrib_dtype(node, value.index(), lambda i: self.dtype(node.inputs[i], depth + 1)
                                 if i < len(node.inputs) and node.inputs[i] is not None else None)
        if node is None or node.domain not in _STANDARD_DOMAINS:
            return None
        op, index = node.op_type, value.index()

        def dtype_of(i: int):
            return self.dtype(node.inputs[i], depth + 1) if i < len(node.inputs) and node.inputs[i] is not None else None

        if op in QUANTIZED_SHAPE_OPS:  # MatMulInteger, QLinearConv, ... (ir/quantization.py)
            return quantized_op_dtype(node, index, dtype_of)
        if op == "Dropout" and index == 1:
            return ir.DataType.BOOL
        if index != 0 and op not in ("Split", "TopK"):
            return None
        if op == "TopK" and index == 1:
            return ir.DataType.INT64
        if op == "Cast":
            return ir.DataType(_attr(node, "to", 0)) or None
        if op == "CastLike":
            return dtype_of(1)
        if op in _INT64_RESULT:
            return ir.DataType.INT64
        if op in _BOOL_RESULT:
            return ir.DataType.BOOL
        if op == "Where":
            return dtype_of(1)
        if op == "ConstantOfShape":
            attr = node.attributes.get("value")
            return ir.DataType.FLOAT if attr is None else attr.as_tensor().dtype
        if op in _SAME_DTYPE or op in _BROADCASTING or op in _REDUCE:
            return dtype_of(0)
        return None

    # -- shapes ---------------------------------------------------------------------------

    def shape(self, value: ir.Value | None) -> tuple | None:
        """The trusted shape with None for every dim whose size is not known (rank known)."""
        shape = self.symbolic_shape(value)
        return None if shape is None else tuple(d if isinstance(d, int) else None for d in shape)

    def symbolic_shape(self, value: ir.Value | None, _depth: int = 0) -> tuple | None:
        """The trusted shape with a Sym token for every dim whose size is not known."""
        if value is None:
            return None
        hit = self._shapes.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        if not self._warming:
            self._warm(value, self._shapes, self.symbolic_shape)
        result = self._infer_shape(value, _depth) if _depth < _MAX_DEPTH else None
        self._shapes[id(value)] = (value, result)
        return result

    def rank(self, value: ir.Value | None) -> int | None:
        shape = self.symbolic_shape(value)
        return None if shape is None else len(shape)

    def static_shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        shape = self.symbolic_shape(value)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return shape

    def _input_shape(self, value: ir.Value) -> tuple | None:
        declared = value.shape
        if declared is None:
            return None
        dims = []
        for axis, dim in enumerate(declared):
            if isinstance(dim, int):
                dims.append(dim)
            else:
                dims.append(Sym(f"{value.name}[{axis}]"))
        if value.is_initializer() and value.const_value is not None:
            # Not fed, the initializer is used: a dim is known only where both agree.
            actual = tuple(value.const_value.shape)
            if len(actual) != len(dims):
                return None
            dims = [d if isinstance(d, int) and d == a else Sym(f"{value.name}[{i}]") for i, (d, a) in
                    enumerate(zip(dims, actual))]
        return tuple(dims)

    def _infer_shape(self, value: ir.Value, depth: int) -> tuple | None:
        if id(value) in self._main_inputs:
            return self._input_shape(value)
        if value.is_graph_input():
            return None  # subgraph or function inputs: nothing checks them
        if value.const_value is not None and value.producer() is None:
            return tuple(int(d) for d in value.const_value.shape)  # no need to read the bytes
        array = constant_array(value)
        if array is not None:
            return tuple(int(d) for d in array.shape)
        node = value.producer()
        if node is not None and node.domain == CONTRIB_DOMAIN:  # onnxruntime's contrib ops (ir/contrib_shapes.py)
            present = lambda i: i < len(node.inputs) and node.inputs[i] is not None  # noqa: E731
            return contrib_shape(node, value.index(),
                                 lambda i: self.symbolic_shape(node.inputs[i], depth + 1) if present(i) else None,
                                 lambda i: self.static_shape(node.inputs[i]) if present(i) else None)
        if node is None or node.domain not in _STANDARD_DOMAINS:
            return None
        try:
            return self._op_shape(node, value.index(), depth)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None

    def _op_shape(self, node: ir.Node, index: int, depth: int) -> tuple | None:
        op = node.op_type
        inputs = node.inputs

        def shape_of(i: int):
            return self.symbolic_shape(inputs[i], depth + 1) if i < len(inputs) and inputs[i] is not None else None

        def elements_of(i: int):
            return self.elements(inputs[i], depth + 1) if i < len(inputs) and inputs[i] is not None else None

        if op in _SAME_SHAPE:
            return shape_of(0) if index == 0 or op in ("Dropout",) else None
        if index != 0 and op not in ("Split", "DynamicQuantizeLinear"):
            return None
        if op in _BROADCASTING:
            shapes = [shape_of(i) for i in range(len(inputs)) if inputs[i] is not None]
            return _broadcast_shapes(shapes)
        if op == "Shape":
            rank = len(shape_of(0)) if shape_of(0) is not None else None
            if rank is None:
                return None
            start, end = _shape_range(node, rank)
            return (max(0, end - start),)
        if op == "Size":
            return ()
        if op == "Transpose":
            shape = shape_of(0)
            if shape is None:
                return None
            perm = _attr(node, "perm")
            perm = list(range(len(shape)))[::-1] if perm is None else list(perm)
            return tuple(shape[p] for p in perm) if sorted(perm) == list(range(len(shape))) else None
        if op == "Reshape":
            return self._reshape_shape(node, shape_of(0), elements_of(1))
        if op == "Flatten":
            shape = shape_of(0)
            if shape is None:
                return None
            axis = int(_attr(node, "axis", 1))
            axis = axis + len(shape) if axis < 0 else axis
            if not 0 <= axis <= len(shape):
                return None
            return (_product(shape[:axis]), _product(shape[axis:]))
        if op in ("Squeeze", "Unsqueeze"):
            return self._squeeze_shape(node, shape_of(0), elements_of(1))
        if op == "Concat":
            shapes = [shape_of(i) for i in range(len(inputs))]
            return _concat_shape(shapes, int(_attr(node, "axis", 0)))
        if op == "Gather":
            data, indices = shape_of(0), shape_of(1)
            if data is None or indices is None:
                return None
            axis = _normalize_axis(_attr(node, "axis", 0), len(data))
            return None if axis is None else data[:axis] + indices + data[axis + 1:]
        if op == "MatMul":
            return _matmul_shape(shape_of(0), shape_of(1))
        if op == "Gemm":
            a, b = shape_of(0), shape_of(1)
            if a is None or b is None or len(a) != 2 or len(b) != 2:
                return None
            m = a[1] if _attr(node, "transA", 0) else a[0]
            n = b[0] if _attr(node, "transB", 0) else b[1]
            return (m, n)
        if op in ("Expand",):
            target = elements_of(1)
            shape = shape_of(0)
            if target is None or shape is None or target.scalar:
                return None
            dims = tuple(e if e is not None else Sym("expand") for e in target.items)
            return _broadcast_shapes([shape, dims])
        if op == "ConstantOfShape":
            target = elements_of(0)
            if target is None or target.scalar:
                return None
            return tuple(e if e is not None else Sym("constant_of_shape") for e in target.items)
        if op == "Tile":
            shape, repeats = shape_of(0), elements_of(1)
            if shape is None or repeats is None or len(repeats.items) != len(shape):
                return None
            return tuple(
                d * r if isinstance(d, int) and isinstance(r, int) else (d if r == 1 else Sym("tile"))
                for d, r in zip(shape, repeats.items)
            )
        if op in _REDUCE or op in ("ArgMax", "ArgMin"):
            return self._reduce_shape(node, shape_of(0), elements_of(1))
        if op == "Resize":
            if len(inputs) <= 3 or inputs[3] is None:  # parity: Resize given constant scales
                return _resize_scales_shape(node, shape_of(0), inputs[2] if len(inputs) > 2 else None)
            return self._resize_shape(node, shape_of(0), elements_of(3) if len(inputs) > 3 else None)
        if op in ("Conv", "MaxPool", "AveragePool", "LpPool"):
            return self._window_shape(node, shape_of(0), shape_of(1) if op == "Conv" else None)
        if op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
            shape = shape_of(0)
            return None if shape is None or len(shape) < 2 else shape[:2] + (1,) * (len(shape) - 2)
        if op == "Slice":
            return self._slice_shape(node, shape_of(0), [elements_of(i) for i in range(1, 5)])
        if op == "Pad":
            return self._pad_shape(node, shape_of(0), elements_of(1), elements_of(3))
        if op == "Split":
            return self._split_shape(node, index, shape_of(0), elements_of(1))
        if op in QUANTIZED_SHAPE_OPS:  # MatMulInteger, QLinearConv, ... (ir/quantization.py)
            return quantized_op_shape(node, index, shape_of, _matmul_shape,
                                      lambda x, w: self._window_shape(node, x, w))
        return None

    def _resize_shape(self, node, shape, sizes) -> tuple | None:
        """Resize given explicit `sizes` over every axis (scales are left unknown)."""
        if shape is None or sizes is None or sizes.scalar or len(sizes.items) != len(shape):
            return None
        policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
        policy = policy.decode() if isinstance(policy, bytes) else policy
        if _attr(node, "axes") is not None or policy != "stretch":
            return None
        return tuple(e if isinstance(e, int) else Sym("resize") for e in sizes.items)

    def _window_shape(self, node, shape, weight_shape) -> tuple | None:
        """Conv and pooling outputs: (N, channels, spatial...) with ONNX's output-size formulas.
        ceil_mode is left unknown (runtimes differ on windows that start in the padding)."""
        if shape is None or len(shape) < 3:
            return None
        spatial = len(shape) - 2
        if node.op_type == "Conv":
            if weight_shape is None or len(weight_shape) != len(shape) or not isinstance(weight_shape[0], int):
                return None
            kernel = _attr(node, "kernel_shape") or weight_shape[2:]
            channels = weight_shape[0]
        else:
            kernel = _attr(node, "kernel_shape")
            channels = shape[1]
            if _attr(node, "ceil_mode", 0):
                return shape[:2] + tuple(Sym("ceil_mode") for _ in range(spatial))
        kernel = list(kernel or ())
        if len(kernel) != spatial or not all(isinstance(k, int) and k > 0 for k in kernel):
            return None
        strides = list(_attr(node, "strides") or [1] * spatial)
        dilations = list(_attr(node, "dilations") or [1] * spatial)
        pads = list(_attr(node, "pads") or [0] * (2 * spatial))
        auto_pad = _attr(node, "auto_pad", "NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
            return None
        out = []
        for i, size in enumerate(shape[2:]):
            if not isinstance(size, int) or strides[i] < 1 or dilations[i] < 1:
                out.append(Sym(node.op_type))
                continue
            extent = dilations[i] * (kernel[i] - 1) + 1
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                out.append(-(-size // strides[i]))
            elif auto_pad == "VALID":
                out.append((size - extent) // strides[i] + 1 if size >= extent else Sym("empty"))
            elif auto_pad in ("NOTSET", ""):
                padded = size + pads[i] + pads[i + spatial]
                out.append((padded - extent) // strides[i] + 1 if padded >= extent else Sym("empty"))
            else:
                return None
        return (shape[0], channels) + tuple(out)

    def _reshape_shape(self, node, shape, target) -> tuple | None:
        if target is None or target.scalar:
            return None
        allowzero = bool(_attr(node, "allowzero", 0))
        dims = []
        for i, e in enumerate(target.items):
            if isinstance(e, int) and e == 0 and not allowzero:
                if shape is None or i >= len(shape):
                    return None
                dims.append(shape[i])
            elif isinstance(e, int) and e < -1:
                return None
            elif isinstance(e, Sym) and not allowzero and not (shape is not None and i < len(shape) and shape[i] is e):
                # a run-time size that may be 0, which would copy input dim i instead
                dims.append(Sym("reshape"))
            else:
                dims.append(e)
        if sum(1 for d in dims if isinstance(d, int) and d == -1) > 1:
            return None
        if any(isinstance(d, int) and d == -1 for d in dims):
            total = _product(shape) if shape is not None else None
            rest = _product([d for d in dims if not (isinstance(d, int) and d == -1)])
            inferred = Sym("reshape")
            if isinstance(total, int) and isinstance(rest, int) and rest > 0 and total % rest == 0:
                inferred = total // rest
            dims = [inferred if isinstance(d, int) and d == -1 else d for d in dims]
        return tuple(d if d is not None else Sym("reshape") for d in dims)

    def _squeeze_shape(self, node, shape, axes_input) -> tuple | None:
        if shape is None:
            return None
        axes = _attr(node, "axes")
        if axes is None and axes_input is not None:
            if not axes_input.known():
                return None
            axes = list(axes_input.items)
        if node.op_type == "Squeeze":
            if axes is None:
                if not all(isinstance(d, int) for d in shape):
                    return None
                return tuple(d for d in shape if d != 1)
            normalized = {_normalize_axis(a, len(shape)) for a in axes}
            if None in normalized:
                return None
            return tuple(d for i, d in enumerate(shape) if i not in normalized)
        if axes is None:
            return None
        out_rank = len(shape) + len(axes)
        normalized = {_normalize_axis(a, out_rank) for a in axes}
        if None in normalized or len(normalized) != len(axes):
            return None
        rest = iter(shape)
        return tuple(1 if i in normalized else next(rest) for i in range(out_rank))

    def _reduce_shape(self, node, shape, axes_input) -> tuple | None:
        if shape is None:
            return None
        keepdims = bool(_attr(node, "keepdims", 1))
        if node.op_type in ("ArgMax", "ArgMin"):
            axes = [_attr(node, "axis", 0)]
        else:
            axes = _attr(node, "axes")
            if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
                if axes_input is None or not axes_input.known():
                    return None
                axes = list(axes_input.items)
            if not axes:
                if _attr(node, "noop_with_empty_axes", 0):
                    return shape
                axes = list(range(len(shape)))
        normalized = {_normalize_axis(a, len(shape)) for a in axes}
        if None in normalized:
            return None
        if keepdims:
            return tuple(1 if i in normalized else d for i, d in enumerate(shape))
        return tuple(d for i, d in enumerate(shape) if i not in normalized)

    def _slice_shape(self, node, shape, params) -> tuple | None:
        if shape is None:
            return None
        if len(node.inputs) > 1:
            starts, ends, axes, steps = params
            if starts is None or ends is None or not starts.known() or not ends.known():
                return None
            starts, ends = list(starts.items), list(ends.items)
            axes = list(axes.items) if axes is not None and axes.known() else (
                None if len(node.inputs) > 3 and node.inputs[3] is not None else list(range(len(starts))))
            steps = list(steps.items) if steps is not None and steps.known() else (
                None if len(node.inputs) > 4 and node.inputs[4] is not None else [1] * len(starts))
        else:
            starts, ends = list(_attr(node, "starts", [])), list(_attr(node, "ends", []))
            axes = list(_attr(node, "axes", range(len(starts))))
            steps = [1] * len(starts)
        if axes is None or steps is None or not (len(starts) == len(ends) == len(axes) == len(steps)):
            return None
        dims = list(shape)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = _normalize_axis(axis, len(shape))
            if axis is None or step == 0:
                return None
            dim = shape[axis]
            if isinstance(dim, int):
                dims[axis] = len(range(*slice(start, end, step).indices(dim)))
            elif start == 0 and step == 1 and end >= 2**31 - 1:
                dims[axis] = dim
            else:
                dims[axis] = Sym("slice")
        return tuple(dims)

    def _pad_shape(self, node, shape, pads_input, axes_input) -> tuple | None:
        if shape is None:
            return None
        pads = _attr(node, "pads")
        if pads is None:
            if pads_input is None or not pads_input.known():
                return None
            pads = list(pads_input.items)
        axes = list(range(len(shape)))
        if len(node.inputs) > 3 and node.inputs[3] is not None:
            if axes_input is None or not axes_input.known():
                return None
            axes = [_normalize_axis(a, len(shape)) for a in axes_input.items]
            if None in axes:
                return None
        if len(pads) != 2 * len(axes):
            return None
        dims = list(shape)
        for k, axis in enumerate(axes):
            grow = int(pads[k]) + int(pads[k + len(axes)])
            dims[axis] = dims[axis] + grow if isinstance(dims[axis], int) else (dims[axis] if grow == 0 else Sym("pad"))
        return tuple(dims)

    def _split_shape(self, node, index, shape, split_input) -> tuple | None:
        if shape is None:
            return None
        axis = _normalize_axis(_attr(node, "axis", 0), len(shape))
        if axis is None:
            return None
        split = _attr(node, "split")
        if split is None and split_input is not None and split_input.known():
            split = list(split_input.items)
        dims = list(shape)
        if split is not None:
            if index >= len(split):
                return None
            dims[axis] = int(split[index])
            return tuple(dims)
        count = len(node.outputs)
        total = shape[axis]
        if not isinstance(total, int) or _attr(node, "num_outputs") is not None and total % count:
            return None  # uneven splits: leave to the runtime
        if total % count:
            return None
        dims[axis] = total // count
        return tuple(dims)

    # -- partial values -------------------------------------------------------------------

    def elements(self, value: ir.Value | None, _depth: int = 0) -> Elements | None:
        if value is None:
            return None
        hit = self._elements.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        result = None
        if _depth < _MAX_DEPTH:
            try:
                result = self._infer_elements(value, _depth)
            except (TypeError, ValueError, IndexError, OverflowError):
                result = None
        self._elements[id(value)] = (value, result)
        return result

    def _infer_elements(self, value: ir.Value, depth: int) -> Elements | None:
        tensor = value.const_value if value.producer() is None else None
        if tensor is not None and (len(tensor.shape) > 1 or tensor.size > MAX_ELEMENTS):
            return None  # too big to be a shape: do not read its bytes
        array = constant_array(value)
        if array is not None:
            if array.dtype.kind not in "iu" or array.ndim > 1 or array.size > MAX_ELEMENTS:
                return None
            return Elements(tuple(int(x) for x in array.reshape(-1)), array.ndim == 0, ir.DataType.from_numpy(array.dtype))
        if value.is_graph_input():
            return None
        node = value.producer()
        if node is None or node.domain not in _STANDARD_DOMAINS or value.index() != 0:
            return None
        op = node.op_type
        inputs = node.inputs

        def elements_of(i: int) -> Elements | None:
            return self.elements(inputs[i], depth + 1) if i < len(inputs) and inputs[i] is not None else None

        if op == "Shape":
            shape = self.symbolic_shape(inputs[0], depth + 1)
            if shape is None:
                return None
            start, end = _shape_range(node, len(shape))
            return Elements(tuple(shape[start:end]), False, ir.DataType.INT64)
        if op == "Size":
            shape = self.symbolic_shape(inputs[0], depth + 1)
            size = _product(shape) if shape is not None else None
            return Elements((size if isinstance(size, int) else None,), True, ir.DataType.INT64)
        if op == "Identity":
            return elements_of(0)
        if op == "Cast":
            source = elements_of(0)
            target = ir.DataType(_attr(node, "to", 0))
            if source is None or target not in _INT_DTYPES:
                return None
            limit = 2**31 if target == ir.DataType.INT32 else 2**63
            items = tuple(
                e if (isinstance(e, int) and -limit <= e < limit) or (isinstance(e, Sym) and target == ir.DataType.INT64)
                else None
                for e in source.items
            )
            return Elements(items, source.scalar, target)
        if op == "Gather":
            data, indices = elements_of(0), elements_of(1)
            if data is None or indices is None or data.scalar or not indices.known():
                return None
            if _attr(node, "axis", 0) not in (0, -1):
                return None
            picked = []
            for i in indices.items:
                j = i + len(data.items) if i < 0 else i
                if not 0 <= j < len(data.items):
                    return None
                picked.append(data.items[j])
            return Elements(tuple(picked), indices.scalar, data.dtype)
        if op == "Slice":
            data = elements_of(0)
            if data is None or data.scalar:
                return None
            params = [elements_of(i) for i in range(1, 5)]
            sliced = self._slice_shape(node, data.items, params)  # reuse the index arithmetic on one axis
            if sliced is None:
                return None
            return self._slice_elements(node, data, params)
        if op == "Concat":
            parts = [elements_of(i) for i in range(len(inputs))]
            if any(p is None or p.scalar for p in parts) or not parts:
                return None
            if len({p.dtype for p in parts}) != 1:
                return None
            return Elements(tuple(e for p in parts for e in p.items), False, parts[0].dtype)
        if op == "Unsqueeze":
            data = elements_of(0)
            if data is None or not data.scalar:
                return None
            axes = _attr(node, "axes")
            if axes is None:
                axes_input = elements_of(1)
                axes = None if axes_input is None or not axes_input.known() else list(axes_input.items)
            return Elements(data.items, False, data.dtype) if axes is not None and list(axes) in ([0], [-1]) else None
        if op == "Squeeze":
            data = elements_of(0)
            if data is None or data.scalar or len(data.items) != 1:
                return None
            return Elements(data.items, True, data.dtype)
        if op == "Reshape":
            data, target = elements_of(0), elements_of(1)
            if data is None or target is None or not target.known() or target.scalar:
                return None
            if len(target.items) == 0 and len(data.items) == 1:
                return Elements(data.items, True, data.dtype)
            if len(target.items) == 1 and target.items[0] in (-1, len(data.items)):
                return Elements(data.items, False, data.dtype)
            return None
        if op in ("Add", "Sub", "Mul", "Div"):
            return _arithmetic(op, elements_of(0), elements_of(1)) if len(node.inputs) == 2 else None
        if op in ("Max", "Min"):
            # Variadic: fold every operand, not just the first two (found by fuzzing the pipeline).
            result = elements_of(0)
            for index in range(1, len(node.inputs)):
                result = _arithmetic(op, result, elements_of(index))
            return result
        if op == "Equal" and len(node.inputs) == 2:  # parity: a dim is never equal to a negative int
            return _equal(elements_of(0), elements_of(1))
        return None

    def _slice_elements(self, node, data: Elements, params) -> Elements | None:
        if len(node.inputs) > 1:
            starts, ends, axes, steps = params
            if starts is None or ends is None or not starts.known() or not ends.known():
                return None
            if axes is not None and (not axes.known() or list(axes.items) not in ([0], [-1])):
                return None
            if axes is None and len(node.inputs) > 3 and node.inputs[3] is not None:
                return None
            if steps is not None and not steps.known():
                return None
            if steps is None and len(node.inputs) > 4 and node.inputs[4] is not None:
                return None
            step = steps.items[0] if steps is not None else 1
            if len(starts.items) != 1 or len(ends.items) != 1 or (steps is not None and len(steps.items) != 1):
                return None
            start, end = starts.items[0], ends.items[0]
        else:
            starts, ends = list(_attr(node, "starts", [])), list(_attr(node, "ends", []))
            axes = list(_attr(node, "axes", [0]))
            if len(starts) != 1 or len(ends) != 1 or axes not in ([0], [-1]):
                return None
            start, end, step = starts[0], ends[0], 1
        if step == 0:
            return None
        picked = tuple(data.items[i] for i in range(*slice(start, end, step).indices(len(data.items))))
        return Elements(picked, False, data.dtype)


def _paired(a: Elements | None, b: Elements | None) -> tuple[tuple, tuple] | None:
    """The two operands' items broadcast to one length (a single item repeats), or None."""
    if a is None or b is None or a.dtype != b.dtype:
        return None
    if len(a.items) != len(b.items) and 1 not in (len(a.items), len(b.items)):
        return None
    n = max(len(a.items), len(b.items))
    return (a.items * n if len(a.items) == 1 else a.items), (b.items * n if len(b.items) == 1 else b.items)


def _arithmetic(op: str, a: Elements | None, b: Elements | None) -> Elements | None:
    pair = _paired(a, b)
    if pair is None:
        return None
    xs, ys = pair
    limit = 2**31 if a.dtype == ir.DataType.INT32 else 2**63
    out = []
    for x, y in zip(xs, ys):
        if not (isinstance(x, int) and isinstance(y, int)):
            out.append(None)
            continue
        if op == "Add":
            r = x + y
        elif op == "Sub":
            r = x - y
        elif op == "Mul":
            r = x * y
        elif op == "Max":
            r = max(x, y)
        elif op == "Min":
            r = min(x, y)
        else:  # integer Div: truncation and flooring agree only for non-negative operands
            r = x // y if x >= 0 and y > 0 else None
        out.append(r if r is None or -limit <= r < limit else None)
    return Elements(tuple(out), a.scalar and b.scalar, a.dtype)


def _equal(a: Elements | None, b: Elements | None) -> Elements | None:
    """Equal over partial values (parity helper's addition). A Sym element is a dim size, never
    negative, so it differs from every negative int (Expand's `Where(Equal(shape, -1), 1, shape)`);
    the same Sym object is equal to itself; anything else unknown stays unknown."""
    pair = _paired(a, b)
    if pair is None:
        return None
    xs, ys = pair
    out = []
    for x, y in zip(xs, ys):
        if isinstance(x, int) and isinstance(y, int):
            out.append(int(x == y))
        elif isinstance(x, Sym) and x is y:
            out.append(1)
        elif (isinstance(x, Sym) and isinstance(y, int) and y < 0) or (isinstance(y, Sym) and isinstance(x, int) and x < 0):
            out.append(0)
        else:
            out.append(None)
    return Elements(tuple(out), a.scalar and b.scalar, ir.DataType.BOOL)


def _shape_range(node: ir.Node, rank: int) -> tuple[int, int]:
    """Shape's `start`/`end` (opset 15+), clamped as the operator specifies."""
    start = int(_attr(node, "start", 0))
    end = _attr(node, "end")
    end = rank if end is None else int(end)
    if start < 0:
        start += rank
    if end < 0:
        end += rank
    start = min(max(start, 0), rank)
    end = min(max(end, 0), rank)
    return start, max(start, end)


def _product(dims):
    total = 1
    for d in dims:
        if not isinstance(d, int):
            return Sym("product")
        total *= d
    return total


def _broadcast_shapes(shapes) -> tuple | None:
    if not shapes or any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    result = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        for i, d in enumerate(padded):
            merged = broadcast_dims(result[i], d)
            if merged is None:
                return None
            result[i] = merged
    return tuple(result)


def _resize_scales_shape(node, shape, scales_value) -> tuple | None:
    """Resize by constant whole-number scales: each dim times its scale (parity helper's addition).
    Only whole-number scales and products below 2**24: then onnxruntime's float32 product
    `scale * dim` and the spec's floor(dim * scale) are the same integer."""
    if shape is None or scales_value is None:
        return None
    scales = constant_array(scales_value)
    if scales is None or scales.dtype != np.float32 or scales.shape != (len(shape),):
        return None
    mode = _attr(node, "coordinate_transformation_mode", "half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if _attr(node, "axes") is not None or mode == "tf_crop_and_resize":
        return None
    dims = []
    for dim, scale in zip(shape, scales.tolist()):
        if not (scale >= 1 and scale == int(scale) and scale < 2**24):
            return None
        if scale == 1:
            dims.append(dim)
        elif isinstance(dim, int) and dim * int(scale) < 2**24:
            dims.append(dim * int(scale))
        else:
            dims.append(Sym("resize"))
    return tuple(dims)


def _concat_shape(shapes, axis: int) -> tuple | None:
    if shapes and any(s is None for s in shapes) and any(s is not None for s in shapes):
        # Parity: an input of unknown shape still has the others' dims off the axis (Concat
        # rejects anything else); the axis' size is unknown.
        known_shapes = [s for s in shapes if s is not None]
        rank = len(known_shapes[0])
        axis_index = _normalize_axis(axis, rank)
        if axis_index is None or any(len(s) != rank for s in known_shapes):
            return None
        merged = _concat_shape(known_shapes, axis)
        return None if merged is None else merged[:axis_index] + (Sym("concat"),) + merged[axis_index + 1:]
    if not shapes or any(s is None for s in shapes):
        return None
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        return None
    axis = _normalize_axis(axis, rank)
    if axis is None:
        return None
    dims = []
    for i in range(rank):
        column = [s[i] for s in shapes]
        if i == axis:
            dims.append(_sum(column))
        else:
            known = [d for d in column if isinstance(d, int)]
            dims.append(known[0] if known else column[0])
    return tuple(dims)


def _sum(dims):
    if all(isinstance(d, int) for d in dims):
        return sum(dims)
    nonzero = [d for d in dims if not (isinstance(d, int) and d == 0)]
    return nonzero[0] if len(nonzero) == 1 else Sym("concat")


def _matmul_shape(a, b) -> tuple | None:
    if a is None or b is None or not a or not b:
        return None
    a_rows = a if len(a) > 1 else (1,) + tuple(a)
    b_cols = b if len(b) > 1 else tuple(b) + (1,)
    batch = _broadcast_shapes([a_rows[:-2], b_cols[:-2]])
    if batch is None:
        return None
    dims = batch + (a_rows[-2], b_cols[-1])
    if len(a) == 1:
        dims = dims[:-2] + dims[-1:]
    if len(b) == 1:
        dims = dims[:-1]
    return dims
