"""Every exact rule's shape/axis/permutation/index algebra, proven over every attribute
combination of ranks up to 5 and small dims (tests/algebra_proofs_*.py), and a wrong rule
planted in each family caught by its proof."""

from __future__ import annotations

import itertools

import onnx_ir as ir
import pytest

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.facts import indexing, layout, values
from onnxrefine.passes import fusion_chains, fusion_pad, noop, sequences, shapes, transposes, where
from onnxrefine.passes.opargs import normalize_axes

import algebra_proofs_layout as layout_proofs
import algebra_proofs_shapes as shape_proofs
from algebra_proof import until_caught

PROOFS = [
    layout_proofs.prove_transpose_composition,
    layout_proofs.prove_identity_transpose,
    layout_proofs.prove_squeeze_composition,
    layout_proofs.prove_unsqueeze_composition,
    layout_proofs.prove_slice_fusion,
    layout_proofs.prove_concat_fusion,
    layout_proofs.prove_reduce_unsqueeze,
    layout_proofs.prove_pad_fusion,
    layout_proofs.prove_transpose_into_gemm,
    layout_proofs.prove_transpose_to_reshape,
    layout_proofs.prove_reshape_through_transpose,
    shape_proofs.prove_nop_reshape,
    shape_proofs.prove_reshape_chain,
    shape_proofs.prove_flatten_rules,
    shape_proofs.prove_concat_into_reshape,
    shape_proofs.prove_fold_reshape_target,
    shape_proofs.prove_unit_axes_shapes,
    shape_proofs.prove_nop_broadcasts,
    shape_proofs.prove_where_selection,
    shape_proofs.prove_nop_split,
    shape_proofs.prove_nop_pad,
    shape_proofs.prove_shape_start_end,
    shape_proofs.prove_slice_of_shape,
    shape_proofs.prove_gather_of_shape,
    shape_proofs.prove_split_to_sequence,
    shape_proofs.prove_shape_arithmetic,
    shape_proofs.prove_reshape_fact,
    shape_proofs.prove_concat_fact,
]


@pytest.mark.parametrize("prove", PROOFS, ids=lambda p: p.__name__.removeprefix("prove_"))
def test_exact_algebra_holds_for_every_combination(prove):
    proof = prove()
    assert proof.holds, f"{proof.summary()}; counterexamples: {proof.counterexamples}"
    assert proof.compared > 0, f"{proof.family}: no rewrite was compared, so nothing was proven"


# --- planted wrong rules: one per family, each must be caught ---------------------------------


def _perms_wrong_order(inner, outer):
    return [outer[axis] for axis in inner]


def _identity_transpose_any_leading_zero(m, ctx):
    perm = m["node"].attributes.get("perm")
    if perm is not None and list(perm.value)[:1] == [0]:
        return noop._forward(m, "node")
    return _ORIGINALS["identity_transpose"](m, ctx)


def _squeeze_axes_against_input_rank(first, second, rank):
    first_n, second_n = normalize_axes(first, rank), normalize_axes(second, rank)  # the second step's rank is smaller
    if first_n is None or second_n is None or not first or not second:
        return None
    removed = set(first_n)
    return sorted(first_n + [fusion_chains._nth_not_in(j, removed) for j in second_n])


def _unsqueeze_axes_not_shifted(first, second, rank):
    first_n = normalize_axes(first, None if rank is None else rank + len(first))
    second_n = normalize_axes(second, None if rank is None else rank + len(first) + len(second))
    return None if first_n is None or second_n is None or set(first_n) & set(second_n) else sorted(first_n + second_n)


def _slice_axes_not_normalised(starts, ends, axes, steps, rank):
    result = _ORIGINALS["slice_params"](starts, ends, axes, steps, rank)
    raw = list(range(len(result[0]))) if axes is None else axes.reshape(-1).tolist()
    return result[0], result[1], raw, result[3]


