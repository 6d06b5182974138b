"""A float64 reference evaluator: the model's arithmetic, as ideal as float64 allows.

Every floating tensor (float32/float16/bfloat16/float8/float64 feeds, initializers, Constant values,
Cast/CastLike to a floating type) is carried as float64; integer and bool tensors keep their exact dtype and
ONNX semantics. The result is what the graph computes with (almost) no rounding, which is what verification
compares float32 runs against.

Known, deliberate departures from a float32 runtime:
- float32 is modelled as real arithmetic (no rounding, no overflow), Cast to float32 included. Narrower
  formats are not: a Cast to float16/bfloat16/float8 and every float16/bfloat16 node output are rounded
  to that type as the spec says (see ``kernels.dtype``).
- Cast of NaN/inf or out-of-range floats to an integer type is undefined in ONNX; we return numpy's result.
- Random* ops are not evaluated (their values are not part of a model's deterministic meaning).

Most ops run in hand-written numpy kernels (``kernels/*``, registered at import into
``base.KERNELS``, the leaf module they and this one share);
other standard ops fall back to ``onnx.reference`` on the float64 arrays, with a check that the fallback did
not hand back a lower-precision float.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxrefine.errors import OnnxRefineError
from onnxrefine.ir.opsets import STANDARD_DOMAINS as _STANDARD_DOMAINS
from onnxrefine.ir.validate import sparse_to_dense
from onnxrefine.verify.reference.kernels import control  # noqa: F401  (registers its kernels)
from onnxrefine.verify.reference.kernels import dtype as _dtype
from onnxrefine.verify.reference.kernels import nn  # noqa: F401  (registers its kernels)
from onnxrefine.verify.reference.kernels import quant  # noqa: F401  (registers its kernels)
from onnxrefine.verify.reference.kernels import shape  # noqa: F401  (registers its kernels)
from onnxrefine.verify.reference.base import (KERNELS, NodeCall, ReferencePrecisionWarning,
                                              UnsupportedOperatorError)
from onnxrefine.verify.reference.kernels.tensor import to_internal
from onnxrefine.verify.reference.memory import Initializer as _Initializer
from onnxrefine.verify.reference.memory import last_uses
from onnxrefine.verify.reference.onnx_fallback import run_with_onnx_reference

__all__ = [
    "NodeCall",
    "ReferencePrecisionWarning",
    "UnsupportedOperatorError",
    "evaluate_float64",
    "supported_op_types",
]

# Ops whose value is not a deterministic function of the inputs; refusing is more honest than guessing.
_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
# Ops with no meaning in ideal arithmetic, or that need more than numpy.
_REFUSED = {
    "BitCast": "reinterprets the bits of a float, which has no meaning once floats are carried as float64",
    "ImageDecoder": "decodes image bytes (needs Pillow), outside what the reference models",
}


# The native kernels: base.py's table, filled by the kernel modules imported above (the
# same dict object, so a test that swaps one kernel with monkeypatch.setitem swaps it here).
_NATIVE = KERNELS


def native_op_types() -> frozenset[str]:
    """Standard-domain ops evaluated by this package's own kernels."""
    return frozenset(_NATIVE)


def fallback_op_types() -> frozenset[str]:
    """Standard-domain ops evaluated through onnx.reference (on float64 arrays)."""
    global _FALLBACK_CACHE
    if _FALLBACK_CACHE is None:
        try:  # a private module of onnx (bounded <2 in pyproject.toml): where it moved, no fallback
            from onnx.reference.ops._op_list import load_op  # kernels: those ops are refused, never guessed
        except ImportError:
            _FALLBACK_CACHE = frozenset()
            return _FALLBACK_CACHE
        names = {
            schema.name
            for schema in onnx.defs.get_all_schemas_with_history()
            if schema.domain in _STANDARD_DOMAINS and schema.name not in _NATIVE
        }
        loadable = set()
        for name in names - _NONDETERMINISTIC - set(_REFUSED):
            try:
                load_op("", name)
            except Exception:  # noqa: BLE001 - onnx.reference simply lacks this op
                continue
            loadable.add(name)
        _FALLBACK_CACHE = frozenset(loadable)
    return _FALLBACK_CACHE


_FALLBACK_CACHE: frozenset[str] | None = None


