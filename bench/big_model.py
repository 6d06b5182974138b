"""Build a large external-data model (a 3 GiB model onnxruntime runs from its path).

    python bench/big_model.py OUT.onnx                         # 48 layers of 4096x4096: 3 GiB of weights
    python bench/big_model.py OUT.onnx --layers 4 --hidden 256 # small, for a quick try

Each layer: y = Relu((x @ W + b) * s), with x reshaped first by a Shape->Gather->Unsqueeze->Concat->
Reshape chain (what exporters emit for `x.view(batch, -1)`), so folding and shape passes have work.
Weights go to `OUT.onnx.data` (one float32 matrix at a time: the builder never holds more than one
layer's weights), graph in OUT.onnx. Input `x` is [batch, hidden] with a symbolic batch.

Measuring verification on it (see the issue's item 1):

    /usr/bin/time -v onnxrefine verify OUT.onnx OUT.onnx
    onnxrefine optimize OUT.onnx -o OPT.onnx --no-verify && /usr/bin/time -v onnxrefine verify OUT.onnx OPT.onnx
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _external(name: str, dims, location: str, offset: int, length: int) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def build(path: str | os.PathLike, layers: int = 48, hidden: int = 4096, seed: int = 0) -> Path:
    """Write the model to `path` (+ `path`.data); returns the model path."""
    path = Path(path)
    location = path.name + ".data"
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    scale = np.float32(1.0 / np.sqrt(hidden))  # keeps activations O(1) through the layers
    inits += [numpy_helper.from_array(np.array(0, np.int64), "first"),
              numpy_helper.from_array(np.array([0], np.int64), "axis0"),
              numpy_helper.from_array(np.array([hidden], np.int64), "width")]
    offset = 0
    with open(path.parent / location, "wb") as data:
        x = "x"
        for i in range(layers):
            for name, shape in ((f"W{i}", (hidden, hidden)), (f"b{i}", (hidden,)), (f"s{i}", (hidden,))):
                if name.startswith("W"):
                    array = (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)
                elif name.startswith("b"):
                    array = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
                else:
                    array = rng.uniform(0.5, 1.5, shape).astype(np.float32)
                # 4 KiB alignment lets onnxruntime memory-map the weights instead of copying them.
                pad = -offset % 4096
                data.write(b"\0" * pad)
                offset += pad
                data.write(array.tobytes())
                inits.append(_external(name, shape, location, offset, array.nbytes))
                offset += array.nbytes
                del array
            nodes += [
                helper.make_node("Shape", [x], [f"shape{i}"], name=f"shape{i}"),
                helper.make_node("Gather", [f"shape{i}", "first"], [f"batch{i}"], name=f"gather{i}", axis=0),
                helper.make_node("Unsqueeze", [f"batch{i}", "axis0"], [f"batch1_{i}"], name=f"unsqueeze{i}"),
                helper.make_node("Concat", [f"batch1_{i}", "width"], [f"target{i}"], name=f"concat{i}", axis=0),
                helper.make_node("Reshape", [x, f"target{i}"], [f"flat{i}"], name=f"reshape{i}"),
                helper.make_node("MatMul", [f"flat{i}", f"W{i}"], [f"mm{i}"], name=f"matmul{i}"),
                helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"add{i}"),
                helper.make_node("Mul", [f"add{i}", f"s{i}"], [f"mul{i}"], name=f"mul{i}"),
                helper.make_node("Relu", [f"mul{i}"], [f"y{i}"], name=f"relu{i}"),
            ]
            x = f"y{i}"
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", hidden])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))  # the graph alone: every weight is already external
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="model path (weights go to OUTPUT.data beside it)")
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = build(args.output, args.layers, args.hidden, args.seed)
    size = (path.parent / (path.name + ".data")).stat().st_size
    print(f"wrote {path} and {path.name}.data ({size / 2**30:.2f} GiB of weights)")


if __name__ == "__main__":
    main()
