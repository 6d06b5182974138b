"""Float16 graphs: is a difference onnxruntime's precision rather than the rewrite's?

onnxruntime's CPU provider has no float16 kernel for many ops (Exp, Log, ...): it computes them in
float32 and inserts Casts, then removes Cast pairs it finds redundant. Whether a float16 rounding
between two such ops survives depends on what sits between them, so an exact rewrite (two
Unsqueezes fused into one: fuzz case 3969 of seed 20000) can make onnxruntime skip a rounding the
spec requires, and the candidate's run departs from the spec where the original's does not.

The evidence that the rewrite changed nothing is the spec itself: the float64 reference evaluates
both models, rounding every float16/bfloat16 value where it is produced (kernels/dtype.py),
and on the input set judged the two give bit-identical values. That evidence holds only where the
reference models every rounding behind the value judged (its cone, subgraphs on it included); it
models float32 as real arithmetic, so a cone that computes a float32 value other than by moving
data (where a reassociation could overflow or round differently in float32 and the reference would
not see it) is explained only where that value is the same node of the same inputs in both models
(a shared float32 prefix the rewrite did not touch: both models then read the same float32 values,
in onnxruntime as in the reference, and those reach float16 only through a rounding Cast or a
decision). A node holding a subgraph or calling a model-local function is never shared, and float32
arithmetic inside a subgraph on the cone, or a function call on it, leaves the value unexplained.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import numpy_helper

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


class GraphSide:
    """One model's main graph: producers, constants, inputs, opsets and local functions."""

    def __init__(self, model: onnx.ModelProto):
        graph = model.graph
        self.model = model
        self.producers = {out: (node, index) for node in graph.node for index, out in enumerate(node.output) if out}
        self.initializers = {init.name: init for init in graph.initializer}
        self.inputs = {value.name for value in graph.input} - set(self.initializers)
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.local_functions = {(f.domain, f.name) for f in model.functions}

    def constant(self, name: str):
        init = self.initializers.get(name)
        return None if init is None else numpy_helper.to_array(init)


def node_signature(side: GraphSide, node: onnx.NodeProto):
    """What makes two nodes the same computation (op, domain, opset, attributes, inputs' count);
    None for a node holding a body or calling a model-local function."""
    if (node.domain, node.op_type) in side.local_functions or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None  # a body that may read outer values: never the same node
    attrs = tuple(a.SerializeToString(deterministic=True) for a in sorted(node.attribute, key=lambda a: a.name))
    return (node.domain or "", node.op_type, side.opsets.get(node.domain or ""), attrs, len(node.input))


def _bodies(node: onnx.NodeProto):
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


