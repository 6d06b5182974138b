"""Chains of clamps merged into one: Clip(Relu(x)), Relu(Clip(x)) and Clip(Clip(x)) -> one Clip.

Relu is Clip to [0, +inf). Clamping to [l1, h1] and then to [l2, h2] is clamping to
[max(l1, l2), min(h1, h2)] when the two intervals meet; each output element goes through the
same max and min as before, against the same bound values, so the result is bit for bit the
same (NaN stays NaN: Clip and Relu both pass it through). Refused: intervals that do not meet
(the chain is a constant, not a clamp), a bound that is NaN or not a constant scalar, an empty
interval (Clip with min > max), and Clip before opset 11 (bounds as attributes).
Relu(Clip(x, lo, hi)) with hi < 0 is all zeros: refused (the intervals [lo, hi] and [0, inf)
do not meet).

onnxscript's fuse_relus_clips merges intervals that do not meet all the same, into a Clip whose
min is above its max: Clip(Clip(x, -3, -1), 2, 5) becomes Clip(x, 2, -1), which gives -1 where
the chain gives 2, and Relu(Clip(x, -3, -1)) becomes Clip(x, 0, -1): -1 where the chain gives 0.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.rewrite.pattern import Match, Op, Opt, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, RewriteContext, Rule


def _bounds(node: ir.Node, ctx: RewriteContext) -> tuple[float | int | None, float | int | None]:
    """(min, max) of a Clip or Relu, None where unbounded."""
    if node.op_type == "Relu":
        return 0, None
    if ctx.opset() < 11:
        raise RewriteRefused("clip_chain.opset", "Clip before opset 11 holds its bounds as attributes")
    found = []
    for index in (1, 2):
        value = node.inputs[index] if index < len(node.inputs) else None
        if value is None:
            found.append(None)
            continue
        array = constant_array(value)
        if array is None or array.size != 1:
            raise RewriteRefused("clip_chain.bounds", "a Clip bound is not a constant scalar")
        bound = array.reshape(-1)[0].item()
        if isinstance(bound, float) and np.isnan(bound):
            raise RewriteRefused("clip_chain.nan_bound", "a Clip bound is NaN")
        found.append(bound)
    low, high = found
    if low is not None and high is not None and low > high:
        raise RewriteRefused("clip_chain.empty_range", "a Clip's min is above its max")
    return low, high


def merge_clamps(m: Match, ctx: RewriteContext) -> Replacement:
    inner, outer = m["inner"], m["outer"]
    if inner.op_type == "Relu" and outer.op_type == "Relu":
        return None  # idempotent_relu_chain's case
    dtype = ctx.facts.dtype(m["x"])
    if dtype is None or dtype.numpy().kind not in "fiu":
        raise RewriteRefused("clip_chain.dtype", "the element type is not known to be a number type")
    (l1, h1), (l2, h2) = _bounds(inner, ctx), _bounds(outer, ctx)
    lows, highs = [b for b in (l1, l2) if b is not None], [b for b in (h1, h2) if b is not None]
    low, high = (max(lows) if lows else None), (min(highs) if highs else None)
    if low is not None and high is not None and low > high:
        raise RewriteRefused("clip_chain.disjoint", "the two clamps' intervals do not meet: the chain is a constant")
    hint = outer.name or "clip"
    inputs = [m["x"]]
    for bound, name in ((low, "min"), (high, "max")):
        inputs.append(None if bound is None else ctx.constant(np.array(bound, dtype.numpy()), f"{hint}_{name}"))
    while inputs[-1] is None:
        inputs.pop()
    new = ctx.node("Clip", inputs, hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]})


def _clamp(x, name: str) -> Op:
    return Op(("Clip", "Relu"), x, Opt(Var(f"{name}_min")), Opt(Var(f"{name}_max")), name=name)


CLAMP_CHAIN = Rule("clamp_chain", _clamp(_clamp(Var("x"), "inner"), "outer"), merge_clamps, kind=EXACT,
                   keeps_intermediates=True)
