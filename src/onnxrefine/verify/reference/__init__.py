"""The float64 reference: the evaluator (evaluator.py), the kernel registry and call type every
kernel shares (base.py), when each value can be freed (memory.py), and the kernels by operator
family (kernels/). The face below is what the rest of the package uses."""

from onnxrefine.verify.reference.base import ReferencePrecisionWarning, UnsupportedOperatorError
from onnxrefine.verify.reference.bound import (bound_of, coherent_of, derived_op_types, magnitude_of, probable_lambda,
                                              probable_scale_of)
from onnxrefine.verify.reference.evaluator import evaluate_float64
from onnxrefine.verify.reference.kernels.dtype import inferred_types

__all__ = ["ReferencePrecisionWarning", "UnsupportedOperatorError", "bound_of", "coherent_of", "derived_op_types",
           "evaluate_float64",
           "inferred_types", "magnitude_of", "probable_lambda", "probable_scale_of"]
