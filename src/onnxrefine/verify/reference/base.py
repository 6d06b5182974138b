"""What the float64 reference evaluator and its kernels share: the leaf of verify/reference*.py.

The evaluator (reference/evaluator.py) and the kernel modules (kernels/*.py) both import this module
and nothing here imports either, so there is no import circle: a kernel module registers its
kernels into KERNELS when it is imported (``@kernel("Relu")`` or ``register_kernels({...})`` for
kernels made by a factory), and reference/evaluator.py imports the kernel modules once, then dispatches on
KERNELS. A kernel raises UnsupportedOperatorError (defined here, so it needs no import of
reference/evaluator.py) when it cannot evaluate a node honestly (Dropout in training mode, say).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from onnxrefine.errors import OnnxRefineError

__all__ = ["KERNELS", "NodeCall", "ReferencePrecisionWarning", "UnsupportedOperatorError", "kernel",
           "register_kernels"]


class UnsupportedOperatorError(OnnxRefineError):
    """The float64 reference cannot evaluate an operator (unknown domain, random op, failed fallback)."""


class ReferencePrecisionWarning(UserWarning):
    """An onnx.reference fallback returned a float narrower than float64 for float64 inputs."""


class NodeCall:
    """What a kernel sees: the node's inputs (None for absent optional ones), attributes and opset."""

    __slots__ = ("node", "inputs", "attrs", "opset", "evaluator", "scope")

    def __init__(self, node, inputs, attrs, opset, evaluator, scope):
        self.node = node
        self.inputs = inputs
        self.attrs = attrs
        self.opset = opset
        self.evaluator = evaluator
        self.scope = scope

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, index: int) -> Any:
        return self.inputs[index] if index < len(self.inputs) else None

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)


Kernel = Callable[[NodeCall], Any]

# Standard-domain op type -> its native float64 kernel. One table, filled at import by the kernel
# modules; an op type registered twice is a programming error (two kernels, one silently lost).
KERNELS: dict[str, Kernel] = {}


def register_kernels(table: Mapping[str, Kernel]) -> dict[str, Kernel]:
    """Register every (op type, kernel) of `table`; returns it as a dict (the module's own view)."""
    for op_type, function in table.items():
        if op_type in KERNELS and KERNELS[op_type] is not function:
            raise RuntimeError(f"two float64 kernels registered for {op_type}")
        KERNELS[op_type] = function
    return dict(table)


def kernel(*op_types: str) -> Callable[[Kernel], Kernel]:
    """Decorator: register the function as the float64 kernel of each of `op_types`."""

    def register(function: Kernel) -> Kernel:
        register_kernels({op_type: function for op_type in op_types})
        return function

    return register
