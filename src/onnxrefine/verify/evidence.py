"""The evidence verification judges: per-track runs and per-output evidence, and the report rows.

A Track is the runs of both models under one RunSettings (strict, or the deployment settings) and the
verdict rules' evidence built from them (verdict.SetEvidence per output and input set). The helpers
below add evidence the rules read (dependency cones of inf/NaN inputs, the float64 values feeding a
discrete output), apply the user's hard bound and turn a judged output into its OutputReport row.
VerificationSession (session.py) calls them in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from onnxrefine.verify import graphinfo
from onnxrefine.verify import judge
from onnxrefine.verify.report import OutputReport
from onnxrefine.verify.ort import RunFailedError, RunSettings, key_differences
from onnxrefine.verify.judge import EXACT, MISMATCH, UNSTABLE


class Track:
    """The runs of both models under one RunSettings, and the evidence built from them."""

    def __init__(self, settings: RunSettings, original_runs: list, map_outputs):
        self.settings = settings
        self.original_runs = original_runs  # per set: (first, second) output dicts
        self.map_outputs = map_outputs  # the original's map outputs and their keys (ort/mapvalues.py)
        self.candidate_runs: list = []
        self.candidate_failure: str | None = None
        self.output_failures: dict[str, str] = {}  # output name -> why it cannot be compared
        self.evidence: dict[str, list] = {}
        self.comparisons: dict[str, list] = {}
        self.set_evidence: list[dict] = []
        self.differing_sets: list[int] = []
        self.controlled: set[int] = set()  # the sets the original's perturbation runs were made on
        self.differing_float: dict[int, list] = {}
        self.converted: dict[str, str] = {}  # output name -> the candidate's own float dtype

    def compare_map_keys(self, candidate_map_outputs, output_map) -> None:
        """A map output whose keys differ from the original's is a mismatch, its values unjudged."""
        self.output_failures = key_differences(self.map_outputs, candidate_map_outputs, output_map)

    def collect(self, output_names, output_map, labelled) -> None:
        self.evidence = {name: [] for name in output_names}
        self.comparisons = {name: [] for name in output_names}
        if self.candidate_failure is not None:
            return
        for index, ((first, second), produced) in enumerate(zip(self.original_runs, self.candidate_runs)):
            feeds = labelled[index][1]
            cand_out = {name: _as_original(produced[output_map[name]], first[name], name, self.converted)
                        for name in output_names if name in output_map}
            extreme, nonfinite = is_extreme(feeds), has_nonfinite(feeds)
            set_evidence = {}
            differing_float = []
            for name in output_names:
                if name not in cand_out or name in self.output_failures:
                    continue
                self.comparisons[name].append(judge.compare_arrays(cand_out[name], first[name]))
                item = judge.SetEvidence(first[name], second[name], cand_out[name],
                                                 extreme=extreme, nonfinite_inputs=nonfinite)
                set_evidence[name] = item
                self.evidence[name].append(item)
                if comparable(item) and not np.all(judge.bit_identical(item.candidate, item.original)):
                    if index not in self.differing_sets:
                        self.differing_sets.append(index)
                    if graphinfo.is_float_dtype(item.original.dtype):
                        differing_float.append(name)
            self.set_evidence.append(set_evidence)
            if differing_float:
                self.differing_float[index] = differing_float


def declared_feeds(model: onnx.ModelProto, feeds) -> dict:
    """The feeds the model declares, cast to its declared types (a conversion may declare others)."""
    return {spec.name: (np.asarray(feeds[spec.name]).astype(spec.dtype) if spec.dtype != np.dtype(object)
                        else feeds[spec.name]) for spec in graphinfo.graph_inputs(model) if spec.name in feeds}