def _concat_any_axes(inner_axis, outer_axis, rank):
    return True


def _reduce_axes_against_wrong_rank(reduce_axes, noop_empty, unsqueeze_axes, rank):
    reduce_axes = reduce_axes or ([] if rank is None else list(range(rank)))
    reduced = normalize_axes(reduce_axes, rank)
    restored = normalize_axes(unsqueeze_axes, None if rank is None else rank - len(reduce_axes) + 1)
    if reduced is None or restored is None or not reduce_axes:
        raise RewriteRefused("reduce_unsqueeze.negative_axes", "planted")
    return sorted(reduced) == sorted(restored)


def _pads_begins_and_ends_swapped(pads, axes, rank):
    result = _ORIGINALS["spatial_pads"](pads, axes, rank)
    half = len(result) // 2
    return result[half:] + result[:half]


def _gemm_flag_set_not_flipped(m, ctx, flag):
    result = _ORIGINALS["gemm"](m, ctx, flag)
    (new,) = result.nodes
    new.attributes[flag] = ir.AttrInt64(flag, 1)
    return result


def _moved_symbolic_dim_copied(shape, perm):
    target = []
    for out_axis, in_axis in enumerate(perm):
        dim = shape[in_axis]
        target.append(dim if isinstance(dim, int) else 0)  # 0 copies the dim at out_axis, not in_axis
    moving = [a for a in perm if shape[a] != 1]
    if moving != sorted(moving) or any(d == 0 for d in shape if isinstance(d, int)):
        raise RewriteRefused("transpose_reshape.reorders", "planted")
    return target


def _through_transpose_order_reversed(middle, perm, target):
    reshape, order = _ORIGINALS["through"](middle, perm, target)
    return reshape, order[::-1]


def _minus_one_beside_unknown(source, target, allowzero):
    if source is not None and len(source) == len(target) and -1 in target:
        return None
    return _ORIGINALS["keeps"](source, target, allowzero)


def _reshape_chain_copying_zero(m, ctx):
    outer = m["outer"]
    new = ctx.node("Reshape", [m["x"], m["shape"]], dict(outer.attributes))
    return noop.Replacement([new], {outer.outputs[0]: new.outputs[0]})


def _flatten_any_axis_of_matrix(m, ctx):
    if noop._rank(ctx, m["x"], "Flatten's input") != 2:
        raise RewriteRefused("flatten.not_2d", "planted")
    return noop._forward(m, "node")


def _sym_copied_anywhere(parts, data_shape, allowzero):
    flat = [0 if not isinstance(v, int) else v for items, _ in parts for v in items]
    return flat


def _fold_sym_copied_anywhere(items, data_shape):
    return [0 if not isinstance(v, int) else v for v in items] if all(v is not None for v in items) else None


def _squeeze_fact_negative_against_wrong_rank(shape, axes):
    if axes is None or not axes:
        return _ORIGINALS["squeezed"](shape, axes)
    removed = {a + len(shape) + 1 if a < 0 else a for a in axes}
    return tuple(d for i, d in enumerate(shape) if i not in removed)


def _operand_may_raise_rank(constant_shape, shape):
    if shape is not None and len(constant_shape) > len(shape):
        return None
    return _ORIGINALS["operand"](constant_shape, shape)


def _broadcast_aligned_left(a, b):
    rank = max(len(a), len(b))
    return _ORIGINALS["broadcast"](tuple(a) + (1,) * (rank - len(a)), tuple(b) + (1,) * (rank - len(b)))


def _split_axis_not_normalised(split, shape, axis):
    if shape is None or not -len(shape) <= axis < len(shape):
        raise RewriteRefused("split.axis_unknown", "planted")
    dim = shape[(axis + len(shape) + 1 if axis < 0 else axis) % len(shape)]  # normalised against the wrong rank
    if dim is None or split != [dim]:
        raise RewriteRefused("split.not_whole", "planted")


