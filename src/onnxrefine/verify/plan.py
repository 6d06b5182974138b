"""How much end-to-end verification will cost, decided from the model before it runs.

One `verify_models(original, candidate)` call costs four onnxruntime sessions (strict and
deployment settings) and, per input set:
the original once, the candidate once, and where the candidate differs (a reassociating rewrite)
the original's re-run control (verify/runs.py), perturbation runs of it and one float64 evaluation of it.
Those costs scale with the model's FLOPs (Conv, ConvTranspose, MatMul, Gemm, from shapes inferred
on a copy without the weights' bytes), its other elements and its weight bytes. The constants
below were fitted on this project's bench machine at idle (2-core AMD EPYC, onnxruntime 1.32,
numpy 2.4: resnet50, bert-base; see bench/verify_cost.py) and scaled by the machine's current
load; on a faster machine the estimate errs high, which only makes auto mode more careful.

The plan picks the input sets: the first random set, the stress sets, then further random sets
up to `trials`, dropping sets from the end while the estimate exceeds the budget (keeping at
least one), and skips verification, saying why up front, when even one set is over the limit.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.attrs import proto_attr
from onnxrefine.ir.protofacts import light_model
from onnxrefine.verify import graphinfo
from onnxrefine.verify.discrete import perturbation_sees_discrete_ops

# Fitted constants (seconds per unit); see the module docstring.
ORT_FLOP_S = 1 / 100e9  # onnxruntime, one thread, optimizations off
ORT_ELEMENT_S = 1.5e-9  # per output element of every node (memory traffic)
ORT_NODE_S = 15e-6
# Every run streams the weights once: what a big model's run costs beyond its FLOPs (0.05 s a run
# of the 0.5 GiB bench/big_model.py model at load 1.9; negligible below ~100 MiB).
ORT_WEIGHT_BYTE_S = 5e-11
# The float64 reference with its per-element error bound (reference/bound.py), which costs about
# twice the evaluation (each dot product again on magnitudes and bounds): refitted on CPU seconds of
# one evaluation of tiny_yolo, mobilenet_v3_small, resnet18, efficientnet_b0 and squeezenet1_0
# (0.7-3.4 s; the constants before the bound existed estimated 0.07-0.4 s).
REF_FLOP_S = 1 / 4e9
REF_ELEMENT_S = 80e-9
REF_NODE_S = 1e-3
# Weights converted to float64 per evaluation, and the float64 matmuls streaming them: 1.25 s an
# evaluation of the 0.5 GiB bench/big_model.py model at load 1.9, ~1.2e-9 s a byte at idle.
REF_WEIGHT_BYTE_S = 2e-9
# Session creation per byte of weights; SESSIONS per verification (original and candidate, strict
# and under the deployment settings). 3 GiB bench/big_model.py model: 4.6-5.8 s a session at load 1.7.
SESSION_BYTE_S = 1.2e-9
SESSIONS = 4
PER_SET_S = 0.03  # Python-side work per input set (comparisons, verdict)
FIXED_S = 0.05
MAX_SLOWDOWN = 8.0


@dataclass
class CostEstimate:
    flops: float
    elements: float
    nodes: int
    weight_bytes: int
    fixed_s: float
    per_set_s: float
    unknown_shapes: int = 0
    slowdown: float = 1.0

    def seconds(self, sets: int) -> float:
        return self.fixed_s + sets * self.per_set_s


@dataclass
class VerifyPlan:
    run: bool
    text: str
    sets: list[tuple[str, dict]] = field(default_factory=list)  # (label, feeds)
    trials: int = 1
    estimate_s: float = 0.0
    reason: str = ""


def machine_slowdown() -> float:
    """How much slower than the calibration machine's idle speed work runs now: the 1-minute
    load average over the cores this process may use (a shared machine runs everything slower;
    the constants are idle figures)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return min(MAX_SLOWDOWN, max(1.0, load / max(1, cores)))


def estimate_cost(light: onnx.ModelProto, feeds: Mapping[str, np.ndarray], weight_bytes: int,
                  perturbation_runs: int, slowdown: float = 1.0, differs: bool = True) -> CostEstimate:
    """Seconds for one verification, from the (light) model and one input set's shapes.
    `differs`: the candidate is expected to differ from the original (a reassociating rewrite was
    applied), so each set also pays the perturbation runs and the float64 evaluation."""
    shapes = _shapes(light, feeds)
    flops = elements = 0.0
    unknown = 0
    nodes = list(light.graph.node)
    for node in nodes:
        out = shapes.get(node.output[0]) if node.output else None
        if out is None or any(d is None for d in out):  # () is a scalar, not unknown
            unknown += 1
            flops += _flops_without_output_shape(node, shapes)
            continue
        count = math.prod(out)
        elements += count
        flops += _flops(node, shapes, count)
    ort_run = flops * ORT_FLOP_S + elements * ORT_ELEMENT_S + len(nodes) * ORT_NODE_S \
        + weight_bytes * ORT_WEIGHT_BYTE_S
    ref_run = flops * REF_FLOP_S + elements * REF_ELEMENT_S + len(nodes) * REF_NODE_S \
        + weight_bytes * REF_WEIGHT_BYTE_S
    fixed = FIXED_S + SESSIONS * weight_bytes * SESSION_BYTE_S
    per_set = PER_SET_S + 2 * ort_run + (((1 + perturbation_runs) * ort_run + ref_run) if differs else 0.0)
    return CostEstimate(flops, elements, len(nodes), weight_bytes, fixed * slowdown, per_set * slowdown,
                        unknown, slowdown)


