"""A proof family's record and what every family's reading check shares.

A `Proof` holds one family's proof (its note when it proves the rewrite, None when it does not
apply or hold), the check of the proof's reading of the operators against onnxruntime (its note
when onnxruntime agrees, None when it does not or cannot say; no check for a definition, which
reads nothing an implementation could get wrong), which rewrites it is for, and the tests that
hold its legitimate cases and the counterexamples it must not prove. Each family module of this
package defines its records beside the two functions they name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx
from onnx import helper

# The tests every record names live here (tests/test_certificate_reach.py checks they exist).
PROOF_TESTS = "tests/test_certificate_proof.py::"


@dataclass(frozen=True)
class Runtime:
    """How a reading check reaches onnxruntime: the certifier's session settings."""

    make_session: Callable
    run: Callable


@dataclass(frozen=True)
class Proof:
    family: str
    why: str
    prove: Callable  # (CertificateRequest) -> the certificate's note, or None
    # (request, Runtime) -> the note when onnxruntime reads the ops as the proof does, else None
    # (the first rewrite is then run whole); None: a definition, nothing to cross-check.
    reading: Callable | None
    legitimate: tuple  # tests of rewrites it proves
    counterexamples: tuple  # tests of wrong rewrites (or misreadings) it must not prove
    exact: bool = False  # also offered exact rewrites (else only reassociating ones)


def miniature_model(graph: onnx.GraphProto, opsets: dict) -> onnx.ModelProto:
    """A model of the standard domain at the rewritten model's opset, at the lowest IR version
    that opset needs (onnxruntime may not know the installed onnx's newest)."""
    opset = helper.make_opsetid("", int(opsets.get("", opsets.get("ai.onnx", 13))))
    model = helper.make_model(graph, opset_imports=[opset])
    try:
        model.ir_version = helper.find_min_ir_version_for([opset])
    except Exception:  # noqa: BLE001 - an opset newer than onnx's table: its own newest
        model.ir_version = onnx.IR_VERSION
    return model