def _pads_summing_to_zero(m, ctx):
    pads = noop.int_list_arg(m["node"], "pads", 1, "pads")
    return noop._forward(m, "node") if pads is not None and sum(pads) == 0 else None


def _shape_end_not_clamped(node, rank):
    start, end = _ORIGINALS["shape_range"](node, rank)
    given = node.attributes.get("end")
    return start, (end if given is None or given.value >= 0 else max(start, given.value + rank + 1))


def _gather_negative_off_by_one(items, indices):
    return _ORIGINALS["gathered"](items, [i - 1 if i < 0 else i for i in indices])


def _chunks_even_only(dim, chunk):
    return [chunk] * max(dim // chunk, 1) if chunk > 0 and dim > 0 else _ORIGINALS["chunks"](dim, chunk)


def _division_floors(op, a, b):
    if op != "Div" or a is None or b is None:
        return _ORIGINALS["arithmetic"](op, a, b)
    pair = values._paired(a, b)
    if pair is None:
        return None
    items = tuple(x // y if isinstance(x, int) and isinstance(y, int) and y else None for x, y in zip(*pair))
    return values.Elements(items, a.scalar and b.scalar, a.dtype)


def _reshape_zero_copied_with_allowzero(shape, items, allowzero):
    return _ORIGINALS["reshaped"](shape, items, False)


def _concat_negative_axis_off_by_one(shapes, axis):
    return _ORIGINALS["concat_shape"](shapes, axis - 1 if axis < 0 else axis)


def _python_slice_positions(dim, start, end, step):
    return range(*slice(start, end, step).indices(dim)) if step else None


_ORIGINALS = {
    "identity_transpose": noop.drop_identity_transpose,
    "slice_params": fusion_chains.slice_params,
    "spatial_pads": fusion_pad.spatial_pads,
    "gemm": layout_proofs.fusion_matmul._transpose_into_gemm,
    "through": transposes.through_transpose,
    "keeps": noop.reshape_keeps_shape,
    "squeezed": layout.squeezed_shape,
    "operand": noop.operand_keeps_shape,
    "broadcast": where._broadcast,
    "shape_range": layout.shape_range,
    "chunks": sequences.chunk_sizes,
    "gathered": values.gathered,
    "arithmetic": values.arithmetic,
    "reshaped": layout.reshaped_shape,
    "concat_shape": indexing.concat_shape,
}

PLANTED = [
    # (proof, [(module, function name)], wrong function)
    (layout_proofs.prove_transpose_composition, [(fusion_chains, "compose_perms")], _perms_wrong_order),
    (layout_proofs.prove_identity_transpose, [(noop, "drop_identity_transpose")], _identity_transpose_any_leading_zero),
    (layout_proofs.prove_squeeze_composition, [(fusion_chains, "compose_squeezes")], _squeeze_axes_against_input_rank),
    (layout_proofs.prove_unsqueeze_composition, [(fusion_chains, "compose_unsqueezes")], _unsqueeze_axes_not_shifted),
    (layout_proofs.prove_slice_fusion, [(fusion_chains, "slice_params")], _slice_axes_not_normalised),
    (layout_proofs.prove_concat_fusion, [(fusion_chains, "same_concat_axis")], _concat_any_axes),
    (layout_proofs.prove_reduce_unsqueeze, [(fusion_chains, "unsqueeze_restores")], _reduce_axes_against_wrong_rank),
    (layout_proofs.prove_pad_fusion, [(fusion_pad, "spatial_pads")], _pads_begins_and_ends_swapped),
    (layout_proofs.prove_transpose_into_gemm, [(layout_proofs.fusion_matmul, "_transpose_into_gemm")],
     _gemm_flag_set_not_flipped),
    (layout_proofs.prove_transpose_to_reshape, [(transposes, "reshape_target")], _moved_symbolic_dim_copied),
    (layout_proofs.prove_reshape_through_transpose, [(transposes, "through_transpose")],
     _through_transpose_order_reversed),
    (shape_proofs.prove_nop_reshape, [(noop, "reshape_keeps_shape")], _minus_one_beside_unknown),
    (shape_proofs.prove_reshape_chain, [(noop, "collapse_reshape_chain")], _reshape_chain_copying_zero),
    (shape_proofs.prove_flatten_rules, [(noop, "drop_flatten_of_matrix")], _flatten_any_axis_of_matrix),
    (shape_proofs.prove_concat_into_reshape, [(fusion_chains, "constant_reshape_target")], _sym_copied_anywhere),
    (shape_proofs.prove_fold_reshape_target, [(shapes, "copying_target")], _fold_sym_copied_anywhere),
    (shape_proofs.prove_unit_axes_shapes, [(layout, "squeezed_shape")], _squeeze_fact_negative_against_wrong_rank),
    (shape_proofs.prove_nop_broadcasts, [(noop, "operand_keeps_shape")], _operand_may_raise_rank),
    (shape_proofs.prove_where_selection, [(where, "_broadcast")], _broadcast_aligned_left),
    (shape_proofs.prove_nop_split, [(noop, "split_covers_axis")], _split_axis_not_normalised),
    (shape_proofs.prove_nop_pad, [(noop, "drop_zero_pad")], _pads_summing_to_zero),
    (shape_proofs.prove_shape_start_end, [(layout, "shape_range")], _shape_end_not_clamped),
    (shape_proofs.prove_slice_of_shape, [(indexing, "slice_positions"), (values, "slice_positions")],
     _python_slice_positions),
    (shape_proofs.prove_gather_of_shape, [(values, "gathered")], _gather_negative_off_by_one),
    (shape_proofs.prove_split_to_sequence, [(sequences, "chunk_sizes")], _chunks_even_only),
    (shape_proofs.prove_shape_arithmetic, [(values, "arithmetic")], _division_floors),
    (shape_proofs.prove_reshape_fact, [(layout, "reshaped_shape")], _reshape_zero_copied_with_allowzero),
    (shape_proofs.prove_concat_fact, [(indexing, "concat_shape")], _concat_negative_axis_off_by_one),
]


@pytest.mark.parametrize("prove, targets, wrong", PLANTED, ids=[w.__name__.strip("_") for _, _, w in PLANTED])
def test_a_planted_wrong_rule_is_caught(prove, targets, wrong, monkeypatch):
    for module, name in targets:
        monkeypatch.setattr(module, name, wrong)
    proof = until_caught(prove)
    assert not proof.holds, f"{proof.summary()}: the planted {wrong.__name__} was not caught"


def test_every_proof_family_has_a_planted_rule():
    assert {p for p, _, _ in PLANTED} == set(PROOFS)


# The CI runs above cap a few enumerations below rank 5 (see each proof's docstring); these run
# them wider (a few CPU minutes in all): `pytest --runslow tests/test_algebra_proofs.py`.
WIDER = [
    (shape_proofs.prove_concat_into_reshape, {"max_rank": 4}),
    (shape_proofs.prove_reshape_chain, {"max_rank": 5}),
    (shape_proofs.prove_where_selection, {"max_rank": 3}),
    (shape_proofs.prove_nop_broadcasts, {"max_rank": 5}),
    (shape_proofs.prove_reshape_fact, {"max_rank": 3, "max_length": 3}),
    (shape_proofs.prove_concat_fact, {"max_rank": 3}),
]


@pytest.mark.slow
@pytest.mark.parametrize("prove, limits", WIDER, ids=[p.__name__.removeprefix("prove_") for p, _ in WIDER])
def test_exact_algebra_holds_wider(prove, limits):
    proof = prove(**limits)
    assert proof.holds, f"{proof.summary()}; counterexamples: {proof.counterexamples}"
