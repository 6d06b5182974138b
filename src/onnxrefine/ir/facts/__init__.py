"""Static shapes, element types and small integer values we can vouch for, derived from trusted
facts only.

Trusted: the main graph's input types (onnxruntime checks every feed against the declared static
dims; a symbolic dim is checked against nothing), constant tensors, and the rules of the
operators in this package. Declared value_info shapes are never used.

A shape is a tuple of dims, or None when even the rank is unknown. A dim is an int, or a `Sym`:
an opaque token standing for "the run-time size of this axis". Two dims that are the same Sym
object are equal at run time (same axis of the same tensor, or carried through a shape-preserving
operator), which is what lets a Reshape target such as Concat(Shape(x)[0:1], [12, 64]) become
[0, 12, 64] while the batch size stays symbolic.

Small integer tensors (rank 0 or 1, as produced by Shape, Gather, Concat, ...) also get a partial
value: a tuple of elements, each an int, a Sym (a dim whose size is unknown) or None (unknown).

Layout: `oracle.StaticShapes` answers the queries (shape, symbolic_shape, static_shape, rank,
dtype, elements) and memoises them; each operator's rules are small functions registered by
(domain, op_type) in core's tables, one module per op family:
  elementwise (same shape as input 0, broadcasting), layout (Shape, Transpose, Reshape, Squeeze,
  Expand, Tile, ...), indexing (Concat, Split, Gather, Slice, Pad, Resize), reduce, window (Conv,
  pools), linalg (MatMul, Gemm), quantized, contrib (com.microsoft), values (partial values).
Adding an operator touches one family module. A rewrite context carries one oracle (`ctx.facts`).
"""

from onnxrefine.ir.facts import (  # noqa: F401  (importing a family registers its rules)
    contrib, elementwise, indexing, layout, linalg, quantized, reduce, values, window,
)
from onnxrefine.ir.facts.core import (
    DTYPE_RULES, MAX_ELEMENTS, SHAPE_RULES, VALUE_RULES, Elements, Sym, broadcast_dims,
)
from onnxrefine.ir.facts.oracle import StaticShapes

__all__ = [
    "DTYPE_RULES", "MAX_ELEMENTS", "SHAPE_RULES", "VALUE_RULES", "Elements", "StaticShapes", "Sym",
    "broadcast_dims",
]
