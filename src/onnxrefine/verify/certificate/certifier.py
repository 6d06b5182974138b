"""Per-rewrite certificates: each rewrite checked on its own matched subgraph before it is applied.

The rule driver hands every rewrite it is about to apply to a `Certifier` (rewrite/driver.py).
The certifier builds one small ONNX model holding both sides: the matched nodes ("original") and
the replacement nodes ("candidate"), reading the same boundary values, each exposed output and its
replacement made graph outputs through Identity (which copies bits). Constants are the model's own
values, fed at run time; integer boundary values nothing vouches for are computed by pulling in
their producers (shape arithmetic), so a dim agrees with the data it describes; activations get
adversarial input sets (`certificate/inputs.py`). Both sides run in one onnxruntime session (CPU,
graph optimizations off, one thread: the settings of `runner.py`).

exact rewrites
    every output bit-identical to the original's on every set (two NaNs are equal whatever their
    payloads; +0 and -0 differ: that is the sign-of-zero class end-to-end inputs rarely reach).
reassociating rewrites (see `certificate/bound.py` for the bound and its derivation)
    judged against the float64 reference of the matched subgraph, and the float64 value of the
    replacement is compared with it on the finite set (the meaning of the folded constants,
    without float32 arithmetic noise). An exact zero may not change sign there either.
A rule that proved no reader can observe the sign of a zero in an output says so
(`Replacement.sign_insensitive`); there +0 and -0 count as equal.

A set on which the ORIGINAL fails to run is dropped; a set on which only the candidate fails
refuses the rewrite. No certificate can be made (outcome "skipped", with the reason) when the
window cannot be made concrete: an input whose shape or element type neither a fact, a run of
the model nor its control-flow body's first iteration or a function's call sites (`scopes.py`)
gives, a node of a custom domain other than onnxruntime's own (com.microsoft, run where
onnxruntime has its kernel) or with a subgraph, a dtype the sets do not cover (bfloat16, float8, strings), no set on which the original runs, or no
float64 reference for an operator. The driver then refuses the rewrite (certificate.uncertifiable), unless
the run verifies end to end (`defer_uncertified`): the outcome is then "deferred", the rewrite
applied and left to that verdict (bisected and rolled back when it fails).

Cost: position-wise subgraphs (elementwise ops, convolutions and pools over per-channel
constants, products by a constant matrix) run on reduced sizes: batch 1, and along a window's axis
the smallest size that shows every window pattern of the full size (`inputs.
reduced_shapes`); all sets stacked in one run, along the batch axis, or side by side along the
last axis where every column is computed alone (`width_stackable`: 1x1 convolutions, whose
weights onnxruntime then reads once instead of once per set). Values get canonical names and
symbolic dims, so certificates of the same structure share one session whatever their sizes;
outcomes (skips too) are cached by structure, constant bytes and which outputs are declared
sign-insensitive when the constants are small. A window is checked against the memory budget
(`window_budget.py`) by shape inference only where its size is not bounded from its inputs. Large
accumulations (over HEAVY_BYTES of constants) get only a few subnormals (each costs ~100x per
multiply-add) and the float64 reference on the finite set only, both sides in one evaluation.
A rewrite that only removes Identity nodes is certified by Identity's definition
(`model.forwards_through_identity`), one that removes x + 0 or x - 0 by IEEE 754's
(`proofs/definitions.py`). Some families are certified by proof (the records of `proofs.PROOFS`,
each proof with its reading check beside it in its family's module), once the proof's
reading of the ops has been checked against onnxruntime in the optimization: by asking
onnxruntime for an affine fold's tail map, a Split's order or a Gemm's reading, or else by
running the rule's first rewrite whole. Building the
model (boundary, canonical names, cache key) is `certificate/model.py`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.rewrite.rule import EXACT, CertificateOutcome, CertificateRequest
from onnxrefine.verify.certificate import proofs
from onnxrefine.verify.certificate.bound import CertificateFailure as _Refuse
from onnxrefine.verify.certificate.bound import CertificateSkip as _Skip
from onnxrefine.verify.certificate.bound import judge_exact, judge_reassociating, side_model
from onnxrefine.verify.certificate.model import (
    RUNTIME_DOMAINS,
    Side,
    boundary,
    build,
    cache_key,
    forwards_through_identity,
)
from onnxrefine.verify.certificate.concrete import RunShapes
from onnxrefine.verify.ort import RunnableDims
from onnxrefine.verify.certificate.scopes import body_facts, call_sides
from onnxrefine.verify.certificate.window_budget import check_budget
from onnxrefine.verify.certificate.concrete import unresolved as unresolved_sides
from onnxrefine.verify.certificate.inputs import (
    NARROW_FLOATS,
    adversarial_sets,
    distinct_set,
    moves_data_only,
    reduced_shapes,
    width_stackable,
)

HEAVY_BYTES = 1 << 16
MAX_SESSIONS = 256
OBSERVED_NOTE = " (at the shapes of a run of the model)"
BODY_NOTE = " (in a control-flow body, at its first iteration's shapes)"
NO_RUN = "the matched subgraph does not run on any generated input set"


@dataclass
class CertificateStats:
    certified: int = 0
    skipped: int = 0
    refused: int = 0
    cache_hits: int = 0
    proved: int = 0  # certified by `proofs`'s proof alone, without a run
    seconds: float = 0.0
    refusals: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"certified": self.certified, "skipped": self.skipped, "refused": self.refused,
                "cache_hits": self.cache_hits, "proved": self.proved, "seconds": round(self.seconds, 4)}


class Certifier:
    """Callable given to the rule driver; keeps caches and counts for one optimization run."""

    def __init__(self, seed: int = 0, defer_uncertified: bool = False):
        self.seed = seed
        # A rewrite no certificate can be made for: "deferred" to the end-to-end verdict of a run
        # that verifies (True), else "skipped", which the driver refuses (certificate.uncertifiable).
        self.defer_uncertified = defer_uncertified
        self.stats = CertificateStats()
        self._sessions: dict[bytes, object] = {}
        self._estimates: dict[tuple, object] = {}  # check_budget's peak estimates
        self._results: dict[bytes, CertificateOutcome] = {}
        self._set_cache: dict[tuple, list] = {}
        self._cross_checked: set[tuple] = set()  # (rule, proof family) whose reading onnxruntime confirmed
        # The sizes of the symbolic dims the model runs at, found once for its certificates and for
        # fold_shapes' checks.
        self.runnable_dims = RunnableDims(seed)
        # The shapes and types of a run of the model, where no fact gives them.
        self._runs = RunShapes(self.runnable_dims)

    def __call__(self, request: CertificateRequest) -> CertificateOutcome:
        started = time.perf_counter()
        try:
            outcome = self._certify(request)
        except _Skip as skip:
            outcome = CertificateOutcome("skipped", str(skip))
        except RewriteRefused as unknown:  # an attribute reference read by a proof (ir/attrs.py)
            outcome = CertificateOutcome("skipped", str(unknown))
        except _Refuse as refusal:
            outcome = CertificateOutcome("refused", str(refusal))
        finally:
            self.stats.seconds += time.perf_counter() - started
        if outcome.status != "refused":
            self._runs.inherit(request.outputs)  # the rewrite is applied: its new values are the old ones'
        if outcome.status == "certified":
            self.stats.certified += 1
        elif outcome.status == "skipped":
            self.stats.skipped += 1
            if self.defer_uncertified:
                outcome = CertificateOutcome("deferred", outcome.detail)
        else:
            self.stats.refused += 1
            self.stats.refusals.append((request.rule, outcome.detail))
        return outcome

    # -- building -----------------------------------------------------------------------------

    def _certify(self, request: CertificateRequest) -> CertificateOutcome:
        """The first proof family (proofs.PROOFS) that proves the rewrite, once its reading of
        the ops has been checked against onnxruntime in this optimization; else a run."""
        for proof in proofs.PROOFS:
            if request.kind == EXACT and not proof.exact:
                continue
            note = proof.prove(request)
            if note is None:
                continue
            family = (request.rule, proof.family)  # a proof's reading is cross-checked per rule and family
            if proof.reading is None or family in self._cross_checked:
                self.stats.proved += 1
                return CertificateOutcome("certified", note, proved=True)
            # What the proof reads of the ops (an affine tail's map, a Split's order) is asked of
            # onnxruntime on this model's constants instead of running the whole first rewrite;
            # where it disagrees or cannot say, the run decides.
            reading = proof.reading(request, RUNTIME)
            if reading is not None:
                self._cross_checked.add(family)
                self.stats.proved += 1
                return CertificateOutcome("certified", f"{note}; {reading}", proved=True)
            outcome = self._certify_by_running(request)
            if outcome.status == "certified":
                # Until a rule's proof has agreed with a run in this optimization, it is also run:
                # the proof's reading of the ops is checked against onnxruntime on real constants.
                self._cross_checked.add(family)
                outcome = CertificateOutcome("certified", f"{outcome.detail}; the proof agrees")
            return outcome
        return self._certify_by_running(request)

    def _certify_by_running(self, request: CertificateRequest) -> CertificateOutcome:
        if forwards_through_identity(request):
            return CertificateOutcome("certified", "bit-identical: forwards a value through Identity", proved=True)
        nodes = list(request.matched) + list(request.replacement)
        for node in nodes:
            if node.domain not in RUNTIME_DOMAINS:
                raise _Skip(f"{node.op_type} is in custom domain '{node.domain}'")
            if any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()):
                raise _Skip(f"{node.op_type} carries a subgraph")
            if any(attr.is_ref() for attr in node.attributes.values()):
                raise _Skip(f"{node.op_type} has an attribute reference (function body)")
        sides, context = boundary(request)
        unresolved = unresolved_sides(sides)
        scoped = body_facts(request, self._runs) if unresolved else None
        if scoped is not None:  # a control-flow body: its inputs as its first iteration sees them
            sides, context = boundary(request, scoped)
            unresolved = unresolved_sides(sides)
            if not unresolved:
                return self._certify_sides(request, sides, context, BODY_NOTE)
        if unresolved and isinstance(request.owner, ir.Function):
            outcomes = [self._certify_sides(request, given, at_call, "")
                        for given, at_call in call_sides(request, self._runs)]
            where = "" if request.calls is not None else f" at each of its {len(outcomes)} call sites"
            return CertificateOutcome("certified", f"{outcomes[0].detail}{where}")
        if unresolved:
            if not self._runs.fill(request, sides):
                what = "element type" if unresolved[0].dtype is None else "shape"
                raise _Skip(f"the {what} of '{unresolved[0].name}' is not known")
            return self._certify_sides(request, sides, context, OBSERVED_NOTE)
        try:
            return self._certify_sides(request, sides, context, "")
        except _Skip as skip:
            # Shapes made up for symbolic dims (SYM_DIM) may not fit together where the matched
            # subgraph reads a shape computed elsewhere: the shapes of a real run do.
            if not str(skip).startswith(NO_RUN) or not self._runs.fill(request, sides):
                raise
            return self._certify_sides(request, sides, context, OBSERVED_NOTE)

    def _certify_sides(self, request: CertificateRequest, sides, context, note: str) -> CertificateOutcome:
        constants = [s for s in sides if s.array is not None] + [
            Side(v, v.name, array=v.const_value.numpy()) for v in request.new_constants]
        activations = [s for s in sides if s.array is None]
        if request.kind != EXACT and any(s.dtype in NARROW_FLOATS for s in activations):
            raise _Skip(f"'{next(s.name for s in activations if s.dtype in NARROW_FLOATS)}' is "
                        f"{next(s.dtype for s in activations if s.dtype in NARROW_FLOATS)}, and a "
                        "reassociating rewrite has no derived bound in that type")
        reduced = reduced_shapes([list(context) + list(request.matched), list(request.replacement)],
                                 {s.name: s.shape for s in activations}, constants)
        if reduced is not None:
            for side in activations:
                side.shape = reduced[side.name]
            note += " (reduced sizes)"
        # A declared dim of 2^40 (hostile or absurd) must not reach numpy: skip, do not allocate.
        from onnxrefine.verify.inputs import generation_limit_bytes

        wanted = sum(int(np.prod(s.shape, dtype=object)) * np.dtype(s.dtype).itemsize for s in activations)
        if wanted > generation_limit_bytes():
            raise _Skip(f"its inputs would take {wanted / 2**30:.3g} GiB")
        key = cache_key(request, activations, constants, context)
        if key is not None and key in self._results:
            self.stats.cache_hits += 1
            cached = self._results[key]
            if cached.status == "refused":
                raise _Refuse(cached.detail)
            if cached.status == "skipped":
                raise _Skip(cached.detail)
            return cached
        try:
            outcome = self._check(request, activations, constants, context, reduced, note)
        except (_Refuse, _Skip) as failure:
            # The same structure and constants fail the same way, and a model the original does
            # not run on (gpt2: 24 shape-arithmetic windows, ~6 ms each) is not built again.
            if key is not None:
                status = "refused" if isinstance(failure, _Refuse) else "skipped"
                self._results[key] = CertificateOutcome(status, str(failure))
            raise
        if key is not None:
            self._results[key] = outcome
        return outcome

    def _check(self, request, activations, constants, context, reduced, note) -> CertificateOutcome:
        proto, fed, outputs = build(request, activations, constants, context, reduced is not None)
        data = proto.SerializeToString()
        digest = hashlib.sha1(data).digest()
        check_budget(proto, activations, fed, self._estimates, digest)
        session = self._session(proto, data, digest)
        # Large constants: a large accumulation, where subnormals are slow and float64 dominates.
        heavy = sum(a.nbytes for a in fed.values()) > HEAVY_BYTES
        sets = None
        if request.kind == EXACT and moves_data_only(
                list(context) + list(request.matched) + list(request.replacement),
                bool(activations) and all(s.dtype.kind == "f" for s in activations),
                lambda v, oracle=request.context.facts: oracle.dtype(v) or v.dtype):
            sets = distinct_set({f"a{i}": (s.dtype, s.shape) for i, s in enumerate(activations)})
            if sets is not None:
                note += " (data movement only: distinct values fix every element's source)"
        if sets is None:
            sets = self._sets(activations, heavy)
        stacked = reduced is not None and len(sets) > 1
        runs = None
        if stacked and width_stackable([list(context) + list(request.matched), list(request.replacement)],
                                       {s.name: s.shape for s in activations}, constants):
            runs = self._run_stacked(session, sets, fed, axis=-1)
        if stacked and runs is None:
            runs = self._run_stacked(session, sets, fed)
        if runs is None:
            stacked = False
            runs, dropped = [], []
            for label, feeds in sets:
                feeds = {**feeds, **fed}
                result = _run(session, feeds)
                if isinstance(result, str):
                    if self._original_fails(proto, outputs, feeds):
                        dropped.append(label)
                        continue
                    raise _Refuse(f"the replacement fails on the '{label}' inputs where the original runs: {result}")
                runs.append((label, feeds, result))
            if not runs:
                raise _Skip(f"{NO_RUN} ({', '.join(dropped)})")
        names = [(o, c) for o, c in outputs]
        unsigned = {o for (o, _), (old, _) in zip(outputs, request.outputs)
                    if any(old is v for v in request.sign_insensitive)}
        if request.kind == EXACT:
            detail = judge_exact(runs, names, unsigned)
        else:
            detail = judge_reassociating(proto, runs, names, [f"a{i}" for i in range(len(activations))] if stacked else None,
                                         heavy, unsigned)
        return CertificateOutcome("certified", f"{detail} on {len(runs)} input sets{note}")

    def _sets(self, activations, heavy: bool):
        """The adversarial sets, cached by the activations' dtypes and element counts (they are
        generated flat and depend on nothing else: (128, 3072) and (1, 128, 3072) share them),
        reshaped and renamed for this certificate."""
        sizes = [int(np.prod(s.shape, dtype=np.int64)) for s in activations]
        key = (tuple((s.dtype, n) for s, n in zip(activations, sizes)), heavy)
        flat = self._set_cache.get(key)
        if flat is None:
            specs = {f"a{i}": (s.dtype, (n,)) for i, (s, n) in enumerate(zip(activations, sizes))}
            flat = self._set_cache[key] = adversarial_sets(specs, self.seed, heavy)
            if len(self._set_cache) > MAX_SESSIONS:
                self._set_cache.pop(next(iter(self._set_cache)))
        shapes = {f"a{i}": s.shape for i, s in enumerate(activations)}
        # keyed a<i>, the certificate model's canonical names
        return [(label, {k: v.reshape(shapes[k]) for k, v in feeds.items()}) for label, feeds in flat]

    @staticmethod
    def _run_stacked(session, sets, fed, axis: int = 0):
        """All sets in one run, stacked along the batch axis (reduced shapes have batch 1 and
        every node is position-wise, so each set's rows are computed as if alone) or, where
        `width_stackable`, along the last axis (each set one column); None when that run fails
        or its outputs are not one row (column) per set (the sets are then run one by one to say
        which)."""
        names = list(sets[0][1])
        stacked = {name: np.concatenate([feeds[name] for _, feeds in sets], axis=axis) for name in names}
        result = _run(session, {**stacked, **fed})
        if isinstance(result, str) or any(v.ndim == 0 or v.shape[axis] != len(sets) for v in result.values()):
            return None
        if axis != 0 and any(v.shape[0] != 1 for v in result.values()):
            return None
        return [(label, {**feeds, **fed},
                 {k: np.ascontiguousarray(np.take(v, [i], axis=axis)) for k, v in result.items()})
                for i, (label, feeds) in enumerate(sets)]

    def _session(self, proto: onnx.ModelProto, data: bytes, key: bytes):
        """The session of the model `proto` (serialized: `data`, digested: `key`), made once."""
        session = self._sessions.get(key)
        if session is None:
            try:
                session = _make_session(data)
            except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
                original = side_model(proto, "original")
                try:
                    _make_session(original.SerializeToString())
                except Exception:  # noqa: BLE001
                    raise _Skip(f"onnxruntime cannot load the matched subgraph: {_first_line(exc)}") from None
                raise _Refuse(f"onnxruntime cannot load the replacement: {_first_line(exc)}") from None
            if len(self._sessions) >= MAX_SESSIONS:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[key] = session
        return session

    def _original_fails(self, proto, outputs, feeds) -> bool:
        original = side_model(proto, "original")
        try:
            session = _make_session(original.SerializeToString())
        except Exception:  # noqa: BLE001
            return True
        return isinstance(_run(session, feeds), str)  # _run feeds the original's inputs only


def _make_session(data: bytes):
    from onnxrefine.runtime import strict_session

    return strict_session(data)


def _run(session, feeds) -> dict | str:
    wanted = {i.name for i in session.get_inputs()}
    # A narrow float input is fed as the float32 holding its values (model.build Casts it in).
    feeds = {(f"{k}_float32" if f"{k}_float32" in wanted else k): (v.astype(np.float32) if v.dtype in NARROW_FLOATS
                                                                  else v)
             for k, v in feeds.items()}
    try:
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:  # noqa: BLE001
        return _first_line(exc)
    return {name: np.asarray(value) for name, value in zip(names, values)}


RUNTIME = proofs.Runtime(_make_session, _run)  # how a proof's reading check reaches onnxruntime


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else type(exc).__name__
