"""Decisions: is a flipped element explained by a float value sitting on a decision boundary?

An op that turns floats into a decision -- ArgMax/ArgMin, TopK's indices, a comparison (Less,
Greater, LessOrEqual, GreaterOrEqual, Equal; also as the condition of a Where), a Cast of a float to
an integer or bool type, Floor/Ceil/Round -- can flip only where the exact (float64) value feeding
it lies within that element's own error bound of the boundary; there the element is `unstable`,
elsewhere a flip is a `mismatch` (verdict.py).

The margin of each feed element is DecisionEvidence.bounds (evidence.py fills it): the element's
own bound on the original's rounding error (the per-element forward bound computed beside the
float64 reference), zero where the feed is computed exactly (a graph input, a Floor of one, data
movement: exact_values below). Where no bound is derived, gamma * |v| of that element stands in.
tol = factor * margin, factor 2 (the original and the candidate each round); for a candidate that
computes in a narrower type, tol = margin_o + margin_c, each model's own bound of the feed
(DecisionEvidence.candidate_bounds, conversion.py). No term is shared across elements: one large
element of a tensor lends no other element a margin.

- ArgMax/ArgMin, TopK: the float64 values at the original's pick and at the candidate's pick are
  within the sum of their tolerances (a near-tie); a NaN at either pick counts as near (NaN
  ordering is not defined by value). An exact tie (both margins 0) and an infinite tie are decided
  by the spec's tie rule (first index, or last with select_last_index; TopK: the lower index first),
  so a tie-order change there is a mismatch.
- comparisons (and Where conditions): |a - b| <= tol_a + tol_b (or either is NaN); equal
  infinities are decided, not near.
- Cast to an integer type, Floor, Ceil, Round: the op's answers at R - tol and R + tol differ and both
  decisions lie between them; a non-finite or out-of-range R of a Cast (undefined in ONNX) counts
  as near. An exact integer R with tol 0 is decided: Cast(Floor(x)) has one answer.
- Cast to bool: |R| <= tol (nonzero -> true), or R is NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

ERROR_FACTOR = 2.0  # the original and the candidate each round: twice one side's error
ARG_OPS = frozenset({"ArgMax", "ArgMin"})
COMPARISON_OPS = frozenset({"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"})
ROUNDING_OPS = frozenset({"Floor", "Ceil", "Round"})
# ops whose output is itself the decision (Where is reached through its condition, evidence.py)
DECISION_OPS = ARG_OPS | COMPARISON_OPS | ROUNDING_OPS | {"Cast", "TopK"}

# Ops that compute each output element exactly from exact inputs (no rounding): data movement,
# selections, sign changes and the integer-valued roundings. A value built only from graph inputs,
# initializers and these ops carries no rounding error, so its decisions have a margin of 0.
EXACT_OPS = frozenset({
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
    "Neg", "Abs", "Relu", "Max", "Min", "Sign", "Floor", "Ceil", "Round", "Where", "Not", "And", "Or",
    "Xor", "ReduceMax", "ReduceMin", "MaxPool", "GlobalMaxPool", "ArgMax", "ArgMin", "TopK", "NonZero",
    "Compress", "Shape", "Size", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN",
    "IsInf", "Dropout",
})


@dataclass
class DecisionEvidence:
    """The op that made a discrete output and the float64 values of its float input(s)."""

    op_type: str
    values: list  # float64 arrays: the op's data input (two for comparisons)
    attrs: dict = field(default_factory=dict)  # axis, keepdims, select_last_index, largest
    # per value, per element: the bound on the original's rounding error of that feed (0: exact);
    # None (for the list or one value) or NaN (one element): not derived, margin_stand_in() decides
    bounds: list | None = None
    output_index: int = 0  # TopK: only its indices (output 1) are judged as a decision
    # a Where whose condition is the comparison above: the comparison's mask is broadcast to it
    through_where: bool = False
    # a candidate computing in a narrower type (conversion.py): per value, its own bound of the same
    # feed (None for the list: the candidate rounds as the original does; None or NaN: the stand-in)
    candidate_bounds: list | None = None

    def usable(self, output_shape) -> bool:
        try:
            if self.op_type in ARG_OPS or self.op_type == "TopK":
                return self.values[0].ndim > 0 and _arg_shape(self, output_shape) is not None
            if self.op_type in COMPARISON_OPS:
                shape = np.broadcast_shapes(*(v.shape for v in self.values))
                if self.through_where:
                    return np.broadcast_shapes(shape, tuple(output_shape)) == tuple(output_shape)
                return shape == tuple(output_shape)
            return self.values[0].shape == tuple(output_shape)
        except (ValueError, IndexError):
            return False


def margin_stand_in(values: np.ndarray, gamma: float) -> np.ndarray:
    """gamma * |v| per element (no term across elements): the margin when no bound is known."""
    with np.errstate(invalid="ignore", over="ignore"):
        return gamma * np.abs(np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0))


def _tolerances(decision: DecisionEvidence, gamma: float, factor: float) -> list:
    """Per value, how far the two runs together may err at each element: each model's own bound,
    b_o + b_c, where the candidate rounds differently (a narrower one); else factor * b_o."""
    own = _margins(decision.bounds, decision.values, gamma)
    if decision.candidate_bounds is None:
        return [factor * margin for margin in own]
    return [mine + theirs for mine, theirs in zip(own, _margins(decision.candidate_bounds, decision.values, gamma))]


def _margins(bounds, values, gamma: float) -> list:
    given = bounds or [None] * len(values)
    margins = []
    for bound, value in zip(given, values):
        stand_in = margin_stand_in(value, gamma)
        if bound is None:
            margins.append(stand_in)
            continue
        bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), value.shape)
        margins.append(np.where(np.isnan(bound), stand_in, bound))
    return margins


def _arg_shape(decision: DecisionEvidence, output_shape):
    data = decision.values[0]
    axis = int(decision.attrs.get("axis", 0 if decision.op_type in ARG_OPS else -1)) % data.ndim
    if decision.op_type == "TopK":
        expected = list(data.shape)
        expected[axis] = output_shape[axis] if len(output_shape) == data.ndim else -1
        fits = len(output_shape) == data.ndim and all(
            got == want for index, (got, want) in enumerate(zip(output_shape, expected)) if index != axis)
        return axis if fits and output_shape[axis] <= data.shape[axis] else None
    keepdims = int(decision.attrs.get("keepdims", 1))
    expected = list(data.shape)
    if keepdims:
        expected[axis] = 1
    else:
        del expected[axis]
    return axis if tuple(expected) == tuple(output_shape) else None


def near_boundary(decision: DecisionEvidence, original: np.ndarray, candidate: np.ndarray,
                  gamma: float, factor: float) -> np.ndarray:
    """Bool per output element: the float64 value feeding it lies within its own bound of the boundary.
    A float output of a decision other than Floor/Ceil/Round or a Where (evidence.decision_feed follows
    a Cast of its integers or bools to a float type) is near only where both models hold values the
    decision can give: a candidate's 2.5 for an index, or its 6 for a comparison, is no flip."""
    near = _near_boundary(decision, original, candidate, gamma, factor)
    if original.dtype.kind == "f" and decision.op_type not in ROUNDING_OPS and not decision.through_where:
        near = near & _decision_values(decision, original) & _decision_values(decision, candidate)
    return near


