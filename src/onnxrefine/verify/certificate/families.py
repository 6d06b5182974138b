"""The proof families, as records: what the certifier tries before running a rewrite.

Each `Proof` holds one family's proof (proofs.py: the certificate's note when it proves the
rewrite, None when it does not apply or hold), the check of the proof's reading of the operators
against onnxruntime beside it (reading.py: its note when onnxruntime agrees, None when it does not
or cannot say; no check for a definition, which reads nothing an implementation could get
wrong), which rewrites it is for, and the tests that hold its legitimate cases and the
counterexamples it must not prove (tests/test_certificate_reach.py checks that every test named
here exists). The certifier walks PROOFS in order (certifier.Certifier._certify); a new family is
one record here, with its two functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from onnxrefine.verify.certificate.proofs import (
    affine_fold_proof,
    affine_tail,
    gemm_from_matmul_add_proof,
    gemm_parts,
    merged_matmul_parts,
    merged_matmul_proof,
    zero_addition_proof,
)
from onnxrefine.verify.certificate.reading import gemm_reading_agrees, split_reading_agrees, tail_reading_agrees


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


def _tail_reading(request, runtime: Runtime) -> str | None:
    tail = affine_tail(request)
    return None if tail is None else tail_reading_agrees(tail, runtime.make_session, runtime.run)


def _split_reading(request, runtime: Runtime) -> str | None:
    parts = merged_matmul_parts(request)
    return None if parts is None else split_reading_agrees(
        parts, request.outputs, dict(request.model.opset_imports), runtime.make_session, runtime.run)


def _gemm_reading(request, runtime: Runtime) -> str | None:
    output = request.outputs[0][0]
    dtype = request.context.facts.dtype(output) or output.dtype
    return None if dtype is None else gemm_reading_agrees(
        gemm_parts(request), dtype.numpy(), dict(request.model.opset_imports), runtime.make_session, runtime.run)


_P = "tests/test_certificate_proof.py::"

PROOFS = (
    Proof("zero_addition", "x + 0 and x - (-0) are x by IEEE 754's definition of addition, where the zero "
          "sign they may change is read by nobody",
          zero_addition_proof, None,
          (_P + "test_float_add_zero_is_proved_by_definition_and_the_outputs_agree",
           _P + "test_a_declared_zero_sign_lets_the_proof_accept_x_plus_zero"),
          (_P + "test_a_wrong_zero_removal_is_not_proved_and_its_run_refuses_it",),
          exact=True),
    Proof("affine_fold", "Conv followed by per-channel affine maps: every folded weight and bias is its "
          "float64 value rounded once",
          affine_fold_proof, _tail_reading,
          (_P + "test_every_fold_is_proved_the_first_once_onnxruntime_agrees_with_its_tail_reading",),
          (_P + "test_a_wrong_constant_in_a_later_fold_is_not_proved_and_its_run_refuses_it",
           _P + "test_a_misreading_the_proof_shares_with_the_rule_is_caught_by_onnxruntime",
           _P + "test_no_proof_where_a_reader_sees_the_sign_of_a_zero",
           _P + "test_the_tail_reading_check_is_tight_enough_for_a_dropped_default_epsilon")),
    Proof("merged_matmul", "sibling MatMuls of one input on concatenated weights, split back in order",
          merged_matmul_proof, _split_reading,
          (_P + "test_merged_matmuls_are_proved_the_first_once_onnxruntime_agrees_with_its_split_reading",),
          (_P + "test_a_merged_weight_that_is_not_the_concatenation_is_not_proved",
           _P + "test_a_split_order_the_proof_misreads_with_the_rule_is_caught_by_onnxruntime")),
    Proof("gemm_from_matmul_add", "MatMul by a constant plus a constant bias is Gemm(alpha=1, beta=1) on the "
          "same constants",
          gemm_from_matmul_add_proof, _gemm_reading,
          (_P + "test_matmul_add_to_gemm_after_the_first_is_proved_and_the_outputs_agree",),
          (_P + "test_a_gemm_with_a_transposed_weight_is_not_proved_and_its_run_refuses_it",
           _P + "test_a_proof_that_misreads_beta_is_caught_by_the_miniature_and_the_run_refuses",
           _P + "test_no_gemm_proof_where_a_zero_sign_is_read")),
)

