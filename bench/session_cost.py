"""What creating an onnxruntime session costs from serialized bytes vs from a temp file written by
the streaming saver (verify/ort/files.py picks bytes below IN_MEMORY_SESSION_MAX_BYTES).

    python bench/session_cost.py     # one-MatMul models of 10 KiB .. 256 MiB, best of 3, in ms
"""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table

from onnxrefine.verify.ort import files, settings


def model(mib: float) -> onnx.ModelProto:
    side = int((mib * 2**20 / 4) ** 0.5)
    weight = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, side])], [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def best_of(runs: int, step) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    options = settings.session_options(settings.RunSettings.strict())
    table = Table(title="session creation, ms (best of 3)")
    for column in ("weights", "from bytes", "temp file + session"):
        table.add_column(column, justify="right")
    for mib in (0.01, 1, 16, 64, 256):
        proto = model(mib)

        def from_bytes():
            ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])

        def from_file():
            opened = files.write_temp(files._proto_as_ir(proto), "model")
            ort.InferenceSession(opened.path, options, providers=["CPUExecutionProvider"])
            opened.close()

        table.add_row(f"{mib:g} MiB", f"{best_of(3, from_bytes):.1f}", f"{best_of(3, from_file):.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