def _as_original(value, original, name, converted: dict):
    """A candidate float output in another float type (a conversion), cast to the original's type."""
    value, original = np.asarray(value), np.asarray(original)
    if value.dtype != original.dtype and graphinfo.is_float_dtype(value.dtype) \
            and graphinfo.is_float_dtype(original.dtype):
        converted[name] = str(value.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            return value.astype(original.dtype)
    return value


MATCH_BY_NAME, MATCH_BY_POSITION = "name", "position"


def match_outputs(original_names, candidate_names, notes, by: str = MATCH_BY_NAME) -> tuple[dict[str, str], str | None]:
    """Original output name -> candidate output name, and the interface problem that makes the
    candidate a mismatch (None when the interfaces agree). By name (the default), a candidate
    whose outputs are not the original's, by name and count, has another interface: a consumer
    that reads `y` or output 1 gets something else, so that is never judged as agreeing. By
    position (`--match-outputs position`, for a candidate renamed on purpose), the counts must
    agree and the outputs are paired in order, with a note."""
    original_names, candidate_names = list(original_names), list(candidate_names)
    if by == MATCH_BY_POSITION:
        if len(original_names) != len(candidate_names):
            return {}, (f"interface mismatch: the candidate has {len(candidate_names)} output(s), the original "
                        f"{len(original_names)}")
        if original_names != candidate_names:
            notes.append("outputs matched by position (--match-outputs position): "
                         + ", ".join(f"{a} -> {b}" for a, b in zip(original_names, candidate_names) if a != b))
        return dict(zip(original_names, candidate_names)), None
    missing = [name for name in original_names if name not in candidate_names]
    extra = [name for name in candidate_names if name not in original_names]
    if missing or extra:
        parts = ([f"lacks output(s) {', '.join(missing)}"] if missing else []) + (
            [f"has other output(s) {', '.join(extra)}"] if extra else [])
        hint = ("; to pair them in order, --match-outputs position"
                if len(original_names) == len(candidate_names) else "")
        return {}, f"interface mismatch: the candidate {' and '.join(parts)}{hint}"
    if original_names != candidate_names:
        notes.append("the candidate's outputs are in another order: matched by name")
    return {name: name for name in original_names}, None


def reference_refusal(model_file, feeds) -> str | None:
    """Why the float64 reference must not evaluate the model on `feeds` (resources.py), or None."""
    from onnxrefine import resources
    from onnxrefine.verify.ort import peak_estimate

    return resources.reference_refusal(peak_estimate(model_file, feeds))


def apply_hard_bound(report: OutputReport, sets, tolerance) -> None:
    """The user's hard bound, on top of the derived one: a differing element whose candidate is
    beyond atol + rtol*|R| of the float64 reference R (the original where there is none) is a
    mismatch. Elements whose reference is not finite, and extreme-magnitude input sets, are left
    to the verdict rules."""
    atol, rtol = tolerance
    if atol is None and rtol is None or report.verdict == MISMATCH:
        return
    atol, rtol = atol or 0.0, rtol or 0.0
    beyond = 0
    for item in sets:
        if not comparable(item) or not graphinfo.is_float_dtype(item.original.dtype) or item.extreme:
            continue
        ref = item.reference if item.reference is not None else item.original.astype(np.float64)
        cand = item.candidate.astype(np.float64)
        differ = ~judge.bit_identical(item.candidate, item.original)
        within = np.abs(cand - ref) <= atol + rtol * np.abs(ref)
        beyond += int(np.count_nonzero(differ & np.isfinite(ref) & ~within))
    if beyond:
        report.verdict = MISMATCH
        report.notes.append(f"{beyond} differing element(s) beyond the hard bound atol={atol:g} + "
                            f"rtol={rtol:g}*|reference|")


def bounds(model, feeds, names, u) -> dict:
    """The rounding bound of each output of `model` (the original) at `u`, the lowest precision
    either graph computes in (a narrower conversion's per-element bounds: conversion.py)."""
    try:
        profile = graphinfo.accumulation_profile(model, feeds)
    except Exception:  # an unreadable graph: the widest guess, sensitivity allowed
        return {name: judge.RoundingBound.for_output(u, 1, graphinfo.UNKNOWN_DIM) for name in names}
    return {name: judge.RoundingBound.for_value(u, profile[name]) for name in names}


# -- evidence for the verdict rules (verdict.py): dependency cones and discrete-output feeds -----

def add_nonfinite_cones(runner, feeds, set_evidence) -> None:
    """SetEvidence.nonfinite_cone on inf/NaN input sets: the original rerun with two finite
    stand-ins for the inf/NaN inputs; an element that changes under either depends on them."""
    changed = {name: None for name in set_evidence}
    for stand_in in (1.0, -2.0):
        try:
            results = runner.run(judge.nonfinite_replaced(feeds, stand_in))
        except RunFailedError:
            return
        for name, item in set_evidence.items():
            moved = results[name]
            if moved.shape != item.original.shape:
                changed[name] = np.ones(item.original.shape, dtype=bool)
                continue
            flip = ~judge.bit_identical(moved, item.original)
            changed[name] = flip if changed[name] is None else changed[name] | flip
    for name, cone in changed.items():
        set_evidence[name].nonfinite_cone = cone


def add_decision_evidence(model_file, feeds, set_evidence, reference_state, evaluate) -> None:
    """SetEvidence.decision for differing outputs made by a decision (decisions.py): the float64
    values feeding the op (`evaluate`: the session's reference evaluator) and their margins (0
    where the feed is computed exactly, else the stand-in of decisions.margin_stand_in)."""
    if reference_state["status"] == "unavailable":
        return
    model = model_file.proto
    producers = producers_of(model)
    wanted = {}
    for name, item in set_evidence.items():
        found = decision_feed(producers, name, item)
        if found is not None and not np.all(judge.bit_identical(item.candidate, item.original)):
            wanted[name] = found
    if not wanted or reference_refusal(model_file, feeds) is not None:
        return
    extra = {"base_dir": model_file.base_dir} if model_file.base_dir is not None else {}
    try:
        values = evaluate(model, feeds, outputs=sorted({v for _, data, _ in wanted.values() for v in data}), **extra)
    except Exception:  # no decision evidence: the perturbation controls decide instead
        return
    exact = judge.exact_values(model)
    for name, found in wanted.items():
        set_evidence[name].decision = decision_evidence(found, name, values, exact)


def decision_evidence(found, name, values, exact) -> judge.DecisionEvidence | None:
    """The DecisionEvidence of value `name`, made by `found` (decision_feed's triple), from the float64
    `values` of its feeds (None where a feed is not float); `exact`: the names computed exactly."""
    from onnxrefine.verify.reference import bound_of

    node, data, through_where = found
    # the per-element bound travels on the evaluator's arrays: read it before converting
    bounds = [0.0 if value in exact else bound_of(values[value]) for value in data]
    arrays = [np.asarray(values[value]) for value in data]
    if not all(graphinfo.is_float_dtype(array.dtype) for array in arrays):
        return None
    attrs = {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}
    return judge.DecisionEvidence(
        node.op_type, [array.astype(np.float64) for array in arrays], attrs, bounds=bounds,
        output_index=list(node.output).index(name) if name in node.output else 0, through_where=through_where)


def add_static_facts(original, candidate_file, tracks, output_map) -> None:
    """What the graphs say of each output, on every track: SetEvidence.exact_decisions
    (decisions.exact_decisions), maxpool_made (rule maxpool-lowest) and picker_made (undefined-pick)."""
    names = list(tracks[0].evidence) if tracks else []
    try:
        exact = judge.exact_decisions(original, names)
    except Exception:  # an unreadable graph: every decision may have rounded
        exact = {}
    candidate = None if candidate_file is None else candidate_file.proto
    made = MadeBy(original, candidate)
    for name in names:
        twin = output_map.get(name) if candidate is not None else None
        picked = made.picker_made(name, twin)
        for track in tracks:
            for item in track.evidence.get(name, []):
                item.exact_decisions = exact.get(name, False)
                item.maxpool_made, item.picker_made = made.maxpool_made(item, name, twin), picked


def runnable_sets(labelled, first_runs, notes) -> tuple:
    """The sets and the original's runs without the generated branch sets it could not run (None)."""
    failed = [label for (label, _), result in zip(labelled, first_runs) if result is None]
    if not failed:
        return labelled, first_runs
    notes.append(f"generated branch set(s) {', '.join(failed)} not used: the original does not run on them")
    kept = [(item, result) for item, result in zip(labelled, first_runs) if result is not None]
    return [item for item, _ in kept], [result for _, result in kept]


# ops after which a MaxPool's -largest finite value is still there: data movement, and LogSoftmax
# (x_i minus the row's finite log-sum-exp leaves -FLT_MAX at -FLT_MAX while the row's largest is finite)
_MOVES = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "LogSoftmax"})
_PICKERS = frozenset({"ReduceMin", "ReduceMax", "MaxPool", "GlobalMaxPool", "Min", "Max"})


