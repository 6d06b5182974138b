"""Importing onnxruntime so that Ctrl-C stays Ctrl-C.

onnxruntime's native module is initialised by pybind11, which turns any Python exception raised
during the initialisation into `ImportError: initialization failed` (the original as its cause).
A Ctrl-C that lands there, a few hundred milliseconds into a run, became an ImportError; the
first code to need onnxruntime (a certificate's session, a fold) caught it as "onnxruntime
cannot run this", refused one rewrite, and the run went on to exit 0 with a different model
(tests/test_interrupt.py saw it on CI). Every module that needs onnxruntime gets it from
`require_onnxruntime`, where an interrupted import is re-raised as what it was; onnxruntime is
still imported only when first needed (a run without verification or certificates never does).
"""

from __future__ import annotations


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` or anything in its cause/context chain is a KeyboardInterrupt."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def require_onnxruntime():
    """Import onnxruntime (once; later imports find it loaded) and return the module. An import
    interrupted by Ctrl-C raises KeyboardInterrupt; any other failure raises as onnxruntime did."""
    try:
        import onnxruntime
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt) and interrupted(exc):
            raise KeyboardInterrupt from None
        raise
    return onnxruntime
