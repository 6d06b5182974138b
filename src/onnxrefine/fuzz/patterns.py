"""Targeted generation: grow graphs around the pattern an optimizer pass looks for.

`PATTERNS` holds each `Pattern` by name: a builder that emits the pattern on a suitable pool value
(or on a fresh graph input), and the op chains of which at least one must appear in the graph.
Builders deliberately mix the forms a pass may rewrite with near misses it must leave alone
(Reshape's 0 after a Reshape, Shape with start/end, Squeeze with negative axes, Pad values other
than zero, bias shapes that do not broadcast per channel), since those are where rewrites go wrong.
`TARGET_PATTERNS` maps pass names to them as each pass's declaration says (its `fuzz` field:
passes/registry.py); the pass names users know from onnxoptimizer (the 39 of its default
fuse-and-elimination set) all have one. The fusion builders live in pattern_fusions.py and the
sources they draw from in pattern_sources.py; the no-op and cleanup builders are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.graphbuilder import (
    ALL_TYPES, BOOL, F16, F32, F64, FLOATS, I64, MAX_NUMEL, NP_TYPES, NUMERIC, Dim, GraphBuilder, Value,
    broadcast_dims, maybe_negative, numel, scalar,
)
from onnxrefine.fuzz import graphquery as q
from onnxrefine.fuzz import opspecs as ops
from onnxrefine.fuzz import opspecs_nn as nn
from onnxrefine.fuzz.pattern_fusions import (  # PATTERNS names them
    concat_into_reshape, consecutive_concats, consecutive_slices, consecutive_squeezes, consecutive_transposes,
    consecutive_unsqueezes, conv_add_bias, conv_bn, log_softmax, matmul_add, pad_conv, pad_pool, qkv,
    reduce_unsqueeze, transpose_gemm,
)
from onnxrefine.fuzz.pattern_sources import tensor


class UnknownTargetError(BadInputError, ValueError):
    """A targeted-generation name that no pattern is registered for."""


@dataclass(frozen=True)
class Pattern:
    build: Callable[[GraphBuilder], None]
    chains: tuple[tuple[str, ...], ...]
    check: Callable[[onnx.ModelProto], bool] | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        return self.chains[0] if self.chains else ()

    def present(self, model: onnx.ModelProto) -> bool:
        """Whether the model contains the pattern (one of the chains, or the structural check)."""
        if self.check is not None and not self.check(model):
            return False
        return not self.chains or any(q.has_chain(model, chain) for chain in self.chains)


# --- no-ops -----------------------------------------------------------------------------------

def nop_cast(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0)
    y = g.node1("Cast", [x.name], x.dtype, x.dims, to=x.dtype)
    if g.chance(0.5):
        middle = g.choice([F32, F16, I64]) if x.dtype != F32 else g.choice([F16, I64])
        y = g.node1("Cast", [y.name], middle, x.dims, to=middle)
        g.node1("Cast", [y.name], x.dtype, x.dims, to=x.dtype)


def nop_dropout(g: GraphBuilder):
    ops.build_dropout(g, tensor(g, tuple(FLOATS), 0))


def nop_flatten(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1, 4)
    axis = 1 if x.rank == 2 and g.chance(0.7) else g.randint(0, x.rank)
    dims = [nn.product(x.dims[:axis]), nn.product(x.dims[axis:])]
    g.node1("Flatten", [x.name], x.dtype, dims, axis=maybe_negative(g, axis, x.rank))


def nop_pad(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    inputs = [x.name, g.ints([0] * (2 * x.rank), "pads")]
    if g.chance(0.3):
        inputs.append(scalar(g, x.dtype, 1))
    g.node1("Pad", inputs, x.dtype, x.dims, mode=g.choice(["constant", "edge", "reflect"]))


def nop_concat(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    g.node1("Concat", [x.name], x.dtype, x.dims, axis=maybe_negative(g, g.randint(0, x.rank - 1), x.rank))


def nop_split(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    axis = g.randint(0, x.rank - 1)
    if x.dims[axis].is_static and g.chance(0.5):
        g.node("Split", [x.name, g.ints([x.dims[axis].size], "split")], [(x.dtype, x.dims)], axis=axis)
    elif g.opset >= 18:
        g.node("Split", [x.name], [(x.dtype, x.dims)], axis=axis, num_outputs=1)
    else:
        g.node("Split", [x.name], [(x.dtype, x.dims)], axis=axis)


def nop_expand(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0, 5)
    choice = g.rng.random()
    if choice < 0.4:
        ops.emit_expand(g, x, [1])
    elif choice < 0.8:
        ops.emit_expand(g, x, [d.size if d.is_static else 1 for d in x.dims])
    elif not ops.build_expand(g, x):
        ops.emit_expand(g, x, [1])


def nop_transpose(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    g.node1("Transpose", [x.name], x.dtype, x.dims, perm=list(range(x.rank)))


def nop_reshape(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    roll = g.rng.random()
    if roll < 0.4:
        target = [0 if (not d.is_static or g.chance(0.5)) else d.size for d in x.dims]
        shape = g.ints(target, "shape")
    elif roll < 0.7 and x.is_static:
        shape = g.ints([d.size for d in x.dims], "shape")
    else:
        shape = g.node1("Shape", [x.name], I64, [Dim.static(x.rank)], x.dims).name
    g.node1("Reshape", [x.name, shape], x.dtype, x.dims)


UNITS = {"Add": 0, "Sub": 0, "Mul": 1, "Div": 1, "Pow": 1}


def nop_with_unit(g: GraphBuilder):
    x = tensor(g, tuple(NUMERIC), 0)
    op = g.choice(sorted(UNITS))
    shape = g.choice([[], [1], [1] * x.rank])
    if g.chance(0.15) and x.rank < 5 and x.numel * 2 <= MAX_NUMEL and x.dtype != I64 and not x.flat_data:
        shape = [2] + [d.size if d.is_static else 1 for d in x.dims]   # the unit grows the output
    unit = g.const(np.full(shape, UNITS[op], dtype=NP_TYPES[x.dtype]), "unit")
    dims = broadcast_dims(x.dims, tuple(Dim.static(s) for s in shape))
    inputs = [unit, x.name] if op in ("Add", "Mul") and g.chance(0.4) else [x.name, unit]
    g.node1(op, inputs, x.dtype, dims)


def monotone_argmax(g: GraphBuilder):
    x = tensor(g, (F32, F32, F16, F64), 1)
    big = g.node1("Mul", [x.name, scalar(g, x.dtype, g.choice([10.0, 50.0, 100.0]))], x.dtype, x.dims) \
        if g.chance(0.6) else x
    y = g.node1(g.choice(["Exp", "Exp", "Softmax", "Sigmoid"]), [big.name], x.dtype, x.dims)
    ops.build_argmax(g, y)


def identity(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 0)
    for _ in range(g.randint(1, 2)):
        x = g.node1("Identity", [x.name], x.dtype, x.dims)


def shape_op(g: GraphBuilder):
    x = tensor(g, tuple(ALL_TYPES), 1)
    s = shape_with_start(g, x)
    if g.chance(0.5):
        ops.build_constant_of_shape(g, s)


def shape_with_start(g: GraphBuilder, x: Value) -> Value:
    if g.opset >= 15 and g.chance(0.7):
        start = g.randint(-x.rank, x.rank - 1)
        end = g.choice([None, x.rank, g.randint(start % x.rank + 1, x.rank)])
        vals = x.dims[start:end]
        attrs = {"start": start} if end is None else {"start": start, "end": end}
        return g.node1("Shape", [x.name], I64, [Dim.static(len(vals))], tuple(vals), **attrs)
    return g.node1("Shape", [x.name], I64, [Dim.static(x.rank)], x.dims)


def shape_gather(g: GraphBuilder):
    ops.build_gather(g, shape_with_start(g, tensor(g, tuple(ALL_TYPES), 1)))


def slice_after_shape(g: GraphBuilder):
    s = shape_with_start(g, tensor(g, tuple(ALL_TYPES), 1))
    start, end, step = ops.draw_slice(g, s.dims[0].size)
    vals = s.shape_vals[slice(start, end, step)]
    inputs = [s.name, g.ints([start]), g.ints([end])] + ([g.ints([0]), g.ints([step])] if step != 1 else [])
    g.node1("Slice", inputs, I64, [Dim.static(len(vals))], tuple(vals))


# --- cleanup ----------------------------------------------------------------------------------

def deadend(g: GraphBuilder):
    x = tensor(g, tuple(FLOATS), 0)
    y = g.node1(g.choice(["Relu", "Neg", "Exp"]), [x.name], x.dtype, x.dims)
    z = g.node1("Identity", [y.name], y.dtype, y.dims) if g.chance(0.5) else y
    g.no_output.update({y.name, z.name})
    g.pool.remove(z)
    if z is not y:
        g.pool.remove(y)


def unused_initializer(g: GraphBuilder):
    g.allow_constant_nodes, saved = False, g.allow_constant_nodes
    g.const(g.random_array(F32, [g.randint(1, 4)]), "unused")
    g.allow_constant_nodes = saved


def duplicate_initializer(g: GraphBuilder):
    x = tensor(g, (F32,), 1)
    array = g.random_array(F32, [d.size if d.is_static else 1 for d in x.dims])
    g.allow_constant_nodes, saved = False, g.allow_constant_nodes
    for op in (g.choice(["Add", "Mul"]), g.choice(["Sub", "Mul", "Max"])):
        g.node1(op, [x.name, g.const(array.copy(), "dup")], x.dtype, x.dims)
    g.allow_constant_nodes = saved


def common_subexpression(g: GraphBuilder):
    x = tensor(g, (F32, F16, F64), 1)
    op = g.choice(["Relu", "Exp", "Transpose", "Softmax"])
    attrs = {"axis": -1} if op == "Softmax" else {}
    first = g.node1(op, [x.name], x.dtype, x.dims[::-1] if op == "Transpose" else x.dims, **attrs)
    second = g.node1(op, [x.name], x.dtype, first.dims, **attrs)
    g.node1("Add", [first.name, second.name], x.dtype, first.dims)


def constant_to_initializer(g: GraphBuilder):
    x = tensor(g, (F32, F64, I64), 0)
    name = g.fresh("const")
    array = g.random_array(x.dtype, [d.size if d.is_static else 1 for d in x.dims])
    g._scopes[-1].nodes.append(onnx.helper.make_node(
        "Constant", [], [name], name=f"n_{name}", value=onnx.numpy_helper.from_array(array, name)))
    g.node1(g.choice(["Add", "Mul"]), [x.name, name], x.dtype, x.dims)


def if_const_cond(g: GraphBuilder):
    nn.emit_if(g, tensor(g, tuple(ALL_TYPES), 0), constant_condition=True)


def idempotent(g: GraphBuilder):
    x = tensor(g, (F32, F16, F64), 1)
    if g.chance(0.3):
        for _ in range(2):
            x = g.node1("Relu", [x.name], x.dtype, x.dims)
        return
    for _ in range(2):
        x = nn.build_reshape(g, x)[0]


def where_not(g: GraphBuilder):
    x = tensor(g, tuple(NUMERIC), 0)
    cond, cdims = ops.bool_condition(g, x)
    negated = g.node1("Not", [cond], BOOL, cdims)
    other, odims = ops.operand(g, x)
    dims = broadcast_dims(x.dims, odims)
    dims = broadcast_dims(dims, cdims) if dims is not None else None
    if dims is None or numel(dims) > MAX_NUMEL:
        # the operand broadcasts with x and the condition with x, but not with each other
        other, dims = x.name, broadcast_dims(x.dims, cdims)
    g.node1("Where", [negated.name, x.name, other], x.dtype, dims)


PATTERNS: dict[str, Pattern] = {
    "conv_bn": Pattern(conv_bn, (("Conv", "BatchNormalization"), ("ConvTranspose", "BatchNormalization"))),
    "conv_add_bias": Pattern(conv_add_bias, (("Conv", "Add"),)),
    "pad_conv": Pattern(pad_conv, (("Pad", "Conv"),)),
    "pad_pool": Pattern(pad_pool, (("Pad", "MaxPool"), ("Pad", "AveragePool"))),
    "matmul_add": Pattern(matmul_add, (("MatMul", "Add"),)),
    "transpose_gemm": Pattern(transpose_gemm, (("Transpose", "Gemm"),)),
    "consecutive_transposes": Pattern(consecutive_transposes, (("Transpose", "Transpose"),)),
    "consecutive_squeezes": Pattern(consecutive_squeezes, (("Squeeze", "Squeeze"),)),
    "consecutive_unsqueezes": Pattern(consecutive_unsqueezes, (("Unsqueeze", "Unsqueeze"),)),
    "consecutive_slices": Pattern(consecutive_slices, (("Slice", "Slice"),)),
    "consecutive_concats": Pattern(consecutive_concats, (("Concat", "Concat"),)),
    "log_softmax": Pattern(log_softmax, (("Softmax", "Log"),)),
    "reduce_unsqueeze": Pattern(reduce_unsqueeze, tuple(
        (op, "Unsqueeze") for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"))),
    "concat_into_reshape": Pattern(concat_into_reshape, (("Concat", "Reshape"), ("Gather", "Reshape"), ("Shape", "Reshape"))),
    "qkv": Pattern(qkv, (("MatMul",),), q.has_shared_matmul_input),
    "nop_cast": Pattern(nop_cast, (("Cast",),)),
    "nop_dropout": Pattern(nop_dropout, (("Dropout",),)),
    "nop_flatten": Pattern(nop_flatten, (("Flatten",),)),
    "nop_pad": Pattern(nop_pad, (("Pad",),)),
    "nop_concat": Pattern(nop_concat, (("Concat",),)),
    "nop_split": Pattern(nop_split, (("Split",),)),
    "nop_expand": Pattern(nop_expand, (("Expand",),)),
    "nop_transpose": Pattern(nop_transpose, (("Transpose",),)),
    "nop_reshape": Pattern(nop_reshape, (("Reshape",),)),
    "nop_with_unit": Pattern(nop_with_unit, tuple((op,) for op in sorted(UNITS))),
    "monotone_argmax": Pattern(monotone_argmax, (("Exp", "ArgMax"), ("Softmax", "ArgMax"), ("Sigmoid", "ArgMax"))),
    "identity": Pattern(identity, (("Identity",),)),
    "shape_op": Pattern(shape_op, (("Shape",),)),
    "shape_gather": Pattern(shape_gather, (("Shape", "Gather"),)),
    "slice_after_shape": Pattern(slice_after_shape, (("Shape", "Slice"),)),
    "deadend": Pattern(deadend, (), q.has_dead_node),
    "unused_initializer": Pattern(unused_initializer, (), q.has_unused_initializer),
    "duplicate_initializer": Pattern(duplicate_initializer, (), q.has_duplicate_initializers),
    "common_subexpression": Pattern(common_subexpression, (), q.has_common_subexpression),
    "constant_to_initializer": Pattern(constant_to_initializer, (("Constant",),)),
    "if_const_cond": Pattern(if_const_cond, (("If",),), q.has_constant_condition_if),
    "idempotent": Pattern(idempotent, (("Reshape", "Reshape"), ("Relu", "Relu"))),
    "where_not": Pattern(where_not, (("Not", "Where"),)),
}


def _targets() -> dict[str, Pattern]:
    """Each pass's pattern, as its declaration names it (passes/registry.py: `fuzz`)."""
    from onnxrefine.passes.registry import all_passes

    targets = {}
    for spec in all_passes():
        if spec.fuzz is not None:
            if spec.fuzz not in PATTERNS:
                raise ValueError(f"pass {spec.name} names fuzz pattern {spec.fuzz!r}, which does not exist")
            targets[spec.name] = PATTERNS[spec.fuzz]
    return targets


# Pass name -> its pattern, read from the pass declarations.
TARGET_PATTERNS: dict[str, Pattern] = _targets()


def pattern_for(target: str) -> Pattern:
    try:
        return TARGET_PATTERNS[target]
    except KeyError:
        known = ", ".join(sorted(TARGET_PATTERNS))
        raise UnknownTargetError(f"no generator pattern for pass {target!r}; known: {known}") from None
