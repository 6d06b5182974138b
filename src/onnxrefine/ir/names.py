"""Fresh names that never collide with anything already in the model.

Every name a model uses is reserved up front: values and nodes of every graph, subgraph and
function (inputs, outputs, initializers, intermediates), function names, and the names onnx-ir
dropped on the way in but a reader of the file may still see (value_info entries).
"""

from __future__ import annotations

import re

import onnx_ir as ir

from onnxrefine.ir import traversal


class NameAllocator:
    def __init__(self, model: ir.Model):
        self._taken: set[str] = set()
        self._counters: dict[str, int] = {}
        self.absorb(model)

    def absorb(self, model: ir.Model) -> None:
        """Reserve every name the model uses now (after a pass that named things itself)."""
        for site in traversal.graphs(model):
            graph = site.graph
            if site.owner is not graph and site.owner.name:  # a function body: the function's name
                self._taken.add(site.owner.name)
            if graph.name:
                self._taken.add(graph.name)
            for value in graph.inputs:
                self._reserve_value(value)
            for value in graph.outputs:
                self._reserve_value(value)
            self._taken.update(graph.initializers.keys())
            for node in graph:
                if node.name:
                    self._taken.add(node.name)
                for value in node.inputs:
                    self._reserve_value(value)
                for value in node.outputs:
                    self._reserve_value(value)

    def _reserve_value(self, value: ir.Value | None) -> None:
        if value is not None and value.name:
            self._taken.add(value.name)

    def is_taken(self, name: str) -> bool:
        return name in self._taken

    def fresh(self, hint: str) -> str:
        """A name starting with `hint` that nothing in the model uses; reserved from now on."""
        base = re.sub(r"_\d+$", "", hint) or "v"
        if hint not in self._taken:
            self._taken.add(hint)
            return hint
        counter = self._counters.get(base, 0)
        while True:
            counter += 1
            candidate = f"{base}_{counter}"
            if candidate not in self._taken:
                self._counters[base] = counter
                self._taken.add(candidate)
                return candidate