def producers_of(model: onnx.ModelProto) -> dict:
    """Value name -> the main-graph node that makes it."""
    return {out: node for node in model.graph.node for out in node.output}


def _source(producers: dict, name: str, through: frozenset) -> tuple:
    """(node, value, k): the node that makes `name` once the ops in `through` are walked back (each from
    its first input), the value of it the walk reached, and the product k of the window sizes of the
    AveragePools walked through (1: none; 0 and no node: a pool whose kernel is not known)."""
    current, node, divisor = name, producers.get(name), 1
    while node is not None and node.input and node.op_type in through:
        if node.op_type == "AveragePool":
            kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), None)
            if not kernel or any(k < 1 for k in kernel):
                return None, current, 0
            divisor *= math.prod(kernel)
        current = node.input[0]
        node = producers.get(current)
    return node, current, divisor


def made_by_picker(producers: dict, name: str) -> bool:
    """The value is the output of a min or max (one of its inputs' elements), possibly moved by data
    movement after it."""
    node, current, _ = _source(producers, name, _MOVES - {"LogSoftmax"})
    return node is not None and node.op_type in _PICKERS and (node.domain or "") in ("", "ai.onnx") \
        and node.output[0] == current


def made_by_maxpool(producers: dict, name: str, shape=None, constant_dims=None):
    """0 unless the value is a MaxPool's output Y, possibly moved by data-movement ops (or a LogSoftmax)
    and averaged by AveragePools after it; else the product k of those AveragePools' window sizes: a
    window of the MaxPool's -FLT_MAX among finite values averages to between -FLT_MAX and -FLT_MAX/k.
    With the value's `shape` and `constant_dims` (name -> a constant's dims, or None): a value a Concat
    makes (read through ops that keep every element in its place) of constants and one input a MaxPool
    makes gives an int array of the value's shape, k on that input's elements and 0 on the constants'."""
    node, current, divisor = _source(producers, name, _MOVES | {"AveragePool"})
    if node is not None and node.op_type == "MaxPool" and node.output[0] == current:
        return divisor
    if shape is None or constant_dims is None:
        return 0
    concat, _, _ = _source(producers, name, _IN_PLACE)
    return 0 if concat is None or concat.op_type != "Concat" else _concat_made(producers, concat, tuple(shape),
                                                                               constant_dims)


