"""A rule is data: a pattern, and a function that returns the replacement, None, or refuses.

    def fold(m: Match, ctx: RewriteContext) -> Replacement | None:
        ...checks: raise RewriteRefused("family.guard", "why") to decline...
        return Replacement([new nodes], {old_value: new_value})

    RULE = Rule("fold_x", PATTERN, fold, kind=EXACT)

The function never mutates the graph: it builds new nodes and constants through `ctx`, and the
driver applies the replacement only once every guard has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.ir.names import NameAllocator
from onnxrefine.ir.facts import StaticShapes
from onnxrefine.ir.opsets import opset_version
from onnxrefine.rewrite.pattern import Match, Op

EXACT = "exact"
REASSOCIATING = "reassociating"


@dataclass
class Replacement:
    nodes: Sequence[ir.Node]
    outputs: Mapping[ir.Value, ir.Value]
    # Nodes outside the pattern's tree that the rule found itself (a variadic input's producer, a
    # sibling) and that the driver removes too once nothing reads them.
    also_removed: Sequence[ir.Node] = ()
    # Replaced values whose sign of zero the rule proved no reader can observe (no path to a
    # divisor, Reciprocal, graph output, ...): their per-rewrite certificate treats +0 and -0 alike.
    sign_insensitive: Sequence[ir.Value] = ()


@dataclass
class CertificateRequest:
    """What a certifier is shown for one rewrite, before the driver applies it.

    `matched` are the nodes the rewrite removes or replaces (producers first, root last);
    `replacement` the new nodes; `outputs` the (exposed original value, value replacing it)
    pairs; `inputs` every value either side reads from outside (activations and constants);
    `new_constants` the constants the rule generated. Nothing here may be mutated.
    """

    rule: str
    kind: str
    model: ir.Model
    owner: ir.Graph | ir.Function
    matched: Sequence[ir.Node]
    replacement: Sequence[ir.Node]
    outputs: Sequence[tuple[ir.Value, ir.Value]]
    inputs: Sequence[ir.Value]
    new_constants: Sequence[ir.Value]
    context: RewriteContext
    sign_insensitive: Sequence[ir.Value] = ()
    # For a rewrite in a function body whose attribute references are bound to one call's values
    # (rewrite/bindings.py): that call, whose argument shapes the certificate takes. None: every call.
    calls: Sequence[ir.Node] | None = None
    # The driver may offer the rewrite again after the graph-level passes (errors.CertificatePostponed):
    # a certificate that would need a run of the whole model only for shapes no fact gives may
    # wait for shape folding to give them.
    may_postpone: bool = False


@dataclass(frozen=True)
class CertificateOutcome:
    """A certifier's answer: "certified" (`proved` when by a proof, without a run for this
    rewrite), "refused" (with why: the certificate failed), or, when no certificate could be
    made, "skipped" (with why: the driver refuses the rewrite) or "deferred" (with why: the run
    verifies end to end, whose verdict judges the rewrite)."""

    status: str
    detail: str = ""
    proved: bool = False


# A certifier checks one rewrite on its own matched subgraph (see onnxrefine.verify.certificate.certifier);
# the driver refuses the rewrite when the outcome is "refused".
Certifier = Callable[[CertificateRequest], CertificateOutcome]


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: Op
    rewrite: Callable[[Match, RewriteContext], Replacement | None]
    kind: str = EXACT
    benefit: int = 1
    # Rules that keep matched intermediates alive for their other readers set this; by default
    # the driver refuses a match whose intermediate values are read outside the match.
    keeps_intermediates: bool = False
    # The driver refuses a match with an attribute reference (`perm=@perm`, in a function body),
    # whose value is each caller's; a rule that binds references to their values itself sets this.
    resolves_references: bool = False

    def __post_init__(self):
        if self.kind not in (EXACT, REASSOCIATING):
            raise ValueError(f"rule {self.name}: unknown kind {self.kind}")


@dataclass
class _PendingConstant:
    value: ir.Value
    array: np.ndarray
    source_bytes: int


@dataclass
class RewriteContext:
    """What a rule may use to build its replacement; one per driver run."""

    model: ir.Model
    names: NameAllocator
    budget: ConstantBudget
    # The trusted shape / element type / small-value oracle (ir/facts/) that this run's rules and
    # certificates share; made from `model` unless given. Its facts are semantic, so rewrites
    # that keep values never make a memoised one wrong.
    facts: StaticShapes = None  # type: ignore[assignment]  (set in __post_init__)
    owner: ir.Graph | ir.Function | None = None
    rule_name: str = ""
    pending_constants: list[_PendingConstant] = field(default_factory=list)
    pending_nodes: list[ir.Node] = field(default_factory=list)
    # Values the current rewrite's guards proved no reader can tell +0 from -0 in
    # (ir/signed_zero.refuse_if_observable); the certificate treats their zero signs alike.
    sign_insensitive: list[ir.Value] = field(default_factory=list)

    def __post_init__(self):
        if self.facts is None:
            self.facts = StaticShapes(self.model)

    def begin(self, owner: ir.Graph | ir.Function, rule_name: str) -> None:
        self.owner = owner
        self.rule_name = rule_name
        self.pending_constants = []
        self.pending_nodes = []
        self.sign_insensitive = []

    def node(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        attributes: Mapping[str, object] | Sequence[ir.Attr] = (),
        *,
        num_outputs: int = 1,
        domain: str = "",
        hint: str | None = None,
    ) -> ir.Node:
        """A new node with fresh node and output names."""
        base = hint or f"{self.rule_name}_{op_type}"
        if isinstance(attributes, Mapping):
            attributes = [_attribute(k, v) for k, v in attributes.items()]
        node = ir.Node(
            domain,
            op_type,
            inputs,
            attributes,
            num_outputs=num_outputs,
            name=self.names.fresh(base),
        )
        for output in node.outputs:
            output.name = self.names.fresh(f"{base}_out")
        self.pending_nodes.append(node)
        return node

    def constant(self, array: np.ndarray, hint: str, derived_from: Sequence[ir.Value | None] = ()) -> ir.Value:
        """A new constant holding `array` exactly; refused when over the per-tensor budget."""
        array = np.require(array, requirements="C")  # ascontiguousarray would make a scalar 1-D
        source_bytes = max(
            (v.const_value.nbytes for v in derived_from if v is not None and v.const_value is not None),
            default=0,
        )
        reason = self.budget.tensor_refusal(array.nbytes, source_bytes)
        if reason is not None:
            raise RewriteRefused("budget.rule_tensor", reason)
        name = self.names.fresh(hint)
        tensor = ir.Tensor(array, name=name)
        value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape), const_value=tensor)
        self.pending_constants.append(_PendingConstant(value, array, source_bytes))
        return value

    def opset(self, domain: str = "") -> int:
        return opset_version(self.owner.opset_imports if self.owner is not None else None, self.model.opset_imports,
                             domain)


def _attribute(name: str, value: object) -> ir.Attr:
    """`ir.convenience.convert_attribute` with the common cases first: for a list it checks
    three typing.Protocol isinstances (slow: a tenth of a 20k-node optimize) before the list."""
    if isinstance(value, ir.Attr):
        return value
    if isinstance(value, (list, tuple)) and value:
        if all(type(x) is int for x in value):
            return ir.AttrInt64s(name, list(value))
        if all(type(x) is float for x in value):
            return ir.AttrFloat32s(name, list(value))
    elif type(value) is int:
        return ir.AttrInt64(name, value)
    elif type(value) is float:
        return ir.AttrFloat32(name, value)
    elif type(value) is str:
        return ir.AttrString(name, value)
    return ir.convenience.convert_attribute(name, value)
