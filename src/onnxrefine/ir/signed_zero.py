"""Can the sign of a zero in a value be observed? The guard of rewrites that may flip it.

IEEE floats have two zeros. They compare equal, but some operations tell them apart: 1/(+0) = +inf
and 1/(-0) = -inf. A rewrite that is exact in real arithmetic (dropping `x + 0.0`, folding a
negative scale into a Conv's weights, merging a Pad into an AveragePool's own padding) can turn one
zero into the other; that is harmless unless the zero reaches such an operation. This module
answers, for one value: does any path from it reach a *sink* (an operation whose result depends on
the sign of a zero input) through operations that *carry* the sign?

- carriers pass a zero's sign to their output (Mul, Div's numerator, Add/Sub, Neg, Conv, MatMul,
  layout ops, Sqrt(-0) = -0, Relu(-0) = -0 in onnxruntime, Max/Min, Cast to a float type, ...);
- stoppers provably lose it (Abs, Exp, Cos, Sigmoid, Softmax, Log(+-0) = -inf, comparisons and
  Equal since -0 == +0, Cast to int/bool, Shape/Size, ...);
- sinks observe it: Div's divisor, Reciprocal, Mod's divisor, Pow's base (unless its exponent is a
  constant > 0, which carries, or 0, which stops), ArgMax/ArgMin/TopK (ties between -0 and +0 are
  broken differently by onnxruntime's float16 kernels); and, conservatively, anything not listed,
  custom domains, nodes holding subgraphs, values captured by a subgraph, outputs of a subgraph
  (their readers are not followed).

A call of a model-local function is followed into its body: the call's input carries its sign to
the body's formal input, and a body output to that output of every call of the function (all call
sites at once: more readers, never fewer). Inside the body the same rules hold (a node reading
an attribute reference is a sink). Not followed (a sink, as any custom op): a function named as an
op onnxruntime or ONNX knows (its own domains, a registered schema), which onnxruntime runs with
its kernel instead of the body. A custom-op library that registers a kernel under a local
function's own name would be run instead of the body too; the analysis cannot see one.

A main-graph output is a sink only when asked (`outputs_observable`): there the two zeros are equal
in value, so a reassociating rewrite (whose outputs may differ by rounding anyway) may flip one, but
an exact rewrite (bit-identical outputs) may not. Every pass that can flip a zero is reassociating.

One query is linear in the size of the graph downstream of the value (iterative, memoised). The
"observable" answers are kept for the whole driver run (`for_context`), since a later rewrite can
only make a kept answer conservative. "Not observable" answers are kept too, but a rewrite can make
them wrong by giving a value new readers; the driver reports every value that gained readers
(`note_new_uses`), and the kept "not observable" answers upstream of it are dropped. Without that
cache a chain of n removable `x + 0.0` took n queries of O(n) each.

Audit of the passes that could flip a zero (probed in onnxruntime 1.32 CPU, whose Conv/MatMul/Gemm
sums start at +0.0 and so never give -0.0): guarded here are fuse_mul_into_conv (a negative or zero
scale), eliminate_float_add_zero, fuse_pad_into_pool (a padded AveragePool sums only the real
elements) and the BatchNormalization folds whose shift or B holds -0.0 (BN ends by adding it).
Sign-exact, no guard: x*1, x/1, x**1, x-(+0.0), x+(-0.0) (eliminate_nop_with_unit); MatMul + c ->
Gemm (the same sum plus c); fuse_pad_into_conv (the same +0.0 padding); fuse_qkv (the same sums);
fuse_add_bias_into_conv, once the constant becomes the bias as it is (not added to an invented +0.0).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.ir.attrs import attr, references
from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS as _STANDARD
from onnxrefine.ir.quantization import zero_sign_use


# Every input carries a zero's sign to the outputs (or may: carrying is the conservative choice
# when an op's treatment of -0 is not pinned down, since it keeps looking for sinks downstream).
_CARRY = frozenset({
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Concat",
    "Gather", "GatherElements", "GatherND", "Split", "Expand", "Tile", "Pad", "Neg", "Mul", "Add",
    "Sub", "Sum", "Mean", "Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "BatchNormalization",
    "InstanceNormalization", "LayerNormalization", "GroupNormalization", "MeanVarianceNormalization",
    "LpNormalization", "LRN", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu",
    "Sqrt", "Max", "Min", "Clip", "Sin", "Tan", "Asin", "Atan", "Sinh", "Tanh", "Asinh", "Atanh",
    "Erf", "Round", "Floor", "Ceil", "Sign", "CastLike", "ReduceSum", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceProd", "AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool",
    "DepthToSpace", "SpaceToDepth", "Where", "ScatterND", "ScatterElements", "Scatter", "Dropout",
    "Softsign", "HardSwish", "HardSigmoid", "Gelu", "Mish", "Shrink", "CumSum", "Trilu",
    "ReverseSequence", "Compress", "SequenceConstruct", "SplitToSequence", "SequenceAt",
    "ConcatFromSequence", "SequenceInsert", "Optional", "OptionalGetElement",
})
# Provably lose it: every output is the same for a -0 or a +0 in any input.
_STOP = frozenset({
    "Abs", "Exp", "Cos", "Cosh", "Acos", "Sigmoid", "Softmax", "LogSoftmax", "Log", "Softplus",
    "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf", "Shape", "Size", "Not", "And",
    "Or", "Xor", "NonZero",
})
# Inputs at these positions observe the sign; the others carry it.
_SINK_AT = {"Div": {1}, "Mod": {1}}
# Only input 0 carries; any other float input (scales, roi) is treated as a sink.
_CARRY_FIRST = frozenset({"Resize", "Upsample"})
_SINKS = frozenset({"Reciprocal", "ArgMax", "ArgMin", "TopK"})


# Domains whose ops onnxruntime may run with kernels of its own (the standard ones, its contrib and
# internal ops, ONNX-ML, training, ATen): a call of a local function there is never followed.
_RUNTIME_DOMAIN_PREFIXES = ("ai.onnx", "com.microsoft", "com.ms.", "org.pytorch")


def _runtime_op(domain: str, op_type: str) -> bool:
    """Whether a runtime may run (domain, op_type) otherwise than a local function's body."""
    if domain in _STANDARD or domain.startswith(_RUNTIME_DOMAIN_PREFIXES):
        return True
    try:
        return onnx.defs.has(op_type, domain)
    except Exception:  # noqa: BLE001 - an onnx without the query: assume it may
        return True


