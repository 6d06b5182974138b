"""Exhaustive proofs of the layout fusions' algebra: permutations, Squeeze/Unsqueeze axes, Slice
and Concat fusion, a reduction's axes put back, Pad folded into Conv/pooling, Transpose into Gemm.
Each function returns a Proof (tests/algebra_proof.py); tests/test_algebra_proofs.py runs them."""

from __future__ import annotations

import itertools

import numpy as np

from onnxrefine.passes import fusion_chains, fusion_matmul, fusion_pad, noop, transposes

import onnx_semantics as sem
from algebra_proof import (
    MAX_RANK, REFUSED, Proof, StubContext, StubFacts, StubMatch, attribute, axis_choices, concretisations,
    constant, data, forwarded, node, symbolic_shapes,
)

DIMS = (2, 3, 4, 5, 6)  # distinct sizes: an axis out of place changes the shape


def prove_transpose_composition(max_rank: int = MAX_RANK) -> Proof:
    """fuse_consecutive_transposes: every pair of permutations (and no perm) of every rank."""
    proof = Proof("fuse_consecutive_transposes")
    for rank in range(max_rank + 1):
        x = data(DIMS[:rank])
        spelled = [None, *itertools.permutations(range(rank))]
        perms = [(p, proof.ask(fusion_chains._perm, node("Transpose", perm=None if p is None else list(p)), rank))
                 for p in spelled]
        for (inner, inner_perm), (outer, outer_perm) in itertools.product(perms, perms):
            composed = proof.ask(fusion_chains.compose_perms, inner_perm, outer_perm)
            if composed is REFUSED:
                continue
            proof.compare((rank, inner, outer), lambda: sem.transpose(sem.transpose(x, inner), outer),
                          lambda: sem.transpose(x, composed))
    return proof


def prove_identity_transpose(max_rank: int = MAX_RANK) -> Proof:
    """eliminate_nop_transpose: the rule's own function, every perm of every rank."""
    proof = Proof("eliminate_nop_transpose")
    for rank in range(max_rank + 1):
        x = data(DIMS[:rank])
        for perm in [None, *itertools.permutations(range(rank))]:
            match = StubMatch(node=node("Transpose", perm=None if perm is None else list(perm)), x=constant(x))
            result = proof.ask(noop.drop_identity_transpose, match, StubContext(StubFacts(x.shape)))
            if forwarded(result):
                proof.compare((rank, perm), lambda: sem.transpose(x, perm), lambda: x)
    return proof


def prove_squeeze_composition(max_rank: int = MAX_RANK) -> Proof:
    """fuse_consecutive_squeezes: every pair of axis lists (each axis both spellings), rank known
    and unknown, over every shape of 1s and 2s."""
    proof = Proof("fuse_consecutive_squeezes")
    for rank in range(max_rank + 1):
        shapes = list(itertools.product((1, 2), repeat=rank))
        for first in axis_choices(rank):
            for second in axis_choices(rank - len(first)):
                for known_rank in (rank, None):
                    fused = proof.ask(fusion_chains.compose_squeezes, first, second, known_rank)
                    if fused is REFUSED or fused is None:
                        continue
                    for shape in shapes:
                        proof.compare((shape, first, second, known_rank),
                                      lambda: sem.squeeze_shape(sem.squeeze_shape(shape, first), second),
                                      lambda: sem.squeeze_shape(shape, fused))
    return proof


def prove_unsqueeze_composition(max_rank: int = MAX_RANK) -> Proof:
    """fuse_consecutive_unsqueezes: every pair of axis lists with an output of rank up to 5."""
    proof = Proof("fuse_consecutive_unsqueezes")
    for rank in range(max_rank + 1):
        shape = DIMS[:rank]
        for k1 in range(max_rank - rank + 1):
            for first in axis_choices(rank + k1, max_count=k1):
                if len(first) != k1:
                    continue
                for k2 in range(max_rank - rank - k1 + 1):
                    for second in axis_choices(rank + k1 + k2, max_count=k2):
                        if len(second) != k2:
                            continue
                        for known_rank in (rank, None):
                            fused = proof.ask(fusion_chains.compose_unsqueezes, first, second, known_rank)
                            if fused is REFUSED or fused is None:
                                continue
                            proof.compare((shape, first, second, known_rank),
                                          lambda: sem.unsqueeze_shape(sem.unsqueeze_shape(shape, first), second),
                                          lambda: sem.unsqueeze_shape(shape, fused))
    return proof


