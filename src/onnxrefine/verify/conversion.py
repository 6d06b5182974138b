"""Conversions: a candidate that declares other inputs (another float type, an input dropped) or
computes in a narrower float type than the original (an fp16 conversion).

How each model is fed (conversion, apply_conversion, converted_sets): every model gets the input
sets cast to its declared types; where the candidate's type is narrower, both get the values
rounded to it, so each is judged on what it was given.

How a narrower candidate is judged (attach_candidate_bounds): the original's derived bound
(reference/bound.py) is that of a run in the original's precision, which the candidate's float16
rounding exceeds. So the candidate's own graph is evaluated in float64 as well, on the inputs cast
to its declared types, with its own bound B_c (u of float16/bfloat16 at each value it computes in
them) and its own coherent bound K_c (each of its constants taken as rounded once to its type, which
covers the conversion's rounding of every float32 weight: |w32 - w16| <= u16*|w16|). Per element,
with R the original's float64 value and R_c* the exact value of the candidate's graph,
    |C - R| <= |C - R_c*| + |R_c* - R| <= B_c + K_c,
so the verdict's rule within-derived-bound judges the candidate with B = max(B_o, B_c) (the original
must still lie within its own B_o) and K = K_c, element by element. What the candidate changed
beyond the rounding of its constants (one wrong weight, a dropped op, a flipped sign) moves R_c*
away from R by more than K_c, and the candidate with it. Where the candidate's graph cannot be
evaluated or its bound is not derived, the elements are judged by the accumulation allowance at
the narrower precision, as before (SetEvidence.error_bound None / NaN there).

A decision of a narrower candidate (_attach_decision_bounds) is judged by each model's own
margin: the two runs together may err by b_o + b_c at the feed, b_c the candidate's own bound of its
feed (its graph evaluated in float64), or gamma * |R| at the narrower u where that is not derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxrefine.verify import evidence, graphinfo, judge

__all__ = ["Conversion", "conversion", "apply_conversion", "localisation_refusal", "converted_sets",
           "converted_output_notes", "narrower_candidate", "attach_candidate_bounds"]


@dataclass
class Conversion:
    """How the candidate's declared inputs relate to the original's (a conversion to another
    precision, an input dropped): what the runs must do about it, or why they cannot run."""

    problem: str | None = None
    dropped: list = field(default_factory=list)  # inputs of the original the candidate does not declare
    retyped: list = field(default_factory=list)  # inputs it declares in another float type
    narrower: dict = field(default_factory=dict)  # input name -> the candidate's narrower float dtype
    notes: list = field(default_factory=list)

    @property
    def changes_inputs(self) -> bool:
        return bool(self.dropped or self.retyped)


def conversion(original: onnx.ModelProto, candidate: onnx.ModelProto) -> Conversion:
    """The candidate may declare a float input in another float type (an fp16 conversion: it is fed
    the inputs cast to its type, and where that type is narrower both models get the values rounded
    to it, so each is judged on what it was given) and may drop an input (it is fed what it
    declares; its outputs show whether the original needed the values). An input the original lacks,
    or one retyped to a non-float type, is a problem: the candidate cannot run on the original's sets."""
    want = {spec.name: spec.dtype for spec in graphinfo.graph_inputs(original)}
    have = {spec.name: spec.dtype for spec in graphinfo.graph_inputs(candidate)}
    extra = sorted(set(have) - set(want))
    dropped = sorted(set(want) - set(have))
    read = [name for name in dropped if _reads(original.graph, name)]
    retyped = [name for name in have if name in want and have[name] != want[name]]
    unconvertible = [name for name in retyped if not (graphinfo.is_float_dtype(have[name])
                                                      and graphinfo.is_float_dtype(want[name]))]
    result = Conversion(dropped=dropped, retyped=retyped)
    if extra or unconvertible:
        why = [f"declares input(s) {', '.join(extra)} the original lacks" if extra else "",
               f"declares input(s) {', '.join(unconvertible)} in a non-float type of its own" if unconvertible else ""]
        result.problem = (f"candidate inputs {sorted(have)} do not match the original's {sorted(want)}: "
                          + "; ".join(part for part in why if part))
        return result
    unread = [name for name in dropped if name not in read]
    if unread:
        result.notes.append(f"candidate drops input(s) {', '.join(unread)}, which the original never reads: "
                            "fed the inputs it declares")
    if read:
        # a graph cannot read a value it does not declare: the candidate answers without it (onnxslim
        # folds a Shape of an input of static shape); judged on what it declares, its outputs show
        # whether the original needed the values
        result.notes.append(f"candidate drops input(s) {', '.join(read)}, which the original reads: fed the "
                            "inputs it declares, judged on its outputs")
    for name in retyped:
        if np.dtype(have[name]).itemsize < np.dtype(want[name]).itemsize:
            result.narrower[name] = np.dtype(have[name])
    if retyped:
        result.notes.append("candidate declares input(s) " + ", ".join(
            f"{name} as {have[name]} (the original {want[name]})" for name in retyped)
            + ": each model is fed the inputs cast to its declared types" + (
                ", both given the values rounded to the narrower type" if result.narrower else ""))
    return result