def _decision_values(decision: DecisionEvidence, values: np.ndarray) -> np.ndarray:
    """Where float `values` are ones the decision gives: 0 or 1 (a comparison, a Cast to bool), an index
    within the axis (ArgMax/ArgMin), an integer of the Cast's type."""
    v = values.astype(np.float64)
    with np.errstate(invalid="ignore"):
        whole = v == np.trunc(v)
        if decision.op_type in COMPARISON_OPS:
            return (v == 0) | (v == 1)
        if decision.op_type in ARG_OPS:
            axis = _arg_shape(decision, values.shape)
            return whole & (v >= 0) & (v < (0 if axis is None else decision.values[0].shape[axis]))
        decided = _decided_type(decision, values)
        if decided == np.bool_:
            return (v == 0) | (v == 1)
        info = np.iinfo(decided)
        return whole & (v >= info.min) & (v <= info.max)


def _near_boundary(decision: DecisionEvidence, original: np.ndarray, candidate: np.ndarray,
                   gamma: float, factor: float) -> np.ndarray:
    tolerances = _tolerances(decision, gamma, factor)
    with np.errstate(invalid="ignore", over="ignore"):
        if decision.op_type in ARG_OPS or decision.op_type == "TopK":
            return _near_pick(decision, tolerances[0], original, candidate)
        if decision.op_type in COMPARISON_OPS:
            a, b = np.broadcast_arrays(*decision.values)
            tol = np.add(*np.broadcast_arrays(*tolerances))
            near = np.isnan(a) | np.isnan(b) | ((np.abs(a - b) <= tol) & ~((a == b) & ~np.isfinite(a)))
            return np.broadcast_to(near, original.shape) if decision.through_where else near
        value, tol = decision.values[0], tolerances[0]
        if decision.op_type in ROUNDING_OPS:
            step = _ROUNDINGS[decision.op_type]
            low, high = step(value - tol), step(value + tol)
            o, c = original.astype(np.float64), candidate.astype(np.float64)
            between = (np.minimum(o, c) >= low) & (np.maximum(o, c) <= high)
            return ~np.isfinite(value) | ((low != high) & between)
        decided = _decided_type(decision, original)
        if decided == np.bool_:
            return np.isnan(value) | (np.abs(value) <= tol)
        info = np.iinfo(decided)
        undefined = ~np.isfinite(value) | (value > info.max) | (value < info.min)
        low = np.trunc(np.where(undefined, 0.0, value - tol))
        high = np.trunc(np.where(undefined, 0.0, value + tol))
        o, c = original.astype(np.float64), candidate.astype(np.float64)
        between = (np.minimum(o, c) >= low) & (np.maximum(o, c) <= high)
        return undefined | ((low != high) & between)