def _has_subgraph(node: ir.Node) -> bool:
    return any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values())


def _classify(node: ir.Node, index: int) -> str:
    """'sink', 'stop' or 'carry' for `node` reading a value at input `index`."""
    op = node.op_type
    if node.domain not in _STANDARD or _has_subgraph(node) or references(node):
        return "sink"  # an attribute reference (function body): what the node does is not known here
    if op in _SINKS:
        return "sink"
    if op in _SINK_AT:
        return "sink" if index in _SINK_AT[op] else "carry"
    if op in _CARRY_FIRST:
        return "carry" if index == 0 else "sink"
    if op == "Cast":
        to = attr(node, "to")
        return "carry" if to is not None and ir.DataType(to).is_floating_point() else "stop"
    if op == "Pow":
        if index == 1:
            return "stop"  # x ** (+0) == x ** (-0) == 1
        exponent = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
        if exponent is None or exponent.size == 0:
            return "sink"
        exponent = exponent.astype(np.float64)
        if np.all(exponent == 0):
            return "stop"
        return "carry" if np.all(exponent > 0) else "sink"  # (-0) ** -1 = -inf, (+0) ** -1 = +inf
    quantized = zero_sign_use(node, index)  # QuantizeLinear, ... (ir/quantization.py)
    if quantized is not None:
        return quantized
    if op in _STOP:
        return "stop"
    if op in _CARRY:
        return "carry"
    return "sink"  # unknown: assume it may look


