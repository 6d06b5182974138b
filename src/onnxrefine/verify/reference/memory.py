"""Memory discipline of the float64 reference: weights read when a node needs them, values freed
after their last use.

A model's weights are left where they are (embedded bytes, or external data memory-mapped from
disk) until the node reading them runs; each is converted to float64 for that node only, so at
most one node's weights are held in float64 at a time (a Gather from a weight converts only the
rows it picks). `last_uses` tells the evaluator when a
computed value is read for the last time, so it can drop it there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxrefine.verify.reference.kernels import tensor as _tensor
from onnxrefine.verify.reference.kernels.tensor import to_internal


class Initializer:
    """An initializer not yet read: embedded bytes, or external data memory-mapped on `load()`."""

    __slots__ = ("tensor", "base_dir")

    def __init__(self, tensor: onnx.TensorProto, base_dir: str | None):
        self.tensor, self.base_dir = tensor, base_dir

    def load(self) -> np.ndarray:
        """The weight as the kernels read it: floats converted to float64 (a new array), other
        types copied so that no kernel holds on to the mapping."""
        native = self.native()
        if isinstance(native, np.memmap):
            view = np.asarray(native)
            return to_internal(view) if _tensor.is_floating(view.dtype) and view.dtype != np.float64 \
                else np.array(view)
        return to_internal(native)

    def native(self) -> np.ndarray:
        """The weight in its own dtype, memory-mapped where it is external data; for a kernel that
        only moves elements (a Gather from an embedding table), which then converts the few it
        picks, not the whole table."""
        tensor = self.tensor
        if tensor.data_location != onnx.TensorProto.EXTERNAL or self.base_dir is None:
            return numpy_helper.to_array(tensor)
        info = {entry.key: entry.value for entry in tensor.external_data}
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        if dtype.kind not in "fiub" or dtype.itemsize == 0:  # packed or non-numpy types: onnx reads them
            return numpy_helper.to_array(tensor, self.base_dir)
        location = os.path.join(self.base_dir, info["location"])
        shape = tuple(int(d) for d in tensor.dims)
        if not np.prod(shape, dtype=np.int64):
            return np.zeros(shape, dtype=dtype)
        return np.memmap(location, dtype=dtype.newbyteorder("<"), mode="r",
                         offset=int(info.get("offset", 0)), shape=shape)


def last_uses(graph_nodes: Sequence[onnx.NodeProto], run_nodes: Sequence[onnx.NodeProto]) -> dict[int, list]:
    """Node index -> names read for the last time by that node. `run_nodes` are the nodes as
    evaluated (a rewritten node may read other names than the graph's); names a subgraph reads
    count as read by the node holding it."""
    last: dict[str, int] = {}
    for index, (node, run) in enumerate(zip(graph_nodes, run_nodes)):
        for name in (*node.input, *run.input, *_subgraph_reads(node)):
            if name:
                last[name] = index
    by_index: dict[int, list] = {}
    for name, index in last.items():
        by_index.setdefault(index, []).append(name)
    return by_index


def _subgraph_reads(node: onnx.NodeProto) -> set:
    names: set = set()
    for attr in node.attribute:
        for graph in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                      attr.graphs if attr.type == onnx.AttributeProto.GRAPHS else []):
            for inner in graph.node:
                names.update(inner.input)
                names |= _subgraph_reads(inner)
    return names
