"""onnxrefine: an ONNX optimizer whose rewrites never change what a model computes."""

__version__ = "0.1.0"

from onnxrefine.api import optimize, optimize_with_report  # noqa: E402
from onnxrefine.verified import VerifySettings  # noqa: E402

__all__ = ["__version__", "optimize", "optimize_with_report", "VerifySettings"]
