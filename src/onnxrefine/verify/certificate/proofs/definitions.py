"""Proofs by definition: rewrites whose exactness IEEE 754, the ONNX specification or the
definition of a conversion states outright, so there is no reading of an operator to cross-check
against onnxruntime by a run (their records hold no reading check).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.ir.foldmath import constant_array
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.verify.certificate.proofs.record import PROOF_TESTS as _P
from onnxrefine.verify.certificate.proofs.record import Proof


def zero_addition_proof(request) -> str | None:
    """x + c -> x and x - c -> x where every element of c is a zero, by IEEE 754's definition.

    For every float x other than a zero, x + (+-0) and x - (+-0) are x itself (x is
    representable: nothing rounds), +-inf and NaN included (NaN payloads aside, as everywhere in
    the certificates); subnormals too (ONNX has no flush-to-zero; onnxruntime's is off unless a
    session asks). For x = +-0: x + (-0) and x - (+0) are x; x + (+0) and x - (-0) are +0, so
    x = -0 gives +0 where the candidate keeps -0. The rewrite is therefore bit-exact except for
    the sign of a zero where c holds a +0 (Add) or a -0 (Sub), which is accepted only on an
    output the rule declared sign-insensitive: the same condition the run-based judges apply.

    Declined (the run decides): c first in a Sub (0 - x is -x), any nonzero or NaN element of c,
    a c that broadcasts x up (a higher rank, a dim x does not provably have), a dtype that is not
    x's own, an unknown rank, a replacement that forwards anything but x, function bodies.
    This is a definition, like Identity's: there is no reading of an op to cross-check by a run.
    """
    matched = list(request.matched)
    if len(matched) != 1 or request.replacement or len(request.outputs) != 1 or not isinstance(request.owner, ir.Graph):
        return None
    node = matched[0]
    if (node.op_type not in ("Add", "Sub") or node.domain not in STANDARD_DOMAINS or len(node.inputs) != 2
            or len(node.outputs) != 1):
        return None
    old, new = request.outputs[0]
    if old is not node.outputs[0] or node.inputs[0] is node.inputs[1]:
        return None
    if new is node.inputs[0]:
        other = node.inputs[1]
    elif new is node.inputs[1] and node.op_type == "Add":  # 0 + x; never 0 - x
        other = node.inputs[0]
    else:
        return None
    zero = constant_array(other)
    if zero is None or zero.dtype.kind != "f" or np.any(zero != 0):  # NaN != 0 too
        return None
    oracle = request.context.facts
    dtype = oracle.dtype(new) or new.dtype
    if dtype is None or np.dtype(dtype.numpy()) != zero.dtype:
        return None
    shape = oracle.symbolic_shape(new)
    if shape is None or zero.ndim > len(shape):
        return None
    for d_zero, d_x in zip(zero.shape, shape[len(shape) - zero.ndim:]):
        if d_zero != 1 and not (isinstance(d_x, int) and d_x == d_zero):
            return None
    flips = ~np.signbit(zero) if node.op_type == "Add" else np.signbit(zero)
    if np.any(flips) and not any(old is v for v in request.sign_insensitive):
        return None
    what = "+ 0" if node.op_type == "Add" else "- 0"
    return (f"proved: x {what} is x by IEEE 754 (zeros of c: {zero.size}, no broadcast of x)"
            + ("; the zero sign it may flip is declared unread" if np.any(flips) else ""))


def same_type_cast_proof(request) -> str | None:
    """Cast(x, to=T) -> x and CastLike(x, like) -> x where the facts give x the element type T
    (like's), by the definition of a conversion: every value of a type is a value of that type, so
    nothing rounds, saturates, flushes or changes sign (NaN payloads aside, as everywhere in the
    certificates; `saturate` reads only values the target cannot hold).

    Declined (the run decides): a replacement that forwards anything but x, x's or like's type not
    known from the facts, another type, `to` an attribute reference, function bodies. A
    definition: there is no reading of an op to cross-check by a run.
    """
    matched = list(request.matched)
    if len(matched) != 1 or request.replacement or len(request.outputs) != 1 or not isinstance(request.owner, ir.Graph):
        return None
    node = matched[0]
    if node.op_type not in ("Cast", "CastLike") or node.domain not in STANDARD_DOMAINS or not node.inputs \
            or len(node.outputs) != 1:
        return None
    old, new = request.outputs[0]
    if old is not node.outputs[0] or new is not node.inputs[0] or new is None:
        return None
    oracle = request.context.facts
    source = oracle.dtype(new)
    if node.op_type == "Cast":
        to = node.attributes.get("to")
        if to is None or to.is_ref() or to.type != ir.AttributeType.INT:
            return None
        target = ir.DataType(to.as_int())
    else:
        like = node.inputs[1] if len(node.inputs) > 1 else None
        target = None if like is None else oracle.dtype(like)
    if source is None or target is None or source != target:
        return None
    return f"proved: a {node.op_type} of {source.name} to {target.name} is its input by definition"


PROOFS = (
    Proof("same_type_cast", "a Cast or CastLike to the element type its input has is that input, by the "
          "definition of a conversion",
          same_type_cast_proof, None,
          (_P + "test_a_cast_to_its_own_type_is_proved_by_definition_and_the_outputs_agree",),
          (_P + "test_a_wrong_cast_removal_is_not_proved_and_its_run_refuses_it",),
          exact=True),
    Proof("zero_addition", "x + 0 and x - (-0) are x by IEEE 754's definition of addition, where the zero "
          "sign they may change is read by nobody",
          zero_addition_proof, None,
          (_P + "test_float_add_zero_is_proved_by_definition_and_the_outputs_agree",
           _P + "test_a_declared_zero_sign_lets_the_proof_accept_x_plus_zero"),
          (_P + "test_a_wrong_zero_removal_is_not_proved_and_its_run_refuses_it",),
          exact=True),
)