# Starts and ends around a dim of up to 5: negatives, past either end, and the INT_MAX / INT_MIN
# that exporters write for "to the end"; every step from -3 to 3 but 0.
_BOUNDS = (-(2**63), -(2**31), -6, -5, -2, -1, 0, 1, 2, 4, 5, 6, 2**31 - 1, 2**63 - 1)
_STEPS = (-3, -2, -1, 1, 2, 3)
SLICE_PARAMS = [(s, e, st) for s in _BOUNDS for e in _BOUNDS for st in _STEPS]


def _slice_inputs(params, axes, spell_axes: bool, spell_steps: bool):
    starts = np.array([p[0] for p in params], np.int64)
    ends = np.array([p[1] for p in params], np.int64)
    steps = np.array([p[2] for p in params], np.int64)
    return starts, ends, (np.array(axes, np.int64) if spell_axes else None), (steps if spell_steps else None)


def prove_slice_fusion(max_rank: int = MAX_RANK) -> Proof:
    """fuse_consecutive_slices: every pair of disjoint axis lists (in every order, both
    spellings, axes and steps given or left out, rank known and unknown), the per-axis bounds
    cycling through every (start, end, step) of SLICE_PARAMS; and every pair of SLICE_PARAMS on
    two axes of every small length (0 to 5)."""
    proof = Proof("fuse_consecutive_slices")
    cursor = itertools.cycle(SLICE_PARAMS)
    for rank in range(1, max_rank + 1):
        x = data((5, 1, 4, 0, 3)[:rank] if rank > 3 else (5, 4, 3)[:rank])
        selections = [a for a in axis_choices(rank, ordered=True, max_count=2) if a]
        for first, second in itertools.product(selections, selections):
            for spell_axes, spell_steps, known_rank in itertools.product((True, False), (True, False), (rank, None)):
                if not spell_axes and (first != list(range(len(first))) or second != list(range(len(second)))):
                    continue
                p1, p2 = [next(cursor) for _ in first], [next(cursor) for _ in second]
                _slice_case(proof, x, (first, p1), (second, p2), spell_axes, spell_steps, known_rank)
    for length in (0, 1, 3, 5):
        x = data((length, 4))
        for index, params in enumerate(SLICE_PARAMS):
            other = SLICE_PARAMS[(index * 7 + 3) % len(SLICE_PARAMS)]
            _slice_case(proof, x, ([0], [params]), ([-1], [other]), True, True, 2)
            _slice_case(proof, x, ([1], [other]), ([0], [params]), True, True, None)
    return proof


def _slice_case(proof, x, inner, outer, spell_axes, spell_steps, known_rank) -> None:
    (a1, p1), (a2, p2) = inner, outer
    args1, args2 = _slice_inputs(p1, a1, spell_axes, spell_steps), _slice_inputs(p2, a2, spell_axes, spell_steps)
    first = proof.ask(fusion_chains.slice_params, *args1, known_rank)
    second = proof.ask(fusion_chains.slice_params, *args2, known_rank)
    if first is REFUSED or second is REFUSED:
        return
    fused = proof.ask(fusion_chains.fused_slice_params, first, second)
    if fused is REFUSED:
        return
    proof.compare((x.shape, inner, outer, spell_axes, spell_steps, known_rank),
                  lambda: sem.slice_(sem.slice_(x, *_read(args1)), *_read(args2)),
                  lambda: sem.slice_(x, *_read(fused)))


def _read(args):
    return [None if a is None else [int(v) for v in np.asarray(a).reshape(-1)] for a in args]


