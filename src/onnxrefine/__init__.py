"""onnxrefine: an ONNX optimizer whose rewrites never change what a model computes."""

__version__ = "0.1.0"

from onnxrefine._deferred import import_onnx_ir  # noqa: E402

import_onnx_ir()  # before any module of the package imports onnx_ir: sympy stays unloaded

__all__ = ["__version__", "optimize", "optimize_with_report", "VerifySettings"]


def __getattr__(name: str):
    # The API is imported on first use, so that `onnxrefine --version` and the CLI's argument
    # checks do not pay for the optimizer's imports.
    if name in ("optimize", "optimize_with_report"):
        from onnxrefine import api

        return getattr(api, name)
    if name == "VerifySettings":
        from onnxrefine.verified import VerifySettings

        return VerifySettings
    raise AttributeError(f"module 'onnxrefine' has no attribute {name!r}")
