"""Where with a constant condition that is all true or all false selects one operand whole:
Where(c, a, b) -> a (or b), when the selected operand already has the output's shape and type.

Expand's `Where(Equal(shape, -1), ones, shape)` (transformers' attention-mask code) becomes `shape`
once fold_shapes knows the Equal is all false (a dim is never -1). Selection copies values
unchanged for integer and bool tensors: EXACT (not for floats: onnxruntime's float Where returns
+0.0 where it selects a -0.0, which the rule's certificate caught). Guards: the element type is an
integer or bool; the condition is a constant bool tensor with every element the same; the
selected operand's shape equals the broadcast output shape (from trusted facts: Where also
broadcasts the condition and the other operand, which may add axes or repeat elements).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.facts import broadcast_dims
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Const, Match, Op, Var
from onnxrefine.rewrite.rule import Replacement, RewriteContext, Rule


EXACT_TYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32, ir.DataType.INT16, ir.DataType.INT8,
                         ir.DataType.UINT64, ir.DataType.UINT32, ir.DataType.UINT16, ir.DataType.UINT8,
                         ir.DataType.BOOL})


def _same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y or (isinstance(x, int) and isinstance(y, int) and x == y)
                                    for x, y in zip(a, b))


def select_constant_where(m: Match, ctx: RewriteContext) -> Replacement:
    node: ir.Node = m["where"]
    if node.domain not in STANDARD_DOMAINS:
        return None
    condition = m.array("c")
    if condition.dtype != np.bool_ or condition.size == 0:
        raise RewriteRefused("where_const.condition", "the condition is not a non-empty bool constant")
    if condition.all():
        chosen = m["a"]
    elif not condition.any():
        chosen = m["b"]
    else:
        raise RewriteRefused("where_const.mixed", "the condition mixes true and false")
    shapes = ctx.facts
    parts = [shapes.symbolic_shape(v) for v in (node.inputs[0], m["a"], m["b"])]
    if any(p is None for p in parts):
        raise RewriteRefused("where_const.shape_unknown", "an operand's shape is not known from trusted facts")
    output = parts[0]
    for part in parts[1:]:
        output = _broadcast(output, part)
        if output is None:
            raise RewriteRefused("where_const.broadcast", "the operands' shapes do not provably broadcast")
    if not _same_shape(shapes.symbolic_shape(chosen), output):
        raise RewriteRefused("where_const.selected_broadcast", "Where broadcasts the selected operand to a larger shape")
    if shapes.dtype(chosen) not in EXACT_TYPES:
        # onnxruntime's float Where turns a selected -0.0 into +0.0 (found by this rule's certificate)
        raise RewriteRefused("where_const.float", "not an integer or bool selection (a float Where may change the sign of a zero)")
    return Replacement([], {node.outputs[0]: chosen})


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    dims = []
    for x, y in zip(a, b):
        dim = broadcast_dims(x, y)
        if dim is None:
            return None
        dims.append(dim)
    return tuple(dims)


SELECT_CONSTANT_WHERE = Rule(
    "eliminate_where_with_constant_condition",
    Op("Where", Const("c"), Var("a"), Var("b"), name="where"),
    select_constant_where,
)


PASSES = (
    PassSpec(
        "eliminate_where_with_constant_condition",
        "Where whose constant condition is all true (all false) -> its first (second) operand, when that "
        "operand already has the output's shape",
        rules=(SELECT_CONSTANT_WHERE,), order=22, not_fuzzed=NO_PATTERN_YET,
    ),
)
