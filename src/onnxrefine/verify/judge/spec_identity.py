"""Float16 graphs: is a difference onnxruntime's precision rather than the rewrite's?

onnxruntime's CPU provider has no float16 kernel for many ops (Exp, Log, ...): it computes them in
float32 and inserts Casts, then removes Cast pairs it finds redundant. Whether a float16 rounding
between two such ops survives depends on what sits between them, so an exact rewrite (two
Unsqueezes fused into one: fuzz case 3969 of seed 20000) can make onnxruntime skip a rounding the
spec requires, and the candidate's run departs from the spec where the original's does not.

The evidence that the rewrite changed nothing is the spec itself: the float64 reference evaluates
both models, rounding every float16/bfloat16 value where it is produced (kernels/dtype.py),
and on the input set judged the two give bit-identical values. That evidence holds only where the
reference models every rounding of the graph; it models float32 as real arithmetic, so a model
that computes any float32 value other than by moving data (where a reassociation could overflow
or round differently in float32 and the reference would not see it) is never explained here.
Subgraphs and functions are not typed by the check, so models holding them are not either.
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.verify.judge import compare
from onnxrefine.verify.reference import inferred_types
from onnxrefine.verify.judge.verdict import MISMATCH, UNSTABLE

# Ops whose float32 outputs are copies of float32 input elements (or constants): exact in the
# reference as in float32.
MOVING_OPS = frozenset({
    "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
    "Constant", "ConstantOfShape", "Shape", "Size", "Where", "ReverseSequence", "Compress",
})
_FLOAT32 = onnx.TensorProto.FLOAT
_ROUNDED = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})
MAX_EVALUATIONS = 8  # reference evaluations of each model per verification (a localisation can ask many)


def rounding_fully_modelled(model: onnx.ModelProto) -> bool:
    """Does the reference model every rounding this model's float arithmetic makes? True for graphs
    whose float arithmetic is all float16/bfloat16 (or float64), float32 values only moved."""
    if model.functions:
        return False
    graph = model.graph
    if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for node in graph.node for attr in node.attribute):
        return False
    if any(node.domain not in STANDARD_DOMAINS for node in graph.node):
        return False
    types = inferred_types(model)
    if types is None:
        return False
    narrow = False
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            elem = types.get(name)
            if elem is None:
                return False
            if elem == _FLOAT32 and node.op_type not in MOVING_OPS:
                return False
            narrow |= elem in _ROUNDED
    return narrow


class SpecIdentity:
    """Per verification: `same(original_name, candidate_name, feeds)` when the float64 reference
    (the spec) gives the two models' values bit for bit alike on `feeds`."""

    def __init__(self, original: onnx.ModelProto, candidate: onnx.ModelProto, evaluate=None):
        # evaluate: the session's reference evaluator (evaluate_float64's signature); None: that one.
        # A reference that declines (the no-reference fallback) explains nothing.
        self.original, self.candidate, self.evaluate = original, candidate, evaluate
        self._applies: bool | None = None
        self.evaluations = 0

    @property
    def applies(self) -> bool:
        if self._applies is None:
            self._applies = rounding_fully_modelled(self.original) and rounding_fully_modelled(self.candidate)
        return self._applies

    def same(self, original_name: str, candidate_name: str, feeds) -> bool:
        if not self.applies or self.evaluations >= MAX_EVALUATIONS:
            return False
        self.evaluations += 1
        try:
            first = _value(self._evaluator(), self.original, original_name, feeds)
            second = _value(self._evaluator(), self.candidate, candidate_name, feeds)
        except Exception:  # noqa: BLE001 - a value the reference cannot compute explains nothing
            return False
        if first is None or second is None or first.shape != second.shape:
            return False
        return bool(np.all(compare.bit_identical(first, second)))

    def outputs_same(self, pairs: list[tuple[str, str]], feed_sets) -> bool:
        """Every (original, candidate) output pair bit-identical by the reference on every set."""
        if not self.applies or not pairs:
            return False
        evaluate_float64 = self._evaluator()
        try:
            for feeds in feed_sets:
                first = evaluate_float64(self.original, feeds, outputs=[o for o, _ in pairs])
                second = evaluate_float64(self.candidate, feeds, outputs=[c for _, c in pairs])
                for o_name, c_name in pairs:
                    a, b = np.asarray(first[o_name]), np.asarray(second[c_name])
                    if a.shape != b.shape or not np.all(compare.bit_identical(a, b)):
                        return False
        except Exception:  # noqa: BLE001 - what the reference cannot compute explains nothing
            return False
        return True

    def _evaluator(self):
        if self.evaluate is not None:
            return self.evaluate
        import functools

        from onnxrefine.verify.reference import evaluate_float64

        return functools.partial(evaluate_float64, error_bounds=False)  # values compared, no bounds read

    NOTE = ("float16 precision of onnxruntime: by the spec (float64 reference rounding every "
            "float16 value) both models compute this value bit for bit alike on the input sets "
            "where it differs; onnxruntime skipped or added a rounding in one of them")


def _value(evaluate_float64, model: onnx.ModelProto, name: str, feeds) -> np.ndarray | None:
    outputs = {out.name for out in model.graph.output}
    if name in outputs:
        return np.asarray(evaluate_float64(model, feeds, outputs=[name])[name])
    seen: dict[str, np.ndarray] = {}

    def observe(value_name, value):
        if value_name == name:
            seen[name] = np.array(value, copy=True)

    evaluate_float64(model, feeds, outputs=[model.graph.output[0].name], observe=observe)
    return seen.get(name)


def excuse_float16_runtime(sections, tracks, original_model, candidate_model, output_map, labelled,
                           evaluate=None) -> None:
    """A float16 output judged mismatch that the spec says both models compute alike on every set
    where it differs is onnxruntime's precision, not the rewrite's: unstable, with the note."""
    spec = None
    for section, track in zip(sections, tracks):
        if track.candidate_failure is not None:
            continue
        for report in section:
            if report.verdict != MISMATCH or report.name not in output_map:
                continue
            spec = spec or SpecIdentity(original_model, candidate_model, evaluate)
            sets = [labelled[index][1] for index in track.differing_sets]
            if spec.outputs_same([(report.name, output_map[report.name])], sets):
                report.verdict = UNSTABLE
                report.notes.append(spec.NOTE)
