"""Concrete shapes and element types for a certificate's boundary values that no fact gives.

Two sources, tried by the certifier (certifier.py) after the shape facts:

- a run of the model (`RunShapes.fill`): every activation of the window takes the shape and
  element type it has in one onnxruntime run of the model on its own input shapes
  (`verify/ort/observed.py`; its symbolic dims at sizes it runs at, `verify/ort/dims.py`, which
  tries the sizes an earlier run ran at first), all from the same run, so they agree with each
  other and with every fact about them. Each run also asks every other value of the model whose
  shape no fact fixes (only Shapes are fetched, and one element of a value whose element type
  nothing else gives), so the first run usually answers for the rest; a value a rewrite makes
  inherits the shape of the value it replaces (`inherit`);
- for a rewrite in a model-local function's body or a control-flow body, the facts its inputs
  have at each call or first iteration (scopes.py), whose arguments a run may give.

The run only chooses the sizes the certificate is judged at: a wrong choice can make a
certificate impossible, never make a wrong rewrite pass.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import CertificatePostponed
from onnxrefine.verify.certificate.inputs import SUPPORTED_DTYPES
from onnxrefine.verify.certificate.model import Side
from onnxrefine.verify.ort import MAX_OBSERVED_VALUES, RunnableDims

# Runs of the model made to learn shapes no fact gives, per optimization.
MAX_OBSERVATIONS = 4
# Operators whose output is not a tensor (no Shape of it to ask for).
_NOT_TENSOR_OPS = frozenset("SequenceConstruct SequenceEmpty SequenceInsert SequenceErase SplitToSequence Optional".split())


def unresolved(sides) -> list[Side]:
    """The activation sides without a concrete shape or element type."""
    return [s for s in sides if s.array is None and (s.shape is None or s.dtype is None)]


class RunShapes:
    """The shapes and element types of runs of the model, kept for one optimization."""

    def __init__(self, dims: RunnableDims):
        self.dims = dims  # the sizes of the symbolic dims the model runs at, shared with fold_shapes
        self._observed: dict[int, tuple] = {}  # id(value) -> (value, shape, dtype) in a run
        self._runs = 0

    def inherit(self, outputs) -> None:
        """An applied rewrite: each value replacing an observed one has its shape and type."""
        for old, new in outputs:
            if id(old) in self._observed and id(new) not in self._observed:
                self._observed[id(new)] = (new, *self._observed[id(old)][1:])

    def fill(self, request, sides) -> bool:
        """Give every activation side the shape (and, where none is known, the element type) it
        has in a run of the model. False where no run can say (a value of a function body or of
        a loop iteration, a model that does not run, MAX_OBSERVATIONS runs made)."""
        activations = [s for s in sides if s.array is None]
        if len(self.observed(request, [s.value for s in activations])) < len(activations):
            return False
        for side in activations:
            _, side.shape, dtype = self._observed[id(side.value)]
            if side.dtype is None:
                if np.dtype(dtype) not in SUPPORTED_DTYPES:
                    return False
                side.dtype = np.dtype(dtype)
        return True

    def observed(self, request, values) -> dict[int, tuple]:
        """id(value) -> (shape, numpy dtype) in a run of the model, for those of `values` a run
        answers (none after MAX_OBSERVATIONS runs, or once the model did not run). Where the request
        may be postponed, raises CertificatePostponed whatever earlier runs observed."""
        if values and request.may_postpone:
            # From the request alone, not from what earlier runs observed or how many were made:
            # verification replays prefixes of the schedule with this certifier, and a replay's
            # steps must come in the order of the full run's (passes/bisection.py).
            raise CertificatePostponed(f"the shape of '{values[0].name}' is not known before shape folding")
        missing = [v for v in values if id(v) not in self._observed]
        if missing and self._runs < MAX_OBSERVATIONS:
            self._runs += 1
            unknown = [v for node in request.model.graph for v in node.outputs
                       if id(v) not in self._observed and _not_static(v, request.context.facts)]
            asked = list(dict.fromkeys(missing + unknown))[:MAX_OBSERVED_VALUES]
            runs = self.dims.observe(request.model, asked, shapes=True, facts=request.context.facts)
            if isinstance(runs, str):
                self._runs = MAX_OBSERVATIONS  # a model that did not run will not run the next time
            else:
                values_by_id = {id(v): v for v in asked}
                for key, (shape, dtype) in runs[0][1].items():
                    self._observed[key] = (values_by_id[key], shape, dtype)
        return {id(v): self._observed[id(v)][1:] for v in values if id(v) in self._observed}


def _not_static(value: ir.Value, oracle) -> bool:
    """A named tensor of the model whose shape the facts do not fix (unknown or symbolic)."""
    producer = value.producer()
    if not value.name or producer is None or producer.op_type in _NOT_TENSOR_OPS:
        return False
    if value.type is not None and not isinstance(value.type, ir.TensorType):
        return False
    return oracle.static_shape(value) is None
