"""Scaling of the graph-level passes (folding, shape folding, cleanup) on synthetic graphs of growing size.

    python bench/passes_scaling.py

Each row times one pass on a graph of n blocks; linear passes show a roughly constant time per block.
Certificates are off (bench/certificate_cost.py measures them).
"""

from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table

import onnxrefine


def _model(nodes, inits, inputs, outputs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "bench", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def cleanup_model(n: int) -> onnx.ModelProto:
    """n blocks of: a duplicated Relu (CSE), a dead Exp chain (DCE), a duplicated initializer."""
    nodes, inits = [], []
    x = "x"
    for i in range(n):
        inits += [numpy_helper.from_array(np.full(4, i, np.float32), f"c{i}"),
                  numpy_helper.from_array(np.full(4, i, np.float32), f"d{i}")]
        nodes += [helper.make_node("Relu", [x], [f"r{i}"]), helper.make_node("Relu", [x], [f"s{i}"]),
                  helper.make_node("Add", [f"r{i}", f"c{i}"], [f"a{i}"]), helper.make_node("Add", [f"s{i}", f"d{i}"], [f"b{i}"]),
                  helper.make_node("Exp", [f"a{i}"], [f"dead{i}"]), helper.make_node("Sub", [f"a{i}", f"b{i}"], [f"y{i}"])]
        x = f"y{i}"
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4])])


def shapes_model(n: int) -> onnx.ModelProto:
    """n blocks of Reshape(x, Concat(Shape(x)[0:1], [-1])) over a symbolic batch."""
    nodes = []
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    x = "x"
    for i in range(n):
        nodes += [helper.make_node("Shape", [x], [f"s{i}"]), helper.make_node("Slice", [f"s{i}", "zero", "one"], [f"b{i}"]),
                  helper.make_node("Concat", [f"b{i}", "minus_one"], [f"t{i}"], axis=0),
                  helper.make_node("Reshape", [x, f"t{i}"], [f"r{i}"]),
                  helper.make_node("Relu", [f"r{i}"], [f"y{i}"])]
        x = f"y{i}"
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 4])])


def folding_model(n: int) -> onnx.ModelProto:
    """n constant Add/Mul pairs feeding a running sum over x."""
    nodes, inits = [], []
    x = "x"
    for i in range(n):
        inits.append(numpy_helper.from_array(np.full(4, i + 1, np.float32), f"k{i}"))
        nodes += [helper.make_node("Mul", [f"k{i}", f"k{i}"], [f"m{i}"]), helper.make_node("Add", [x, f"m{i}"], [f"y{i}"])]
        x = f"y{i}"
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4])])


def add_zero_model(n: int) -> onnx.ModelProto:
    """n blocks of x + 0.0 -> Relu: every Add is removable, and each removal asks the signed-zero
    analysis about the whole chain below it (quadratic until its answers were kept)."""
    nodes, x = [], "x"
    inits = [numpy_helper.from_array(np.zeros(4, np.float32), "zero")]
    for i in range(n):
        nodes += [helper.make_node("Add", [x, "zero"], [f"a{i}"]), helper.make_node("Relu", [f"a{i}"], [f"y{i}"])]
        x = f"y{i}"
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4])])


CASES = [
    ("eliminate_float_add_zero", add_zero_model, (1000, 2000, 4000, 8000)),
    ("eliminate_common_subexpression", cleanup_model, (500, 1000, 2000, 4000)),
    ("eliminate_deadend", cleanup_model, (500, 1000, 2000, 4000)),
    ("eliminate_duplicate_initializer", cleanup_model, (500, 1000, 2000, 4000)),
    ("fold_shapes", shapes_model, (250, 500, 1000, 2000)),
    ("fold_constants", folding_model, (100, 200, 400)),
]


def main() -> None:
    table = Table(title="graph-level passes: seconds per run (and per block)")
    for column in ("pass", "blocks", "nodes before", "nodes after", "seconds", "ms / block"):
        table.add_column(column, justify="right")
    for name, build, sizes in CASES:
        for n in sizes:
            model = build(n)
            started = time.perf_counter()
            # certify=False: per-rewrite certificates are timed by bench/certificate_cost.py
            _, report = onnxrefine.optimize_with_report(model, [name], fixed_point=False, certify=False)
            seconds = time.perf_counter() - started
            table.add_row(name, str(n), str(report.nodes_before), str(report.nodes_after), f"{seconds:.2f}",
                          f"{1000 * seconds / n:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
