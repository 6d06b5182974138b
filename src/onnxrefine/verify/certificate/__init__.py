"""Per-rewrite certificates: the certifier (certifier.py) checks one rewrite on its matched subgraph,
built as a model by model.py, run on inputs.py's input sets and judged against bound.py's derived
error bound; some families are proved instead: the records of proofs/ (one module per family
group), each proof with its check of the proof's reading of the ops against onnxruntime beside it.
The face below is what the rest of the package uses."""

from onnxrefine.verify.certificate.certifier import Certifier
from onnxrefine.verify.certificate.inputs import MOVEMENT_OPS

__all__ = ["MOVEMENT_OPS", "Certifier"]
