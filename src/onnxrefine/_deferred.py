"""Import onnx-ir without importing sympy (start-up time of the CLI).

onnx-ir imports sympy at module level (0.5-2.5 s on a loaded machine, most of the CLI's start-up)
but uses it only for arithmetic on symbolic dimensions (`SymbolicDim(...) + 1`), which onnxrefine
never does on its optimize path. While onnx-ir is imported, `sympy` and `onnx_ir._symbolic_shapes`
(whose module body calls sympy) are stand-in modules; the stand-ins are taken out of sys.modules
as soon as onnx-ir is loaded, so every later `import sympy` anywhere gets the real module through
the ordinary import system. onnx-ir keeps its references to the stand-ins, which import the real
module on first attribute access and forward to it: symbolic-dimension arithmetic still works
(tests/test_startup.py checks it), it just pays the import when first used.

Nothing is deferred when onnx-ir or sympy is already imported, or when the stand-in cannot be
built (another onnx-ir layout): then onnx-ir is imported the ordinary way.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types

_DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")
_lock = threading.RLock()


class _DeferredModule(types.ModuleType):
    """A module whose real counterpart is imported on first attribute access."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_deferred_real"] = None

    def __getattr__(self, attr: str):  # only called for attributes not set on the stand-in
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # the import system probes dunders; they must not load it
        return getattr(self._deferred_load(), attr)

    def _deferred_load(self) -> types.ModuleType:
        with _lock:
            real = self.__dict__["_deferred_real"]
            if real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                real = importlib.import_module(self.__name__)
                self.__dict__["_deferred_real"] = real
            return real


def import_onnx_ir() -> None:
    """Import onnx_ir with sympy deferred (see the module docstring)."""
    if "onnx_ir" in sys.modules or "sympy" in sys.modules:
        return
    with _lock:
        try:
            if any(importlib.util.find_spec(name.split(".")[0]) is None for name in _DEFERRED):
                return
        except (ImportError, ValueError):
            return
        stand_ins = {name: _DeferredModule(name) for name in _DEFERRED}
        for name, module in stand_ins.items():
            # The import system reads __spec__ of a module found in sys.modules; a spec that
            # is not initializing lets `import sympy` return the stand-in without loading it.
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module
        try:
            importlib.import_module("onnx_ir")
        finally:
            for name, module in stand_ins.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]


def lazy_face(namespace: dict, homes: dict[str, tuple[str, ...]]):
    """The `__getattr__` (PEP 562) of a package face whose names are imported from their modules
    on first use, so that importing the package for one of its rooms does not load the others.
    `homes`: module (absolute name, so that tests/test_layers.py reads it as an import) -> the
    names it gives. A name once looked up is kept in the package's namespace."""
    where = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module), name)
        return value

    return __getattr__
