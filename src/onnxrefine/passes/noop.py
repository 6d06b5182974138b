"""No-op elimination: nodes whose output provably equals their input, bit for bit.

Every guard rests on trusted facts only (constants, the main graph's declared inputs, operator
shape/type rules via ir/facts/), never on declared value_info. A replacement that would
make a graph output alias a graph input, another output or an outer-scope value is refused by the
driver; the node then stays.

Not no-ops, and therefore refused: x + (+0.0) in floating point (-0.0 + 0.0 = +0.0), x - (-0.0),
a constant that broadcasts x up, ArgMax(f(x)) for an f that can create ties (see MONOTONE_ARG),
Reshape(Reshape(x, a), b) when b copies dims with 0, Dropout that may run in training mode.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.foldmath import is_float_dtype
from onnxrefine.ir.signed_zero import refuse_if_observable
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.clip_chains import CLAMP_CHAIN
from onnxrefine.passes.noop_shapes import CONCAT_EMPTY, EXPAND_BROADCAST, FLATTEN_ROW
from onnxrefine.passes.opargs import input_at, int_list_arg, known_dim, normalize_axes
from onnxrefine.passes.registry import GRAPH, NO_PATTERN_YET, PassSpec
from onnxrefine.rewrite.pattern import Const, Match, Op, Opt, Rest, Var
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING, Replacement, RewriteContext, Rule


def _forward(m: Match, node_key: str, value_key: str = "x") -> Replacement:
    """Replace output 0 of the matched node by the captured value."""
    return Replacement([], {m[node_key].outputs[0]: m[value_key]})


def _rank(ctx: RewriteContext, value: ir.Value, what: str) -> int:
    rank = ctx.facts.rank(value)
    if rank is None:
        raise RewriteRefused("noop.rank_unknown", f"the rank of {what} is not known from trusted facts")
    return rank


# --- eliminate_identity ----------------------------------------------------------------------


def drop_identity(m: Match, ctx: RewriteContext) -> Replacement:
    return _forward(m, "node")


IDENTITY = Rule("eliminate_identity", Op("Identity", Var("x"), name="node"), drop_identity)


# --- eliminate_nop_cast ------------------------------------------------------------------------


def drop_same_type_cast(m: Match, ctx: RewriteContext) -> Replacement:
    node: ir.Node = m["node"]
    oracle = ctx.facts
    source = oracle.dtype(m["x"])
    if source is None:
        raise RewriteRefused("cast.dtype_unknown", "the input's element type is not known from trusted facts")
    if node.op_type == "Cast":
        target = ir.DataType(attr(node, "to"))
    else:
        target = oracle.dtype(input_at(node, 1))
        if target is None:
            raise RewriteRefused("cast.castlike_target_unknown", "CastLike's target element type is not known from trusted facts")
    if source != target:
        return None  # a real conversion; nothing to explain
    return _forward(m, "node")


CAST = Rule("eliminate_nop_cast", Op("Cast", Var("x"), name="node"), drop_same_type_cast)
CAST_LIKE = Rule("eliminate_nop_cast_like", Op("CastLike", Var("x"), Var("like"), name="node"), drop_same_type_cast)


# --- eliminate_nop_dropout ---------------------------------------------------------------------


def drop_inference_dropout(m: Match, ctx: RewriteContext) -> Replacement:
    node: ir.Node = m["node"]
    opset = ctx.opset()
    if opset < 7 and attr(node, "is_test", 0) != 1:
        raise RewriteRefused("dropout.is_test", "Dropout before opset 7 without is_test=1 runs in training mode")
    training = m.get("training")
    if training is not None:
        flag = m.array("training")
        if flag is None:
            raise RewriteRefused("dropout.training_not_constant", "Dropout's training_mode is not a constant")
        if np.any(flag):
            raise RewriteRefused("dropout.training", "Dropout runs in training mode")
    if any(out.uses() or out.is_graph_output() for out in node.outputs[1:]):
        raise RewriteRefused("dropout.mask_read", "Dropout's mask output is read")
    return _forward(m, "node")


DROPOUT = Rule(
    "eliminate_nop_dropout",
    Op("Dropout", Var("x"), Opt(Var("ratio")), Opt(Var("training")), name="node"),
    drop_inference_dropout,
)


# --- eliminate_nop_flatten ---------------------------------------------------------------------


def drop_flatten_of_matrix(m: Match, ctx: RewriteContext) -> Replacement | None:
    if int(attr(m["node"], "axis", 1)) not in (1, -1):
        return None
    if _rank(ctx, m["x"], "Flatten's input") != 2:
        raise RewriteRefused("flatten.not_2d", "Flatten's input is not known to be 2-D")
    return _forward(m, "node")


FLATTEN = Rule("eliminate_nop_flatten", Op("Flatten", Var("x"), name="node"), drop_flatten_of_matrix)


# --- eliminate_nop_pad -------------------------------------------------------------------------


def drop_zero_pad(m: Match, ctx: RewriteContext) -> Replacement | None:
    pads = int_list_arg(m["node"], "pads", 1, "pads")
    if pads is None or any(p != 0 for p in pads):
        return None
    # With nothing added or cropped, every mode (constant, edge, reflect, wrap) returns the input.
    return _forward(m, "node")


PAD = Rule("eliminate_nop_pad", Op("Pad", Var("x"), Rest("args"), name="node"), drop_zero_pad)


# --- eliminate_nop_concat / eliminate_nop_split ------------------------------------------------

CONCAT = Rule("eliminate_nop_concat", Op("Concat", Var("x"), name="node"), lambda m, ctx: _forward(m, "node"))


def drop_single_split(m: Match, ctx: RewriteContext) -> Replacement | None:
    node: ir.Node = m["node"]
    if len(node.outputs) != 1:
        return None
    split = int_list_arg(node, "split", 1, "split")
    if split is not None:
        split_covers_axis(split, ctx.facts.shape(m["x"]), attr(node, "axis", 0))
    return _forward(m, "node")


def split_covers_axis(split: list[int], shape, axis: int) -> None:
    """RewriteRefused unless a one-output Split by `split` along `axis` of a tensor of `shape`
    (dims int or None) returns the whole tensor."""
    axis = normalize_axes([axis], None if shape is None else len(shape))
    if shape is None or axis is None or known_dim(shape[axis[0]]) is None:
        raise RewriteRefused("split.axis_unknown", "Split's axis length is not known, so the split may not cover it")
    if split != [shape[axis[0]]]:
        raise RewriteRefused("split.not_whole", f"split {split} does not cover the axis of length {shape[axis[0]]}")


SPLIT = Rule("eliminate_nop_split", Op("Split", Var("x"), Rest("args"), name="node"), drop_single_split)


# --- eliminate_nop_expand ----------------------------------------------------------------------


def drop_unit_expand(m: Match, ctx: RewriteContext) -> Replacement | None:
    """Expand is a no-op when broadcasting the input against the target gives the input's own
    shape: an all-ones target no longer than the input's rank, or a target each of whose dims is
    1 or equal to the input's known dim."""
    shape = [int(d) for d in m.array("shape").reshape(-1)]
    if all(d == 1 for d in shape):
        expand_keeps_shape(shape, rank=_rank(ctx, m["x"], "Expand's input"))
    else:
        expand_keeps_shape(shape, source=ctx.facts.shape(m["x"]))
    return _forward(m, "node")