def _reads(graph: onnx.GraphProto, name: str) -> bool:
    """Whether any node of `graph` or of its subgraphs (which see outer names), or an output, reads `name`."""
    if any(out.name == name for out in graph.output):
        return True
    for node in graph.node:
        if name in node.input:
            return True
        for attr in node.attribute:
            subgraphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
            if any(_reads(sub, name) for sub in subgraphs):
                return True
    return False


def apply_conversion(run, draw) -> None:
    """conversion() applied to a verification's state (session._Run): its problem becomes the
    candidate's failure, its notes are added, the sets become what both models get, and the early
    localisation is dropped where the candidate's inputs differ (localisation feeds both alike).
    `draw()` gives the sets generated for the candidate's own types (None: the sets were given)."""
    if run.candidate_failure is not None:
        return
    plan = conversion(run.original_file.proto, run.candidate_file.proto)
    run.candidate_failure = plan.problem
    run.notes.extend(plan.notes)
    if plan.problem is None and plan.narrower:
        run.labelled = converted_sets(plan, run.original_file.proto, run.labelled, {} if draw is None else draw())
    if plan.changes_inputs:
        run.early = None


def localisation_refusal(original, candidate, max_bytes: int) -> str | None:
    """Why layer-wise localisation is not run on the pair (models None: weights beyond max_bytes)."""
    if original is None or candidate is None:
        return f"not run: a model's weights exceed {max_bytes >> 20} MiB (localisation holds both models in memory)"
    if conversion(original, candidate).changes_inputs:
        return "not run: the candidate declares other inputs (a conversion), so its intermediates are not the original's"
    return None


def converted_sets(plan: Conversion, original: onnx.ModelProto, labelled, drawn: dict) -> list:
    """The (label, feeds) sets as both models get them under `plan`: each input the candidate
    declares narrower rounded to that type (exact values of it, in the original's dtype). `drawn`:
    label -> the sets generated for the candidate's own types, which replace the original's draw
    of the same label (a set drawn for float32 overflows float16)."""
    dtypes = {spec.name: spec.dtype for spec in graphinfo.graph_inputs(original)}
    sets = []
    with np.errstate(over="ignore", invalid="ignore"):
        for label, feeds in labelled:
            mine = drawn.get(label, {})
            sets.append((label, {name: (np.asarray(mine.get(name, value)).astype(plan.narrower[name]).astype(dtypes[name])
                                        if name in plan.narrower else value) for name, value in feeds.items()}))
    return sets


def converted_output_notes(tracks) -> list:
    converted = {name: dtype for track in tracks for name, dtype in track.converted.items()}
    if not converted:
        return []
    return ["candidate output(s) " + ", ".join(f"{name} ({dtype})" for name, dtype in converted.items())
            + " in another float type: compared in the original's type, judged against float64 with the "
            "per-element bound of the candidate's own precision"]


def narrower_candidate(original: onnx.ModelProto, candidate: onnx.ModelProto) -> bool:
    """The candidate computes in a float type narrower than any the original computes in."""
    return judge.lowest_precision_u(graphinfo.float_dtypes(candidate)) > \
        judge.lowest_precision_u(graphinfo.float_dtypes(original))


def attach_candidate_bounds(run, sets: dict, evaluate, narrower_part: bool = True, spec_same: bool = True) -> None:
    """The candidate's own bounds, from its graph evaluated in float64 (`evaluate`: the session's
    reference evaluator) on each set of `sets` (input set index -> the original's output names
    evaluated there), where the original's do not judge it:
    - a narrower candidate (narrower_candidate): each differing output's SetEvidence gets the bounds
      of the candidate's own precision (module docstring); where the candidate's own bound is not
      available, the original's (which does not cover it) is dropped;
    - a float16 graph whose original bound is not finite at a differing element (a subgraph on its
      path): SetEvidence.spec_same_bound, the candidate's own bound where the reference gives both
      models the same value (rule float16-skipped-rounding);
    - a narrower candidate's decisions (evidence.add_decision_evidence has run): each model's own margin.
    `narrower_part` / `spec_same`: whether to make the narrower candidate's bounds / the spec-same ones."""
    candidate_file = run.candidate_file
    if candidate_file is None or run.strict.candidate_failure is not None:
        return
    narrower = narrower_candidate(run.original_file.proto, candidate_file.proto)
    if not (narrower_part if narrower else spec_same):
        return
    for track in run.tracks if narrower else ():
        for index in track.differing_sets:
            _attach_decision_bounds(run, track.set_evidence[index], run.labelled[index][1], evaluate)
    if not narrower and not any(np.dtype(dtype).name in NARROW_FLOATS for dtype in run.float_dtypes):
        return
    for index, names in sorted(sets.items()):
        items = [(name, track.set_evidence[index][name]) for track in run.tracks
                 if index < len(track.set_evidence) for name in names if name in track.set_evidence[index]]
        items = [(name, item) for name, item in items if item.reference is not None
                 and (narrower or _unbounded_where_differing(item))]
        if not items:
            continue
        values = _candidate_values(candidate_file, run.labelled[index][1],
                                   sorted({run.output_map[name] for name, _ in items}), evaluate)
        for name, item in items:
            (_attach if narrower else _attach_spec_same)(item, values.get(run.output_map[name]))


