"""Rewrites that put an operation in the form a backend (or a later fold) takes best, under
onnxoptimizer's names; none is on by default, as in onnxoptimizer.

- `adjust_add`: Add(constant, x) -> Add(x, constant), the operand order TensorRT fuses into the
  MatMul/Conv before it as a bias. IEEE addition is commutative bit for bit: exact.
- `adjust_slice_and_matmul`: MatMul(Slice(constant data), constant rhs) -> Slice(MatMul(data, rhs))
  when the Slice leaves the contracted (last) axis alone, so the MatMul of constants can fold.
  onnxoptimizer also moves it when `rhs` has batch dims: MatMul broadcasts the sliced batch
  against them (a sliced batch of 1 against rhs's 3 gives 3 results; sliced afterwards, 1), so a
  rhs of rank above 2 is refused here. Each result element is the same dot product, but a
  runtime may block a larger MatMul differently: reassociating.
- `replace_einsum_with_matmul`: a two-operand Einsum that is a (batched) matrix product,
  "...ij,...jk->...ik" with explicit batch letters, or with the second operand transposed
  ("ik,jk->ij": MatMul of a Transpose). onnxoptimizer only compares letters by position, so it
  also turns "ii,ij->ij" (A[i,i] * B[i,j], no sum) into a MatMul, which sums over the repeated
  letter; here every letter of a term must be distinct, the batch letters the same in all three
  terms and none of them m, k or n. Einsum and MatMul may sum in different orders: reassociating.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.attrs import attr
from onnxrefine.passes.opargs import input_at, normalize_axes
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Const, Match, Op, Rest, Var
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING, Replacement, RewriteContext, Rule

# --- adjust_add ---------------------------------------------------------------------------------


def adjust_add(m: Match, ctx: RewriteContext) -> Replacement | None:
    add: ir.Node = m["add"]
    first, second = add.inputs[0], add.inputs[1]
    if constant_array(first) is None or constant_array(second) is not None:
        return None  # already constant second (or both constant: folding's business)
    new = ctx.node("Add", [second, first], hint=add.name or None)
    return Replacement([new], {add.outputs[0]: new.outputs[0]})


ADJUST_ADD = Rule("adjust_add", Op("Add", Var("a"), Var("b"), name="add"), adjust_add, kind=EXACT)


# --- adjust_slice_and_matmul --------------------------------------------------------------------


def adjust_slice_and_matmul(m: Match, ctx: RewriteContext) -> Replacement:
    slice_node: ir.Node = m["slice"]
    data, rhs = m["data"], m["rhs"]
    rank, rhs_rank = m.array("data").ndim, m.array("rhs").ndim
    if rhs_rank > 2:
        raise RewriteRefused("slice_matmul.rhs_batch",
                             "the right operand has batch dims, which MatMul broadcasts against the sliced batch")
    axes_value = input_at(slice_node, 3)
    axes = constant_array(axes_value) if axes_value is not None else None
    if axes is None:
        raise RewriteRefused("slice_matmul.axes", "the Slice has no constant axes")
    axes = normalize_axes(axes.reshape(-1), rank)
    if axes is None or rank - 1 in axes:
        raise RewriteRefused("slice_matmul.contracted_axis", "the Slice cuts the axis MatMul contracts (or its axes are bad)")
    matmul = ctx.node("MatMul", [data, rhs], hint=f"{m['matmul'].name or 'matmul'}_full")
    new = ctx.node("Slice", [matmul.outputs[0], *slice_node.inputs[1:]], hint=m["matmul"].name or None)
    return Replacement([matmul, new], {m["matmul"].outputs[0]: new.outputs[0]})


SLICE_MATMUL = Rule(
    "adjust_slice_and_matmul",
    Op("MatMul", Op("Slice", Const("data"), Rest("slice_args"), name="slice"), Const("rhs"), name="matmul"),
    adjust_slice_and_matmul,
    kind=REASSOCIATING,
)


# --- replace_einsum_with_matmul -----------------------------------------------------------------

_MATMUL_DTYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.INT32,
                  ir.DataType.UINT32, ir.DataType.INT64, ir.DataType.UINT64)


def einsum_as_matmul(equation: str) -> bool | None:
    """Whether the two-operand equation is a matrix product of its operands (False) or of the first
    and the transposed second (True); None when it is neither."""
    equation = equation.replace(" ", "")
    left, arrow, result = equation.partition("->")
    first, comma, second = left.partition(",")
    if not arrow or not comma or "," in second:
        return None
    terms = (first, second, result)
    if len(first) < 2 or len({len(t) for t in terms}) != 1:
        return None
    if not all(t.isascii() and t.isalpha() and t.islower() and len(set(t)) == len(t) for t in terms):
        return None  # a repeated letter is a diagonal or a product without sum, not a contraction
    batch = first[:-2]
    if second[:-2] != batch or result[:-2] != batch:
        return None
    m, k = first[-2:]
    if set(batch) & set(first[-2:] + second[-2:]):
        return None
    if second[-2:] == k + result[-1] and result[-2:] == m + result[-1] and result[-1] not in (m, k):
        return False
    if second[-2:] == result[-1] + k and result[-2:] == m + result[-1] and result[-1] not in (m, k):
        return True
    return None


def replace_einsum(m: Match, ctx: RewriteContext) -> Replacement:
    einsum: ir.Node = m["einsum"]
    equation = attr(einsum, "equation")
    if isinstance(equation, bytes):
        equation = equation.decode()
    transposed = einsum_as_matmul(equation or "")
    if transposed is None:
        raise RewriteRefused("einsum.not_matmul", f"equation {equation!r} is not a matrix product of its operands")
    a, b = m["a"], m["b"]
    if any(v.dtype not in _MATMUL_DTYPES for v in (a, b)):
        raise RewriteRefused("einsum.dtype", "an operand's element type is not one MatMul takes (or not known)")
    nodes = []
    if transposed:
        rank = len(equation.replace(" ", "").partition(",")[0])
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        transpose = ctx.node("Transpose", [b], {"perm": perm}, hint=f"{einsum.name or 'einsum'}_transpose")
        nodes.append(transpose)
        b = transpose.outputs[0]
    matmul = ctx.node("MatMul", [a, b], hint=einsum.name or None)
    nodes.append(matmul)
    return Replacement(nodes, {einsum.outputs[0]: matmul.outputs[0]})


EINSUM = Rule("replace_einsum_with_matmul", Op("Einsum", Var("a"), Var("b"), name="einsum"), replace_einsum,
              kind=REASSOCIATING)


PASSES = (
    PassSpec("adjust_add", "Add(constant, x) -> Add(x, constant), the bias order backends fuse",
             rules=(ADJUST_ADD,), order=30, default=False, not_fuzzed="reorders operands only: tested on its own"),
    PassSpec("adjust_slice_and_matmul", "MatMul(Slice(constant), constant) -> Slice(MatMul(...)) when the Slice "
             "keeps the contracted axis and the right operand is at most 2-D (the MatMul then folds)",
             rules=(SLICE_MATMUL,), order=30, default=False, not_fuzzed="constant operands only: tested on its own"),
    PassSpec("replace_einsum_with_matmul", "Two-operand Einsum that is a (batched) matrix product -> MatMul "
             "(of a Transpose for 'ik,jk->ij'); distinct letters only", rules=(EINSUM,), order=30, default=False,
             not_fuzzed="the fuzz generator builds no Einsum: tested on its own"),
)