def _decided_type(decision: DecisionEvidence, output: np.ndarray) -> np.dtype:
    """The type a Cast decides in: the output's, or the Cast's `to` where the output holds its integers
    or bools made floats again (evidence.decision_feed follows such a Cast)."""
    if output.dtype.kind in "biu" or "to" not in decision.attrs:
        return output.dtype
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(decision.attrs["to"])))


_ROUNDINGS = {"Floor": np.floor, "Ceil": np.ceil, "Round": np.round}  # np.round: half to even, as ONNX


def _picks(decision, indices, tolerance, axis):
    size = decision.values[0].shape[axis]
    index = indices.astype(np.int64)
    if decision.op_type in ARG_OPS and not int(decision.attrs.get("keepdims", 1)):
        index = np.expand_dims(index, axis)
    valid = (index >= 0) & (index < size)
    safe = np.clip(index, 0, max(size - 1, 0))
    return (np.take_along_axis(decision.values[0], safe, axis=axis),
            np.take_along_axis(tolerance, safe, axis=axis), valid)


def _near_pick(decision, tolerance, original, candidate) -> np.ndarray:
    axis = _arg_shape(decision, original.shape)
    ro, to, valid_o = _picks(decision, original, tolerance, axis)
    rc, tc, valid_c = _picks(decision, candidate, tolerance, axis)
    # An exact tie (no rounding error at either pick) or an infinite one is no near-tie: the values
    # are equal by the spec, and its tie-break (first or last index, TopK's lower index first)
    # decides (ArgMax(Exp(x)) -> ArgMax(x) where Exp overflows is a real change, not rounding).
    decided_tie = (ro == rc) & (~np.isfinite(ro) | ((to == 0) & (tc == 0)))
    near = valid_o & valid_c & (np.isnan(ro) | np.isnan(rc) | ((np.abs(ro - rc) <= to + tc) & ~decided_tie))
    if decision.op_type in ARG_OPS and not int(decision.attrs.get("keepdims", 1)):
        near = np.squeeze(near, axis)
    return near


_COMPARE = {"Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
            "GreaterOrEqual": np.greater_equal, "Equal": np.equal}