NARROW_FLOATS = ("float16", "bfloat16")


def _unbounded_where_differing(item) -> bool:
    if item.original.shape != item.candidate.shape or item.original.dtype != item.candidate.dtype:
        return False
    differ = ~judge.bit_identical(item.candidate, item.original)
    return item.error_bound is None or bool(np.any(differ & ~np.isfinite(item.error_bound)))


def _candidate_values(candidate_file, feeds, names, evaluate) -> dict:
    from onnxrefine.verify.reference import bound_of

    feeds = evidence.declared_feeds(candidate_file.proto, feeds)
    if evidence.reference_refusal(candidate_file, feeds) is not None:
        return {}
    extra = {"base_dir": candidate_file.base_dir} if candidate_file.base_dir is not None else {}
    try:
        values = evaluate(candidate_file.proto, feeds, outputs=names, **extra)
    except Exception:  # noqa: BLE001 - no bound of its own: the accumulation allowance judges instead
        return {}
    return {name: value for name, value in values.items() if bound_of(value) is not None}


def _own_bound(item, value):
    from onnxrefine.verify.reference import bound_of

    own = None if value is None else bound_of(value)
    return None if own is None or np.shape(own) != item.reference.shape else np.asarray(own, np.float64)


def _attach(item, value) -> None:
    from onnxrefine.verify.reference import coherent_of

    own = _own_bound(item, value)
    if own is None or item.error_bound is None:
        item.error_bound = item.coherent_bound = None
        return
    coherent = coherent_of(value)
    item.error_bound = np.maximum(item.error_bound, own)  # NaN stays NaN
    item.coherent_bound = np.zeros(own.shape) if coherent is None else np.asarray(coherent, np.float64)


def _attach_spec_same(item, value) -> None:
    own = _own_bound(item, value)
    if own is None:
        return
    unbounded = np.ones(own.shape, dtype=bool) if item.error_bound is None else ~np.isfinite(item.error_bound)
    same = judge.bit_identical(np.asarray(value, np.float64), item.reference) & unbounded & np.isfinite(own)
    if same.any():
        item.spec_same_bound = np.where(same, own, np.nan)


def _attach_decision_bounds(run, set_evidence: dict, feeds, evaluate) -> None:
    """For a narrower candidate, DecisionEvidence.candidate_bounds of each decided output of one set:
    the candidate's own bound of the values feeding its decision (the same op, found through the
    output map), 0 where it computes them exactly, None (the stand-in at the narrower u) where its
    decision or its bound is not found. An equal-precision candidate keeps the original's margin."""
    from onnxrefine.verify.reference import bound_of

    decided = {name: item.decision for name, item in set_evidence.items()
               if item.decision is not None and name in run.output_map}
    if not decided:
        return
    candidate_file = run.candidate_file
    model = candidate_file.proto
    producers = {out: node for node in model.graph.node for out in node.output}
    wanted = {}
    for name, decision in decided.items():
        found = evidence.decision_feed(producers, run.output_map[name], set_evidence[name])
        if found is not None and found[0].op_type == decision.op_type and len(found[1]) == len(decision.values):
            wanted[name] = found[1]
        decision.candidate_bounds = [None] * len(decision.values)
    names = sorted({value for data in wanted.values() for value in data})
    values = _candidate_values(candidate_file, feeds, names, evaluate) if names else {}
    exact = judge.exact_values(model)
    for name, data in wanted.items():
        decision = decided[name]
        bounds = []
        for value_name, reference in zip(data, decision.values):
            own = None if value_name not in values else bound_of(values[value_name])
            usable = own is not None and np.shape(own) == reference.shape
            bounds.append(0.0 if value_name in exact else np.asarray(own, np.float64) if usable else None)
        decision.candidate_bounds = bounds