def _shapes(light: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, tuple]:
    """Value name -> shape with the inputs pinned to one set's shapes. Shape inference with data
    propagation: exporters compute Reshape targets from Shape->Gather->Concat chains, and without
    it every MatMul behind one has an unknown shape (its cost then a guess). Falls back to
    graphinfo.static_shapes (no propagation) when that inference fails."""
    pinned = onnx.ModelProto()
    pinned.CopyFrom(light)  # light: no large weights' bytes, cheap to copy
    graphinfo.pin_input_shapes(pinned, feeds)
    try:
        from onnxrefine.ir.peak import infer_shapes_bounded  # data propagation bounded

        inferred = infer_shapes_bounded(pinned)
    except Exception:
        return graphinfo.static_shapes(light, {name: _shaped(value) for name, value in feeds.items()})
    shapes: dict[str, tuple] = {}
    graph = inferred.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            shapes[value.name] = tuple(dim.dim_value if dim.HasField("dim_value") else None
                                       for dim in tensor_type.shape.dim)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
    for name, array in feeds.items():
        shapes[name] = tuple(np.shape(array))
    return shapes


def _shaped(value) -> np.ndarray:
    array = np.asarray(value)
    return np.broadcast_to(np.zeros((), dtype=np.float32), array.shape)  # only the shape is read


def _flops(node: onnx.NodeProto, shapes, out_count: int) -> float:
    def shape(index):
        return shapes.get(node.input[index]) if len(node.input) > index and node.input[index] else None

    if node.op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        weight = shape(1 if node.op_type != "QLinearConv" else 3)
        if weight and all(d is not None for d in weight) and len(weight) >= 2:
            if node.op_type == "ConvTranspose":
                source = shape(0)
                if source and all(d is not None for d in source):
                    return 2.0 * math.prod(source) * math.prod(weight[1:])
            return 2.0 * out_count * math.prod(weight[1:])
    if node.op_type in ("MatMul", "Gemm", "MatMulInteger", "FusedMatMul"):
        a = shape(0)
        if a and a[-1] is not None:
            k = _gemm_depth(node, a)
            return 2.0 * out_count * k
    return float(out_count)


def _flops_without_output_shape(node: onnx.NodeProto, shapes) -> float:
    """A matmul-like node whose output shape is unknown: assume its weight is used once per
    row of a modest activation (128 rows: a sequence), the usual case in exported transformers."""
    if node.op_type in ("MatMul", "Gemm", "Conv"):
        weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
        if weight and all(d is not None for d in weight):
            return 2.0 * 128 * math.prod(weight)
    return 0.0


def _gemm_depth(node: onnx.NodeProto, a: list) -> int:
    """The accumulation depth of a product whose first input has shape `a` (known last dim)."""
    if node.op_type != "Gemm":
        return a[-1]
    try:
        transposed = proto_attr(node, "transA", 0)
    except RewriteRefused:  # transA=@t inside a function: either way, count the larger
        return max(d for d in (a[0], a[-1]) if d is not None)
    return a[0] if transposed and a[0] is not None else a[-1]


# Stress sets by what they add to a random set: inf/NaN propagation and signed zeros/subnormals
# are where exact rewrites go wrong; large magnitudes find overflow; negatives find sign slips.
STRESS_PRIORITY = ("stress:inf_nan", "stress:zeros_tiny", "stress:large", "stress:negative")
# What an automatic budget never cuts: random0 and the first stress set (inf/NaN), the two that
# find most broken rewrites; the rest of the sets run as the budget allows.
MIN_AUTO_SETS = 2


def min_auto_sets(model: onnx.ModelProto, assignments: int = 1) -> int:
    """MIN_AUTO_SETS, or 1 for a model without a floating-point input: its stress sets hold no
    stress values (integer and bool inputs are drawn alike for every kind of set, inputs.py), so
    its inf/NaN set is another random draw, which auto mode runs only as the budget allows (as
    VerifySettings.trials keeps one random set). Not where the sets alternate between several
    `assignments` of the symbolic dims (make_plan): there the second set is at other sizes."""
    if assignments > 1 or any(graphinfo.is_float_dtype(spec.dtype) for spec in graphinfo.graph_inputs(model)):
        return MIN_AUTO_SETS
    return 1


