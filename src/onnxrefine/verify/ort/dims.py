"""Sizes of a model's symbolic input dims at which it runs in onnxruntime, for the runs that check
what no shape fact vouches for.

Two readers run the model (observed.py): `fold_shapes` compares each value it folds with the
runtime's, and certificates learn the shapes of boundary values no fact gives
(certificate/concrete.py). Generated inputs give every symbolic dim the default size (2), and
some models do not run there: a decoder with a KV cache gathers from its flattened attention mask
at positions up to past + sequence, which must fit the mask's length, `total`. Where a run fails,
other sizes are tried, on the same session of the cut model, in this order:

1. every dim the default size;
2. every dim a different size (3, 4, 5, ... in the order the inputs name them);
3. for each sum the graph computes of two input dims (an Add of two values the shape facts know
   to be single input dims, `a + b`; a Sub `a - b` read as a = b + c), each other dim set to that
   sum, the remaining dims different sizes from 2, then from 3;
4. every dim 3.

A check made at one assignment can pass where only that assignment makes it right (a symbolic dim
folded to the number it is at the default size), so a fold is checked at two assignments
(`points=2`) in which every dim has a different size; a certificate's shapes need one run. The
assignments that ran are tried first by the next run of the same optimization (`RunnableDims`
holds them), MAX_TRIES runs at most per observation.

The sizes only choose where a check is made: a wrong choice can make a check impossible, never
make a wrong fold pass (each run is onnxruntime's own computation on inputs the model accepts).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from onnxrefine.verify.ort.observed import Cut

MAX_TRIES = 8
# The first size the "different sizes" assignments start from (the default size is 2).
DISTINCT_FROM = 3


def dim_keys(model: ir.Model) -> list[str]:
    """The keys that size the main graph's symbolic input dims (a dim's name, or "input[axis]"
    for a dim with none), in the order the inputs declare them."""
    from onnxrefine.verify.inputs import unnamed_dim

    keys: list[str] = []
    for value in model.graph.inputs:
        if value.is_initializer() or value.shape is None:
            continue
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, int):
                continue
            key = dim.value if isinstance(dim, ir.SymbolicDim) and dim.value else unnamed_dim(value.name, axis)
            if key not in keys:
                keys.append(key)
    return keys


def dim_sums(model: ir.Model, facts, keys: Sequence[str]) -> list[tuple[str, str, str]]:
    """(whole, a, b) with whole = a + b, read from the main graph's Add and Sub nodes of two
    values the facts know to be single input dims: Add(a, b) gives each other dim as the whole,
    Sub(whole, a) each other dim as b."""
    from onnxrefine.verify.inputs import unnamed_dim

    names: dict[int, str] = {}
    for value in model.graph.inputs:
        shape = facts.symbolic_shape(value)
        if value.shape is None or shape is None:
            continue
        for axis, (declared, dim) in enumerate(zip(value.shape, shape)):
            if not isinstance(dim, int):
                names[id(dim)] = (declared.value if isinstance(declared, ir.SymbolicDim) and declared.value
                                  else unnamed_dim(value.name, axis))
    sums: list[tuple[str, str, str]] = []
    for node in model.graph:
        if node.op_type not in ("Add", "Sub") or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        operands = [_single_dim(facts, value, names) for value in node.inputs]
        if None in operands or operands[0] == operands[1]:
            continue
        first, second = operands
        others = [key for key in keys if key not in operands]
        found = ([(other, first, second) for other in others] if node.op_type == "Add"
                 else [(first, second, other) for other in others])
        sums.extend(entry for entry in found if entry not in sums)
    return sums


def _single_dim(facts, value, names: dict[int, str]) -> str | None:
    elements = facts.elements(value) if value is not None else None
    if elements is None or len(elements.items) != 1 or isinstance(elements.items[0], int):
        return None
    return names.get(id(elements.items[0]))


def candidates(keys: Sequence[str], sums: Sequence[tuple[str, str, str]]) -> list[dict[str, int]]:
    """The assignments tried, in order (see the module's docstring)."""
    from onnxrefine.verify.inputs import DEFAULT_DIM

    found = [{key: DEFAULT_DIM for key in keys},
             {key: DISTINCT_FROM + index for index, key in enumerate(keys)}]
    for whole, first, second in sums:
        for start in (DEFAULT_DIM, DISTINCT_FROM):
            sizes = {key: start + index for index, key in enumerate(k for k in keys if k != whole)}
            sizes[whole] = sizes[first] + sizes[second]
            found.append({key: sizes[key] for key in keys})
    found.append({key: DISTINCT_FROM for key in keys})
    unique = []
    for assignment in found:
        if assignment not in unique:
            unique.append(assignment)
    return unique


def differ_everywhere(first: dict[str, int], second: dict[str, int]) -> bool:
    return all(first[key] != second[key] for key in first)


def shown_dims(assignment: dict[str, int]) -> str:
    return ", ".join(f"{key}={size}" for key, size in assignment.items())


class RunnableDims:
    """Runs of a model at sizes of its symbolic dims at which it runs, for one optimization: the
    assignments that ran are tried first the next time."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._ran: list[dict[str, int]] = []

    def observe(self, model: ir.Model, values, *, facts=None, shapes: bool = False,
                points: int = 1) -> list[tuple[dict[str, int], dict]] | str:
        """[(assignment, observed.observe's answer at it)] for `points` assignments in which every
        symbolic dim differs (one where the model has none), or a one-line reason there are not
        that many."""
        from onnxrefine.ir.facts import StaticShapes
        from onnxrefine.resources import ResourceLimitError

        keys = dim_keys(model)
        with Cut(model, values, shapes=shapes, facts=facts) as cut:
            if cut.failure is not None:
                return cut.failure
            if not keys:
                try:
                    result = cut.run(self.seed, {})
                except ResourceLimitError as exc:
                    return str(exc).splitlines()[0]
                return result if isinstance(result, str) else [({}, result)]
            tried = [dict(a) for a in self._ran if list(a) == keys]
            tried += [a for a in candidates(keys, dim_sums(model, facts or StaticShapes(model), keys))
                      if a not in tried]
            found: list[tuple[dict[str, int], dict]] = []
            failure = None
            runs = 0
            for assignment in tried[:MAX_TRIES]:
                runs += 1
                try:
                    result = cut.run(self.seed, assignment)
                except ResourceLimitError as exc:
                    failure = failure or str(exc).splitlines()[0]
                    break
                if isinstance(result, str):
                    failure = failure or result
                    continue
                if assignment not in self._ran:
                    self._ran.append(assignment)
                if all(differ_everywhere(assignment, other) for other, _ in found):
                    found.append((assignment, result))
                if len(found) >= points:
                    return found
        if not found:
            return failure if runs == 1 else f"{failure} (and at {runs - 1} other sizes of its symbolic dims)"
        return (f"it runs at one assignment of its symbolic dims only ({shown_dims(found[0][0])}), not at another "
                f"where every dim differs ({runs} tried{'' if failure is None else ': ' + failure})")