def expand_keeps_shape(shape: list[int], rank: int | None = None, source=None) -> None:
    """RewriteRefused unless Expand to `shape` returns its input: one of rank `rank` for an
    all-ones `shape`, else one of shape `source` (dims int or None; None: unknown)."""
    if all(d == 1 for d in shape):
        if len(shape) > rank:
            raise RewriteRefused("expand.ones_raise_rank", f"Expand to rank {len(shape)} raises the rank of a rank-{rank} input")
        return
    if source is None:
        raise RewriteRefused("expand.shape_unknown", "the input's shape is not known from trusted facts")
    if len(shape) > len(source):
        raise RewriteRefused("expand.raise_rank", f"Expand to rank {len(shape)} raises the rank of a rank-{len(source)} input")
    for target, dim in zip(shape, source[len(source) - len(shape):]):
        if target != 1 and known_dim(dim) != target:
            raise RewriteRefused("expand.broadcasts", f"target dim {target} may broadcast input dim {dim}")


EXPAND = Rule("eliminate_nop_expand", Op("Expand", Var("x"), Const("shape"), name="node"), drop_unit_expand)


# --- eliminate_nop_transpose -------------------------------------------------------------------


def drop_identity_transpose(m: Match, ctx: RewriteContext) -> Replacement | None:
    perm = attr(m["node"], "perm")
    if perm is None:
        if _rank(ctx, m["x"], "Transpose's input") > 1:
            return None
    elif list(perm) != list(range(len(perm))):
        return None
    return _forward(m, "node")