def reference_decision(decision: DecisionEvidence, output: np.ndarray):
    """(decision the float64 values make, bool mask where that decision is defined); None for a
    decision the reference does not restate (an unsorted TopK, a Where's selection)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if decision.op_type in ARG_OPS or decision.op_type == "TopK":
            return _reference_pick(decision, output)
        if decision.op_type in COMPARISON_OPS:
            if decision.through_where:
                return None
            a, b = np.broadcast_arrays(*decision.values)
            return _COMPARE[decision.op_type](a, b), ~(np.isnan(a) | np.isnan(b))
        value = decision.values[0]
        if decision.op_type in ROUNDING_OPS:
            return _ROUNDINGS[decision.op_type](value).astype(output.dtype), np.isfinite(value)
        if output.dtype == np.bool_:
            return value != 0, ~np.isnan(value)
        info = np.iinfo(output.dtype)
        defined = np.isfinite(value) & (value <= info.max) & (value >= info.min)
        return np.trunc(np.where(defined, value, 0.0)).astype(output.dtype), defined


def _reference_pick(decision, output):
    data = decision.values[0]
    axis = _arg_shape(decision, output.shape)
    if decision.op_type == "TopK":
        if not int(decision.attrs.get("sorted", 1)):
            return None
        # the spec: by value, ties broken by the lower index (a stable sort on the sort key)
        key = -data if int(decision.attrs.get("largest", 1)) else data
        order = np.argsort(key, axis=axis, kind="stable")
        chosen = np.take(order, np.arange(output.shape[axis]), axis=axis)
        defined = ~np.any(np.isnan(data), axis=axis, keepdims=True)
        return chosen.astype(output.dtype), np.broadcast_to(defined, output.shape)
    keep = bool(int(decision.attrs.get("keepdims", 1)))
    pick = np.argmax if decision.op_type == "ArgMax" else np.argmin
    if int(decision.attrs.get("select_last_index", 0)):
        flipped = np.flip(data, axis)
        chosen = data.shape[axis] - 1 - pick(flipped, axis=axis, keepdims=keep)
    else:
        chosen = pick(data, axis=axis, keepdims=keep)
    defined = ~np.any(np.isnan(data), axis=axis, keepdims=keep)
    return chosen.astype(output.dtype), defined


def exact_values(model: onnx.ModelProto) -> set:
    """Main-graph value names computed without rounding: graph inputs, initializers, Constants, and
    the outputs of EXACT_OPS (and of Casts to a type that holds the input exactly, or to an integer
    type) whose inputs are all exact. Their float64 value is what any run computes."""
    graph = model.graph
    exact = {value.name for value in graph.input} | {init.name for init in graph.initializer}
    float_rank = {onnx.TensorProto.FLOAT16: 1, onnx.TensorProto.BFLOAT16: 1, onnx.TensorProto.FLOAT: 2,
                  onnx.TensorProto.DOUBLE: 3}
    for node in graph.node:
        if node.op_type == "Constant":
            exact.update(node.output)
            continue
        inputs_exact = all(name in exact for name in node.input if name)
        if not inputs_exact:
            continue
        if node.op_type in EXACT_OPS:
            exact.update(name for name in node.output if name)
        elif node.op_type == "Cast":
            to = next((attr.i for attr in node.attribute if attr.name == "to"), None)
            # to an integer/bool type: truncation of an exact value is exact; to float32/64: widening
            # keeps the value only from a narrower float, so only float64/32 targets of ints are not
            # assumed (int64 -> float32 rounds)
            if to is not None and (to not in float_rank or float_rank[to] == 3):
                exact.update(node.output)
    return exact


def exact_decisions(model: onnx.ModelProto, names) -> dict:
    """Per value name: True when every decision behind it (graphinfo's discontinuous ops, Casts to
    int/bool) reads only exactly computed values (exact_values), so rounding cannot move any of
    them. A node holding a subgraph counts as an inexact decision (its inside is not followed)."""
    from onnxrefine.verify.graphinfo import is_jump

    exact = exact_values(model)
    inexact: set = set()
    for node in model.graph.node:
        has_subgraph = any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                           for attr in node.attribute)
        if has_subgraph or any(name in inexact for name in node.input) or (
                is_jump(node) and not all(name in exact for name in node.input if name)):
            inexact.update(node.output)
    return {name: name not in inexact for name in names}


class DiscreteFacts:
    """A discrete output on one input set, with the float64 values feeding its decision."""

    def __init__(self, evidence, bound):
        self.evidence, self.bound = evidence, bound

    def follows(self) -> np.ndarray:
        ev = self.evidence
        restated = reference_decision(ev.decision, ev.original)
        if restated is None:
            return np.zeros(ev.original.shape, dtype=bool)
        expected, defined = restated
        near = near_boundary(ev.decision, ev.original, ev.candidate, self.bound.gamma, ERROR_FACTOR)
        return defined & ~near & (ev.candidate == expected) & (ev.original != expected)
