"""Operators that rearrange a tensor without computing on its elements: Shape, Size, Transpose,
Reshape, Flatten, Squeeze, Unsqueeze, Expand, Tile, DepthToSpace, ..., and the generators
ConstantOfShape and Range."""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.attrs import attr
from onnxrefine.ir.facts.core import (
    Site, Sym, broadcast_shapes, dtype_rule, normalize_axis, product, shape_rule,
)

# Output 0 has input 0's element type (the indexing ones are in indexing.py).
_SAME_DTYPE = tuple("Transpose Reshape Flatten Squeeze Unsqueeze Expand Tile DepthToSpace SpaceToDepth".split())


def shape_range(node: ir.Node, rank: int) -> tuple[int, int]:
    """Shape's `start`/`end` (opset 15+), clamped as the operator specifies."""
    start = int(attr(node, "start", 0))
    end = attr(node, "end")
    end = rank if end is None else int(end)
    if start < 0:
        start += rank
    if end < 0:
        end += rank
    start = min(max(start, 0), rank)
    end = min(max(end, 0), rank)
    return start, max(start, end)


@shape_rule("Shape")
def shape_shape(site: Site):
    shape = site.shape(0)
    if shape is None:
        return None
    start, end = shape_range(site.node, len(shape))
    return (max(0, end - start),)


@shape_rule("Size")
def size_shape(site: Site):
    return ()


@dtype_rule("Shape Size NonZero")
def int64_dtype(site: Site):
    return ir.DataType.INT64


@dtype_rule(_SAME_DTYPE)
def same_dtype(site: Site):
    return site.dtype(0)


@shape_rule("Transpose")
def transpose_shape(site: Site):
    shape = site.shape(0)
    if shape is None:
        return None
    perm = site.attr("perm")
    perm = list(range(len(shape)))[::-1] if perm is None else list(perm)
    return tuple(shape[p] for p in perm) if sorted(perm) == list(range(len(shape))) else None


@shape_rule("Flatten")
def flatten_shape(site: Site):
    shape = site.shape(0)
    if shape is None:
        return None
    return flattened_shape(shape, int(site.attr("axis", 1)))


def flattened_shape(shape: tuple, axis: int) -> tuple | None:
    """Flatten's output shape (dims int or Sym); None for an axis outside the rank."""
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        return None
    return (product(shape[:axis]), product(shape[axis:]))


@shape_rule("Reshape")
def reshape_shape(site: Site):
    shape, target = site.shape(0), site.elements(1)
    if target is None or target.scalar:
        return None
    return reshaped_shape(shape, target.items, bool(site.attr("allowzero", 0)))


def reshaped_shape(shape: tuple | None, items: tuple, allowzero: bool) -> tuple | None:
    """Reshape's output shape for data of `shape` (None: unknown) and a target whose partial
    value is `items` (ints, Syms, None)."""
    dims = []
    for i, e in enumerate(items):
        if isinstance(e, int) and e == 0 and not allowzero:
            if shape is None or i >= len(shape):
                return None
            dims.append(shape[i])
        elif isinstance(e, int) and e < -1:
            return None
        elif isinstance(e, Sym) and not allowzero and not (shape is not None and (i >= len(shape) or shape[i] is e)):
            # a run-time size that may be 0, which would copy input dim i instead (past the
            # input's rank a 0 is refused by the runtime, so there the size is e in a model that runs)
            dims.append(Sym("reshape"))
        else:
            dims.append(e)
    if sum(1 for d in dims if isinstance(d, int) and d == -1) > 1:
        return None
    if any(isinstance(d, int) and d == -1 for d in dims):
        inferred = None if shape is None else inferred_dim(shape, [d for d in dims if not (isinstance(d, int) and d == -1)])
        dims = [(inferred if inferred is not None else Sym("reshape")) if isinstance(d, int) and d == -1 else d
                for d in dims]
    return tuple(d if d is not None else Sym("reshape") for d in dims)


def inferred_dim(shape: tuple, others: list):
    """The size Reshape gives its -1 dim: the data's element count over the product of the other
    target dims, with a run-time dim (the same Sym) on both sides cancelled; an int, a Sym, or None
    when the quotient is not one of them.

    The cancellation is exact because the runtime refuses to infer -1 when the other dims
    multiply to 0 (onnxruntime's Reshape enforces a non-zero product; the ONNX specification
    leaves the shape undefined), so in a model that runs each cancelled dim is a non-zero factor
    of both products. (b, s, 64) to (b, s, -1, 16) gives 4; (b, s, 4, 16) to (b, s, -1) gives 64."""
    remaining = [d for d in shape if isinstance(d, Sym)]
    total = product([d for d in shape if isinstance(d, int)])
    rest = 1
    for d in others:
        if isinstance(d, int):
            rest *= d
            continue
        if not isinstance(d, Sym) or not any(r is d for r in remaining):
            return None
        remaining.pop(next(i for i, r in enumerate(remaining) if r is d))
    if rest <= 0 or total % rest != 0:
        return None
    quotient = total // rest
    if not remaining:
        return quotient
    return remaining[0] if len(remaining) == 1 and quotient == 1 else None