TRANSPOSE = Rule("eliminate_nop_transpose", Op("Transpose", Var("x"), name="node"), drop_identity_transpose)


# --- eliminate_nop_reshape ---------------------------------------------------------------------


def reshape_keeps_shape(source, target: list[int], allowzero: bool) -> str | None:
    """Why Reshape(x, target) may differ from x of trusted shape `source`; None if it never does."""
    if source is None:
        return "the input's shape is not known from trusted facts"
    if len(target) != len(source):
        return f"target rank {len(target)} differs from the input rank {len(source)}"
    if target.count(-1) > 1:
        return "more than one -1 in the target"
    for i, (t, d) in enumerate(zip(target, source)):
        if t == 0 and not allowzero:
            continue  # copies dim i
        if t == -1:
            others = [source[j] for j in range(len(source)) if j != i]
            if any(known_dim(o) is None or o == 0 for o in others):
                return "-1 next to a dim that is unknown or zero"
            continue
        if known_dim(d) is None:
            return f"input dim {i} is not known"
        if t != d:
            return f"target dim {i} is {t}, the input's is {d}"
    return None


def drop_same_shape_reshape(m: Match, ctx: RewriteContext) -> Replacement | None:
    target = [int(t) for t in m.array("shape").reshape(-1)]
    source = ctx.facts.shape(m["x"])
    reason = reshape_keeps_shape(source, target, bool(attr(m["node"], "allowzero", 0)))
    if reason is not None:
        raise RewriteRefused("reshape.not_same_shape", reason)
    return _forward(m, "node")


RESHAPE = Rule("eliminate_nop_reshape", Op("Reshape", Var("x"), Const("shape"), name="node"), drop_same_shape_reshape)


# --- eliminate_nop_with_unit -------------------------------------------------------------------


def _unit_guard(m: Match, ctx: RewriteContext, op: str, signed_zero_may_change: bool = False) -> Replacement | None:
    constant = m.array("c")
    if constant is None:
        return None
    if op == "Mul" or op == "Div" or op == "Pow":
        if not np.all(constant == 1):
            return None
    elif op == "And":
        if not np.all(constant):
            return None
    elif op == "Or":
        if np.any(constant):
            return None
    else:  # Add, Sub
        if np.any(constant != 0):
            return None
        if is_float_dtype(constant.dtype) and not signed_zero_may_change:
            negative_zero = np.signbit(constant)
            if op == "Add" and not np.all(negative_zero):
                raise RewriteRefused("identity_arith.add_zero_sign", "x + 0.0 turns x = -0.0 into +0.0 (only x + (-0.0) is a no-op)")
            if op == "Sub" and np.any(negative_zero):
                raise RewriteRefused("identity_arith.sub_negative_zero", "x - (-0.0) turns x = -0.0 into +0.0")
    source_dtype = ctx.facts.dtype(m["x"])
    # The operator's type constraint already ties both operands to one element type (Pow's
    # exponent excepted); a trusted dtype that disagrees means the model is not what it seems.
    if op != "Pow" and source_dtype is not None and source_dtype.numpy() != constant.dtype:
        raise RewriteRefused("identity_arith.dtype", f"input element type {source_dtype} differs from the constant's {constant.dtype}")
    operand_keeps_shape(constant.shape, ctx.facts.shape(m["x"]))
    return _forward(m, "node")


def operand_keeps_shape(constant_shape: tuple, shape) -> None:
    """RewriteRefused unless broadcasting x of `shape` (dims int or None; None: unknown) with a
    constant of `constant_shape` gives x's own shape."""
    if shape is None:
        raise RewriteRefused("identity_arith.rank_unknown", "the input's rank is not known, so the constant may broadcast it up")
    if len(constant_shape) > len(shape):
        raise RewriteRefused("identity_arith.raise_rank", f"a rank-{len(constant_shape)} constant broadcasts the rank-{len(shape)} input up")
    aligned = shape[len(shape) - len(constant_shape):]
    for d_const, d_in in zip(constant_shape, aligned):
        if d_const != 1 and d_const != known_dim(d_in):
            raise RewriteRefused("identity_arith.broadcasts", f"constant dim {d_const} may broadcast input dim {d_in}")


