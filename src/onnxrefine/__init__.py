"""onnxrefine: an ONNX optimizer whose rewrites never change what a model computes."""

__version__ = "0.1.0"

# onnxruntime is an extra (any build provides the module: CPU, GPU, OpenVINO...); say which to
# install rather than fail deep inside an import chain.
try:
    import onnxruntime  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError("onnxrefine needs onnxruntime: pip install 'onnxrefine[cpu]' (or 'onnxrefine[gpu]', "
                      "or any onnxruntime build you already use)") from _exc

from onnxrefine.api import optimize, optimize_with_report  # noqa: E402
from onnxrefine.verified import VerifySettings  # noqa: E402

__all__ = ["__version__", "optimize", "optimize_with_report", "VerifySettings"]