def choose_sets(labelled: Sequence[tuple[str, dict]], trials: int) -> list[tuple[str, dict]]:
    """Generated sets in the order they are worth running: random0, the stress sets, then the
    other random sets (a budget cut drops from the end)."""
    randoms = [item for item in labelled if item[0].startswith("random")][: max(1, trials)]
    stress = [item for item in labelled if not item[0].startswith("random")]
    stress.sort(key=lambda item: STRESS_PRIORITY.index(item[0]) if item[0] in STRESS_PRIORITY else 99)
    return randoms[:1] + stress + randoms[1:]


def alternate(orders: Sequence[list[tuple[str, dict]]]) -> list[tuple[str, dict]]:
    """The sets of choose_sets' order, the n-th taken from the n-th assignment of the dims (round
    robin): the first sets, which a budget cut keeps, are at different sizes."""
    return [orders[index % len(orders)][index] for index in range(len(orders[0]))]


def make_plan(model: onnx.ModelProto, *, budget_s: float, forced: bool, trials: int, seed: int,
              dims: Mapping[str, int] | Sequence[Mapping[str, int]] | None, inputs: Sequence[Mapping[str, np.ndarray]] | None,
              weight_bytes: int, budget_text: str = "", limit_s: float | None = None,
              limit_text: str = "", differs: bool = True) -> VerifyPlan:
    """What verification will do, decided before it runs: as many input sets as fit `budget_s`,
    at least min_auto_sets (as many as there are, if fewer); skipped when even that one would exceed `limit_s` (default: `budget_s`).
    `forced` (--verify) runs every set whatever the estimate; given `inputs` all run (the user
    chose them) unless their estimate exceeds the limit in auto mode, which skips. `differs`:
    see estimate_cost (False when only exact rewrites were applied: bit-identical outputs expected).
    `dims`: the sizes of the symbolic dims, or several assignments the generated sets alternate."""
    limit_s = budget_s if limit_s is None else limit_s
    from onnxrefine.verify import judge
    from onnxrefine.verify.inputs import generate_labelled_inputs

    light = light_model(model)
    if inputs is not None:
        sets = [(f"given{index}", dict(feeds)) for index, feeds in enumerate(inputs)]
    else:
        sizes = [dims] if dims is None or isinstance(dims, Mapping) else list(dims)
        sets = alternate([choose_sets(generate_labelled_inputs(light, seed=seed, dims=at, stress=True,
                                                               trials=trials, deferred=True), trials)
                          for at in sizes])
    if not sets:
        return VerifyPlan(False, "skipped: no input sets", reason="no input sets")
    perturb = judge.perturbation_runs(trials, perturbation_sees_discrete_ops(light))
    cost = estimate_cost(light, sets[0][1], weight_bytes, perturb, slowdown=machine_slowdown(),
                         differs=differs)
    count = len(sets)
    if not forced and inputs is None:
        minimum = min_auto_sets(light, len(sizes))
        while count > minimum and cost.seconds(count) > budget_s:
            count -= 1
    estimate = cost.seconds(count)
    work = f"{cost.flops / 1e9:.1f} GFLOP a run, {weight_bytes / 2**20:.0f} MiB of weights"
    if cost.slowdown > 1.2:
        work += f", machine load x{cost.slowdown:.1f}"
    budget_text = budget_text or f"{budget_s:g} s"
    if not forced and estimate > limit_s:
        what = ("one verification on one input set" if count == 1 else
                f"verification on {count} {'given ' if inputs is not None else ''}input sets")
        reason = (f"{what} would take ~{estimate:.0f} s (estimated: {work}), over the limit of "
                  f"{limit_text or f'{limit_s:g} s'} (--verify-budget)")
        return VerifyPlan(False, f"skipped: {reason}", estimate_s=estimate, reason=reason)
    dropped = len(sets) - count
    cut = "" if not dropped else (
        f"; {dropped} more set(s) left out to fit the budget of {budget_text}" if estimate <= budget_s else
        f"; {dropped} more set(s) left out, and the {count} kept (the fewest auto mode verifies on) still "
        f"over the budget of {budget_text}")
    text = (f"verifying end to end on {count} input set(s): ~{estimate:.1f} s estimated ({work}{cut})")
    # only the kept sets are made (generated sets are deferred: inputs.DeferredSet)
    return VerifyPlan(True, text, [(label, dict(feeds)) for label, feeds in sets[:count]], trials, estimate)