def _unit_rule(op: str) -> Rule:
    pattern = Op(op, Var("x"), Const("c"), name="node")
    return Rule(f"eliminate_nop_with_unit_{op.lower()}", pattern, lambda m, ctx: _unit_guard(m, ctx, op))


UNIT_RULES = tuple(_unit_rule(op) for op in ("Mul", "Add", "Sub", "Div", "Pow", "And", "Or"))


def _float_zero_rule(op: str) -> Rule:
    """x + 0.0 -> x and x - (-0.0) -> x for floats: equal in value, but the result's zero keeps
    x's sign where the original made it +0.0. Not bit-exact, so a pass of its own, declared
    reassociating; applied only where no sign-sensitive use (1/x, ...) can see that zero
    (ir/signed_zero.py), with or without verification."""

    def rewrite(m: Match, ctx: RewriteContext) -> Replacement | None:
        constant = m.array("c")
        if constant is None or not is_float_dtype(constant.dtype) or np.any(constant != 0):
            return None
        negative_zero = np.signbit(constant)
        exact = np.all(negative_zero) if op == "Add" else not np.any(negative_zero)
        if exact:
            return None  # eliminate_nop_with_unit removes it exactly
        replacement = _unit_guard(m, ctx, op, signed_zero_may_change=True)
        if replacement is not None:
            refuse_if_observable(ctx, m["node"].outputs[0], f"removing x {'+ 0.0' if op == 'Add' else '- (-0.0)'}")
        return replacement

    return Rule(f"eliminate_float_{op.lower()}_zero", Op(op, Var("x"), Const("c"), name="node"), rewrite,
                kind=REASSOCIATING)


# --- eliminate_nop_monotone_argmax -------------------------------------------------------------

# Widening casts that are exact and order-preserving; the source types are ones onnxruntime's
# ArgMax/ArgMin implement, so the rewritten node still runs there.
# float16 is not a source: onnxruntime's float16 ArgMax breaks ties (inf, +-0) with
# select_last_index differently from its float32 kernel (pipeline fuzz case 2036, seed 11002036).
_EXACT_WIDENING = {
    ir.DataType.FLOAT: {ir.DataType.DOUBLE},
    ir.DataType.INT8: {ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT16,
                       ir.DataType.FLOAT, ir.DataType.DOUBLE},
    ir.DataType.UINT8: {ir.DataType.INT16, ir.DataType.UINT16, ir.DataType.INT32, ir.DataType.UINT32,
                        ir.DataType.INT64, ir.DataType.UINT64, ir.DataType.FLOAT16, ir.DataType.FLOAT,
                        ir.DataType.DOUBLE},
    ir.DataType.INT32: {ir.DataType.INT64, ir.DataType.DOUBLE},
}
_FLOAT_NEG_TYPES = {ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE}
_TIE_MAKERS = {
    "Exp": "Exp overflows to inf and underflows to 0, making ties ArgMax breaks differently",
    "Sigmoid": "Sigmoid saturates to 0 and 1 in floating point, making ties",
    "Tanh": "Tanh saturates to -1 and 1 in floating point, making ties",
    "Log": "Log rounds neighbouring inputs to one output (ties) and maps negatives to NaN",
    "Sqrt": "Sqrt rounds neighbouring inputs to one output (ties) and maps negatives to NaN",
    "Softmax": "Softmax rounds and underflows, making ties",
    "LogSoftmax": "LogSoftmax rounds, making ties",
    "Relu": "Relu is not strictly monotone (all negatives tie at 0)",
}
MONOTONE_ARG = ("Neg", "Cast") + tuple(_TIE_MAKERS)