def _axes(site: Site) -> tuple[bool, list | None]:
    """(known, axes) of Squeeze/Unsqueeze: the attribute, else input 1; axes None when neither is
    given. An axes input whose value is not known leaves the axes unknown: read as "no axes", it
    made Squeeze drop every 1 (a Reshape after it then looked like a no-op and was removed)."""
    axes = site.attr("axes")
    if axes is None and site.present(1):
        axes_input = site.elements(1)
        if axes_input is None or not axes_input.known():
            return False, None
        axes = list(axes_input.items)
    return True, axes


@shape_rule("Squeeze")
def squeeze_shape(site: Site):
    shape = site.shape(0)
    if shape is None:
        return None
    known, axes = _axes(site)
    return squeezed_shape(shape, axes) if known else None


def squeezed_shape(shape: tuple, axes: list[int] | None) -> tuple | None:
    """Squeeze's output shape (dims int or Sym) for `axes` (None: not given); None where it
    depends on run-time dims or the axes are invalid."""
    if axes is not None and len(axes) == 0:
        return None  # empty axes: onnxruntime squeezes every 1, the ONNX reference none
    if axes is None:
        if not all(isinstance(d, int) for d in shape):
            return None
        return tuple(d for d in shape if d != 1)
    normalized = {normalize_axis(a, len(shape)) for a in axes}
    if None in normalized:
        return None
    return tuple(d for i, d in enumerate(shape) if i not in normalized)


@shape_rule("Unsqueeze")
def unsqueeze_shape(site: Site):
    shape = site.shape(0)
    if shape is None:
        return None
    known, axes = _axes(site)
    return unsqueezed_shape(shape, axes) if known and axes is not None else None


def unsqueezed_shape(shape: tuple, axes: list[int]) -> tuple | None:
    """Unsqueeze's output shape (dims int or Sym); None for invalid axes."""
    out_rank = len(shape) + len(axes)
    normalized = {normalize_axis(a, out_rank) for a in axes}
    if None in normalized or len(normalized) != len(axes):
        return None
    rest = iter(shape)
    return tuple(1 if i in normalized else next(rest) for i in range(out_rank))


@shape_rule("Expand")
def expand_shape(site: Site):
    target, shape = site.elements(1), site.shape(0)
    if target is None or shape is None or target.scalar:
        return None
    dims = tuple(e if e is not None else Sym("expand") for e in target.items)
    return broadcast_shapes([shape, dims])


@shape_rule("ConstantOfShape")
def constant_of_shape_shape(site: Site):
    target = site.elements(0)
    if target is None or target.scalar:
        return None
    return tuple(e if e is not None else Sym("constant_of_shape") for e in target.items)


@dtype_rule("ConstantOfShape")
def constant_of_shape_dtype(site: Site):
    value = site.attr("value")
    return ir.DataType.FLOAT if value is None else value.dtype


@shape_rule("Range")
def range_shape(site: Site):
    """Range(start, limit, delta) has max(ceil((limit - start) / delta), 0) elements: that count
    for known ints, and limit itself for Range(0, dim, 1) of a run-time dim (a size, never
    negative), the positions 0..dim-1 of an axis."""
    start, limit, delta = (site.elements(i) for i in range(3))
    if any(e is None or not e.scalar for e in (start, limit, delta)):
        return None
    (first,), (last,), (step,) = start.items, limit.items, delta.items
    if isinstance(first, int) and isinstance(last, int) and isinstance(step, int) and step != 0:
        return (max(-((first - last) // step), 0),)
    if first == 0 and step == 1 and isinstance(last, Sym):
        return (last,)
    return None


@dtype_rule("Range")
def range_dtype(site: Site):
    return site.dtype(0)


@shape_rule("Tile")
def tile_shape(site: Site):
    shape, repeats = site.shape(0), site.elements(1)
    if shape is None or repeats is None or len(repeats.items) != len(shape):
        return None
    return tuple(
        d * r if isinstance(d, int) and isinstance(r, int) else (d if r == 1 else Sym("tile"))
        for d, r in zip(shape, repeats.items)
    )