def prove_concat_fusion(max_rank: int = MAX_RANK) -> Proof:
    """fuse_consecutive_concats: every pair of axes (both spellings) of every rank, rank known
    and unknown."""
    proof = Proof("fuse_consecutive_concats")
    for rank in range(1, max_rank + 1):
        for inner, outer in itertools.product(range(-rank, rank), repeat=2):
            for known_rank in (rank, None):
                if proof.ask(fusion_chains.same_concat_axis, inner, outer, known_rank) is not True:
                    continue
                a, b = _concat_parts(rank, inner, (1, 2))
                (c,) = _concat_parts(rank, outer, (3,))
                proof.compare((rank, inner, outer, known_rank),
                              lambda: sem.concat([sem.concat([a, b], inner), c], outer),
                              lambda: sem.concat([a, b, c], outer))
    return proof


def _concat_parts(rank, axis, lengths):
    parts = []
    for offset, length in enumerate(lengths):
        shape = list(DIMS[:rank])
        shape[axis] = length
        parts.append(data(shape) + 100 * offset)
    return parts


def prove_reduce_unsqueeze(max_rank: int = MAX_RANK) -> Proof:
    """fuse_consecutive_reduce_unsqueeze: every reduction axis list (none, or every subset in
    both spellings; noop_with_empty_axes both ways) against every Unsqueeze axis list, rank
    known and unknown."""
    proof = Proof("fuse_consecutive_reduce_unsqueeze")
    for rank in range(max_rank + 1):
        x = data(DIMS[:rank])
        reductions = [None, *axis_choices(rank)]
        for reduce_axes, noop_empty, unsqueeze_axes, known_rank in itertools.product(
                reductions, (False, True), axis_choices(rank), (rank, None)):
            if proof.ask(fusion_chains.unsqueeze_restores, reduce_axes, noop_empty, unsqueeze_axes, known_rank) is not True:
                continue
            case = (rank, reduce_axes, noop_empty, unsqueeze_axes, known_rank)
            proof.compare(case,
                          lambda: _unsqueeze(sem.reduce_sum(x, reduce_axes, False, noop_empty), unsqueeze_axes),
                          lambda: sem.reduce_sum(x, reduce_axes, True, noop_empty))
    return proof


def _unsqueeze(x, axes):
    return x.reshape(sem.unsqueeze_shape(x.shape, axes))


def prove_pad_fusion(max_rank: int = MAX_RANK) -> Proof:
    """fuse_pad_into_conv / fuse_pad_into_pool: a Pad over every axis list (none, or every
    ordered selection in both spellings) of every rank from 3, its pads labelled so that each
    lands somewhere of its own, taken into the consumer's pads. Both sides are compared as the
    input the window slides over (sem.window_input, cross-checked against Conv and AveragePool)."""
    proof = Proof("fuse_pad_into_conv/pool")
    for rank in range(3, max_rank + 1):
        spatial = rank - 2
        x = data((1, 2, 2, 1, 1)[:rank])
        consumer = [1 + i % 2 for i in range(2 * spatial)]
        for axes in [None, *axis_choices(rank, ordered=True)]:
            count = rank if axes is None else len(axes)
            for variant in range(3):
                pads = _labelled_pads(count, axes, rank, variant)
                added = proof.ask(fusion_pad.spatial_pads, pads, axes, rank)
                if added is REFUSED:
                    continue
                merged = proof.ask(fusion_pad.merged_pads, consumer, added)
                proof.compare((rank, axes, pads),
                              lambda: sem.window_input(sem.pad_zeros(x, pads, axes), consumer),
                              lambda: sem.window_input(x, merged))
    if proof.ask(fusion_pad.spatial_pads, [0, 0, 1, 0, 0, 1], [0, 1, -1], None) is not REFUSED:
        proof.fail(("axes", "unknown rank"), "a negative Pad axis of an input of unknown rank was resolved")
    return proof


def _labelled_pads(count, axes, rank, variant) -> list[int]:
    """Variant 0: distinct pads, batch and channel untouched; 1: distinct everywhere; 2: one
    negative (a crop)."""
    pads = [1 + i for i in range(2 * count)]
    for i in range(count):
        axis = i if axes is None else axes[i] % rank
        if variant == 0 and axis < 2:
            pads[i] = pads[i + count] = 0
    if variant == 2 and pads:
        pads[-1] = -1
    return pads


