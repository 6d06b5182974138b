"""Whether the shape-fact oracle's facts on a model are what onnxruntime computes."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from helpers import session

from onnxrefine.ir.facts import StaticShapes, Sym


def facts_hold(proto: onnx.ModelProto, feeds: dict, where: str, names=None) -> int:
    """Assert that every fact the oracle vouches for on `proto`'s node outputs (those in `names`,
    or all) is what onnxruntime computes on `feeds`, one Sym one size throughout; returns how
    many shapes were checked."""
    model = ir.serde.deserialize_model(proto)
    facts = StaticShapes(model)
    values = [v for node in model.graph for v in node.outputs if v.name and (names is None or v.name in names)]
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=v.name) for v in values if v.name not in declared)
    runner = session(probe)
    actual = dict(zip([o.name for o in runner.get_outputs()], runner.run(None, feeds)))
    syms: dict[int, int] = {}
    for value in model.graph.inputs:
        for dim, size in zip(facts.symbolic_shape(value) or (), feeds[value.name].shape):
            if isinstance(dim, Sym):
                syms[id(dim)] = size
    checked = 0
    for value in values:
        array = actual[value.name]
        here = f"{where}: {value.name} ({value.producer().op_type})"
        shape = facts.symbolic_shape(value)
        if shape is not None:
            assert len(shape) == array.ndim, here
            for dim, size in zip(shape, array.shape):
                if isinstance(dim, Sym):  # one Sym object is one run-time size
                    assert syms.setdefault(id(dim), size) == size, here
                else:
                    assert dim == size, here
            checked += 1
        dtype = facts.dtype(value)
        if dtype is not None:
            assert dtype.numpy() == array.dtype, here
        elements = facts.elements(value)
        if elements is not None:
            assert array.ndim == (0 if elements.scalar else 1) and array.size == len(elements.items), here
            for item, actual_item in zip(elements.items, array.reshape(-1).tolist()):
                if isinstance(item, Sym):
                    assert syms.setdefault(id(item), actual_item) == actual_item, here
                else:
                    assert item is None or item == actual_item, here
    return checked
