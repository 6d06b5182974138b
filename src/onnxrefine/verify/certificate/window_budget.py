"""A certificate's window against the memory budget (resources.py), estimated only where it can
be large.

A window whose inputs take under SMALL_BYTES and that holds no operator that can make its output
far larger than its inputs (`EXPANDING`) runs as it is. A Concat outputs what it reads: where
what it reads has an element count bounded from the window's inputs (through Shape, Gather and
the operators that keep their data's count), its output's bound is added to the inputs' size
instead, so the shape arithmetic of a Reshape target (Shape, Gather, Unsqueeze, Concat of a few
integers) needs no shape inference, while a chain of Concats doubling a value adds up past
SMALL_BYTES. Everything else gets `ir.peak.estimate_peak`, kept per window model and input
shapes, against an eighth of the budget.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from onnxrefine.verify.certificate.bound import CertificateSkip

# Operators whose output can be far larger than their inputs: a window holding one is checked
# against the memory budget whatever its inputs' size (a resource bomb next to a rewrite is in its window).
EXPANDING = frozenset("ConstantOfShape Expand Tile Pad Resize Upsample OneHot Range Concat MatMul Gemm "
                      "Loop Scan".split())
SMALL_BYTES = 1 << 20
CERTIFICATE_BUDGET_SHARE = 8
MAX_ESTIMATES = 256
# Operators whose output has no more elements than their data input (the first).
_SAME_ELEMENTS = frozenset("Identity Reshape Squeeze Unsqueeze Flatten Cast".split())
_ITEM_BYTES = 8  # the widest element a bounded value can have (int64, float64)


def check_budget(proto: onnx.ModelProto, activations, fed, estimates: dict | None = None,
                 digest: bytes = b"") -> None:
    """CertificateSkip when the window `proto` (its activations' sides, its fed constants) would
    exceed the certificates' share of the memory budget. `estimates` keeps the estimates made,
    by `digest` (the model's bytes) and the shapes fed: an estimate reads nothing else."""
    from onnxrefine import resources
    from onnxrefine.ir import peak

    shapes = {f"a{i}": (tuple(s.shape), np.dtype(s.dtype or np.float32).itemsize) for i, s in enumerate(activations)}
    shapes.update({name: (np.shape(array), np.asarray(array).dtype.itemsize) for name, array in fed.items()})
    sizes = sum(math.prod(shape) * itemsize for shape, itemsize in shapes.values())
    concatenated = _bounded_concat_bytes(proto, shapes)
    if concatenated is not None and sizes + concatenated < SMALL_BYTES:
        return
    feeds = {f"a{i}": np.broadcast_to(np.zeros((), np.dtype(s.dtype or np.float32)), s.shape)
             for i, s in enumerate(activations)}
    feeds.update(fed)
    key = (digest, tuple((name, np.shape(array)) for name, array in feeds.items()))
    estimate = estimates.get(key) if estimates is not None and digest else None
    if estimate is None:
        estimate = peak.estimate_peak(proto, feeds)
        if estimates is not None and digest:
            if len(estimates) >= MAX_ESTIMATES:
                estimates.pop(next(iter(estimates)))
            estimates[key] = estimate
    # A certificate holds up to ~8 input sets and both sides' outputs per set at once: its window
    # gets an eighth of the budget (measured: a Concat-doubling window within the whole budget
    # took the process to 3 GB).
    try:
        resources.check_runnable(estimate, "the matched subgraph",
                                 budget=resources.memory_budget() // CERTIFICATE_BUDGET_SHARE,
                                 budget_text=f"1/{CERTIFICATE_BUDGET_SHARE} of --memory-budget for a certificate")
    except resources.ResourceLimitError as exc:
        raise CertificateSkip(str(exc)) from None


def _bounded_concat_bytes(proto: onnx.ModelProto, shapes: dict[str, tuple[tuple, int]]) -> int | None:
    """The bytes the window's Concats output at most, where each reads only values whose element
    counts are bounded from the inputs' shapes (`shapes`: name -> (shape, itemsize)); None where
    the window holds another expanding operator or a Concat of an unbounded value."""
    elements = {name: math.prod(shape) for name, (shape, _) in shapes.items()}
    total = 0
    for node in proto.graph.node:
        bound = None
        if node.op_type in _SAME_ELEMENTS and node.input and node.input[0] in elements:
            bound = elements[node.input[0]]
        elif node.op_type == "Shape" and node.input[0] in shapes:
            bound = len(shapes[node.input[0]][0])
        elif node.op_type == "Gather" and len(node.input) > 1 and all(n in elements for n in node.input[:2]):
            bound = elements[node.input[0]] * elements[node.input[1]]
        elif node.op_type == "Concat":
            if not all(name in elements for name in node.input if name):
                return None
            bound = sum(elements[name] for name in node.input if name)
            total += bound * _ITEM_BYTES
        elif node.op_type in EXPANDING:
            return None
        if bound is not None and node.output:
            elements[node.output[0]] = bound
    return total
