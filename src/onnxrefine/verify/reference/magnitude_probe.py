"""The magnitude of the terms behind the results of an op without a bound rule, probed.

Past an op without a rule (bound.py's BOUND_RULES) the rule-based magnitude pass derives nothing, and
the verdict would have no per-element measure of how large the terms behind an element are. An op
without a rule is still a function the reference evaluator can run: its magnitude is its first-order
carry of its inputs' magnitudes, which central differences measure without knowing the op.

For inputs x_j with magnitudes M_j (their own |x_j| where none is known; constants are exact and not
moved), a step h = MAGNITUDE_STEP:
- one probe per trial moves every input at once by h * M_j * s with independent random signs s:
  for y = sum_i c_i x_i the change is h * sum_i c_i M_i s_i, whose mean square over the signs is
  h^2 * sum_i c_i^2 M_i^2, the root-sum-square of the terms (what the rule-based pass gives a dot
  product or a reduction); its root mean square over the trials estimates it;
- each input alone is moved by +h * M_j as well, and the changes are added: sum_j |sum_i c_ji M_ji|,
  the magnitude the rules give a sum or product of two values. With few terms the random signs can
  cancel in every trial where the same-sign move does not (a bilinear Resize's four neighbours of
  about equal weight, signs + - - +: zero, twice in a row on deeplabv3's output), and the same-sign
  move cancels where the terms' signs differ (x - mean(x)), so
M is the larger of the two, per element. A probe is read as a derivative only where the op is linear
at that scale: the step up and the step down change the element by opposite amounts (within half
their size). An element where they do not (a jump, a kink, an extremum) gets no magnitude (NaN): the
verdict then takes the element's own |R|, which excuses nothing another element computed.

Probes cost runs of the op: 2 * TRIALS, plus 2 per moved input (and one more for a float16 result,
whose unrounded value the probes are read against: the reruns are not rounded to it). Subgraph ops (If, Loop, Scan) and non-float results are not probed.
"""

from __future__ import annotations

import numpy as np

TRIALS = 2
# the largest share of a probe's change its curvature may take before it no longer reads as a derivative
_LINEARITY = 0.5


def probe_magnitudes(node, inputs, outputs, magnitudes, moved, step, run) -> list[np.ndarray | None]:
    """Per output of `node`, its probed magnitude (NaN where not linear at the step), or None.

    inputs: the values the node ran on; outputs: its results; magnitudes: per input the known
    magnitude (None: the input's own |x|); moved: per input whether it is a float input to move
    (not a constant); run(inputs) -> the node's results on other inputs."""
    if any(attr.type in (5, 10) for attr in node.attribute):  # GRAPH, GRAPHS: a subgraph op
        return [None] * len(outputs)
    floats = [isinstance(out, np.ndarray) and out.dtype.kind == "f" for out in outputs]
    positions = [index for index, flag in enumerate(moved) if flag and isinstance(inputs[index], np.ndarray)]
    if not any(floats) or not positions:
        return [None] * len(outputs)
    deltas = {}
    for index in positions:
        known = magnitudes[index]
        value = inputs[index]
        magnitude = np.abs(value) if known is None or np.shape(known) != value.shape else np.asarray(known)
        deltas[index] = step * np.where(np.isfinite(magnitude), magnitude, 0.0)
    rng = np.random.default_rng(0)
    squares, counts, linear = _zeros(outputs, floats), 0, _trues(outputs, floats)
    for _ in range(TRIALS):
        signs = {index: rng.choice((-1.0, 1.0), size=np.shape(inputs[index])) for index in positions}
        change, ok = _central(inputs, outputs, floats, {i: deltas[i] * signs[i] for i in positions}, run)
        squares = [None if s is None else s + c * c for s, c in zip(squares, change)]
        linear = [None if a is None else a & b for a, b in zip(linear, ok)]
        counts += 1
    total = [None if s is None else np.sqrt(s / counts) for s in squares]
    summed = _zeros(outputs, floats)
    for index in positions:
        change, ok = _central(inputs, outputs, floats, {index: deltas[index]}, run)
        summed = [None if s is None else s + c for s, c in zip(summed, change)]
        linear = [None if a is None else a & b for a, b in zip(linear, ok)]
    total = [None if t is None else np.maximum(t, s) for t, s in zip(total, summed)]
    return [None if t is None else np.where(ok, t / step, np.nan) for t, ok in zip(total, linear)]


def _central(inputs, outputs, floats, delta, run):
    """(per output |y(x+d) - y(x-d)| / 2, and where the step reads as linear)."""
    up = run([value + delta[i] if i in delta else value for i, value in enumerate(inputs)])
    down = run([value - delta[i] if i in delta else value for i, value in enumerate(inputs)])
    changes, linear = [], []
    for index, flag in enumerate(floats):
        base = outputs[index]
        if not flag or index >= len(up) or index >= len(down) or np.shape(up[index]) != base.shape \
                or np.shape(down[index]) != base.shape:
            changes.append(None if not flag else np.full(base.shape, np.nan))
            linear.append(None if not flag else np.zeros(base.shape, dtype=bool))
            continue
        with np.errstate(all="ignore"):
            rise = np.asarray(up[index], np.float64) - base
            fall = np.asarray(down[index], np.float64) - base
            size = np.abs(rise) + np.abs(fall)
            ok = np.isfinite(size) & (np.abs(rise + fall) <= _LINEARITY * size)
            ok |= size == 0  # locally constant: no change, no terms
        changes.append(np.where(ok, np.abs(rise - fall) / 2, 0.0))
        linear.append(ok)
    return changes, linear


def _zeros(outputs, floats):
    return [np.zeros(out.shape) if flag else None for out, flag in zip(outputs, floats)]


def _trues(outputs, floats):
    return [np.ones(out.shape, dtype=bool) if flag else None for out, flag in zip(outputs, floats)]