_IN_PLACE = frozenset({"Identity", "LogSoftmax"})


def _concat_made(producers: dict, concat, shape: tuple, constant_dims):
    axis = next((a.i for a in concat.attribute if a.name == "axis"), None)
    if axis is None or not shape:
        return 0
    axis = axis + len(shape) if axis < 0 else axis
    dims = [constant_dims(name) for name in concat.input]
    computed = [index for index, found in enumerate(dims) if found is None]
    if not 0 <= axis < len(shape) or len(computed) != 1 or \
            any(found is not None and len(found) != len(shape) for found in dims):
        return 0  # the computed input's place along the axis is known only beside constants
    (open_index,) = computed
    extents = [found[axis] if found is not None else 0 for found in dims]
    extents[open_index] = shape[axis] - sum(extents)
    made = made_by_maxpool(producers, concat.input[open_index])
    if extents[open_index] < 0 or not made:
        return 0
    mask = np.zeros(shape, np.int64)
    start = sum(extents[:open_index])
    place = [slice(None)] * len(shape)
    place[axis] = slice(start, start + extents[open_index])
    mask[tuple(place)] = made
    return mask


def constant_dims_of(model: onnx.ModelProto) -> dict:
    """Name -> dims of each main-graph initializer and Constant node's tensor."""
    dims = {init.name: tuple(init.dims) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR), None)
            if value is not None:
                dims[node.output[0]] = tuple(value.dims)
    return dims


class MadeBy:
    """Per pair of models: what makes a value, for the maxpool-lowest and undefined-pick rules."""

    def __init__(self, original: onnx.ModelProto, candidate: onnx.ModelProto | None):
        self.here, self.dims_here = producers_of(original), constant_dims_of(original)
        self.there = {} if candidate is None else producers_of(candidate)
        self.dims_there = {} if candidate is None else constant_dims_of(candidate)

    def maxpool_made(self, item, name: str, twin: str | None) -> tuple:
        return (made_by_maxpool(self.here, name, item.original.shape, self.dims_here.get),
                twin is not None and made_by_maxpool(self.there, twin, item.candidate.shape, self.dims_there.get))

    def picker_made(self, name: str, twin: str | None) -> tuple:
        return made_by_picker(self.here, name), twin is not None and made_by_picker(self.there, twin)


def decision_feed(producers, name, item):
    """(decision node, its float input names, through a Where) for an output a decision makes, or None."""
    node = producers.get(name)
    if node is None:
        return None
    is_float = graphinfo.is_float_dtype(item.original.dtype)
    if node.op_type == "Where" and len(node.input) == 3:
        condition = producers.get(node.input[0])
        if condition is not None and condition.op_type in judge.COMPARISON_OPS:
            return condition, list(condition.input[:2]), True
        return None
    if node.op_type == "Cast" and is_float:  # a decision's integers or bools made floats: judged as its own
        inner = producers.get(node.input[0])
        return decision_feed(producers, node.input[0], Typed(np.empty(0, np.int64))) if makes_discrete(inner) else None
    if node.op_type not in judge.DECISION_OPS:
        return None
    if node.op_type in judge.ROUNDING_OPS:
        return (node, list(node.input[:1]), False) if is_float else None
    if is_float or (node.op_type == "TopK" and list(node.output).index(name) != 1):
        return None
    comparison = node.op_type in judge.COMPARISON_OPS
    return node, list(node.input[:2] if comparison else node.input[:1]), False


