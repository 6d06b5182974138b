"""Which element-type conversions keep every value exactly, for rewrites of Cast chains.

Half- and mixed-precision models (float16/bfloat16 exports, autocast-style graphs) are full of
Casts. A Cast pair can only be dropped when the pair is the identity on every input: the first
Cast must be an exact widening (every value of the source type, infinities and NaN included, is
a value of the middle type), so the second sees the original value. float32 -> float16 ->
float32 rounds and is never dropped; float16 -> float32 -> float16 is the identity.
"""

from __future__ import annotations

import onnx_ir as ir

_D = ir.DataType
_INTS = (_D.INT8, _D.INT16, _D.INT32, _D.INT64, _D.UINT8, _D.UINT16, _D.UINT32, _D.UINT64)

# source -> the types that hold each of its values exactly (a float type holds an integer type
# when the integers fit its significand: 11 bits for float16, 8 for bfloat16, 24 for float32).
EXACT_WIDENING: dict[ir.DataType, frozenset[ir.DataType]] = {
    _D.FLOAT16: frozenset({_D.FLOAT, _D.DOUBLE}),
    _D.BFLOAT16: frozenset({_D.FLOAT, _D.DOUBLE}),
    _D.FLOAT: frozenset({_D.DOUBLE}),
    **{f8: frozenset({_D.FLOAT16, _D.FLOAT, _D.DOUBLE}) for f8 in (_D.FLOAT8E5M2, _D.FLOAT8E4M3FN)},
    **{f8: frozenset({_D.FLOAT, _D.DOUBLE}) for f8 in (_D.FLOAT8E4M3FNUZ, _D.FLOAT8E5M2FNUZ)},
    _D.INT8: frozenset({_D.INT16, _D.INT32, _D.INT64, _D.FLOAT16, _D.BFLOAT16, _D.FLOAT, _D.DOUBLE}),
    _D.UINT8: frozenset({_D.INT16, _D.UINT16, _D.INT32, _D.UINT32, _D.INT64, _D.UINT64, _D.FLOAT16,
                         _D.BFLOAT16, _D.FLOAT, _D.DOUBLE}),
    _D.INT16: frozenset({_D.INT32, _D.INT64, _D.FLOAT, _D.DOUBLE}),
    _D.UINT16: frozenset({_D.INT32, _D.UINT32, _D.INT64, _D.UINT64, _D.FLOAT, _D.DOUBLE}),
    _D.INT32: frozenset({_D.INT64, _D.DOUBLE}),
    _D.UINT32: frozenset({_D.INT64, _D.UINT64, _D.DOUBLE}),
    _D.BOOL: frozenset(_INTS + (_D.FLOAT16, _D.BFLOAT16, _D.FLOAT, _D.DOUBLE)),
}


def exact_widening(source: ir.DataType | None, target: ir.DataType | None) -> bool:
    """Cast source -> target keeps every value (and is not the identity)."""
    return source is not None and target is not None and target in EXACT_WIDENING.get(source, frozenset())


def cast_chain_refusal(source: ir.DataType | None, middle: ir.DataType, target: ir.DataType) -> str | None:
    """Why Cast(Cast(x: source, middle), target) must not become Cast(x, target) (or x), or None.

    Allowed only when the first Cast is an exact widening and the direct conversion is exact too
    (or the identity): then both forms give the value itself, with no rounding mode to agree on.
    """
    if source is None:
        return "the element type before the Cast chain is not known from trusted facts"
    if not exact_widening(source, middle):
        return f"Cast {source.name} -> {middle.name} rounds or saturates: dropping it changes the precision"
    if target != source and not exact_widening(source, target):
        return (f"Cast {source.name} -> {target.name} is not exact: the chain through {middle.name} and "
                "the direct Cast may round differently")
    return None
