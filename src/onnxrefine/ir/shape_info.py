"""Shape information in the saved model: a value_info entry for every intermediate value whose
element type and shape the trusted facts (ir/facts) know, as onnxsim and onnxslim write them.

Viewers (Netron) and tools downstream read shapes from value_info. Only facts go in: a dim the
facts know is written as its size; a dim that is the same run-time size as a named symbolic dim
of a graph input (carried through shape-preserving operators) is written with that name; any
other unknown dim is written as unknown. A value whose element type or rank the facts do not
know keeps what the input declared for it, if anything. Graph inputs and outputs are the model's
interface and are left as declared.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxrefine.ir.facts import StaticShapes, Sym


def _input_dim_names(model: ir.Model, facts: StaticShapes) -> dict[int, str]:
    """id(Sym) -> the dim_param of the graph input axis it stands for."""
    names: dict[int, str] = {}
    for value in model.graph.inputs:
        declared, symbolic = value.shape, facts.symbolic_shape(value)
        if declared is None or symbolic is None:
            continue
        for dim, token in zip(declared, symbolic):
            if isinstance(token, Sym) and isinstance(dim, ir.SymbolicDim) and dim.value:
                names[id(token)] = dim.value
    return names


def annotate(model: ir.Model) -> int:
    """Give every intermediate value of the main graph the type and shape the facts know; returns
    how many values were annotated."""
    facts = StaticShapes(model)
    dim_names = _input_dim_names(model, facts)
    interface = {id(v) for v in model.graph.inputs} | {id(v) for v in model.graph.outputs}
    annotated = 0
    for node in model.graph:
        for value in node.outputs:
            if id(value) in interface or not value.name:
                continue
            if value.type is not None and not isinstance(value.type, ir.TensorType):
                continue  # a sequence, map or optional: the facts describe tensors only
            dtype, shape = facts.dtype(value), facts.symbolic_shape(value)
            if dtype is None or shape is None:
                continue
            value.type = ir.TensorType(dtype)
            value.shape = ir.Shape([d if isinstance(d, int) else dim_names.get(id(d)) for d in shape])
            annotated += 1
    return annotated


def strip(model: ir.Model) -> None:
    """No value_info for the main graph (--no-shape-info): its intermediate values forget type and
    shape (subgraphs keep theirs: their outputs are their interface)."""
    interface = {id(v) for v in model.graph.inputs} | {id(v) for v in model.graph.outputs}
    for node in model.graph:
        for value in node.outputs:
            if id(value) not in interface:
                value.type = None
                value.shape = None
