"""The proof families, as records: what the certifier tries before running a rewrite.

One module per family group, each defining its records (`PROOFS`) beside the proofs and the
onnxruntime reading checks they name (`record.py`: the `Proof` record, what the reading checks
share). The certifier walks PROOFS below in order (certifier.Certifier._certify); a new family is
its two functions and one record in its group's module, and that module's PROOFS here.
"""

from onnxrefine.verify.certificate.proofs import affine, definitions, matmul
from onnxrefine.verify.certificate.proofs.record import Proof, Runtime

PROOFS = definitions.PROOFS + affine.PROOFS + matmul.PROOFS

__all__ = ["PROOFS", "Proof", "Runtime"]
