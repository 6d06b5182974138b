"""Whether a model's discrete ops can see what the perturbation runs move.

The controls of verdict.py run the original on its float inputs moved by a few ulps, more of them
(judge.perturbation_runs) where the graph holds a discrete op (graphinfo.is_jump: Floor, Equal, a
Cast to int...), to see where the original's own results jump. A discrete op moves under those
runs only where its inputs do; one that reads nothing but constants, integer inputs (never
moved), or the shapes of values whose shapes are fixed cannot jump, whatever the float inputs
are: the shape arithmetic of an exported model (Shape, Cast to int64, Floor of a scale times a
size for Resize) and a mask made from integer token ids with Equal. Counting those made every
such model pay for the runs of a discrete one while the runs could never show one jump.

The analysis is one topological pass over the main graph with two flags per value: its values
may move, its shape may move. A float graph input's values move, its shape does not; an
initializer and a Constant move in nothing. Shape and Size read only their input's shape. An
op's output shape moves where an input's shape does, or where any input's values do unless the
op is one whose output shape follows from its inputs' shapes and attributes alone
(SHAPE_FROM_SHAPES), or from them and the values of named inputs (SHAPE_INPUTS: a Reshape's
target, a Resize's sizes) that do not move; NonZero, Unique, Compress and any op not listed are
shaped by every input's values. A value read from an enclosing scope, or of a name the pass does
not know, moves in both.

Where it cannot follow the data it counts the op as discrete, as the whole-graph check did and
more: an If, Loop or Scan whose bodies hold a discrete op, and a call of a local function whose
body (or a function it calls) holds one, count when any of their inputs moves (a body holding a
random op moves on its own); their outputs move in both. The extra runs are there to find where a
discrete op makes the original jump; a graph whose discrete ops read nothing the runs move gets
the runs of a graph without any, which is what it is as far as the runs can tell.
"""

from __future__ import annotations

import onnx

from onnxrefine.verify.graphinfo import graph_inputs, is_float_dtype, is_jump

# Ops whose output shape follows from their inputs' shapes and attributes alone, never from an
# input's values (which of their inputs carry values is irrelevant: none shapes the result).
SHAPE_FROM_SHAPES = frozenset({
    # elementwise, unary and broadcasting binary/variadic
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd",
    "BitwiseNot", "BitwiseOr", "BitwiseXor", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Cos", "Cosh",
    "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid",
    "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean",
    "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "PRelu", "Pow", "Reciprocal", "Relu", "Round",
    "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum",
    "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
    # per-axis and normalizing ops (axes as attributes)
    "BatchNormalization", "Flatten", "GroupNormalization", "Hardmax", "InstanceNormalization",
    "LayerNormalization", "LogSoftmax", "LpNormalization", "MeanVarianceNormalization",
    "RMSNormalization", "Softmax", "Transpose", "DepthToSpace", "SpaceToDepth", "ArgMax", "ArgMin",
    "CumSum", "Concat", "Trilu", "Dropout", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    # products, convolutions and pooling (kernel, strides and pads are attributes)
    "Conv", "ConvInteger", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "QLinearConv",
    "QLinearMatMul", "AveragePool", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "LpPool",
    "MaxPool", "LRN", "Einsum", "Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
})
# Ops whose output shape follows from their inputs' shapes and the values of these inputs alone
# (a target shape, sizes or scales, pads, axes, a count), never from their data's values.
SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3),
    "Upsample": (1,), "Pad": (1, 3), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "TopK": (1,),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "OneHot": (1,), "CenterCropPad": (1, 2), "EyeLike": (),
    **{op: (1,) for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                           "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")},
}
_SHAPE_READERS = frozenset({"Shape", "Size"})
_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})
# Ops whose values may differ from run to run whatever their inputs: every run moves them (a
# Dropout in training mode draws its mask anew).
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"})
_STANDARD = ("", "ai.onnx")


def perturbation_sees_discrete_ops(model: onnx.ModelProto) -> bool:
    """Whether a discrete op of `model` can read something the perturbation runs move (see the
    module docstring)."""
    values_move: dict[str, bool] = {}
    shape_moves: dict[str, bool] = {}
    for spec in graph_inputs(model):
        values_move[spec.name] = spec.dtype == object or is_float_dtype(spec.dtype)
        shape_moves[spec.name] = False
    for init in model.graph.initializer:
        values_move.setdefault(init.name, False)
        shape_moves.setdefault(init.name, False)
    functions = {(f.domain, f.name): f for f in model.functions}
    bodies_jump: dict[tuple, bool] = {}
    bodies_random: dict[tuple, bool] = {}

    def moves(name: str) -> bool:
        return values_move.get(name, True) or shape_moves.get(name, True)

    for node in model.graph.node:
        names = [name for name in node.input if name]
        standard = (node.domain or "") in _STANDARD
        if standard and node.op_type == "Constant":
            moved_values = moved_shape = False
        elif standard and node.op_type in _SHAPE_READERS:
            moved_values = moved_shape = bool(names) and shape_moves.get(names[0], True)
        else:
            # an op with bodies, which also read the enclosing scope, or a call of a local function
            bodied = node.op_type in _SUBGRAPH_OPS or any(a.HasField("g") or len(a.graphs) for a in node.attribute)
            opaque = bodied or (node.domain, node.op_type) in functions
            read_moving = bodied or node.op_type in _RANDOM or any(moves(name) for name in names) \
                or (opaque and _holds(node, functions, bodies_random, _is_random))
            if read_moving and (is_jump(node) or (opaque and _holds(node, functions, bodies_jump, is_jump))):
                return True
            moved_values = read_moving
            moved_shape = opaque or any(shape_moves.get(name, True) for name in names) \
                or any(values_move.get(name, True) for name in _shaping_inputs(node, standard))
        for out in node.output:
            if out:
                values_move[out], shape_moves[out] = moved_values, moved_shape
    return False


def _shaping_inputs(node: onnx.NodeProto, standard: bool) -> list[str]:
    """The inputs of `node` whose values may shape its outputs: none for SHAPE_FROM_SHAPES, the
    listed ones for SHAPE_INPUTS, every one for any other op."""
    if standard and node.op_type in SHAPE_FROM_SHAPES:
        return []
    if standard and node.op_type in SHAPE_INPUTS:
        return [node.input[i] for i in SHAPE_INPUTS[node.op_type] if i < len(node.input) and node.input[i]]
    return [name for name in node.input if name]


def _is_random(node: onnx.NodeProto) -> bool:
    return node.op_type in _RANDOM


def _holds(node: onnx.NodeProto, functions: dict, seen: dict, kind) -> bool:
    """Whether `node`'s subgraph bodies, or the local function it calls (and those its body calls),
    hold an op of `kind` anywhere; `seen` memoizes each function's answer for this kind."""
    key = (node.domain, node.op_type)
    if key in functions:
        if key not in seen:
            seen[key] = False  # a recursive call holds what the first visit finds
            seen[key] = any(kind(inner) or _holds(inner, functions, seen, kind) for inner in functions[key].node)
        if seen[key]:
            return True
    for attr in node.attribute:
        for graph in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
            if any(kind(inner) or _holds(inner, functions, seen, kind) for inner in graph.node):
                return True
    return False