class SignedZeroAnalysis:
    """Memoised answers to `observable(value)` within one graph state (see the module docstring)."""

    def __init__(self, main_graph: ir.Graph, outputs_observable: bool = False, functions=None):
        self.main_graph = main_graph
        self.outputs_observable = outputs_observable
        # the model's local functions ((domain, name, overload) -> ir.Function), whose calls are
        # followed into their bodies; the calls of each, found once (dropped when a value gains a
        # reader, which a new call would be)
        self.functions = dict(functions or {})
        self._bodies = {id(function.graph): function for function in self.functions.values()}
        self._calls: dict | None = None
        # Only "observable" answers are kept across queries: rewrites between two queries may move
        # readers onto a value (a forwarded output), which can make an unobservable value
        # observable, while a kept "observable" can at worst be stale in the refusing direction.
        self._observable: set[ir.Value] = set()
        # "Not observable" answers: downward closed (every value a kept one carries its sign into is
        # kept too), so new_uses() only has to walk upstream from a kept value that gained readers.
        self._unobservable: set[ir.Value] = set()

    def _expand(self, value: ir.Value) -> tuple[bool, list[ir.Value]]:
        """(reaches a sink directly, values its sign is carried into)."""
        reason, carried = self._step(value)
        return reason is not None, carried

    def _step(self, value: ir.Value) -> tuple[str | None, list[ir.Value]]:
        """(why it reaches a sink directly, or None; the values its sign is carried into)."""
        carried: list[ir.Value] = []
        if value.is_graph_output():
            if value.graph is self.main_graph:
                if self.outputs_observable:
                    return f"{value.name!r} is an output of the model", []
            else:
                returned = self._returned(value)
                if returned is None:
                    return f"{value.name!r} is an output of a subgraph, whose readers are not followed", []
                carried.extend(returned)
        for use in value.uses():
            node = use.node
            if node.graph is not value.graph:
                return f"{value.name!r} is captured by a subgraph", []  # not followed
            formal = self._formal(node, use.idx)
            if formal is not None:
                carried.append(formal)
                continue
            kind = _classify(node, use.idx)
            if kind == "sink":
                label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
                return f"it reaches {label} (input {use.idx}), which tells -0 from +0", []
            if kind == "carry":
                carried.extend(out for out in node.outputs if out is not None)
        return None, carried

    def _function_of(self, node: ir.Node) -> ir.Function | None:
        """The local function `node` calls and onnxruntime runs as its body; None for an op a
        runtime has a kernel or schema for, which it runs instead of a local function of that name
        (a local com.microsoft::Inverse whose body is Abs still inverts)."""
        if not self.functions:
            return None
        function = self.functions.get((node.domain, node.op_type, getattr(node, "overload", "") or ""))
        if function is None or _runtime_op(node.domain, node.op_type):
            return None
        return function

    def _formal(self, node: ir.Node, index: int) -> ir.Value | None:
        """The body's formal input a call of a local function reads input `index` into (None: no
        such call, or no such formal)."""
        function = self._function_of(node)
        if function is None or index >= len(function.inputs) or _has_subgraph(node):
            return None
        return function.inputs[index]

    def _new_call(self, node: ir.Node) -> bool:
        """`node` calls a local function and is not among the calls found (any call is, before
        they are found)."""
        function = self._function_of(node)
        if function is None:
            return False
        return self._calls is None or all(call is not node for call in self._calls.get(id(function), []))

    def _returned(self, value: ir.Value) -> list[ir.Value] | None:
        """The outputs, at every call of the function, that its body returns `value` as; None where
        `value`'s graph is no local function's body."""
        function = self._bodies.get(id(value.graph))
        if function is None or function.graph is not value.graph:
            return None
        positions = [index for index, out in enumerate(function.outputs) if out is value]
        if self._calls is None:
            self._calls = {}
            graphs = [self.main_graph, *(f.graph for f in self.functions.values())]
            for graph in graphs:
                for node in ir.traversal.RecursiveGraphIterator(graph):
                    called = self._function_of(node)
                    if called is not None:
                        self._calls.setdefault(id(called), []).append(node)
        return [call.outputs[index] for call in self._calls.get(id(function), [])
                for index in positions if index < len(call.outputs) and call.outputs[index] is not None]

    def observable(self, value: ir.Value) -> bool:
        """Whether a -0 turned into +0 (or back) in `value` can change what some sink computes."""
        if value in self._observable:
            return True
        if value in self._unobservable:
            return False
        memo: dict[ir.Value, bool] = {}  # this query's answers, "not observable" ones included
        expansions: dict[ir.Value, tuple[bool, list[ir.Value]]] = {}
        on_stack: set[ir.Value] = set()
        stack = [value]
        while stack:
            current = stack[-1]
            if current in memo or current in self._observable:
                stack.pop()
                continue
            if current in self._unobservable:
                memo[current] = False
                stack.pop()
                continue
            if current not in expansions:
                expansions[current] = self._expand(current)
                direct, carried = expansions[current]
                if not direct:
                    pending = [v for v in carried if v not in memo and v not in on_stack]
                    if pending:
                        on_stack.add(current)
                        stack.extend(pending)
                        continue
            direct, carried = expansions[current]
            # A carried value not yet answered can only be one on the current path (a cycle, which
            # a valid graph has not): count it as observable.
            memo[current] = direct or any(v in self._observable or memo.get(v, True) for v in carried)
            if memo[current]:
                self._observable.add(current)
            on_stack.discard(current)
            stack.pop()
        # Every False answer was reached only through False answers (a cycle counts as True), so
        # the kept set stays downward closed.
        self._unobservable.update(v for v, answer in memo.items() if not answer)
        return value in self._observable

    def new_uses(self, values) -> None:
        """`values` gained readers (or became graph outputs): drop the kept "not observable"
        answers that may now be wrong, i.e. the value's and those of every kept value whose sign
        is carried into it."""
        if any(v is not None and v.graph is not self.main_graph for v in values) or any(
                self._new_call(use.node) for v in values if v is not None for use in v.uses()):
            # upstream of a body's formal input are the calls' arguments, in other graphs; a new
            # call gives every body output of its function new readers
            self._forget_all()
            return
        stack = [v for v in values if v is not None and v in self._unobservable]
        while stack:
            value = stack.pop()
            if value not in self._unobservable:
                continue
            self._unobservable.discard(value)
            producer = value.producer()
            if producer is None:
                continue
            if self._function_of(producer) is not None:
                self._forget_all()  # upstream through a body: its formal inputs, every call's arguments
                return
            for index, source in enumerate(producer.inputs):
                if source is not None and source in self._unobservable and _classify(producer, index) == "carry":
                    stack.append(source)

    def _forget_all(self) -> None:
        """Drop every kept "not observable" answer and the calls found."""
        self._calls = None
        self._unobservable.clear()

    def why(self, value: ir.Value) -> str:
        """A short reason naming the first sink found (for refusals)."""
        seen: set[ir.Value] = set()
        stack = [value]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            reason, carried = self._step(current)
            if reason is not None:
                return reason
            stack.extend(carried)
        return "its sign reaches a sign-sensitive use"


