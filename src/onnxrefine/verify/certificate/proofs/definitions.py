"""Proofs by definition: rewrites whose exactness IEEE 754 or the ONNX specification states
outright, so there is no reading of an operator to cross-check against onnxruntime by a run
(their records hold no reading check).
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


PROOFS = (
    Proof("zero_addition", "x + 0 and x - (-0) are x by IEEE 754's definition of addition, where the zero "
          "sign they may change is read by nobody",
          zero_addition_proof, None,
          (_P + "test_float_add_zero_is_proved_by_definition_and_the_outputs_agree",
           _P + "test_a_declared_zero_sign_lets_the_proof_accept_x_plus_zero"),
          (_P + "test_a_wrong_zero_removal_is_not_proved_and_its_run_refuses_it",),
          exact=True),
)
