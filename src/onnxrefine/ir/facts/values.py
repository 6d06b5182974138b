"""Partial values of small integer tensors (the shape arithmetic of exported models: Shape,
Gather, Slice, Concat, Reshape targets, ...). Each element is an int, a Sym (a dim whose size is
unknown) or None (unknown)."""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.facts.core import Elements, Site, Sym, product, value_rule
from onnxrefine.ir.facts.indexing import slice_positions, slice_shape
from onnxrefine.ir.facts.layout import shape_range

_INT_DTYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})


@value_rule("Shape")
def shape_value(site: Site):
    shape = site.oracle.symbolic_shape(site.inputs[0], site.depth + 1)
    if shape is None:
        return None
    start, end = shape_range(site.node, len(shape))
    return Elements(tuple(shape[start:end]), False, ir.DataType.INT64)


@value_rule("Size")
def size_value(site: Site):
    shape = site.oracle.symbolic_shape(site.inputs[0], site.depth + 1)
    size = product(shape) if shape is not None else None
    return Elements((size if isinstance(size, int) else None,), True, ir.DataType.INT64)


@value_rule("Identity")
def identity_value(site: Site):
    return site.elements(0)


@value_rule("Cast")
def cast_value(site: Site):
    source = site.elements(0)
    target = ir.DataType(site.attr("to", 0))
    if source is None or target not in _INT_DTYPES:
        return None
    limit = 2**31 if target == ir.DataType.INT32 else 2**63
    items = tuple(
        e if (isinstance(e, int) and -limit <= e < limit) or (isinstance(e, Sym) and target == ir.DataType.INT64)
        else None
        for e in source.items
    )
    return Elements(items, source.scalar, target)


@value_rule("Gather")
def gather_value(site: Site):
    data, indices = site.elements(0), site.elements(1)
    if data is None or indices is None or data.scalar or not indices.known():
        return None
    if site.attr("axis", 0) not in (0, -1):
        return None
    picked = gathered(data.items, indices.items)
    return None if picked is None else Elements(picked, indices.scalar, data.dtype)


def gathered(items: tuple, indices) -> tuple | None:
    """Gather along the only axis of a 1-D value (negative indices count from the end); None for
    an index out of range."""
    picked = []
    for i in indices:
        j = i + len(items) if i < 0 else i
        if not 0 <= j < len(items):
            return None
        picked.append(items[j])
    return tuple(picked)


@value_rule("Slice")
def slice_value(site: Site):
    data = site.elements(0)
    if data is None or data.scalar:
        return None
    params = [site.elements(i) for i in range(1, 5)]
    if slice_shape(site.node, data.items, params) is None:  # reuse the index arithmetic on one axis
        return None
    return _slice_elements(site.node, data, params)


def _slice_elements(node, data: Elements, params) -> Elements | None:
    if len(node.inputs) > 1:
        starts, ends, axes, steps = params
        if starts is None or ends is None or not starts.known() or not ends.known():
            return None
        if axes is not None and (not axes.known() or list(axes.items) not in ([0], [-1])):
            return None
        if axes is None and len(node.inputs) > 3 and node.inputs[3] is not None:
            return None
        if steps is not None and not steps.known():
            return None
        if steps is None and len(node.inputs) > 4 and node.inputs[4] is not None:
            return None
        step = steps.items[0] if steps is not None else 1
        if len(starts.items) != 1 or len(ends.items) != 1 or (steps is not None and len(steps.items) != 1):
            return None
        start, end = starts.items[0], ends.items[0]
    else:
        starts, ends = list(attr(node, "starts", [])), list(attr(node, "ends", []))
        axes = list(attr(node, "axes", [0]))
        if len(starts) != 1 or len(ends) != 1 or axes not in ([0], [-1]):
            return None
        start, end, step = starts[0], ends[0], 1
    positions = slice_positions(len(data.items), start, end, step)
    if positions is None:
        return None
    return Elements(tuple(data.items[i] for i in positions), False, data.dtype)


@value_rule("Concat")
def concat_value(site: Site):
    parts = [site.elements(i) for i in range(len(site.inputs))]
    if any(p is None or p.scalar for p in parts) or not parts:
        return None
    if len({p.dtype for p in parts}) != 1:
        return None
    return Elements(tuple(e for p in parts for e in p.items), False, parts[0].dtype)