@dataclass
class Typed:
    """A stand-in item of a value's type alone: all decision_feed reads of an item."""

    original: np.ndarray


def makes_discrete(node) -> bool:
    """A decision whose one output is integers or bools: a comparison, ArgMax/ArgMin, a Cast to an integer
    type or bool (TopK's indices are its second output, not followed through a Cast)."""
    if node is None or node.op_type not in judge.COMPARISON_OPS | judge.ARG_OPS | {"Cast"}:
        return False
    to = next((attr.i for attr in node.attribute if attr.name == "to"), None)
    return node.op_type != "Cast" or (to is not None and to in _DISCRETE_TYPES)


_DISCRETE_TYPES = frozenset(getattr(onnx.TensorProto, name) for name in (
    "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"))


def output_report(name, sets, comps, bound, candidate_name, candidate_failure, reference_state):
    if candidate_failure is not None or candidate_name is None or not sets:
        reason = candidate_failure or "candidate has no such output"
        return OutputReport(name=name, verdict=MISMATCH, dtype="?", shape=[], candidate_shape=[],
                            candidate_dtype="?", comparison={}, notes=[reason],
                            bound=bound.to_dict())
    judgement = judge.judge_output(sets, bound)
    # The table summarizes ordinary input sets; extreme-magnitude sets (overflowing intermediates)
    # would drown it, so they are summarized apart.
    ordinary = [comp for comp, item in zip(comps, sets) if not item.extreme] or comps
    extreme = [comp for comp, item in zip(comps, sets) if item.extreme]
    merged = judge.merge(ordinary)
    first = sets[0]
    needs_reference = judgement.verdict != EXACT and graphinfo.is_float_dtype(first.original.dtype) \
        and first.original.shape == first.candidate.shape
    if not needs_reference:
        reference = "not needed"
    elif judgement.used_reference:
        reference = "float64"
    else:
        reference = "no float64 reference"
    notes = list(judgement.notes)
    if reference == "no float64 reference" and judgement.verdict != EXACT:
        notes.append("no float64 reference: judged by ulp statistics and the original's "
                     "re-run/perturbation spread")
    if judgement.overflow_excused:
        notes.append(f"{judgement.overflow_excused} difference(s) in overflow territory on "
                     "extreme-magnitude inputs not judged")
    if judgement.nonfinite_excused:
        notes.append(f"{judgement.nonfinite_excused} inf<->NaN or inf<->largest-finite difference(s) on "
                     "inf/NaN inputs (order of inf arithmetic, saturation) not blamed")
    if judgement.beyond_own_bound:
        notes.append(f"the original exceeds its own derived bound at {judgement.beyond_own_bound} differing "
                     "element(s): judged there by the accumulation allowance")
    if judgement.verdict == UNSTABLE:
        notes.append(f"the original itself is unstable at {judgement.unstable_positions} element(s); "
                     "the candidate's differences there are not blamed on it")
    if judgement.unstable_by:
        notes.append("unstable by control: " + ", ".join(
            f"{name} {count}" for name, count in sorted(judgement.unstable_by.items())))
    return OutputReport(
        name=name, verdict=judgement.verdict, dtype=str(first.original.dtype),
        shape=list(first.original.shape), candidate_shape=list(first.candidate.shape),
        candidate_dtype=str(first.candidate.dtype), comparison=merged.to_dict(),
        comparison_extreme=judge.merge(extreme).to_dict() if extreme and len(extreme) < len(comps) else {},
        differing=judgement.differing, unexplained=judgement.unexplained,
        unstable_positions=judgement.unstable_positions, orig_err_max=judgement.orig_err_max,
        cand_err_max=judgement.cand_err_max, reference=reference, bound=bound.to_dict(),
        scatter=judgement.scatter if judgement.used_reference else {}, notes=notes,
        worst_elements=judgement.worst_elements,
        excused=dict(judgement.excused),
    )


def is_extreme(feeds) -> bool:
    for value in feeds.values():
        value = np.asarray(value)
        if graphinfo.is_float_dtype(value.dtype) and value.size:
            magnitude = np.abs(value.astype(np.float64))
            limit = np.sqrt(graphinfo.finite_max(value.dtype))
            if np.any(np.isfinite(magnitude) & (magnitude > limit)):
                return True
    return False


def has_nonfinite(feeds) -> bool:
    return any(graphinfo.is_float_dtype(np.asarray(value).dtype)
               and not np.all(np.isfinite(np.asarray(value).astype(np.float64)))
               for value in feeds.values())


def comparable(item) -> bool:
    return item.original.shape == item.candidate.shape and item.original.dtype == item.candidate.dtype
