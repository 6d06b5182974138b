"""Models with map-typed values (ZipMap of ai.onnx.ml: what every scikit-learn classifier export
ends in), which onnx-ir cannot hold yet.

`split` sets aside the nodes that produce or read a map (and everything downstream of them)
and leaves the rest, the *core*, as a model of tensors: the tensors the set-aside nodes read
become extra outputs of the core, so optimizing it keeps them (by name) and verifying it
compares them element by element. `assemble` puts the set-aside nodes back, unchanged, behind
the optimized core, with the original's outputs in their order. Where the split cannot be made
safely (a map-typed graph input, set-aside nodes reading a weight or holding subgraphs, a name
the optimized core now uses), `split`/`assemble` say why, and the caller passes the model
through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import helper

from onnxrefine.errors import BadInputError

# Operators whose outputs are maps whatever the model declares (ai.onnx.ml).
MAP_PRODUCERS = {("ai.onnx.ml", "ZipMap")}


class MapTypesError(BadInputError):
    """A valid model whose values include maps, which onnx-ir cannot hold (see ir/maps.py)."""


def holds_map(type_proto: onnx.TypeProto) -> bool:
    kind = type_proto.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return holds_map(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return holds_map(type_proto.optional_type.elem_type)
    return False


def map_typed_names(graph: onnx.GraphProto) -> list[str]:
    """Values the graph declares (inputs, outputs, value_info) or its operators make map-typed."""
    names = [v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info) if holds_map(v.type)]
    for node in graph.node:
        if (node.domain, node.op_type) in MAP_PRODUCERS:
            names.extend(o for o in node.output if o)
    return list(dict.fromkeys(names))


def check_no_maps(proto: onnx.ModelProto) -> None:
    names = map_typed_names(proto.graph)
    if names:
        shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
        raise MapTypesError(f"the model has map-typed values ({shown}), which onnx-ir cannot hold yet")


@dataclass
class SetAside:
    """What `split` took out of the model, to be put back by `assemble`."""

    nodes: list[onnx.NodeProto]
    outputs: list[onnx.ValueInfoProto]          # the original graph outputs, in order
    map_value_info: list[onnx.ValueInfoProto]
    read: list[str]                             # core values the set-aside nodes read
    added_outputs: list[str] = field(default_factory=list)  # of `read`: made core outputs
    opset_import: list[onnx.OperatorSetIdProto] = field(default_factory=list)

    @property
    def produced(self) -> set[str]:
        return {o for node in self.nodes for o in node.output if o}


def split(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, SetAside] | str:
    """(core model, what was set aside), or why the model cannot be split."""
    graph = proto.graph
    maps = set(map_typed_names(graph))
    if any(v.name in maps for v in graph.input):
        return "a graph input is map-typed"
    tail, produced = [], set()
    for node in graph.node:
        if any(o in maps for o in node.output) or any(i in produced for i in node.input if i):
            tail.append(node)
            produced.update(o for o in node.output if o)
    initializers = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    read = list(dict.fromkeys(i for node in tail for i in node.input if i and i not in produced))
    if any(name in initializers for name in read):
        return "the map operators read a weight (" + ", ".join(n for n in read if n in initializers) + ")"
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for node in tail for a in node.attribute):
        return "the map operators hold subgraphs"
    core = onnx.ModelProto()
    core.CopyFrom(proto)
    set_aside = {id(n) for n in tail}
    kept = [n for n in graph.node if id(n) not in set_aside]
    del core.graph.node[:]
    core.graph.node.extend(kept)
    del core.graph.value_info[:]
    core.graph.value_info.extend(v for v in graph.value_info if v.name not in maps and v.name not in produced)
    graph_inputs = {v.name for v in graph.input}
    outputs = [v for v in graph.output if v.name not in produced]
    names = {v.name for v in outputs}
    added = [name for name in read if name not in names and name not in graph_inputs]
    types = _tensor_types(core, added)
    del core.graph.output[:]
    core.graph.output.extend(outputs + [types[name] for name in added])
    aside = SetAside(tail, list(graph.output), [v for v in graph.value_info if v.name in maps], read, added,
                     list(proto.opset_import))
    return core, aside


def _tensor_types(core: onnx.ModelProto, names: list[str]) -> dict[str, onnx.ValueInfoProto]:
    """Value infos for `names`: declared, else onnx's shape inference, else an untyped one."""
    found = {v.name: v for v in core.graph.value_info if v.name in names}
    missing = [n for n in names if n not in found]
    if missing:
        try:
            inferred = onnx.shape_inference.infer_shapes(core).graph.value_info
        except Exception:  # noqa: BLE001 - inference is a help here, not a requirement
            inferred = []
        found.update({v.name: v for v in inferred if v.name in missing})
    return {n: found.get(n) or helper.make_empty_tensor_value_info(n) for n in names}


def assemble(core: onnx.ModelProto, aside: SetAside) -> onnx.ModelProto | str:
    """The optimized core with the set-aside nodes behind it, or why they cannot go back."""
    graph = core.graph
    produced_by_core = {o for n in graph.node for o in n.output if o} | {t.name for t in graph.initializer}
    available = produced_by_core | {v.name for v in graph.input}
    missing = [name for name in aside.read if name not in available]
    if missing:
        return f"the optimized model no longer computes {', '.join(missing)}"
    clashes = sorted(aside.produced & produced_by_core)
    if clashes:
        return f"the optimized model now uses the name(s) {', '.join(clashes)}"
    model = onnx.ModelProto()
    model.CopyFrom(core)
    model.graph.node.extend(aside.nodes)
    core_outputs = {v.name: v for v in graph.output}
    del model.graph.output[:]
    model.graph.output.extend(v if v.name in aside.produced else core_outputs[v.name] for v in aside.outputs)
    model.graph.value_info.extend(aside.map_value_info)
    versions = {o.domain: o.version for o in model.opset_import}
    for opset in aside.opset_import:
        if opset.domain not in versions:
            model.opset_import.append(opset)
    return model
