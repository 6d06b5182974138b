"""Exhaustive proofs of the shape algebra: Reshape targets (0 copies, -1, allowzero), Reshape and
Flatten chains, the shape facts merge_reshape_unit_axes writes as a target, the no-op removals'
broadcasting and split checks, Shape's start/end and the Slice of a shape that fold_shapes
computes. Each function returns a Proof (tests/algebra_proof.py)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir

from onnxrefine.ir.facts import Elements, Sym, indexing, layout, values
from onnxrefine.passes import fusion_chains, noop, sequences, shapes, where

import onnx_semantics as sem
from algebra_proof import (
    MAX_RANK, REFUSED, Proof, StubContext, StubFacts, StubMatch, axis_choices, concretisations,
    constant, data, forwarded, int_input, node, symbolic_shapes, unknown_as_none,
)

# Reshape target elements: infer, copy (or zero with allowzero), and small sizes.
TARGET_ELEMENTS = (-1, 0, 1, 2, 3)


def prove_nop_reshape(max_rank: int = MAX_RANK) -> Proof:
    """eliminate_nop_reshape: every target of the input's rank over TARGET_ELEMENTS, allowzero
    both ways, for every shape over {0, 1, 2, unknown} (rank 5: {1, 2, unknown})."""
    proof = Proof("eliminate_nop_reshape")
    for rank in range(max_rank + 1):
        dims = (0, 1, 2, "sym") if rank < 5 else (1, 2, "sym")
        elements = TARGET_ELEMENTS if rank < 5 else (-1, 0, 1, 2)
        for shape in symbolic_shapes(rank, dims):
            known = unknown_as_none(shape)
            for target, allowzero in itertools.product(itertools.product(elements, repeat=rank), (False, True)):
                if proof.ask(noop.reshape_keeps_shape, known, list(target), allowzero) is not None:
                    continue
                for (concrete,) in concretisations(shape):
                    proof.compare((shape, target, allowzero, concrete),
                                  lambda: sem.reshape_shape(concrete, target, allowzero), lambda: concrete)
    return proof


class _ChainFacts(StubFacts):
    """ctx.facts that know the shapes of the chain's input and of the inner Reshape's output."""

    def __init__(self, shapes: dict):
        super().__init__(None)
        self._shapes = shapes

    def symbolic_shape(self, value):
        return self._shapes.get(id(value))


def prove_reshape_chain(max_rank: int = 4, zero_rank: int = 3) -> Proof:
    """idempotent_reshape_chain (the rule's own function): Reshape(Reshape(x, a), b) for every
    outer target b of up to 3 elements over TARGET_ELEMENTS, allowzero both ways, every inner
    target a of up to 2, every input shape over {0, 1, 2} of rank up to `max_rank`. A target whose
    0 copies a dim (allowzero off) makes the rule read the shapes of x and of the inner output: it
    is asked once per chain, with those shapes known, for inputs of rank up to `zero_rank`."""
    proof = Proof("idempotent_reshape_chain")
    inputs = [s for r in range(max_rank + 1) for s in itertools.product((0, 1, 2), repeat=r)]
    inner_targets = [t for n in range(3) for t in itertools.product(TARGET_ELEMENTS, repeat=n)]
    chains = set()  # (input shape, middle shape): all that the outer Reshape sees of the inner one
    for shape, inner_target in itertools.product(inputs, inner_targets):
        try:
            chains.add((shape, sem.reshape_shape(shape, inner_target)))
        except sem.Invalid:
            continue
    x, inner = constant(np.zeros(0), "x"), node("Reshape")
    for n, allowzero in itertools.product(range(4), (0, 1)):
        for outer_target in itertools.product(TARGET_ELEMENTS, repeat=n):
            reads_shapes = not allowzero and 0 in outer_target
            for shape, middle in (sorted(c for c in chains if len(c[0]) <= zero_rank) if reads_shapes else [(None, None)]):
                facts = _ChainFacts({id(x): shape, id(inner.outputs[0]): middle} if reads_shapes else {})
                match = StubMatch(outer=node("Reshape", allowzero=allowzero), inner=inner, x=x,
                                  shape=constant(np.array(outer_target, np.int64)))
                result = proof.ask(noop.collapse_reshape_chain, match, StubContext(facts))
                if result is REFUSED:
                    continue
                (new,) = result.nodes
                new_target, new_allowzero = int_input(new, 1), bool(new.attributes["allowzero"].value)
                for chain in ([(shape, middle)] if reads_shapes else chains):
                    proof.compare((chain[0], chain[1], outer_target, allowzero),
                                  lambda chain=chain: sem.reshape_shape(chain[1], outer_target, bool(allowzero)),
                                  lambda chain=chain: sem.reshape_shape(chain[0], new_target, new_allowzero))
    return proof


def prove_flatten_rules(max_rank: int = MAX_RANK) -> Proof:
    """eliminate_nop_flatten and idempotent_flatten_chain (the rules' own functions): every axis
    of every shape over {0, 1, 2} of every rank, inner and outer."""
    proof = Proof("eliminate_nop_flatten / idempotent_flatten_chain")
    chains = {}  # outer axis -> the fused Flatten's axis (the chain rule reads no shape)
    for outer_axis in (-3, -2, -1, 0, 1, 2, 3):
        chain = StubMatch(outer=node("Flatten", axis=outer_axis), x=constant(np.zeros(0)))
        result = proof.ask(noop.collapse_flatten_to_row, chain, StubContext(StubFacts(None)))
        if result is not REFUSED and result is not None:
            fused = result.nodes[0].attributes.get("axis")
            chains[outer_axis] = 1 if fused is None else int(fused.value)
    for rank in range(max_rank + 1):
        for shape in itertools.product((0, 1, 2), repeat=rank):
            for axis in range(-rank - 1, rank + 2):
                match = StubMatch(node=node("Flatten", axis=axis), x=constant(np.zeros(0)))
                if forwarded(proof.ask(noop.drop_flatten_of_matrix, match, StubContext(StubFacts(shape)))):
                    proof.compare((shape, axis), lambda: sem.flatten_shape(shape, axis), lambda: shape)
                for outer_axis, new_axis in chains.items():
                    proof.compare((shape, axis, outer_axis),
                                  lambda: sem.flatten_shape(sem.flatten_shape(shape, axis), outer_axis),
                                  lambda: sem.flatten_shape(shape, new_axis))
    return proof


def _computed_items(syms):
    """What a computed Reshape target element can be: a known size, or one of the data's own
    symbolic dims (the position decides whether 0 may stand for it)."""
    return [("size", 0), ("size", 2), *(("sym", s) for s in syms)]


def prove_concat_into_reshape(max_rank: int = 3) -> Proof:
    """fuse_concat_into_reshape: every target of up to `max_rank` elements, each a constant from
    TARGET_ELEMENTS, a known run-time size or one of the data's symbolic dims, split into
    constant and computed parts as the elements come; allowzero both ways; data of every shape
    over {0, 2, symbolic} up to rank `max_rank`, every symbolic dim made every small size."""
    proof = Proof("fuse_concat_into_reshape")
    for rank in range(max_rank + 1):
        for shape in symbolic_shapes(rank, (0, 2, "sym")):
            syms = [d for d in shape if isinstance(d, Sym)]
            choices = [("const", c) for c in TARGET_ELEMENTS] + _computed_items(syms)
            for length in range(max_rank + 1):
                for elements, allowzero in itertools.product(itertools.product(choices, repeat=length), (False, True)):
                    parts = [([v], kind == "const") for kind, v in elements]
                    target = proof.ask(fusion_chains.constant_reshape_target, parts, shape, allowzero)
                    if target is REFUSED:
                        continue
                    _compare_targets(proof, shape, elements, target, allowzero)
    return proof


def _compare_targets(proof, shape, elements, target, allowzero) -> None:
    for (concrete,) in concretisations(shape):
        sizes = dict(zip([id(d) for d in shape], concrete))
        runtime = [sizes[id(v)] if kind == "sym" else v for kind, v in elements]
        proof.compare((shape, elements, allowzero, concrete),
                      lambda: sem.reshape_shape(concrete, runtime, allowzero),
                      lambda: sem.reshape_shape(concrete, target, allowzero))


def prove_fold_reshape_target(max_rank: int = 3) -> Proof:
    """fold_shapes' computed Reshape target made constant (allowzero=0): every partial value of
    up to `max_rank` elements (ints from TARGET_ELEMENTS, the data's symbolic dims, unknowns)
    over data of every shape over {0, 2, symbolic}."""
    proof = Proof("fold_shapes (Reshape target)")
    for rank in range(max_rank + 1):
        for shape in symbolic_shapes(rank, (0, 2, "sym")):
            syms = [d for d in shape if isinstance(d, Sym)]
            choices = [("const", c) for c in TARGET_ELEMENTS] + [("sym", s) for s in syms] + [("unknown", None)]
            for length in range(max_rank + 1):
                for elements in itertools.product(choices, repeat=length):
                    items = [v for _, v in elements]
                    target = proof.ask(shapes.copying_target, items, shape)
                    if target is None or target is REFUSED:
                        continue
                    _compare_targets(proof, shape, elements, target, False)
    return proof


def prove_unit_axes_shapes(max_rank: int = MAX_RANK) -> Proof:
    """merge_reshape_unit_axes writes the shape facts' Squeeze/Unsqueeze/Flatten output shape
    as a Reshape target: those shape rules for every axis list (both spellings) and axis of every
    shape over {0, 1, 2, symbolic}, every symbolic dim made every small size."""
    proof = Proof("merge_reshape_unit_axes (shape facts)")
    for rank in range(max_rank + 1):
        # rank 4 and 5: at most two (one) symbolic dims, each made every small size
        dims, max_syms = ((0, 1, 2, "sym"), None) if rank < 4 else ((1, 2, "sym"), 5 - rank + 1)
        for shape in symbolic_shapes(rank, dims, max_syms):
            for axes in [None, *axis_choices(rank)]:
                _fact_case(proof, layout.squeezed_shape, (shape, axes), lambda s, a=axes: sem.squeeze_shape(s, a))
            for axes in axis_choices(rank + 1, max_count=1) if rank < max_rank else []:
                _fact_case(proof, layout.unsqueezed_shape, (shape, axes), lambda s, a=axes: sem.unsqueeze_shape(s, a))
            for axis in range(-rank - 1, rank + 2):
                _fact_case(proof, layout.flattened_shape, (shape, axis), lambda s, a=axis: sem.flatten_shape(s, a))
    return proof


def _fact_case(proof, rule, args, truth) -> None:
    """A shape fact holds when every dim it states is the dim the operator gives: an int as it
    is, the input's own symbolic dim as made concrete; a symbolic dim of the fact's own (a
    product of unknowns) states nothing."""
    fact = proof.ask(rule, *args)
    if fact is None or fact is REFUSED:
        return
    shape = args[0]
    for (concrete,) in concretisations(shape):
        sizes = {id(d): c for d, c in zip(shape, concrete) if not isinstance(d, int)}
        claimed = tuple(d if isinstance(d, int) else sizes.get(id(d), _ANY) for d in fact)
        proof.compare((shape, args[1:], concrete), lambda: truth(concrete),
                      lambda: _agreeing(claimed, truth(concrete)))


_ANY = "any size"


def _agreeing(claimed: tuple, actual: tuple):
    """`actual` where the fact's claim agrees with it, else the claim (which then differs)."""
    agrees = len(claimed) == len(actual) and all(c is _ANY or c == a for c, a in zip(claimed, actual))
    return actual if agrees else claimed


def prove_nop_broadcasts(max_rank: int = 4) -> Proof:
    """eliminate_nop_expand and eliminate_nop_with_unit: every target / constant shape over
    {0, 1, 2, 3} of rank up to `max_rank` against every input shape over {0, 1, 2, unknown}."""
    proof = Proof("eliminate_nop_expand / eliminate_nop_with_unit (broadcast)")
    others = [t for r in range(max_rank + 1) for t in itertools.product((0, 1, 2, 3), repeat=r)]
    for rank in range(max_rank + 1):
        for shape in symbolic_shapes(rank):
            known = unknown_as_none(shape)
            for other in others:
                if all(d == 1 for d in other):
                    expand = proof.ask(noop.expand_keeps_shape, list(other), rank=rank)
                else:
                    expand = proof.ask(noop.expand_keeps_shape, list(other), source=known)
                unit = proof.ask(noop.operand_keeps_shape, other, known)
                for (concrete,) in concretisations(shape) if expand is None or unit is None else ():
                    if expand is None:
                        proof.compare(("Expand", shape, other, concrete),
                                      lambda: sem.expand_shape(concrete, other), lambda: concrete)
                    if unit is None:
                        proof.compare(("elementwise", shape, other, concrete),
                                      lambda: sem.broadcast_shape(concrete, other), lambda: concrete)
    return proof


def prove_where_selection(max_rank: int = 2) -> Proof:
    """eliminate_where_with_constant_condition: the selected operand has the output's shape, for
    every triple of shapes over {1, 2, s, t} (s, t symbolic, shared between operands) up to rank
    `max_rank`."""
    proof = Proof("eliminate_where_with_constant_condition (broadcast)")
    s, t = Sym("s"), Sym("t")
    shapes_ = [sh for r in range(max_rank + 1) for sh in itertools.product((1, 2, s, t), repeat=r)]
    for cond, a, b in itertools.product(shapes_, repeat=3):
        output = proof.ask(where._broadcast, cond, a)
        output = output if output is None or output is REFUSED else proof.ask(where._broadcast, output, b)
        if output is None or output is REFUSED or not where._same_shape(a, output):
            continue
        for concrete_cond, concrete_a, concrete_b in concretisations(cond, a, b):
            proof.compare((cond, a, b, concrete_a), lambda: sem.broadcast_shape(concrete_cond, concrete_a, concrete_b),
                          lambda: concrete_a)
    return proof


def prove_nop_split(max_rank: int = MAX_RANK) -> Proof:
    """eliminate_nop_split: every axis (both spellings and out of range) of every shape over
    {0, 1, 2, unknown}, split lists of one and two pieces. Strict: Split itself rejects a split
    that is not the whole axis, and removing it would make a failing model run."""
    proof = Proof("eliminate_nop_split")
    for rank in range(1, max_rank + 1):
        for shape in symbolic_shapes(rank):
            for axis, split in itertools.product(range(-rank - 1, rank + 1), ([0], [1], [2], [3], [1, 1])):
                if proof.ask(noop.split_covers_axis, split, unknown_as_none(shape), axis) is REFUSED:
                    continue
                for (concrete,) in concretisations(shape):
                    x = data(concrete)
                    proof.compare((shape, axis, split, concrete), lambda: sem.split(x, split, axis), lambda: [x],
                                  strict=True)
    return proof


def prove_nop_pad(max_rank: int = MAX_RANK) -> Proof:
    """eliminate_nop_pad (the rule's own function): every pads list of -1/0/1 over every axis
    (0/1 from rank 4)."""
    proof = Proof("eliminate_nop_pad")
    for rank in range(max_rank + 1):
        x = data((2, 3, 1, 2, 2)[:rank])
        for pads in itertools.product((-1, 0, 1) if rank < 4 else (0, 1), repeat=2 * rank):
            match = StubMatch(node=node("Pad", [constant(x), constant(np.array(pads, np.int64))]), x=constant(x))
            if forwarded(proof.ask(noop.drop_zero_pad, match, StubContext(StubFacts(x.shape)))):
                proof.compare((rank, pads), lambda: sem.pad_zeros(x, pads), lambda: x)
    return proof


def prove_shape_start_end(max_rank: int = MAX_RANK) -> Proof:
    """fold_shapes' Shape with start/end: every start and end (and no end) from -7 to 7 of every
    rank, as the value (shape[start:end]) and as the length fold_shapes reads."""
    proof = Proof("fold_shapes (Shape start/end)")
    for rank in range(max_rank + 1):
        shape = (2, 3, 4, 5, 6)[:rank]
        for start, end in itertools.product(range(-7, 8), [None, *range(-7, 8)]):
            window = proof.ask(layout.shape_range, node("Shape", start=start, end=end), rank)
            begin, stop = window
            proof.compare((rank, start, end), lambda: sem.shape_op(shape, start, end),
                          lambda: shape[begin:stop] if len(shape[begin:stop]) == max(0, stop - begin) else None)
    return proof


# Slice bounds of a shape value: as in the layout proofs, plus the int32 extremes.
_BOUNDS = (-(2**63), -(2**31), -7, -6, -2, -1, 0, 1, 2, 5, 6, 7, 2**31 - 1, 2**63 - 1)


def prove_slice_of_shape() -> Proof:
    """fold_shapes' Slice of a shape value (opset 10+ inputs), and the shape fact of a Slice's
    output on a static axis: every (start, end, step) over _BOUNDS and steps -3..3 on lengths 0
    to 6, axes [0], [-1] or absent. What the facts state must be what onnxruntime and the
    specification both compute."""
    proof = Proof("fold_shapes (Slice of a shape) / Slice shape fact")
    filler = constant(np.zeros(0))
    nodes = {axes: node("Slice", [filler, filler, filler, None if axes is None else filler, filler])
             for axes in (0, -1, None)}
    for length in range(7):
        vector = np.arange(10, 10 + length, dtype=np.int64)
        data_elements = Elements(tuple(vector.tolist()), False, ir.DataType.INT64)
        for start, end, step, axis in itertools.product(_BOUNDS, _BOUNDS, (-3, -2, -1, 1, 2, 3), (0, -1, None)):
            axes = None if axis is None else [axis]
            params = [_elements(start), _elements(end), None if axis is None else _elements(axis), _elements(step)]
            case = (length, start, end, step, axes)
            runtime = sem.slice_(vector, [start], [end], axes, [step])
            specified = vector[list(sem.slice_indices(length, start, end, step, runtime=False))]
            folded = proof.ask(values._slice_elements, nodes[axis], data_elements, params)
            if folded is not None and folded is not REFUSED:
                proof.compare(case, lambda: runtime, lambda: np.array(folded.items, np.int64))
                if not np.array_equal(specified, runtime):
                    proof.fail(case, "folded where the specification and onnxruntime compute different values")
            fact = proof.ask(indexing.slice_shape, nodes[axis], (length,), params)
            if fact is not None and isinstance(fact[0], int):
                proof.compare(case, lambda: runtime.shape, lambda: fact)
                if specified.shape != runtime.shape:
                    proof.fail(case, "a shape fact where the specification and onnxruntime differ")
    return proof


def _elements(*ints) -> Elements:
    return Elements(tuple(ints), False, ir.DataType.INT64)


def prove_gather_of_shape() -> Proof:
    """fold_shapes' Gather from a shape value: every list of up to 3 indices from -7 to 6 (and a
    scalar index) on shapes of length 0 to 6."""
    proof = Proof("fold_shapes (Gather of a shape)")
    for length in range(7):
        vector = np.arange(10, 10 + length, dtype=np.int64)
        items = tuple(vector.tolist())
        for count in range(4):
            for indices in itertools.product(range(-7, 7), repeat=count):
                picked = proof.ask(values.gathered, items, indices)
                if picked is None:
                    continue
                proof.compare((length, indices), lambda: sem.gather(vector, np.array(indices, np.int64)),
                              lambda: np.array(picked, np.int64).reshape(len(indices)))
    return proof


def prove_split_to_sequence() -> Proof:
    """split_to_sequence_as_split: the Split sizes for every scalar chunk from -1 to 9 over every
    dim from 0 to 9, and the piece every SequenceAt position from -11 to 10 reads."""
    proof = Proof("split_to_sequence_as_split")
    for dim, chunk in itertools.product(range(10), range(-1, 10)):
        x = data((2, dim))
        sizes = proof.ask(sequences.chunk_sizes, dim, chunk)
        if sizes is REFUSED:
            continue
        pieces = sem.split(x, sizes, 1) if sum(sizes) == dim else None
        proof.compare((dim, chunk), lambda: sem.split_to_sequence(x, chunk, 1),
                      lambda: pieces if pieces is not None else sizes)
        for position in range(-11, 11):
            index = proof.ask(sequences.piece_index, position, len(sizes))
            if index is None:
                continue
            proof.compare((dim, chunk, position), lambda: sem.sequence_at(sem.split_to_sequence(x, chunk, 1), position),
                          lambda: pieces[index])
    return proof


def prove_shape_arithmetic() -> Proof:
    """fold_shapes' integer arithmetic on shape values (Add, Sub, Mul, Div, Max, Min, Equal) in
    int64 and int32: every pair of operands, each a single element (the type's extremes, small
    ints of both signs, two symbolic dims) or two (from the smallest extreme, -1, 0, 3 and a
    symbolic dim), each symbolic dim made every small size. Every element the facts state must
    be what the operator computes."""
    proof = Proof("fold_shapes (shape arithmetic)")
    s, t = Sym("s"), Sym("t")
    for dtype in (ir.DataType.INT64, ir.DataType.INT32):
        limit = sem.INT_LIMITS[np.dtype(dtype.numpy())]
        operands = [(v,) for v in (-limit, -3, -1, 0, 2, 3, limit - 1, s, t)]
        operands += list(itertools.product((-limit, -1, 0, 3, s), repeat=2))
        for op, a, b in itertools.product(("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal"), operands, operands):
            first, second = Elements(a, False, dtype), Elements(b, False, dtype)
            if op == "Equal":
                claim = proof.ask(values.equal, first, second)
            else:
                claim = proof.ask(values.arithmetic, op, first, second)
            if claim is None or all(item is None for item in claim.items):
                continue
            for concrete_a, concrete_b in concretisations(a, b):
                x, y = np.array(concrete_a, dtype.numpy()), np.array(concrete_b, dtype.numpy())
                truth = []
                proof.compare((op, dtype, a, b, concrete_a, concrete_b),
                              lambda: truth.append(sem.integer_binary(op, x, y).tolist()) or truth[0],
                              lambda: _stated(claim.items, truth[0]))
    return proof


def _stated(claimed, actual: list):
    """`actual` where every element the facts state (not None) agrees with it, else the claim."""
    agrees = len(claimed) == len(actual) and all(c is None or (isinstance(c, int) and int(c) == a)
                                                 for c, a in zip(claimed, actual))
    return actual if agrees else list(claimed)


def prove_reshape_fact(max_rank: int = 2, max_length: int | None = None) -> Proof:
    """The shape fact of a Reshape's output, which every rule downstream trusts: data of every
    shape over {0, 1, 2, symbolic} up to rank `max_rank` (and of unknown shape), targets of up to
    `max_length` elements (default: 3, and 2 for data of rank 2 and more), each an int from TARGET_ELEMENTS, one of the data's symbolic dims, a
    run-time size of its own or unknown, allowzero both ways. Every dim the fact states must be
    the operator's, for every size of the symbolic dims and every value of the unknowns."""
    proof = Proof("Reshape shape fact")
    fresh = Sym("size")
    for rank in range(max_rank + 1):
        for shape in symbolic_shapes(rank):
            syms = [d for d in shape if isinstance(d, Sym)]
            choices = [*TARGET_ELEMENTS, *syms, fresh, None]
            for length in range((max_length if max_length is not None else 3 if rank < 2 else 2) + 1):
                for items, allowzero in itertools.product(itertools.product(choices, repeat=length), (False, True)):
                    for known in (shape, None):
                        fact = proof.ask(layout.reshaped_shape, known, items, allowzero)
                        if fact is not None:
                            _reshape_fact_case(proof, shape, items, allowzero, fact)
    return proof


def _reshape_fact_case(proof, shape, items, allowzero, fact) -> None:
    unknowns = [i for i, e in enumerate(items) if e is None]
    for (concrete, sized), values_ in itertools.product(concretisations(shape, [e for e in items if e is not None]),
                                                        itertools.product((-1, 0, 1, 3), repeat=len(unknowns))):
        sizes = {id(d): c for d, c in zip(shape, concrete) if isinstance(d, Sym)}
        known_items = iter(sized)
        target = [next(known_items) if e is not None else 0 for e in items]
        for i, v in zip(unknowns, values_):
            target[i] = v
        claimed = tuple(d if isinstance(d, int) else sizes.get(id(d), _ANY) for d in fact)
        proof.compare((shape, items, allowzero, concrete, target),
                      lambda: sem.reshape_shape(concrete, target, allowzero),
                      lambda: _agreeing(claimed, sem.reshape_shape(concrete, target, allowzero)))


def prove_concat_fact(max_rank: int = 2) -> Proof:
    """The shape fact of a Concat's output: two inputs of every shape over {0, 1, 2, symbolic}
    up to rank `max_rank` (either of unknown shape too), every axis in both spellings and out of
    range."""
    proof = Proof("Concat shape fact")
    for rank in range(1, max_rank + 1):
        shapes_ = symbolic_shapes(rank)
        for first, second in itertools.product(shapes_, shapes_):
            for axis in range(-rank - 1, rank + 1):
                for known in ((first, second), (first, None), (None, second)):
                    fact = proof.ask(indexing.concat_shape, list(known), axis)
                    if fact is None:
                        continue
                    for concrete_first, concrete_second in concretisations(first, second):
                        sizes = {id(d): c for s, cs in ((first, concrete_first), (second, concrete_second))
                                 for d, c in zip(s, cs) if isinstance(d, Sym)}
                        claimed = tuple(d if isinstance(d, int) else sizes.get(id(d), _ANY) for d in fact)

                        def truth():
                            return sem.concat([data(concrete_first), data(concrete_second)], axis).shape

                        proof.compare((first, second, known, axis, concrete_first, concrete_second), truth,
                                      lambda: _agreeing(claimed, truth()))
    return proof
