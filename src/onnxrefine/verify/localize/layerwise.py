"""Layer-wise localisation: which intermediate value is the first one a rewrite broke?

An output verdict judges what leaves the model; a single wrong fold deep inside a residual network
can be diluted there (by later Adds, pooling, a Softmax) until it hides in the output's rounding
bound. Localisation judges the values *inside* the model that the original and the candidate both
hold, each with the same rules as an output (verdict.judge_output) against its
own float64 value and its own rounding bound, and names the first one (in the original's
topological order) that is a mismatch.

Which values. Main-graph node outputs of the original paired with a candidate value by
correspond.py: by name, or by role where a name now holds another value (onnxoptimizer's
fuse_bn_into_conv gives the fused Conv the Conv's output name), minus the original's graph outputs
(judged already), minus values that reach no graph output in either model (dead code: they change
nothing; a fused Conv may take over a dead BatchNormalization's role under the Conv's name with no
reader left to tell), minus values whose producing subgraph is structurally identical in both models
(same ops, attributes, constants and graph inputs all the way up: onnxruntime computes them bit for
bit alike, so there is nothing to judge). A pair whose shape or dtype differs is not the same value;
it is listed as not comparable and not judged.

How. Per input set (the ones verification used), the original is evaluated once in float64 with an
observer (reference.evaluate_float64(observe=...)): the output check's own evaluation of that set
where it makes one (verify_models, localize/shared.py), else one of localisation's; values are grouped into batches, in topological
order, whose estimated size (one copy in their own dtype) stays under `max_batch_bytes`; once the
reference has produced a batch's last value, both models run in onnxruntime with that batch exposed
as extra graph outputs (original twice, candidate once), each value is judged, and everything of the
batch is freed. The original's perturbation runs (sensitivity, unstable positions) are added only for
values that fail without them: they can only excuse more, never less. Peak memory is therefore
the reference's own working set plus about (5 + perturbation runs) x max_batch_bytes, whatever the
model's size. While all judged values total at most 4 batches, one session per model exposes them
all and each run fetches one batch (onnxruntime then holds one copy of them all during a run;
bert-base's 257 values, ~250 MiB); beyond that each batch gets its own sessions, rebuilt per input
set (one float64 evaluation per set costs more than rebuilding them, so sets stay the outer loop).

Judged per input set and combined with the worst verdict: the rules in verdict.py judge each set on
its own, and holding a value's evidence across sets would defeat the memory bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnxrefine.verify import graphinfo
from onnxrefine.verify import judge
from onnxrefine.verify.localize.correspond import Pair, find_pairs  # noqa: F401 - find_pairs re-exported
from onnxrefine.verify.ort import ModelRunner, RunFailedError
from onnxrefine.verify.judge import ArtefactCheck
from onnxrefine.resources import ResourceLimitError

DEFAULT_BATCH_BYTES = 128 << 20
SHARED_SESSION_FACTOR = 4  # one session exposing every value while they total <= 4 batches


@dataclass
class ValueResult:
    name: str
    candidate_name: str
    order: int
    node: str
    op: str
    candidate_op: str
    verdict: str = judge.EXACT
    dtype: str = ""
    shape: list = field(default_factory=list)
    size: int = 0
    differing: int = 0
    unexplained: int = 0
    max_abs: float = 0.0
    max_ulp: float = 0.0
    orig_err_max: float | None = None
    cand_err_max: float | None = None
    reference: bool = False
    bound_n: int = 0
    mismatch_sets: list = field(default_factory=list)  # labels of the input sets judged mismatch
    runtime_artefact: str = ""  # why a mismatch is onnxruntime's doing (runtime_artefacts.py)
    stats_from_extreme: bool = False  # the figures above come from extreme-magnitude sets only
    excused: dict = field(default_factory=dict)  # rule name -> differing elements it explained

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def describe(self) -> str:
        where = f"{self.op} node {self.node or '<unnamed>'}"
        if self.candidate_op and self.candidate_op != self.op:
            where += f"; candidate: {self.candidate_op}"
        text = f"{self.name} ({where}) {self.verdict}: {self.unexplained}/{self.size} element(s) unexplained"
        if self.mismatch_sets:
            text += f" (input sets {', '.join(self.mismatch_sets)})"
        if self.runtime_artefact:
            text += f"; {self.runtime_artefact}"
        if self.reference and self.cand_err_max is not None:
            text += f", cand err vs f64 {self.cand_err_max:.3g} vs orig err {self.orig_err_max or 0.0:.3g}"
        else:
            text += f", max_abs {self.max_abs:.3g}"
        return text


def batches_of(pairs: list[Pair], max_bytes: int) -> list[list[Pair]]:
    """Consecutive (topological) groups whose estimated bytes stay under max_bytes (at least one each)."""
    batches, current, size = [], [], 0
    for pair in pairs:
        if current and size + pair.est_bytes > max_bytes:
            batches.append(current)
            current, size = [], 0
        current.append(pair)
        size += pair.est_bytes
    if current:
        batches.append(current)
    return batches


def runner_with_outputs(model: onnx.ModelProto, names, role: str) -> ModelRunner:
    """An onnxruntime session over `model` with `names` exposed as extra graph outputs.

    The proto gets the outputs for the time it takes to serialize it and gets them back off after,
    so a caller's model is left as it was and no copy of its weights is made.
    """
    graph = model.graph
    count = len(graph.output)
    present = {out.name for out in graph.output}
    try:
        for name in names:
            if name not in present:
                graph.output.add().name = name
                present.add(name)
        return ModelRunner(model, role)
    finally:
        del graph.output[count:]


def _fetch(runner: ModelRunner, names, feeds) -> dict:
    """The named values of one onnxruntime run (only those: the session may expose more)."""
    names = list(dict.fromkeys(names))
    try:
        values = runner.run_outputs(names, feeds)  # in this process or a watched child (resources.py)
    except ResourceLimitError:
        raise
    except Exception as exc:
        raise RunFailedError(f"onnxruntime failed to run the {runner.role}: {str(exc).splitlines()[0]}") from None
    return {name: np.asarray(value) if not isinstance(value, list) else value for name, value in zip(names, values)}


class Localizer:
    def __init__(self, original, candidate, pairs: list[Pair], *, perturb_count: int, seed: int,
                 max_batch_bytes: int = DEFAULT_BATCH_BYTES):
        self.original, self.candidate = original, candidate
        self.pairs = pairs
        self.batches = batches_of(pairs, max_batch_bytes)
        self.perturb_count, self.seed = perturb_count, seed
        self.shared = sum(pair.est_bytes for pair in pairs) <= SHARED_SESSION_FACTOR * max_batch_bytes
        self.results = {pair.name: ValueResult(pair.name, pair.candidate_name, pair.order, pair.node, pair.op,
                                               pair.candidate_op, bound_n=pair.bound.n if pair.bound else 0)
                        for pair in pairs}
        self.not_comparable: dict[str, str] = {}
        self.runs = 0
        self.sessions_built = 0
        self.reference_state = "not needed"
        self.reference_reason = ""
        self.failure: str | None = None
        self._cached: tuple | None = None
        self.sets_run = 0
        self.evaluate = None  # the reference evaluator (session.py); None: reference.evaluate_float64
        self._decisions: tuple | None = None  # (producers, feed names, exact names): _decision_feeds
        self._made = None  # evidence.MadeBy of the two models: _made_by
        self.artefacts = ArtefactCheck(original, candidate, lambda model, names, feeds: _fetch(
            runner_with_outputs(model, names, "model"), names, feeds))

    def run_set(self, set_index: int, feeds, *, extreme: bool, nonfinite: bool, label: str = "") -> None:
        observe, finish = self.set_observer(set_index, feeds, extreme=extreme, nonfinite=nonfinite, label=label)
        evaluate = self.evaluate
        if evaluate is None:
            from onnxrefine.verify.reference import evaluate_float64 as evaluate

        try:
            evaluate(self.original, feeds, outputs=[], observe=observe)
        except Exception as exc:  # noqa: BLE001 - see finish
            finish(exc)
        else:
            finish(None)

    def set_observer(self, set_index: int, feeds, *, extreme: bool, nonfinite: bool, label: str = ""):
        """(observe, finish) for one input set: `observe` goes to a float64 evaluation of the
        original (evaluate_float64(observe=...)), which may be one made for another purpose (the
        output check's: verify_models shares it); `finish(exc)` after it, with the exception it
        raised or None."""
        if self.failure is not None:
            return (lambda name, value: None), (lambda exc: None)
        last_of = {batch[-1].name: index for index, batch in enumerate(self.batches)}
        wanted = {pair.name for pair in self.pairs}
        reference: dict = {}
        fed: dict = {}  # the float64 feeds of values a decision makes, kept for the set (_attach_decision)
        decision_inputs = self._decision_feeds()[1]
        done: set[int] = set()
        context = (set_index, feeds, extreme, nonfinite, label or f"set{set_index}", fed)
        self.sets_run += 1

        def observe(name, value):
            if name in wanted:
                reference[name] = value
            if name in decision_inputs:
                fed[name] = value
            index = last_of.get(name)
            if index is not None and self.failure is None:
                done.add(index)
                try:
                    self._judge_batch(index, context, reference)
                except Exception as exc:  # noqa: BLE001 - not the reference's fault; stop localising
                    self.failure = f"{type(exc).__name__}: {exc}"

        def finish(exc) -> None:
            if exc is None:
                if self.reference_state == "not needed":
                    self.reference_state = "float64"
            else:  # unsupported op or an evaluator bug: the values it reached are judged against
                # float64, the rest by the fallback rules
                self.reference_state = "partial"
                self.reference_reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            for index in range(len(self.batches)):
                if index not in done and self.failure is None:
                    self._judge_batch(index, context, reference)
            reference.clear()
            fed.clear()

        return observe, finish

    def _sessions(self, index: int):
        """(original, candidate) sessions exposing the batch's values, or all values when their
        total is small enough that onnxruntime holding them all during a run costs less than
        rebuilding sessions per batch and input set (runs fetch only the batch either way)."""
        key = "all" if self.shared else index
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1], self._cached[2]
        self._cached = None  # free the previous batch's sessions before building new ones
        pairs = self.pairs if self.shared else self.batches[index]
        original = runner_with_outputs(self.original, [p.name for p in pairs], "original model")
        candidate = runner_with_outputs(self.candidate, [p.candidate_name for p in pairs], "candidate model")
        self.sessions_built += 2
        self._cached = (key, original, candidate)
        return original, candidate

    def _judge_batch(self, index, context, reference) -> None:
        set_index, feeds, extreme, nonfinite, label, fed = context
        batch = [pair for pair in self.batches[index] if pair.name not in self.not_comparable]
        if not batch:
            for pair in self.batches[index]:
                reference.pop(pair.name, None)
            return
        try:
            original, candidate = self._sessions(index)
            names = [pair.name for pair in batch]
            first, second = _fetch(original, names, feeds), _fetch(original, names, feeds)
            produced = _fetch(candidate, [pair.candidate_name for pair in batch], feeds)
        except Exception as exc:  # noqa: BLE001 - the end-to-end verdict stands without localisation
            self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return
        self.runs += 3
        differing = []
        for pair in batch:
            a, c = first.pop(pair.name, None), produced.pop(pair.candidate_name, None)
            if not isinstance(a, np.ndarray) or not isinstance(c, np.ndarray) or a.dtype == object:
                self.not_comparable[pair.name] = "not a numeric tensor"
                continue
            if a.shape != c.shape or a.dtype != c.dtype:
                self.not_comparable[pair.name] = (f"candidate holds {c.dtype}{list(c.shape)}, the original "
                                                  f"{a.dtype}{list(a.shape)}: a different value")
                continue
            result = self.results[pair.name]
            result.dtype, result.shape = str(a.dtype), list(a.shape)
            result.size += int(a.size)
            if np.all(judge.bit_identical(c, a)):
                continue
            differing.append((pair, a, second.pop(pair.name), c))
        del first, second, produced
        # Judge first without the perturbation runs of the original: they only add allowance
        # (sensitivity) or turn unexplained elements into unstable ones, so a value that is
        # rounding without them is rounding with them. Only values that fail get them.
        failing = []
        for pair, a, rerun, c in differing:
            ref = reference.pop(pair.name, None)
            item = judge.SetEvidence(a, rerun, c, extreme=extreme, nonfinite_inputs=nonfinite)
            if ref is not None and graphinfo.is_float_dtype(a.dtype) and np.shape(ref) == a.shape:
                item.attach_reference(ref)
            judgement = judge.judge_output([item], pair.bound)
            if judgement.verdict in (judge.EXACT, judge.ROUNDING):
                self._record(pair, item, label, judgement)
            else:
                failing.append((pair, item))
        del differing
        perturbed = self._perturbation_runs(index, feeds, set_index, [p.name for p, _ in failing]) \
            if failing else []
        if failing:  # as the outputs': onnxruntime's MaxPool lowest (rule maxpool-lowest-run)
            from onnxrefine.verify.run_reference import attach_run_reference
            from onnxrefine.verify.reference import evaluate_float64

            attach_run_reference(self.evaluate or evaluate_float64, self.original, feeds, [(p.name, i) for p, i in failing])
        for pair, item in failing:
            self._attach_decision(pair, item, fed)
            item.maxpool_made = self._made_by().maxpool_made(item, pair.name, pair.candidate_name)
            item.perturbed = [runs[pair.name] for runs in perturbed]
            item.perturbation_u = judge.moved_u(feeds)
            judgement = judge.judge_output([item], pair.bound)
            self.artefacts.review(set_index, pair, item, judgement, feeds, self.results[pair.name])
            self._record(pair, item, label, judgement)
        for pair in self.batches[index]:
            reference.pop(pair.name, None)

    def _decision_feeds(self) -> tuple:
        """(producers, the names of every float value a decision reads that makes a judged value, the
        names computed exactly), found once: a value a decision makes (a Cast to int, an ArgMax) is
        judged by the float64 margin of its feed as the output check judges such an output."""
        if self._decisions is None:
            from onnxrefine.verify.evidence import Typed, decision_feed, producers_of

            producers, names = producers_of(self.original), set()
            for pair in self.pairs:
                for dtype in (np.float32, np.int64):  # which feed decides depends on the value's type
                    found = decision_feed(producers, pair.name, Typed(np.empty(0, dtype)))
                    names.update(found[1] if found is not None else ())
            self._decisions = (producers, names, judge.exact_values(self.original) if names else set())
        return self._decisions

    def _made_by(self):
        if self._made is None:  # what makes each value, as for the outputs (maxpool-lowest)
            from onnxrefine.verify.evidence import MadeBy

            self._made = MadeBy(self.original, self.candidate)
        return self._made

    def _attach_decision(self, pair, item, fed) -> None:
        producers, _, exact = self._decision_feeds()
        from onnxrefine.verify.evidence import decision_evidence, decision_feed

        found = decision_feed(producers, pair.name, item)
        if found is not None and all(name in fed for name in found[1]):
            item.decision = decision_evidence(found, pair.name, fed, exact)

    def _perturbation_runs(self, index, feeds, set_index, names) -> list:
        if not any(graphinfo.is_float_dtype(np.asarray(v).dtype) for v in feeds.values()):
            return []
        original, _ = self._sessions(index)
        # The same perturbed inputs as the output checks (verify_models seeds them alike).
        rng = np.random.default_rng([self.seed, 7919, set_index])
        runs = []
        for run_index in range(self.perturb_count):
            pattern = run_index if run_index < 2 else None
            moved = {name: judge.perturb(np.asarray(value), rng, checkerboard=pattern)
                     for name, value in feeds.items()}
            try:
                runs.append(_fetch(original, names, moved))
            except RunFailedError:
                continue
            self.runs += 1
        return runs

    def _record(self, pair: Pair, item, label: str, judgement) -> None:
        result = self.results[pair.name]
        result.verdict = judge.worst([result.verdict, judgement.verdict])
        result.differing += judgement.differing
        result.unexplained += judgement.unexplained
        for rule, count in judgement.excused.items():
            result.excused[rule] = result.excused.get(rule, 0) + count
        if judgement.verdict == judge.MISMATCH:
            result.mismatch_sets.append(label)
        # The figures summarize one ordinary input set (the first where the value differs) plus
        # every set it fails on: computing them on every set costs more than judging it, and
        # extreme-magnitude sets, where intermediates overflow, would drown them.
        failing = judgement.verdict in (judge.UNSTABLE, judge.MISMATCH)
        if result.stats_from_extreme and not item.extreme:
            result.max_abs, result.max_ulp, result.orig_err_max, result.cand_err_max = 0.0, 0.0, None, None
        elif result.max_abs or result.reference or result.max_ulp:
            if not failing:
                return
            if item.extreme and not result.stats_from_extreme:
                return
        result.stats_from_extreme = item.extreme
        max_abs, max_ulp = _max_differences(item.candidate, item.original)
        result.max_abs = max(result.max_abs, max_abs)
        result.max_ulp = max(result.max_ulp, max_ulp)
        if judgement.used_reference:
            result.reference = True
            result.orig_err_max = max(result.orig_err_max or 0.0, judgement.orig_err_max or 0.0)
            result.cand_err_max = max(result.cand_err_max or 0.0, judgement.cand_err_max or 0.0)


def _max_differences(candidate: np.ndarray, original: np.ndarray) -> tuple[float, float]:
    """max |c - o| and the max ulp distance over elements finite on both sides (compare.py's
    definitions, without its histogram and percentiles, which cost more than the judgement here)."""
    if not graphinfo.is_float_dtype(original.dtype):
        diff = np.abs(candidate.astype(np.float64) - original.astype(np.float64))
        return float(diff.max(initial=0.0)), 0.0
    a, c = original.astype(np.float64), candidate.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(c)
    if not finite.any():
        return 0.0, 0.0
    max_abs = float(np.abs(c[finite] - a[finite]).max())
    max_ulp = float(judge.ulp_distance(candidate[finite], original[finite]).max())
    return max_abs, max_ulp


def localize(original, candidate, labelled_sets, *, u: float, perturb_count: int, seed: int,
             max_batch_bytes: int = DEFAULT_BATCH_BYTES,
             time_budget_s: float | None = None, early=None, reference=None) -> dict:
    """Judge the shared intermediate values on `labelled_sets` [(label, feeds)]; the report section.
    `early`: the localisation verify_models began during its output check (localize/shared.py; the
    sets it localised then are not run again). `reference`: the float64 evaluator to use (a
    VerificationSession's); None: reference.evaluate_float64."""
    started = time.perf_counter()
    if early is not None and early.section is not None:
        section, localizer = early.section, early.localizer
        started -= early.seconds
        done = early.labels
    else:
        section, localizer = prepare(original, candidate, labelled_sets, u, perturb_count, seed, max_batch_bytes)
        done = set()
    if localizer is None:
        return section
    if reference is not None:
        localizer.evaluate = localizer.artefacts.spec.evaluate = reference
    from onnxrefine.verify.evidence import has_nonfinite as _has_nonfinite, is_extreme as _is_extreme

    for set_index, (label, feeds) in enumerate(labelled_sets):
        if not localizer.pairs:
            break
        if label in done:
            continue
        if time_budget_s is not None and set_index > 0 and time.perf_counter() - started > time_budget_s:
            section["notes"].append(f"time budget spent: {len(labelled_sets) - set_index} input set(s) "
                                    "not localised")
            break
        localizer.run_set(set_index, feeds, extreme=_is_extreme(feeds), nonfinite=_has_nonfinite(feeds),
                          label=label)
    localizer._cached = None
    if localizer.failure is not None:
        section["status"] = f"failed: {localizer.failure}"
    section["not_comparable"].update(localizer.not_comparable)
    results = [r for r in localizer.results.values() if r.name not in localizer.not_comparable]
    results.sort(key=lambda r: r.order)
    section["values"] = [r.to_dict() for r in results]
    differing = [r for r in results if r.differing]
    bad = [r for r in results if r.verdict == judge.MISMATCH]
    section["verdict"] = judge.worst(r.verdict for r in results)
    section["first_differing"] = differing[0].name if differing else None
    if bad:
        section["first_bad"] = {**bad[0].to_dict(), "description": bad[0].describe()}
    if localizer.reference_state == "partial":
        section["notes"].append(f"the float64 reference stopped ({localizer.reference_reason}): values "
                                "after that point judged by the fallback rules (no float64)")
    section.update(reference=localizer.reference_state, batches=len(localizer.batches), runs=localizer.runs,
                   artefact_runs=localizer.artefacts.runs, shared_reference=len(done),
                   sessions=localizer.sessions_built, input_sets=localizer.sets_run, max_batch_bytes=max_batch_bytes,
                   seconds=round(time.perf_counter() - started, 4))
    return section


def prepare(original, candidate, labelled_sets, u, perturb_count, seed, max_batch_bytes):
    """The section's start and the Localizer (None when there is nothing to run)."""
    section = {"status": "done", "verdict": judge.EXACT, "first_bad": None, "first_differing": None,
               "values": [], "not_comparable": {}, "notes": []}
    if not labelled_sets:
        section["status"] = "not run: no input sets"
        return section, None
    pairs, stats = find_pairs(original, candidate, labelled_sets[0][1], u)
    section.update(paired=stats["paired"], paired_by_name=stats["by_name"], paired_by_role=stats["by_role"],
                   names_reused=stats["name_reused"], ambiguous=stats["ambiguous"],
                   identical_computation=stats["identical_computation"], dead=stats["dead"],
                   checked=len(pairs))
    section["not_comparable"].update({name: "declared type or shape differs" for name in stats["type_differs"]})
    return section, Localizer(original, candidate, pairs, perturb_count=perturb_count, seed=seed,
                              max_batch_bytes=max_batch_bytes)


def include_outputs(section: dict, original: onnx.ModelProto, outputs) -> None:
    """Let a graph output judged mismatch be the first bad value when no intermediate before it is
    (an output the original computes early, or a change that shows only at the outputs)."""
    order = {out: index for index, node in enumerate(original.graph.node) for out in node.output if out}
    producer = {out: node for node in original.graph.node for out in node.output if out}
    first = section.get("first_bad")
    for out in sorted((o for o in outputs if o.verdict == judge.MISMATCH),
                      key=lambda o: order.get(o.name, len(order))):
        position = order.get(out.name, len(order))
        if first is not None and first["order"] <= position:
            return
        node = producer.get(out.name)
        op, name = (node.op_type, node.name) if node is not None else ("graph input", "")
        section["first_bad"] = {
            "name": out.name, "candidate_name": out.name, "order": position, "node": name, "op": op,
            "verdict": out.verdict, "output": True,
            "description": f"{out.name} (graph output; {op} node {name or '<unnamed>'}) mismatch: "
                           f"{out.unexplained}/{out.comparison.get('size', out.differing)} element(s) "
                           "unexplained (see the output table)"}
        return