def for_context(ctx) -> SignedZeroAnalysis:
    """The analysis shared by every rule in one driver run (one RewriteContext)."""
    analysis = getattr(ctx, "_signed_zero_analysis", None)
    if analysis is None or analysis.main_graph is not ctx.model.graph:
        analysis = SignedZeroAnalysis(ctx.model.graph, functions=ctx.model.functions)
        ctx._signed_zero_analysis = analysis
    return analysis


def note_new_uses(ctx, values) -> None:
    """Tell the context's analysis (if any) that `values` gained readers: rewrites call this."""
    analysis = getattr(ctx, "_signed_zero_analysis", None)
    if analysis is not None:
        analysis.new_uses(values)


def refuse_if_observable(ctx, value: ir.Value, what: str) -> None:
    """Raise RewriteRefused when `value`'s zero sign, which the rewrite may flip, can be observed."""
    from onnxrefine.errors import RewriteRefused

    analysis = for_context(ctx)
    if analysis.observable(value):
        raise RewriteRefused("signed_zero.observable", f"{what} may turn -0.0 into +0.0 or back, and {analysis.why(value)}")
    proven = getattr(ctx, "sign_insensitive", None)
    if proven is not None:
        proven.append(value)  # the rewrite's certificate may then treat +0 and -0 alike here