def prove_transpose_into_gemm() -> Proof:
    """fuse_transpose_into_gemm: the rule's own function, for every perm of a matrix (and none),
    either operand, both trans flags, operands of every shape pairing of a 2x3 by 3x4 product."""
    proof = Proof("fuse_transpose_into_gemm")
    shapes = [(2, 3), (3, 2), (3, 4), (4, 3)]
    for flag, perm, trans_a, trans_b, t_shape, other_shape in itertools.product(
            ("transA", "transB"), (None, [0, 1], [1, 0]), (0, 1), (0, 1), shapes, shapes):
        t_in, other = constant(data(t_shape) + 1), constant(data(other_shape) - 5)
        transposed = node("Transpose", [t_in], perm=perm)
        inputs = [transposed.outputs[0], other] if flag == "transA" else [other, transposed.outputs[0]]
        gemm = node("Gemm", inputs, transA=trans_a, transB=trans_b)
        match = StubMatch(transpose=transposed, gemm=gemm, t_in=t_in, other=other)
        result = proof.ask(fusion_matmul._transpose_into_gemm, match, StubContext(StubFacts(None)), flag)
        if result is REFUSED or result is None:
            continue
        (new,) = result.nodes

        def original():
            operands = [sem.transpose(t_in.const_value.numpy(), perm) if v is transposed.outputs[0]
                        else v.const_value.numpy() for v in inputs]
            return sem.gemm(*operands, trans_a, trans_b)

        proof.compare((flag, perm, trans_a, trans_b, t_shape, other_shape), original,
                      lambda: sem.gemm(*[v.const_value.numpy() for v in new.inputs],
                                       attribute(new, "transA", 0), attribute(new, "transB", 0)))
    return proof


def prove_transpose_to_reshape(max_rank: int = MAX_RANK) -> Proof:
    """transpose_to_reshape: every perm of every shape over {0, 1, 2, symbolic}, each symbolic dim
    made every small size."""
    proof = Proof("transpose_to_reshape")
    for rank in range(1, max_rank + 1):
        perms = list(itertools.permutations(range(rank)))
        for shape in symbolic_shapes(rank):
            for perm in perms:
                target = proof.ask(transposes.reshape_target, shape, list(perm))
                if target is REFUSED:
                    continue
                for (concrete,) in concretisations(shape):
                    x = data(concrete)
                    proof.compare((shape, perm, concrete), lambda: sem.transpose(x, perm),
                                  lambda: sem.reshape(x, target))
    return proof


def prove_reshape_through_transpose(max_rank: int = MAX_RANK) -> Proof:
    """reshape_through_transpose: every middle shape over {1, 2} (values distinct, so order
    shows), every perm, every target that interleaves size-1 axes with the transposed shape's
    other dims (up to rank 5), and that order reversed."""
    proof = Proof("reshape_through_transpose")
    for rank in range(1, max_rank + 1):
        for middle in itertools.product((1, 2), repeat=rank):
            x = data(middle)
            for perm in itertools.permutations(range(rank)):
                moved = [middle[p] for p in perm if middle[p] != 1]
                for target in _unit_interleavings(moved, max_rank) + [moved[::-1] + [1]]:
                    result = proof.ask(transposes.through_transpose, list(middle), list(perm), target)
                    if result is REFUSED:
                        continue
                    reshape, order = result
                    proof.compare((middle, perm, target),
                                  lambda: sem.reshape(sem.transpose(x, perm), target),
                                  lambda: sem.transpose(sem.reshape(x, reshape), order))
    return proof


def _unit_interleavings(dims, max_rank) -> list[list[int]]:
    result = []
    for length in range(len(dims), max_rank + 1):
        for positions in itertools.combinations(range(length), len(dims)):
            target, rest = [1] * length, iter(dims)
            for p in positions:
                target[p] = next(rest)
            result.append(target)
    return result