def supported_op_types() -> frozenset[str]:
    """Standard-domain op types this evaluator can run (natively or through the onnx.reference fallback)."""
    return native_op_types() | fallback_op_types()


def evaluate_float64(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    outputs: Sequence[str] | None = None,
    base_dir: str | None = None,
    observe: Any = None,
    error_bounds: bool = True,
    magnitudes: bool = True,
    as_onnxruntime: bool = False,
) -> dict[str, np.ndarray]:
    """Evaluate ``model``'s main graph in float64 and return the requested outputs (default: all).

    Initializers stored as external data are read from ``base_dir`` memory-mapped, and converted to
    float64 only while the node that reads them runs; each value is freed after its last use.

    ``observe(name, value)``, when given, is called with each main-graph node output as soon as it is
    computed (in node order), so a caller can compare intermediates without this evaluator keeping them.

    ``error_bounds``: every main-graph value returned or observed also carries its per-element error
    bound and coherent bound (bound.py; read them with bound.bound_of / coherent_of); with
    ``magnitudes`` also the magnitude of its terms (bound.magnitude_of).

    ``as_onnxruntime``: evaluate the main graph as onnxruntime departs from the spec where it is known to,
    not as the spec says: its float32 MaxPool gives -FLT_MAX (lowest) for a window of only -inf
    (ONNXRUNTIME_LOWEST; judge/departures.py, rule maxpool-lowest-run).
    """
    opsets = {op.domain or "": op.version for op in model.opset_import}
    if "ai.onnx" in opsets and "" not in opsets:
        opsets[""] = opsets["ai.onnx"]
    functions = {(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    evaluator = _Evaluator(opsets, functions)
    evaluator.narrow_types = _dtype.narrow_value_types(model)
    evaluator.model = model
    evaluator.base_dir = base_dir
    evaluator.observe = observe
    if as_onnxruntime:
        evaluator.lowest = onnxruntime_lowest(model, evaluator.declared_elem_type)
    if error_bounds:
        from onnxrefine.verify.reference.bound import BoundTracker

        evaluator.bounds = BoundTracker(model, evaluator, with_magnitudes=magnitudes)
    graph = model.graph
    wanted = list(outputs) if outputs is not None else [o.name for o in graph.output]
    env = evaluator.bind_graph_inputs(graph, feeds)
    results = evaluator.run_graph(graph, env, parent_scope=None, wanted=wanted)
    if evaluator.bounds is not None:
        return {name: evaluator.bounds.attach(name, results[name]) for name in wanted}
    return {name: results[name] for name in wanted}


_FLT_MAX = float(np.finfo(np.float32).max)


def onnxruntime_lowest(model: onnx.ModelProto, elem_type) -> frozenset:
    """The main graph's float32 MaxPool outputs Y: onnxruntime starts each window at the lowest
    float32, so a window of only -inf gives -FLT_MAX where the spec gives -inf (float16 and float64
    MaxPools give -inf). `elem_type(name)`: the value's element type."""
    return frozenset(node.output[0] for node in model.graph.node
                     if node.op_type == "MaxPool" and node.domain in _STANDARD_DOMAINS and node.output
                     and elem_type(node.output[0]) == onnx.TensorProto.FLOAT)


class _Scope(dict):
    """Values visible to a graph: its own, then (read-only) those of enclosing graphs."""

    def __init__(self, parent: _Scope | None = None):
        super().__init__()
        self.parent = parent

    def lookup(self, name: str, native: bool = False) -> Any:
        """The value of `name`; a weight converted to float64 for the node reading it (never kept
        converted), or in its own dtype with `native` (for a kernel that only picks elements)."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope:
                value = dict.__getitem__(scope, name)
                if isinstance(value, _Initializer):
                    if native:
                        picked = value.native()
                        # a dtype numpy's kernels read as is (not a packed or ml_dtypes one)
                        return picked if picked.dtype.kind in "fiub" else to_internal(picked)
                    return value.load()
                return value
            scope = scope.parent
        raise KeyError(name)


def _node_attrs(node: onnx.NodeProto, caller_attrs: Mapping[str, Any] | None) -> dict:
    """A node's attributes; inside a function, its attribute references resolved from the call's."""
    attrs = {}
    for attr in node.attribute:
        if attr.ref_attr_name:
            if caller_attrs is not None and attr.ref_attr_name in caller_attrs:
                attrs[attr.name] = caller_attrs[attr.ref_attr_name]
            continue
        attrs[attr.name] = _attribute_value(attr)
    return attrs


def _attribute_value(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if attr.type == onnx.AttributeProto.TENSOR:
        return to_internal(numpy_helper.to_array(value))
    if attr.type == onnx.AttributeProto.TENSORS:
        return [to_internal(numpy_helper.to_array(t)) for t in value]
    if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
        return to_internal(sparse_to_dense(value))
    if attr.type == onnx.AttributeProto.STRING:
        return value.decode("utf-8") if isinstance(value, bytes) else value
    if attr.type == onnx.AttributeProto.STRINGS:
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
    if attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
        return list(value)
    return value


class _Evaluator:
    def __init__(self, opsets: dict[str, int], functions: dict):
        self.opsets = opsets
        self.functions = functions
        self._fallback_cache: dict[Any, Any] = {}
        self.narrow_types: dict[str, int] = {}  # float16/bfloat16 value names, rounded where produced
        self.lowest: frozenset = frozenset()  # main-graph values made as onnxruntime's MaxPool makes them
        self.base_dir: str | None = None
        self.peak_live = 0  # most computed values held at once by one graph (freed after last use)
        self._last_uses: dict[int, tuple] = {}
        self.observe = None  # see evaluate_float64
        self.bounds = None  # error_bound.BoundTracker of the main graph, when bounds are wanted
        self._node_seen = None  # (node, inputs, attrs, opset) of the native kernel run last (for the bounds)
        self._tracking = None  # the bound tracker of the graph or function body now running, if any
        self.model: onnx.ModelProto | None = None
        self._declared: dict | None = None

    def declared_finfo(self, name: str, computed_dtype):
        """finfo of the float type the model gives value `name` (that of `computed_dtype` when unknown)."""
        import ml_dtypes

        elem = self.declared_elem_type(name)
        if elem in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            return ml_dtypes.finfo(helper.tensor_dtype_to_np_dtype(elem))
        return np.finfo(computed_dtype)

    def declared_elem_type(self, name: str) -> int | None:
        """The element type the model gives value `name` (graph inputs, initializers, inferred for
        the rest; computed once, on first use); None when unknown."""
        if self._declared is None:
            declared = {}
            if self.model is not None:
                graph = self.model.graph
                declared.update({init.name: init.data_type for init in graph.initializer})
                declared.update({value.name: value.type.tensor_type.elem_type for value in graph.input
                                 if value.type.HasField("tensor_type")})
                declared.update(_dtype.inferred_types(self.model) or {})
            self._declared = declared
        return self._declared.get(name) or None

    # -- graphs -------------------------------------------------------------------------------------------
    def bind_graph_inputs(self, graph: onnx.GraphProto, feeds: Mapping[str, np.ndarray]) -> _Scope:
        env = _Scope()
        for init in graph.initializer:
            env[init.name] = _Initializer(init, self.base_dir)
        for sparse in graph.sparse_initializer:
            env[sparse.values.name] = to_internal(sparse_to_dense(sparse))
        input_names = {i.name for i in graph.input}
        for name, value in feeds.items():
            if name not in input_names:
                raise OnnxRefineError(f"feed {name!r} is not an input of the model")
            env[name] = to_internal(np.asarray(value))
        missing = [i.name for i in graph.input if i.name not in env]
        if missing:
            raise OnnxRefineError(f"missing feeds for model inputs: {', '.join(missing)}")
        return env

    def run_graph(self, graph, env: _Scope, parent_scope: _Scope | None, wanted: Sequence[str],
                  tracker=None) -> dict:
        env.parent = parent_scope
        for init in graph.initializer:
            if init.name not in env:
                env[init.name] = _Initializer(init, self.base_dir)
        nodes, last_use = self._schedule(graph)
        keep = set(wanted)
        live = sum(1 for value in dict.values(env) if not isinstance(value, _Initializer))
        for index, node in enumerate(nodes):
            main = parent_scope is None
            track = self.bounds if main else tracker
            self._node_seen = None
            self._tracking = track
            self.run_node(node, env, self.opsets)
            unrounded = {}
            for out in node.output:
                if out in self.narrow_types:
                    unrounded[out] = env[out]
                    env[out] = _dtype.round_to(env[out], self.narrow_types[out])
                if main and out in self.lowest:
                    env[out] = np.where(env[out] == -np.inf, -_FLT_MAX, env[out])
            if track is not None:
                seen = self._node_seen if self._node_seen is not None and self._node_seen[0] is node else None
                track.after_node(node, seen and seen[1:], [dict.get(env, name) if name else None for name in node.output],
                                 env, unrounded)
            if self.observe is not None and main:  # main graph only (localisation)
                for name in node.output:
                    if name:
                        value = dict.get(env, name)
                        self.observe(name, value if self.bounds is None else self.bounds.attach(name, value))
            live += sum(1 for name in node.output if name)
            self.peak_live = max(self.peak_live, live)
            for name in last_use.get(index, ()):
                if name not in keep and dict.__contains__(env, name):
                    live -= not isinstance(dict.pop(env, name), _Initializer)
                    if track is not None:
                        track.forget(name)
        result = {}
        for name in wanted:
            try:
                result[name] = env.lookup(name)
            except KeyError:
                raise OnnxRefineError(f"output {name!r} is not computed by the graph") from None
        return result

    def _schedule(self, graph: onnx.GraphProto) -> tuple[list, dict]:
        """The graph's nodes (Log(Softmax) as LogSoftmax) and, per node index, the names read for
        the last time there."""
        cached = self._last_uses.get(id(graph))
        if cached is None or cached[0] is not graph:
            producers = {out: node for node in graph.node for out in node.output if out}
            nodes = [_log_softmax_form(node, producers) for node in graph.node]
            cached = self._last_uses[id(graph)] = (graph, nodes, last_uses(graph.node, nodes))
        return cached[1], cached[2]

    def run_subgraph(self, graph: onnx.GraphProto, inputs: Sequence[Any], outer: _Scope,
                     tracked_by: onnx.NodeProto | None = None) -> list:
        """`tracked_by`: the If node whose branch this is, run once: its values are bound-tracked as
        the graph around it is (a Loop's or Scan's body, run again and again, is not). A branch
        computing float16 values passes on the magnitude of its terms but no bound: onnxruntime skips
        float16 roundings the spec defines once such a branch is inlined, which rule
        float16-skipped-rounding judges where the original's bound is not derived."""
        env = _Scope()
        for formal, value in zip(graph.input, inputs):
            env[formal.name] = value
        caller = self._tracking
        narrow = any(name in self.narrow_types for node in graph.node for name in node.output)
        tracker = caller.for_subgraph() if caller is not None and tracked_by is not None else None
        try:
            outs = self.run_graph(graph, env, outer, [o.name for o in graph.output], tracker)
        finally:
            self._tracking = caller
        if tracker is not None:
            caller.adopt(tracked_by, [o.name for o in graph.output], tracker, bounds=not narrow)
        return [outs[o.name] for o in graph.output]

    # -- nodes --------------------------------------------------------------------------------------------
    def run_node(self, node: onnx.NodeProto, env: _Scope, opsets: dict[str, int],
                 caller_attrs: Mapping[str, Any] | None = None) -> None:
        inputs = []
        domain = node.domain or ""
        # a Gather from a weight (an embedding table) picks its rows in the weight's own dtype and
        # converts those: converting the whole table to float64 first gives the same rows
        picks = node.op_type == "Gather" and domain in ("", "ai.onnx") and (domain, "Gather", "") not in self.functions
        for position, name in enumerate(node.input):
            if name == "":
                inputs.append(None)
                continue
            try:
                inputs.append(env.lookup(name, native=picks and position == 0))
            except KeyError:
                raise OnnxRefineError(
                    f"node {node.name or node.op_type!r} reads {name!r}, which is not yet computed"
                ) from None
        outputs = self.dispatch(node, domain, inputs, _node_attrs(node, caller_attrs), opsets, env)
        if picks:  # a scalar index picks a numpy scalar: converted too, a scalar again
            outputs = [to_internal(value) if isinstance(value, np.ndarray) else
                       to_internal(np.asarray(value))[()] if isinstance(value, np.generic) else value
                       for value in outputs]
        for name, value in zip(node.output, outputs):
            if name:
                env[name] = value

    def rerun(self, node: onnx.NodeProto, inputs: Sequence[Any], env: _Scope,
              caller_attrs: Mapping[str, Any] | None = None) -> Sequence[Any]:
        """A node's results on other inputs (`caller_attrs`: a function body's call attributes):
        nothing is written to `env`, no bound is tracked (the bound tracker's magnitude probes)."""
        seen, tracking = self._node_seen, self._tracking
        self._tracking = None
        try:
            return self.dispatch(node, node.domain or "", list(inputs), _node_attrs(node, caller_attrs),
                                 self.opsets, env)
        finally:
            self._node_seen, self._tracking = seen, tracking

    def dispatch(self, node, domain, inputs, attrs, opsets, env) -> Sequence[Any]:
        key = (domain, node.op_type, node.overload if node.HasField("overload") else "")
        function = self.functions.get(key) or self.functions.get((domain, node.op_type, ""))
        if function is not None:
            return self._run_function(function, node, inputs, attrs)
        if domain not in _STANDARD_DOMAINS:
            raise UnsupportedOperatorError(
                f"operator {domain}::{node.op_type} (node {node.name!r}) is outside the standard ONNX "
                "domain and no model-local function defines it"
            )
        if node.op_type in _NONDETERMINISTIC:
            raise UnsupportedOperatorError(
                f"operator {node.op_type} (node {node.name!r}) is random; the float64 reference does not "
                "evaluate it"
            )
        if node.op_type in _REFUSED:
            raise UnsupportedOperatorError(
                f"operator {node.op_type} (node {node.name!r}) is not evaluated: {_REFUSED[node.op_type]}"
            )
        opset = opsets.get("", opsets.get("ai.onnx", onnx.defs.onnx_opset_version()))
        handler = _NATIVE.get(node.op_type)
        call = NodeCall(node, inputs, attrs, opset, self, env)
        if handler is not None:
            self._node_seen = (node, inputs, attrs, opset)
        if handler is not None:
            return handler(call)
        return self._run_fallback(call)

    def _run_function(self, function: onnx.FunctionProto, call: onnx.NodeProto, inputs, attrs) -> list:
        caller_attrs = {}
        for attr in function.attribute_proto:
            caller_attrs[attr.name] = _attribute_value(attr)
        caller_attrs.update(attrs)
        opsets = dict(self.opsets)
        opsets.update({op.domain or "": op.version for op in function.opset_import})
        local = _Scope()
        for formal, value in zip(function.input, inputs):
            if formal and value is not None:
                local[formal] = value
        caller = self._tracking
        tracker = None if caller is None else caller.for_function(call, function, inputs, caller_attrs)
        last_use = last_uses(function.node, function.node) if tracker is not None else {}
        keep = set(function.output)
        try:
            for index, node in enumerate(function.node):
                self._node_seen, self._tracking = None, tracker
                self.run_node(node, local, opsets, caller_attrs)
                if tracker is not None:
                    seen = self._node_seen if self._node_seen is not None and self._node_seen[0] is node else None
                    outputs = [dict.get(local, name) if name else None for name in node.output]
                    tracker.type_outputs(node, outputs)
                    tracker.after_node(node, seen and seen[1:], outputs, local)
                    for name in last_use.get(index, ()):
                        if name not in keep:
                            tracker.forget(name)
        finally:
            self._tracking = caller
        if tracker is not None:
            caller.adopt(call, list(function.output), tracker)
        return [dict.get(local, name) for name in function.output]

    def _run_fallback(self, call: NodeCall) -> list:
        return run_with_onnx_reference(call, self._fallback_cache)


def _log_softmax_form(node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto]) -> onnx.NodeProto:
    """Log(Softmax(x)) evaluated as LogSoftmax(x), the same real function.

    Even in float64 a softmax underflows to 0 once a logit trails the row maximum by ~745, and
    log(0) = -inf where the true value is finite; the reference must not inherit that, or a
    rewrite to LogSoftmax (exact in real arithmetic, finite there) looks like a bug.
    """
    if node.op_type != "Log" or (node.domain or "") not in _STANDARD_DOMAINS or not node.input:
        return node
    softmax = producers.get(node.input[0])
    if softmax is None or softmax.op_type != "Softmax" or (softmax.domain or "") not in _STANDARD_DOMAINS:
        return node
    fused = helper.make_node("LogSoftmax", [softmax.input[0]], list(node.output), name=node.name,
                             domain=softmax.domain)
    fused.attribute.extend(softmax.attribute)   # same axis convention in every opset
    return fused
