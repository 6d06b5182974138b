"""Map and sequence-of-map outputs (ZipMap of ai.onnx.ml, what scikit-learn classifier exports end
in) as tensors the verdict rules judge like any other.

A map's keys have no order, so a map becomes its values in the sorted order of its keys; a sequence
of maps becomes one row per map, in the sequence's order. The values keep the map's declared value
type (onnxruntime hands float32 values over as Python floats; judging them as float64 would count
ulps of the wrong type). The keys are kept apart (`MapOutputs.keys`): the session compares the
original's and the candidate's as sets per map, and different keys make that output a mismatch,
since values paired with other keys are not the same answer.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from onnxrefine.ir import maps

_ZIPMAP_VALUES = np.dtype(np.float32)  # ZipMap's outputs are maps to float, whatever is declared


def _value_dtype(type_proto: onnx.TypeProto) -> np.dtype | None:
    """The numpy dtype of the values of a map (or sequence of maps) type; None where it is no
    map of tensors."""
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        return _value_dtype(type_proto.sequence_type.elem_type)
    if kind == "map_type":
        value_type = type_proto.map_type.value_type
        if value_type.WhichOneof("value") == "tensor_type" and value_type.tensor_type.elem_type:
            return helper.tensor_dtype_to_np_dtype(value_type.tensor_type.elem_type)
    return None


class MapOutputs:
    """The map-typed graph outputs of one model and the keys its runs produced."""

    def __init__(self, graph: onnx.GraphProto):
        declared = {v.name: v.type for v in graph.output}
        map_names = set(maps.map_typed_names(graph))
        zipmaps = {o for node in graph.node if (node.domain, node.op_type) in maps.MAP_PRODUCERS
                   for o in node.output}
        self.dtypes: dict[str, np.dtype] = {}
        for name in declared:
            if name in map_names:
                dtype = _ZIPMAP_VALUES if name in zipmaps else _value_dtype(declared[name])
                if dtype is not None:
                    self.dtypes[name] = dtype
        self.keys: dict[str, set] = {name: set() for name in self.dtypes}

    def as_tensors(self, results: dict) -> dict:
        """`results` with each map output replaced by its values tensor (its keys recorded)."""
        for name, dtype in self.dtypes.items():
            if name in results:
                results[name], keys = values_and_keys(results[name], dtype)
                self.keys[name].add(keys)
        return results


def values_and_keys(value, dtype) -> tuple[np.ndarray, tuple]:
    """(values in sorted-key order, the keys): for a map, a vector and its sorted keys; for a
    sequence of maps with the same keys, one row per map and those keys; for maps with different
    keys, their values one after the other and the keys of each map in turn."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        value = value.item() if value.ndim == 0 else list(value)
    if isinstance(value, dict):
        keys = tuple(sorted(value))
        return np.asarray([value[k] for k in keys], dtype=dtype), keys
    per_map = [tuple(sorted(m)) for m in value]
    rows = [[m[k] for k in keys] for m, keys in zip(value, per_map)]
    if len(set(per_map)) <= 1:
        width = len(per_map[0]) if per_map else 0
        return np.asarray(rows, dtype=dtype).reshape(len(rows), width), per_map[0] if per_map else ()
    return np.asarray([v for row in rows for v in row], dtype=dtype), tuple(per_map)


def key_differences(original: MapOutputs, candidate: MapOutputs, output_map: dict) -> dict[str, str]:
    """Original output name -> why the candidate's maps are not comparable with the original's."""
    problems = {}
    for name, keys in original.keys.items():
        other = output_map.get(name)
        if other is None:
            continue
        if other not in candidate.keys:
            problems[name] = "the original's output is a map, the candidate's is not"
        elif candidate.keys[other] != keys:
            problems[name] = (f"the maps hold other keys: the original's {_shown(keys)}, "
                              f"the candidate's {_shown(candidate.keys[other])}")
    return problems


def _shown(keys: set) -> str:
    text = " | ".join(str(list(k)) for k in sorted(keys, key=repr))
    return text if len(text) <= 80 else text[:77] + "..."
