"""Discrete outputs: is a flipped element explained by a float value sitting on a decision boundary?

An output made directly by ArgMax/ArgMin, a comparison (Less, Greater, LessOrEqual, GreaterOrEqual,
Equal) or a Cast of a float to an integer or bool type turns a float into a decision. Rounding can
flip the decision only where the exact (float64) value feeding it lies within rounding of the
boundary; there the element is `unstable`, elsewhere a flip is a `mismatch` (verdict.py).

"Within rounding" is tol = factor * gamma_n * max(|v|, m): gamma_n of the output's bound (it covers
the arithmetic up to and including the discrete op), v the float64 value(s) at the boundary, m the
RMS of the finite feed values, factor 2 (the original and the candidate each round).

- ArgMax/ArgMin: the float64 values at the original's pick and at the candidate's pick are within
  tol of each other (a near-tie); a NaN at either pick counts as near (NaN ordering is not defined
  by value); an infinite tie does not (the tie-break decides it, as the spec says).
- comparisons: |a - b| <= tol (or either is NaN); equal infinities are decided, not near.
- Cast to an integer type: truncation towards zero of R - tol and of R + tol differ (R within tol of
  an integer) and both decisions lie between them; a non-finite or out-of-range R (undefined in
  ONNX) counts as near.
- Cast to bool: |R| <= tol (nonzero -> true), or R is NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ARG_OPS = frozenset({"ArgMax", "ArgMin"})
COMPARISON_OPS = frozenset({"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"})
DECISION_OPS = ARG_OPS | COMPARISON_OPS | {"Cast"}


@dataclass
class DecisionEvidence:
    """The op that made a discrete output and the float64 values of its float input(s)."""

    op_type: str
    values: list  # float64 arrays: the op's data input (two for comparisons)
    attrs: dict = field(default_factory=dict)  # axis, keepdims, select_last_index

    def usable(self, output_shape) -> bool:
        try:
            if self.op_type in ARG_OPS:
                return self.values[0].ndim > 0 and _arg_shape(self, output_shape) is not None
            if self.op_type in COMPARISON_OPS:
                return np.broadcast_shapes(*(v.shape for v in self.values)) == tuple(output_shape)
            return self.values[0].shape == tuple(output_shape)
        except (ValueError, IndexError):
            return False


def _rms(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0


def _arg_shape(decision: DecisionEvidence, output_shape):
    data = decision.values[0]
    axis = int(decision.attrs.get("axis", 0)) % data.ndim
    keepdims = int(decision.attrs.get("keepdims", 1))
    expected = list(data.shape)
    if keepdims:
        expected[axis] = 1
    else:
        del expected[axis]
    return axis if tuple(expected) == tuple(output_shape) else None


def near_boundary(decision: DecisionEvidence, original: np.ndarray, candidate: np.ndarray,
                  gamma: float, factor: float) -> np.ndarray:
    """Bool per output element: the float64 value feeding it lies within rounding of the boundary."""
    with np.errstate(invalid="ignore", over="ignore"):
        if decision.op_type in ARG_OPS:
            return _near_arg(decision, original, candidate, gamma, factor)
        if decision.op_type in COMPARISON_OPS:
            a, b = np.broadcast_arrays(*decision.values)
            m = max(_rms(a), _rms(b))
            tol = factor * gamma * np.maximum(np.maximum(np.abs(a), np.abs(b)), m)
            return np.isnan(a) | np.isnan(b) | ((a == b) & np.isfinite(a)) | (np.abs(a - b) <= tol)
        value = decision.values[0]
        tol = factor * gamma * np.maximum(np.abs(value), _rms(value))
        if original.dtype == np.bool_:
            return np.isnan(value) | (np.abs(value) <= tol)
        info = np.iinfo(original.dtype)
        undefined = ~np.isfinite(value) | (value > info.max) | (value < info.min)
        low = np.trunc(np.where(undefined, 0.0, value - tol))
        high = np.trunc(np.where(undefined, 0.0, value + tol))
        o, c = original.astype(np.float64), candidate.astype(np.float64)
        between = (np.minimum(o, c) >= low) & (np.maximum(o, c) <= high)
        return undefined | ((low != high) & between)


def _near_arg(decision, original, candidate, gamma, factor) -> np.ndarray:
    data = decision.values[0]
    axis = _arg_shape(decision, original.shape)
    size = data.shape[axis]
    picks = []
    for chosen in (original, candidate):
        index = chosen.astype(np.int64)
        if not int(decision.attrs.get("keepdims", 1)):
            index = np.expand_dims(index, axis)
        valid = (index >= 0) & (index < size)
        picked = np.take_along_axis(data, np.clip(index, 0, max(size - 1, 0)), axis=axis)
        picks.append((picked, valid))
    (ro, valid_o), (rc, valid_c) = picks
    tol = factor * gamma * np.maximum(np.maximum(np.abs(ro), np.abs(rc)), _rms(data))
    # An infinite tie is no near-tie: float64 overflows there too, the values are equal by the
    # spec, and the tie-break (first or last index) decides (ArgMax(Exp(x)) -> ArgMax(x) where Exp
    # overflows is a real change, not rounding).
    finite_tie = (ro == rc) & np.isfinite(ro)
    near = valid_o & valid_c & (np.isnan(ro) | np.isnan(rc) | finite_tie | (np.abs(ro - rc) <= tol))
    if not int(decision.attrs.get("keepdims", 1)):
        near = np.squeeze(near, axis)
    return near


_COMPARE = {"Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
            "GreaterOrEqual": np.greater_equal, "Equal": np.equal}


def reference_decision(decision: DecisionEvidence, output: np.ndarray):
    """(decision the float64 values make, bool mask where that decision is defined)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if decision.op_type in ARG_OPS:
            data = decision.values[0]
            axis = _arg_shape(decision, output.shape)
            keep = bool(int(decision.attrs.get("keepdims", 1)))
            pick = np.argmax if decision.op_type == "ArgMax" else np.argmin
            if int(decision.attrs.get("select_last_index", 0)):
                flipped = np.flip(data, axis)
                chosen = data.shape[axis] - 1 - pick(flipped, axis=axis, keepdims=keep)
            else:
                chosen = pick(data, axis=axis, keepdims=keep)
            defined = ~np.any(np.isnan(data), axis=axis, keepdims=keep)
            return chosen.astype(output.dtype), defined
        if decision.op_type in COMPARISON_OPS:
            a, b = np.broadcast_arrays(*decision.values)
            return _COMPARE[decision.op_type](a, b), ~(np.isnan(a) | np.isnan(b))
        value = decision.values[0]
        if output.dtype == np.bool_:
            return value != 0, ~np.isnan(value)
        info = np.iinfo(output.dtype)
        defined = np.isfinite(value) & (value <= info.max) & (value >= info.min)
        return np.trunc(np.where(defined, value, 0.0)).astype(output.dtype), defined
