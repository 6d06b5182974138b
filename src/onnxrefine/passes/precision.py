"""Cast chains in half- and mixed-precision models, removed only where exact (ir/precision.py).

Cast(Cast(x, to=mid), to=dst) becomes x (dst is x's own type) or Cast(x, to=dst) when the first
Cast is an exact widening and so is the direct one: float16 -> float32 -> float16 is the
identity; float32 -> float16 -> float32 rounds and stays. The value each node computes in keeps
its element type: no node is moved into another precision.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.precision import cast_chain_refusal
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Match, Op, Opt, Var
from onnxrefine.rewrite.rule import Replacement, RewriteContext, Rule


def drop_exact_cast_chain(m: Match, ctx: RewriteContext) -> Replacement:
    inner: ir.Node = m["inner"]
    outer: ir.Node = m["outer"]
    source = ctx.facts.dtype(m["x"])
    middle, target = ir.DataType(attr(inner, "to")), ir.DataType(attr(outer, "to"))
    reason = cast_chain_refusal(source, middle, target)
    if reason is not None:
        raise RewriteRefused("cast_chain.inexact", reason)
    if target == source:
        return Replacement([], {outer.outputs[0]: m["x"]})
    cast = ctx.node("Cast", [m["x"]], {"to": int(target)}, hint=outer.name or None)
    return Replacement([cast], {outer.outputs[0]: cast.outputs[0]})


CAST_CHAIN = Rule(
    "eliminate_exact_cast_chain",
    Op("Cast", Op("Cast", Var("x"), name="inner"), name="outer"),
    drop_exact_cast_chain,
)


# --- a Cast of a ConstantOfShape --------------------------------------------------------------

# The element types ConstantOfShape makes (opset 9 on).
_CONSTANT_OF_SHAPE_TYPES = frozenset({
    ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BOOL, ir.DataType.INT8, ir.DataType.INT16,
    ir.DataType.INT32, ir.DataType.INT64, ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32,
    ir.DataType.UINT64,
})


def cast_into_constant_of_shape(m: Match, ctx: RewriteContext) -> Replacement:
    """Cast/CastLike(ConstantOfShape(s, v)) -> ConstantOfShape(s, v in the target type), where v's
    value is exactly the same in that type (a rounding or a wrap is refused: which one a runtime
    does is not ours to guess)."""
    fill, cast = m["fill"], m["cast"]
    target = ctx.facts.dtype(cast.outputs[0])
    if target is None or target not in _CONSTANT_OF_SHAPE_TYPES:
        raise RewriteRefused("fill_cast.dtype", f"the Cast's target type {target} is not one ConstantOfShape makes")
    tensor = attr(fill, "value")
    value = np.zeros(1, np.float32) if tensor is None else np.asarray(tensor.numpy()).reshape(1)
    with np.errstate(all="ignore"):
        converted = value.astype(target.numpy())
        back = converted.astype(value.dtype)
    if not np.array_equal(back, value) or (value.dtype.kind == "f" and not np.all(np.isfinite(value))
                                           and not np.array_equal(np.isinf(value), np.isinf(converted))):
        raise RewriteRefused("fill_cast.inexact", f"the fill value {value[0]!r} is not exactly representable as {target}")
    new = ctx.node("ConstantOfShape", [m["shape"]], {"value": ir.Tensor(converted)}, hint=cast.name or None)
    return Replacement([new], {cast.outputs[0]: new.outputs[0]})


CAST_FILL = Rule(
    "cast_into_constant_of_shape",
    Op(("Cast", "CastLike"), Op("ConstantOfShape", Var("shape"), name="fill"), Opt(Var("like")), name="cast"),
    cast_into_constant_of_shape,
)


# --- CastLike to a known type --------------------------------------------------------------------


def cast_like_to_cast(m: Match, ctx: RewriteContext) -> Replacement:
    """CastLike(x, like) -> Cast(x, to=like's type) where that type is known from trusted facts: the
    same conversion (saturate kept), and a Cast of a constant folds, which CastLike of a constant
    reading a run-time `like` did not."""
    node = m["node"]
    target = ctx.facts.dtype(m["like"])
    if target is None:
        raise RewriteRefused("cast_like.type_unknown", "the like input's element type is not known from trusted facts")
    attributes = {"to": int(target)}
    if "saturate" in node.attributes:
        attributes["saturate"] = int(attr(node, "saturate"))
    cast = ctx.node("Cast", [m["x"]], attributes, hint=node.name or None)
    return Replacement([cast], {node.outputs[0]: cast.outputs[0]})


CAST_LIKE_TO_CAST = Rule("cast_like_to_cast", Op("CastLike", Var("x"), Var("like"), name="node"), cast_like_to_cast)


PASSES = (
    PassSpec(
        "eliminate_exact_cast_chain",
        "Cast(Cast(x)) -> x or one Cast where the first Cast is an exact widening and the direct Cast is exact "
        "(float16->float32->float16 goes; float32->float16->float32 rounds and stays)",
        rules=(CAST_CHAIN,),
        order=20,
        not_fuzzed=NO_PATTERN_YET,
    ),
    PassSpec("fuse_cast_into_constant_of_shape", "Cast/CastLike of a ConstantOfShape -> a ConstantOfShape of the "
             "target type, where the fill value is exact in it", rules=(CAST_FILL,), order=20,
             not_fuzzed=NO_PATTERN_YET),
    PassSpec("cast_like_to_cast", "CastLike(x, like) -> Cast(x, to=like's known type), which folds when x is a "
             "constant", rules=(CAST_LIKE_TO_CAST,), order=21, not_fuzzed=NO_PATTERN_YET),
)