def drop_monotone_before_arg(m: Match, ctx: RewriteContext) -> Replacement:
    f: ir.Node = m["f"]
    arg: ir.Node = m["arg"]
    if f.op_type in _TIE_MAKERS:
        raise RewriteRefused("monotone_arg.tie_maker", _TIE_MAKERS[f.op_type])
    dtype = ctx.facts.dtype(m["x"])
    if dtype is None:
        raise RewriteRefused("monotone_arg.dtype_unknown", f"the element type before {f.op_type} is not known from trusted facts")
    op_type = arg.op_type
    if f.op_type == "Neg":
        # Negation is exact and injective on floats (not on ints: -INT_MIN wraps), so ArgMax of
        # -x is ArgMin of x, ties and select_last_index included.
        if dtype not in _FLOAT_NEG_TYPES:
            raise RewriteRefused("monotone_arg.integer_neg", f"Neg on {dtype} is not order-reversing (integer negation wraps)")
        op_type = "ArgMin" if op_type == "ArgMax" else "ArgMax"
    else:
        target = ir.DataType(attr(f, "to"))
        if target not in _EXACT_WIDENING.get(dtype, ()):
            raise RewriteRefused("monotone_arg.cast", f"Cast {dtype} -> {target} is not a known exact, order-preserving widening")
    new = ctx.node(op_type, [m["x"]], dict(arg.attributes), hint=arg.name or None)
    return Replacement([new], {arg.outputs[0]: new.outputs[0]})


MONOTONE_ARGMAX = Rule(
    "eliminate_nop_monotone_argmax",
    Op(("ArgMax", "ArgMin"), Op(MONOTONE_ARG, Var("x"), name="f"), name="arg"),
    drop_monotone_before_arg,
    keeps_intermediates=True,
)


# --- eliminate_consecutive_idempotent_ops ------------------------------------------------------

IDEMPOTENT_UNARY = ("Relu", "Ceil", "Floor", "Round", "Abs", "Sign")


def _idempotent_rule(op: str) -> Rule:
    pattern = Op(op, Op(op, Var("x"), name="inner"), name="outer")
    return Rule(
        f"idempotent_{op.lower()}_chain",
        pattern,
        lambda m, ctx: Replacement([], {m["outer"].outputs[0]: m["inner"].outputs[0]}),
        keeps_intermediates=True,
    )


def collapse_reshape_chain(m: Match, ctx: RewriteContext) -> Replacement:
    outer: ir.Node = m["outer"]
    target = m.array("shape").reshape(-1)
    shape = m["shape"]
    if not attr(outer, "allowzero", 0) and np.any(target == 0) and not _copies_alike(ctx, m, np.flatnonzero(target == 0)):
        # A 0 copying a dim the inner Reshape's output is known to have (a positive int) is that int.
        middle = ctx.facts.symbolic_shape(m["inner"].outputs[0])
        zeros = np.flatnonzero(target == 0)
        if middle is None or any(i >= len(middle) or known_dim(middle[i]) in (None, 0) for i in zeros):
            raise RewriteRefused("reshape_chain.zero_copy", "the outer Reshape copies dims with 0, which would copy from a different input")
        target = target.astype(np.int64)
        target[zeros] = [known_dim(middle[i]) for i in zeros]
        shape = ctx.constant(target, f"{outer.name or 'reshape'}_shape")
    new = ctx.node("Reshape", [m["x"], shape], dict(outer.attributes), hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]})


def _copies_alike(ctx: RewriteContext, m: Match, positions) -> bool:
    """Whether x has, at each of `positions`, the very dim the inner Reshape's output has there
    (the same trusted int or symbol), so a 0 copies the same dim from either."""
    x_shape, middle = ctx.facts.symbolic_shape(m["x"]), ctx.facts.symbolic_shape(m["inner"].outputs[0])
    if x_shape is None or middle is None:
        return False
    return all(i < len(x_shape) and i < len(middle) and (x_shape[i] is middle[i] or (
        isinstance(x_shape[i], int) and x_shape[i] == middle[i])) for i in positions)


RESHAPE_CHAIN = Rule(
    "idempotent_reshape_chain",
    Op("Reshape", Op("Reshape", Var("x"), Var("inner_shape"), name="inner"), Const("shape"), name="outer"),
    collapse_reshape_chain,
    keeps_intermediates=True,
)


def collapse_flatten_to_row(m: Match, ctx: RewriteContext) -> Replacement | None:
    outer: ir.Node = m["outer"]
    if int(attr(outer, "axis", 1)) != 0:
        return None  # axis 1 of a 2-D Flatten output is eliminate_nop_flatten's case
    new = ctx.node("Flatten", [m["x"]], dict(outer.attributes), hint=outer.name or None)
    return Replacement([new], {outer.outputs[0]: new.outputs[0]})