class _Graph(GraphSide):
    """One model's main graph for the cone check: each value's structural key (an id, equal in two
    models exactly where the value is the same node, attributes and opset, of values with equal keys,
    down to graph inputs of the same name and constants of the same bytes), made on demand."""

    def __init__(self, model: onnx.ModelProto, interned: dict):
        super().__init__(model)
        self.types = inferred_types(model)
        self._interned, self._keys = interned, {"": interned.setdefault(("absent",), len(interned))}
        self._all: set | None = None

    def _own_key(self, name: str):
        if name in self.inputs:
            return ("input", name)
        init = self.initializers.get(name)
        if init is not None:
            bare = onnx.TensorProto()
            bare.CopyFrom(init)
            bare.ClearField("name")
            return ("constant", hashlib.blake2b(bare.SerializeToString(deterministic=True)).digest())
        return None

    def key(self, name: str):
        """The structural key of value `name`, None where it has none (an outer value, a body)."""
        stack, visiting = [name], set()
        while stack:
            top = stack[-1]
            if top in self._keys:
                stack.pop()
                continue
            own = self._own_key(top)
            found = self.producers.get(top)
            if own is None and found is not None:
                node, index = found
                pending = [i for i in node.input if i not in self._keys and i not in visiting]
                if pending and top not in visiting:
                    visiting.add(top)
                    stack.extend(pending)
                    continue
                inputs = tuple(self._keys.get(i) for i in node.input)
                signature = node_signature(self, node)
                if signature is not None and None not in inputs:
                    own = ("output", signature, inputs, index)
            self._keys[top] = None if own is None else self._interned.setdefault(own, len(self._interned))
            stack.pop()
        return self._keys[name]

    def has(self, key) -> bool:
        if self._all is None:
            self._all = {self.key(name) for name in self.producers} - {None}
        return key is not None and key in self._all

    def cone_modelled(self, name: str, other: _Graph) -> bool:
        """Does the reference model every rounding behind value `name` (module docstring)?"""
        if self.types is None:
            return False
        seen, stack, narrow = set(), [name], False
        while stack:
            value = stack.pop()
            if value in seen or value in self.inputs or value in self.initializers or not value:
                continue
            seen.add(value)
            found = self.producers.get(value)
            if found is None:
                return False
            node = found[0]
            computes = self._computes(node, other)
            if computes is None:
                return False
            narrow |= computes
            for body in _bodies(node):
                outer = self._body_modelled(body)
                if outer is None:
                    return False
                stack.extend(outer)
            stack.extend(node.input)
        return narrow

    def _computes(self, node: onnx.NodeProto, other: _Graph | None) -> bool | None:
        """None where the reference does not model what `node` computes (a custom op or a function
        call, an untyped output, float32 arithmetic that is not the same in `other`; None: never),
        else whether it computes a float16 or bfloat16 value."""
        if node.domain not in STANDARD_DOMAINS or (node.domain, node.op_type) in self.local_functions:
            return None
        narrow = False
        for out in node.output:
            elem = self.types.get(out) if out else 0
            if elem is None or (elem == _FLOAT32 and node.op_type not in MOVING_OPS
                                and (other is None or not other.has(self.key(out)))):
                return None
            narrow |= elem in _ROUNDED
        return narrow

    def _body_modelled(self, body: onnx.GraphProto):
        """The outer values a body reads, None where it computes float32 arithmetic (or untyped)."""
        local = {value.name for value in body.input} | {init.name for init in body.initializer}
        local |= {out for node in body.node for out in node.output}
        outer = []
        for node in body.node:
            if self._computes(node, None) is None:
                return None
            for inner in _bodies(node):
                deeper = self._body_modelled(inner)
                if deeper is None:
                    return None
                outer.extend(name for name in deeper if name not in local)
            outer.extend(name for name in node.input if name and name not in local)
        outer.extend(value.name for value in body.output if value.name not in local)
        return outer


class SpecIdentity:
    """Per verification: `same(original_name, candidate_name, feeds)` when the float64 reference
    (the spec) gives the two models' values bit for bit alike on `feeds`."""

    def __init__(self, original: onnx.ModelProto, candidate: onnx.ModelProto, evaluate=None):
        # evaluate: the session's reference evaluator (evaluate_float64's signature); None: that one.
        # A reference that declines (the no-reference fallback) explains nothing.
        self.original, self.candidate, self.evaluate = original, candidate, evaluate
        self._graphs: tuple[_Graph, _Graph] | None = None
        self._applies: dict = {}
        self.evaluations = 0

    def applies(self, original_name: str, candidate_name: str) -> bool:
        """Does the reference model every rounding behind both values (module docstring)?"""
        key = (original_name, candidate_name)
        if key not in self._applies:
            if self._graphs is None:
                interned: dict = {}
                self._graphs = (_Graph(self.original, interned), _Graph(self.candidate, interned))
            first, second = self._graphs
            self._applies[key] = first.cone_modelled(original_name, second) and \
                second.cone_modelled(candidate_name, first)
        return self._applies[key]

    def same(self, original_name: str, candidate_name: str, feeds) -> bool:
        if self.evaluations >= MAX_EVALUATIONS or not self.applies(original_name, candidate_name):
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
        if not pairs or not all(self.applies(o, c) for o, c in pairs):
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


def same_layout(original: np.ndarray, candidate: np.ndarray) -> bool:
    """Rounding moves values, never a shape or a type: a value onnxruntime gives another shape or
    element type in the candidate is no departure of its precision, whatever the reference says."""
    return original.shape == candidate.shape and original.dtype == candidate.dtype


def excuse_float16_runtime(sections, tracks, original_model, candidate_model, output_map, labelled,
                           evaluate=None) -> None:
    """A float16 output judged mismatch that the spec says both models compute alike on every set
    where it differs is onnxruntime's precision, not the rewrite's: unstable, with the note."""
    spec = None
    for section, track in zip(sections, tracks):
        if track.candidate_failure is not None:
            continue
        for report in section:
            if report.verdict != MISMATCH or report.name not in output_map or not all(
                    same_layout(item.original, item.candidate) for item in track.evidence.get(report.name, ())):
                continue
            spec = spec or SpecIdentity(original_model, candidate_model, evaluate)
            sets = [labelled[index][1] for index in track.differing_sets]
            if spec.outputs_same([(report.name, output_map[report.name])], sets):
                report.verdict = UNSTABLE
                report.notes.append(spec.NOTE)
