"""Cast chains in half- and mixed-precision models, removed only where exact (ir/precision.py).

Cast(Cast(x, to=mid), to=dst) becomes x (dst is x's own type) or Cast(x, to=dst) when the first
Cast is an exact widening and so is the direct one: float16 -> float32 -> float16 is the
identity; float32 -> float16 -> float32 rounds and stays. The value each node computes in keeps
its element type: no node is moved into another precision.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.precision import cast_chain_refusal
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.registry import NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Match, Op, Var
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


PASSES = (
    PassSpec(
        "eliminate_exact_cast_chain",
        "Cast(Cast(x)) -> x or one Cast where the first Cast is an exact widening and the direct Cast is exact "
        "(float16->float32->float16 goes; float32->float16->float32 rounds and stays)",
        rules=(CAST_CHAIN,),
        order=20,
        not_fuzzed=NO_PATTERN_YET,
    ),
)
