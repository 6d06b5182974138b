"""Localisation: is a differing intermediate value onnxruntime's doing rather than the rewrite's?

A value V judged a mismatch is explained by the runtime when both models compute it with the same
node (op, domain, opset, attributes; V the same output of it) from inputs that are each either
bit-identical in the two models or themselves explained that way, up to values that are
bit-identical. The candidate then computes V by the same function of the same values as the
original: by the spec it holds what the original holds, and a difference can only come from
onnxruntime computing one node differently from identical inputs (its float16 Softmax gives NaN
or 0 for a row holding both infinities depending on its buffer: fuzz case 282 of seed 500000,
onnxoptimizer's eliminate_nop_concat, where `matmul_16` was named as the first bad value).

Nothing the rewrite changed can hide behind this: any value downstream of a changed node, a
changed constant or a differing graph-level input is not explained, and a real bug is still named
where the change is. The check is made on a fresh run of both models exposing V and every value
it walks through; V must come out bit for bit as it did in the run that was judged, so that the
explanation is about the values judged.
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxrefine.verify.judge import compare
from onnxrefine.verify.judge.spec_identity import GraphSide, SpecIdentity, node_signature

MAX_DEPTH = 8  # nodes walked up from V
MAX_VALUES = 64  # values fetched to check one V


class ArtefactCheck:
    """Per localisation: `explains(...)` for one judged value on one input set."""

    def __init__(self, original: onnx.ModelProto, candidate: onnx.ModelProto, fetch):
        # fetch(model, names, feeds) -> {name: array}: one onnxruntime run exposing `names`
        self.original, self.candidate = GraphSide(original), GraphSide(candidate)
        self.spec = SpecIdentity(original, candidate)
        self._fetch = fetch
        self.runs = 0
        self._blamed: dict = {}  # per input set: mismatches not explained (name -> candidate's name)

    def review(self, set_index: int, pair, item, judgement, feeds, result) -> None:
        """A mismatch the runtime explains becomes unstable (run-dependent at most), with the note
        in `result.runtime_artefact`; one it does not is remembered for the values after it."""
        from onnxrefine.verify.judge import spec_identity, verdict

        if judgement.verdict != verdict.MISMATCH:
            return
        blamed = self._blamed.setdefault(set_index, {})
        try:
            note = self.explains(pair.name, pair.candidate_name, item.original, item.candidate, feeds, blamed)
        except Exception:  # noqa: BLE001 - an explanation that cannot be made is none (a weight
            note = None  # stored outside the proto, ...): the mismatch stands
        if not note and spec_identity.same_layout(item.original, item.candidate) \
                and self.spec.same(pair.name, pair.candidate_name, feeds):
            note = self.spec.NOTE   # float16 graphs: the spec says both compute V alike
        if note:
            judgement.verdict = verdict.UNSTABLE
            result.runtime_artefact = note
        else:
            blamed[pair.name] = pair.candidate_name

    def fetch(self, role: str, names, feeds) -> dict:
        self.runs += 1
        return self._fetch((self.original if role == "original" else self.candidate).model, names, feeds)

    def _plan(self, o_name: str, c_name: str, blamed) -> list[tuple[str, str]] | None:
        """The value pairs (V first) to fetch, walking up through same nodes; None if V's own
        nodes differ, or the walk reaches a value already judged a mismatch the runtime does not
        explain (then nothing explains V: the common case downstream of a real bug, decided
        without a run)."""
        pairs, queue, seen = [], [(o_name, c_name, 0)], set()
        while queue:
            o, c, depth = queue.pop(0)
            if (o, c) in seen:
                continue
            seen.add((o, c))
            if blamed.get(o) == c:
                return None
            if o in self.original.initializers or c in self.candidate.initializers:
                continue  # compared as constants
            if o in self.original.inputs or c in self.candidate.inputs:
                continue  # a graph input: identical only under one name
            pairs.append((o, c))
            if len(pairs) > MAX_VALUES:
                return pairs[:MAX_VALUES]
            nodes = self._same_node(o, c)
            if nodes is None:
                if depth == 0:
                    return None
                continue
            if depth < MAX_DEPTH:
                queue.extend((oi, ci, depth + 1) for oi, ci in zip(nodes[0].input, nodes[1].input) if oi and ci)
        return pairs

    def _same_node(self, o: str, c: str):
        found_o, found_c = self.original.producers.get(o), self.candidate.producers.get(c)
        if found_o is None or found_c is None or found_o[1] != found_c[1]:
            return None
        node_o, node_c = found_o[0], found_c[0]
        sig = node_signature(self.original, node_o)
        if sig is None or sig != node_signature(self.candidate, node_c):
            return None
        if [bool(n) for n in node_o.input] != [bool(n) for n in node_c.input]:
            return None
        return node_o, node_c

    def explains(self, o_name: str, c_name: str, original_value, candidate_value, feeds,
                 blamed=None) -> str | None:
        """A note when onnxruntime, not the rewrite, made V differ on these feeds; else None.
        `blamed`: original name -> candidate name of the values already judged a mismatch on these
        feeds and not explained."""
        plan = self._plan(o_name, c_name, blamed or {})
        if not plan:
            return None
        try:
            got_o = self.fetch("original", [o for o, _ in plan], feeds)
            got_c = self.fetch("candidate", [c for _, c in plan], feeds)
        except Exception:  # noqa: BLE001 - an explanation that cannot be checked is none
            return None
        if not (_same_bits(got_o.get(o_name), original_value) and _same_bits(got_c.get(c_name), candidate_value)):
            return None  # not the values judged
        memo: dict = {}
        origins: list[str] = []

        def explained(o, c, depth) -> bool:
            key = (o, c)
            if key in memo:
                return memo[key]
            memo[key] = False  # (no cycles in a DAG; guards a malformed one)
            if o in self.original.initializers or c in self.candidate.initializers:
                ok = _same_bits(self.original.constant(o), self.candidate.constant(c))
            elif o in self.original.inputs or c in self.candidate.inputs:
                ok = o == c and o in self.original.inputs and c in self.candidate.inputs
            elif depth > 0 and o in got_o and c in got_c and _same_bits(got_o[o], got_c[c]):
                ok = True
            else:
                nodes = self._same_node(o, c) if depth < MAX_DEPTH and o in got_o and c in got_c else None
                ok = nodes is not None and all(
                    explained(oi, ci, depth + 1) for oi, ci in zip(nodes[0].input, nodes[1].input) if oi or ci)
                if ok and all(self._identical(oi, ci, got_o, got_c) for oi, ci in zip(nodes[0].input, nodes[1].input)
                              if oi or ci):
                    origins.append(o)
            memo[key] = ok
            return ok

        if not explained(o_name, c_name, 0):
            return None
        where = ", ".join(dict.fromkeys(origins)) or o_name
        return (f"runtime artefact: onnxruntime computed {where} differently in the two models from "
                "bit-identical inputs with the same node; every node from there to this value is the same "
                "in both models")

    def _identical(self, o, c, got_o, got_c) -> bool:
        if o in self.original.initializers or c in self.candidate.initializers:
            return _same_bits(self.original.constant(o), self.candidate.constant(c))
        if o in self.original.inputs or c in self.candidate.inputs:
            return o == c
        return o in got_o and c in got_c and _same_bits(got_o[o], got_c[c])


def _same_bits(a, b) -> bool:
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
        return False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    return bool(np.all(compare.bit_identical(a, b)))