@value_rule("Unsqueeze")
def unsqueeze_value(site: Site):
    data = site.elements(0)
    if data is None or not data.scalar:
        return None
    axes = site.attr("axes")
    if axes is None:
        axes_input = site.elements(1)
        axes = None if axes_input is None or not axes_input.known() else list(axes_input.items)
    return Elements(data.items, False, data.dtype) if axes is not None and list(axes) in ([0], [-1]) else None


@value_rule("Squeeze")
def squeeze_value(site: Site):
    data = site.elements(0)
    if data is None or data.scalar or len(data.items) != 1:
        return None
    return Elements(data.items, True, data.dtype)


@value_rule("Reshape")
def reshape_value(site: Site):
    data, target = site.elements(0), site.elements(1)
    if data is None or target is None or not target.known() or target.scalar:
        return None
    if len(target.items) == 0 and len(data.items) == 1:
        return Elements(data.items, True, data.dtype)
    if len(target.items) == 1 and target.items[0] in (-1, len(data.items)):
        return Elements(data.items, False, data.dtype)
    return None


@value_rule("Add Sub Mul Div")
def arithmetic_value(site: Site):
    return arithmetic(site.op, site.elements(0), site.elements(1)) if len(site.inputs) == 2 else None


@value_rule("Max Min")
def extremum_value(site: Site):
    # Variadic: fold every operand, not just the first two (found by fuzzing the pipeline).
    result = site.elements(0)
    for index in range(1, len(site.inputs)):
        result = arithmetic(site.op, result, site.elements(index))
    return result


@value_rule("Equal")
def equal_value(site: Site):
    # parity: a dim is never equal to a negative int
    return equal(site.elements(0), site.elements(1)) if len(site.inputs) == 2 else None


def _paired(a: Elements | None, b: Elements | None) -> tuple[tuple, tuple] | None:
    """The two operands' items broadcast to one length (a single item repeats), or None."""
    if a is None or b is None or a.dtype != b.dtype:
        return None
    if len(a.items) != len(b.items) and 1 not in (len(a.items), len(b.items)):
        return None
    n = max(len(a.items), len(b.items))
    return (a.items * n if len(a.items) == 1 else a.items), (b.items * n if len(b.items) == 1 else b.items)


def arithmetic(op: str, a: Elements | None, b: Elements | None) -> Elements | None:
    pair = _paired(a, b)
    if pair is None:
        return None
    xs, ys = pair
    limit = 2**31 if a.dtype == ir.DataType.INT32 else 2**63
    out = []
    for x, y in zip(xs, ys):
        if not (isinstance(x, int) and isinstance(y, int)):
            out.append(None)
            continue
        if op == "Add":
            r = x + y
        elif op == "Sub":
            r = x - y
        elif op == "Mul":
            r = x * y
        elif op == "Max":
            r = max(x, y)
        elif op == "Min":
            r = min(x, y)
        else:  # integer Div: truncation and flooring agree only for non-negative operands
            r = x // y if x >= 0 and y > 0 else None
        out.append(r if r is None or -limit <= r < limit else None)
    return Elements(tuple(out), a.scalar and b.scalar, a.dtype)


def equal(a: Elements | None, b: Elements | None) -> Elements | None:
    """Equal over partial values. A Sym element is a dim size, never
    negative, so it differs from every negative int (Expand's `Where(Equal(shape, -1), 1, shape)`);
    the same Sym object is equal to itself; anything else unknown stays unknown."""
    pair = _paired(a, b)
    if pair is None:
        return None
    xs, ys = pair
    out = []
    for x, y in zip(xs, ys):
        if isinstance(x, int) and isinstance(y, int):
            out.append(int(x == y))
        elif isinstance(x, Sym) and x is y:
            out.append(1)
        elif (isinstance(x, Sym) and isinstance(y, int) and y < 0) or (isinstance(y, Sym) and isinstance(x, int) and x < 0):
            out.append(0)
        else:
            out.append(None)
    return Elements(tuple(out), a.scalar and b.scalar, ir.DataType.BOOL)