FLATTEN_CHAIN = Rule(
    "idempotent_flatten_chain",
    Op("Flatten", Op("Flatten", Var("x"), name="inner"), name="outer"),
    collapse_flatten_to_row,
    keeps_intermediates=True,
)


def _nothing(pctx) -> int:
    return 0


PASSES = (
    PassSpec("eliminate_identity", "Remove Identity nodes", rules=(IDENTITY,), order=20, fuzz="identity"),
    PassSpec("eliminate_nop_cast", "Remove Cast/CastLike to the element type the input provably has",
             rules=(CAST, CAST_LIKE), order=20, fuzz="nop_cast"),
    PassSpec("eliminate_nop_dropout", "Remove inference-mode Dropout whose mask is unused",
             rules=(DROPOUT,), order=20, fuzz="nop_dropout"),
    PassSpec("eliminate_nop_flatten", "Remove Flatten(axis=1) of a tensor known to be 2-D, and Flatten(axis=0) "
             "of a [1, N] (axis=2 of an [N, 1])", rules=(FLATTEN, FLATTEN_ROW), order=20, fuzz="nop_flatten"),
    PassSpec("eliminate_nop_pad", "Remove Pad whose pads are all zero (any mode)", rules=(PAD,), order=20,
             fuzz="nop_pad"),
    PassSpec("eliminate_nop_concat", "Remove Concat of a single input, and Concat inputs known to be empty along "
             "the axis", rules=(CONCAT, CONCAT_EMPTY), order=20, fuzz="nop_concat"),
    PassSpec("eliminate_nop_split", "Remove Split with one output covering the whole axis", rules=(SPLIT,), order=20,
             fuzz="nop_split"),
    PassSpec("eliminate_nop_expand", "Remove Expand whose target broadcasts to the input's own (trusted) shape, "
             "or that feeds a binary op whose own broadcast gives the same output shape", rules=(EXPAND, EXPAND_BROADCAST), order=20, fuzz="nop_expand"),
    PassSpec("eliminate_nop_transpose", "Remove Transpose with the identity permutation",
             rules=(TRANSPOSE,), order=20, fuzz="nop_transpose"),
    PassSpec("eliminate_nop_reshape", "Remove Reshape to the input's own (trusted, static) shape",
             rules=(RESHAPE,), order=20, fuzz="nop_reshape"),
    PassSpec("eliminate_nop_with_unit",
             "Remove x*1, x/1, x**1, x-0, x+(-0.0), And(x,true), Or(x,false) that do not broadcast x",
             rules=UNIT_RULES, order=20, fuzz="nop_with_unit"),
    PassSpec("eliminate_nop_monotone_argmax",
             "ArgMax/ArgMin of Neg (float: swaps to ArgMin/ArgMax) or of an exact widening Cast reads x",
             rules=(MONOTONE_ARGMAX,), order=20, fuzz="monotone_argmax"),
    PassSpec("eliminate_consecutive_idempotent_ops",
             "f(f(x)) -> f(x) for Relu/Ceil/Floor/Round/Abs/Sign; Clip/Relu chains -> one Clip (intervals that "
             "meet); Reshape chains without 0s; Flatten chains to axis 0",
             rules=tuple(_idempotent_rule(op) for op in IDEMPOTENT_UNARY) + (CLAMP_CHAIN, RESHAPE_CHAIN, FLATTEN_CHAIN),
             order=20, fuzz="idempotent"),
    PassSpec("eliminate_float_add_zero",
             "Remove float x+0.0 and x-(-0.0) that do not broadcast x, where the -0.0 it leaves in place of +0.0 "
             "reaches no sign-sensitive use (a divisor, Reciprocal, Pow base, ...)",
             rules=(_float_zero_rule("Add"), _float_zero_rule("Sub")), order=21, not_fuzzed=NO_PATTERN_YET),
    # onnxoptimizer lists a pass named "nop" among its defaults; accept the name so that pass lists
    # copied from it keep working.
    PassSpec("nop", "Does nothing (onnxoptimizer's pass of that name)", run=_nothing, kind=EXACT, phase=GRAPH,
             order=0, default=False, not_fuzzed="it does nothing", exactness="it changes nothing"),
)
