"""The oracle: trusted facts for graph inputs and constants, the rule tables for everything an
operator produces, and one memo per kind of fact."""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir.facts.core import (
    DTYPE_RULES, MAX_ELEMENTS, SHAPE_RULES, VALUE_RULES, Elements, Site, Sym, canonical_domain,
)
from onnxrefine.ir.foldmath import constant_array

_MAX_DEPTH = 64
# A rule reading an attribute or a partial value of an unexpected form (a malformed model)
# raises one of these, and one reading an attribute reference (a function body's `@perm`: the
# caller's value) RewriteRefused from ir/attrs.py; the fact is then unknown.
_RULE_ERRORS = (TypeError, ValueError, IndexError, OverflowError, RewriteRefused)


def _from_rule(table: dict, oracle: StaticShapes, value: ir.Value, depth: int):
    """The fact `table`'s rule gives for `value` (produced by a node), or None."""
    node = value.producer()
    if node is None:
        return None
    entry = table.get((canonical_domain(node.domain), node.op_type))
    if entry is None:
        return None
    index = value.index()
    if index != 0 and not entry.all_outputs:
        return None
    try:
        return entry.fn(Site(oracle, node, index, depth))
    except _RULE_ERRORS:
        return None


class StaticShapes:
    """Shapes, element types and partial integer values, memoised per value.

    Facts are semantic (what the tensor is at run time), so a rewrite that keeps values cannot
    make a recorded fact wrong; it can only make an unknown one knowable, which `forget` allows.
    """

    def __init__(self, model: ir.Model, given: dict | None = None, known: list | None = None):
        self._main_inputs = {id(v) for v in model.graph.inputs}
        # id(value) -> (value, dtype, symbolic shape) taken as given, like a main input's
        # declaration: a control-flow body's inputs as one iteration sees them. Only a certificate
        # asks such an oracle (verify/certificate/scopes.py), to choose the sizes it runs at;
        # rules never trust it.
        self._given = dict(given or {})
        self.model = model
        # (shapes, elements, dtypes) memos another oracle of the model already holds (`given`)
        shapes, elements, dtypes = known or ({}, {}, {})
        self._shapes: dict[int, tuple[ir.Value, object]] = dict(shapes)
        self._elements: dict[int, tuple[ir.Value, object]] = dict(elements)
        self._dtypes: dict[int, tuple[ir.Value, object]] = dict(dtypes)
        self._warming = False

    def _warm(self, value: ir.Value, memo: dict, compute) -> None:
        """Compute `compute` for the producers behind `value` bottom-up, without recursion, so
        that a query deep in a long network never runs into the recursion depth limit."""
        self._warming = True
        try:
            order: list[ir.Value] = []
            seen: set[int] = set()
            stack = [(value, False)]
            while stack:
                current, expanded = stack.pop()
                if expanded:
                    order.append(current)
                    continue
                if id(current) in seen or (id(current) in memo and memo[id(current)][0] is current):
                    continue
                seen.add(id(current))
                stack.append((current, True))
                node = current.producer()
                if node is not None and id(current) not in self._main_inputs:
                    stack.extend((i, False) for i in node.inputs if i is not None)
            for ancestor in order[:-1]:
                compute(ancestor)
        finally:
            self._warming = False

    def given(self, given: dict) -> StaticShapes:
        """An oracle that also takes `given` (see __init__) as facts, reusing this one's answers
        for the main graph's values (no body's input reaches them)."""
        main = self.model.graph
        known = [{key: hit for key, hit in memo.items() if hit[0].graph is main}
                 for memo in (self._shapes, self._elements, self._dtypes)]
        return StaticShapes(self.model, given, known)

    def forget_bodies(self) -> None:
        """Forget the facts of every value outside the main graph (those of a function body read
        with its attribute references bound to one call's values)."""
        main = self.model.graph
        for memo in (self._shapes, self._elements, self._dtypes):
            for key in [key for key, hit in memo.items() if hit[0].graph is not main]:
                del memo[key]

    def refresh(self, values) -> list[ir.Value]:
        """Forget the facts of the computed ones among `values` (values an edit may have changed
        the facts of: the caller passes them producers first) and derive again those that were
        known; returns the values whose facts came out different. A graph input's or
        initializer's facts depend on nothing an edit changes, and are kept: a main input's
        symbolic dims stay the same tokens that every fact derived from them holds."""
        memos = ((self._shapes, self.symbolic_shape), (self._elements, self.elements), (self._dtypes, self.dtype))
        known = []
        for value in values:
            if value.producer() is None:
                continue
            had = [memo.pop(id(value), None) for memo, _ in memos]
            if any(hit is not None and hit[0] is value for hit in had):
                known.append((value, had))
        changed = []
        for value, had in known:
            producer = value.producer()
            if producer is not None and producer.graph is None:
                continue  # removed since: nothing reads its facts any more
            if any(hit is not None and hit[0] is value and derive(value) != hit[1]
                   for hit, (_, derive) in zip(had, memos)):
                changed.append(value)
        return changed

    def forget(self) -> None:
        self._shapes.clear()
        self._elements.clear()
        self._dtypes.clear()

    # -- element types --------------------------------------------------------------------

    def dtype(self, value: ir.Value | None, _depth: int = 0) -> ir.DataType | None:
        """The element type, from trusted facts only (None when not known)."""
        if value is None:
            return None
        hit = self._dtypes.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        if not self._warming:
            self._warm(value, self._dtypes, self.dtype)
        result = None
        if _depth < _MAX_DEPTH:
            try:
                result = self._infer_dtype(value, _depth)
            except _RULE_ERRORS:
                result = None
        self._dtypes[id(value)] = (value, result)
        return result

    def _infer_dtype(self, value: ir.Value, depth: int) -> ir.DataType | None:
        given = self._given.get(id(value))
        if given is not None and given[0] is value:
            return given[1]
        if id(value) in self._main_inputs:
            return value.dtype if isinstance(value.type, ir.TensorType) else None
        if value.is_graph_input():
            return None
        if value.const_value is not None and value.producer() is None:
            return value.const_value.dtype
        array = constant_array(value)
        if array is not None:
            return ir.DataType.from_numpy(array.dtype)
        return _from_rule(DTYPE_RULES, self, value, depth)

    # -- shapes ---------------------------------------------------------------------------

    def shape(self, value: ir.Value | None) -> tuple | None:
        """The trusted shape with None for every dim whose size is not known (rank known)."""
        shape = self.symbolic_shape(value)
        return None if shape is None else tuple(d if isinstance(d, int) else None for d in shape)

    def symbolic_shape(self, value: ir.Value | None, _depth: int = 0) -> tuple | None:
        """The trusted shape with a Sym token for every dim whose size is not known."""
        if value is None:
            return None
        hit = self._shapes.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        if not self._warming:
            self._warm(value, self._shapes, self.symbolic_shape)
        result = self._infer_shape(value, _depth) if _depth < _MAX_DEPTH else None
        self._shapes[id(value)] = (value, result)
        return result

    def rank(self, value: ir.Value | None) -> int | None:
        shape = self.symbolic_shape(value)
        return None if shape is None else len(shape)

    def static_shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        shape = self.symbolic_shape(value)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return shape

    def _input_shape(self, value: ir.Value) -> tuple | None:
        declared = value.shape
        if declared is None:
            return None
        dims = []
        for axis, dim in enumerate(declared):
            if isinstance(dim, int):
                dims.append(dim)
            else:
                dims.append(Sym(f"{value.name}[{axis}]"))
        if value.is_initializer() and value.const_value is not None:
            # Not fed, the initializer is used: a dim is known only where both agree.
            actual = tuple(value.const_value.shape)
            if len(actual) != len(dims):
                return None
            dims = [d if isinstance(d, int) and d == a else Sym(f"{value.name}[{i}]") for i, (d, a) in
                    enumerate(zip(dims, actual))]
        return tuple(dims)

    def _infer_shape(self, value: ir.Value, depth: int) -> tuple | None:
        given = self._given.get(id(value))
        if given is not None and given[0] is value:
            return given[2]
        if id(value) in self._main_inputs:
            return self._input_shape(value)
        if value.is_graph_input():
            return None  # subgraph or function inputs: nothing checks them
        if value.const_value is not None and value.producer() is None:
            return tuple(int(d) for d in value.const_value.shape)  # no need to read the bytes
        array = constant_array(value)
        if array is not None:
            return tuple(int(d) for d in array.shape)
        return _from_rule(SHAPE_RULES, self, value, depth)

    # -- partial values -------------------------------------------------------------------

    def elements(self, value: ir.Value | None, _depth: int = 0) -> Elements | None:
        """The partial value of a rank-0 or rank-1 integer tensor of at most MAX_ELEMENTS."""
        if value is None:
            return None
        hit = self._elements.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        result = None
        if _depth < _MAX_DEPTH:
            try:
                result = self._infer_elements(value, _depth)
            except _RULE_ERRORS:
                result = None
        self._elements[id(value)] = (value, result)
        return result

    def _infer_elements(self, value: ir.Value, depth: int) -> Elements | None:
        tensor = value.const_value if value.producer() is None else None
        if tensor is not None and (len(tensor.shape) > 1 or tensor.size > MAX_ELEMENTS):
            return None  # too big to be a shape: do not read its bytes
        array = constant_array(value)
        if array is not None:
            if array.dtype.kind not in "iu" or array.ndim > 1 or array.size > MAX_ELEMENTS:
                return None
            return Elements(tuple(int(x) for x in array.reshape(-1)), array.ndim == 0, ir.DataType.from_numpy(array.dtype))
        if value.is_graph_input():
            return None
        return _from_rule(VALUE_RULES, self, value, depth)
