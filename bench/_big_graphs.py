"""Large synthetic graphs for the scaling benchmarks (engine_scaling.py, passes_scaling.py).

- `decoder_model(layers)`: a decoder-only transformer as an exporter writes it without folding:
  LayerNorm and GELU decomposed, every Reshape fed by a Shape -> Gather -> Unsqueeze -> Concat
  chain, attention with a causal mask, Identity/Cast/Dropout noise, MatMul + Add pairs. Small
  hidden size so that the weights stay small and the node count dominates (~150 nodes a layer:
  200 layers ~ 30k nodes, 700 layers ~ 100k).
- `chain_model(nodes)`: a chain of cheap rewritable patterns (Identity, Add 0 / Mul 1 with
  shared constants, Transpose pairs, Relu) of exactly `nodes` nodes, for 1M-node runs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs) -> str | list[str]:
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=self.fresh("n"), **attrs))
        return names[0] if outputs == 1 else names


def decoder_model(layers: int, hidden: int = 16, heads: int = 2, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    b = _Builder()
    head_dim = hidden // heads

    def weight(*shape) -> str:
        return b.const(rng.normal(0, 0.2, shape).astype(np.float32), "w")

    scalar = {}

    def k(value, dtype=np.int64) -> str:  # shared scalar/1-D constants, as exporters dedupe them
        key = (value if not isinstance(value, list) else tuple(value), np.dtype(dtype).name)
        if key not in scalar:
            scalar[key] = b.const(np.array(value, dtype), "k")
        return scalar[key]

    def dim(x: str, index: int) -> str:  # Shape -> Gather -> Unsqueeze, as torch.onnx writes it
        shape = b.op("Shape", [x])
        gathered = b.op("Gather", [shape, k(index)], axis=0)
        return b.op("Unsqueeze", [gathered, k([0])])

    def layer_norm(x: str) -> str:
        mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
        centered = b.op("Sub", [x, mean])
        squared = b.op("Pow", [centered, k(2.0, np.float32)])
        var = b.op("ReduceMean", [squared], axes=[-1], keepdims=1)
        std = b.op("Sqrt", [b.op("Add", [var, k(1e-5, np.float32)])])
        normed = b.op("Div", [centered, std])
        return b.op("Add", [b.op("Mul", [normed, weight(hidden)]), weight(hidden)])

    def linear(x: str, n_in: int, n_out: int) -> str:
        return b.op("Add", [b.op("MatMul", [x, weight(n_in, n_out)]), weight(n_out)])

    def split_heads(x: str) -> str:
        shape = b.op("Concat", [dim(x, 0), dim(x, 1), k([heads]), k([head_dim])], axis=0)
        return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def gelu(x: str) -> str:
        erf = b.op("Erf", [b.op("Div", [x, k(1.4142135, np.float32)])])
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [erf, k(1.0, np.float32)])]), k(0.5, np.float32)])

    x = b.op("Identity", ["input"])
    for _ in range(layers):
        h = layer_norm(b.op("Cast", [x], to=TensorProto.FLOAT))
        q, kk, v = (split_heads(linear(h, hidden, hidden)) for _ in range(3))
        scores = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [kk], perm=[0, 1, 3, 2])]),
                              k(float(np.sqrt(head_dim)), np.float32)])
        masked = b.op("Add", [scores, "mask"])
        attn = b.op("Softmax", [masked], axis=-1)
        attn = b.op("Dropout", [attn])
        context = b.op("Transpose", [b.op("MatMul", [attn, v])], perm=[0, 2, 1, 3])
        merged_shape = b.op("Concat", [dim(context, 0), dim(context, 1), k([hidden])], axis=0)
        merged = b.op("Reshape", [context, merged_shape])
        x = b.op("Add", [x, b.op("Identity", [linear(merged, hidden, hidden)])])
        h = layer_norm(x)
        x = b.op("Add", [x, linear(gelu(linear(h, hidden, 4 * hidden)), 4 * hidden, hidden)])
    b.nodes.append(helper.make_node("Identity", [layer_norm(x)], ["output"], name="out"))
    graph = helper.make_graph(
        b.nodes, "decoder",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "seq", hidden]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["seq", "seq"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", hidden])], b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


_CHAIN_BLOCK = 8  # nodes in one repeat of the chain's pattern


def chain_model(nodes: int, width: int = 4) -> onnx.ModelProto:
    """Exactly `nodes` nodes; most blocks hold removable no-ops, so the rewrite count grows with it."""
    b = _Builder()
    zero = b.const(np.zeros(width, np.float32), "zero")
    one = b.const(np.ones(width, np.float32), "one")
    x = "x"
    pattern = (
        lambda x: b.op("Identity", [x]),
        lambda x: b.op("Add", [x, zero]),
        lambda x: b.op("Relu", [x]),
        lambda x: b.op("Mul", [x, one]),
        lambda x: b.op("Unsqueeze", [x, b.const(np.array([0], np.int64), "axes")]),
        lambda x: b.op("Transpose", [x], perm=[1, 0]),
        lambda x: b.op("Transpose", [x], perm=[1, 0]),
        lambda x: b.op("Squeeze", [x, b.const(np.array([0], np.int64), "axes")]),
    )
    assert len(pattern) == _CHAIN_BLOCK
    for i in range(nodes):
        x = pattern[i % _CHAIN_BLOCK](x)
    last = (nodes - 1) % _CHAIN_BLOCK if nodes else _CHAIN_BLOCK - 1  # pattern index of the last node
    shape = {4: [1, width], 5: [width, 1], 6: [1, width]}.get(last, [width])
    graph = helper.make_graph(
        b.nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model
