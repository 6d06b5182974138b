"""What folding a float16 BatchNormalization into its Conv does where a folded weight rounds to zero.

    python bench/bn_underflow.py --corpus DIR [MODEL]      # default: resnet18-fp16

For every Conv -> BatchNormalization pair of DIR/MODEL.onnx with float16 weights, the fold the peers
make (each weight times scale / sqrt(var + eps) in float64, rounded once to float16) is computed;
where a nonzero product rounds to 0, the pair and the fold are cut out as two one-layer models and
run in onnxruntime (CPU, optimizations off) on a Relu-like input holding one +inf at an input
element that weight reads. Prints a table: the pair, how many weights round to zero and to
subnormals, the first zeroed weight, and the output element it feeds before and after the fold.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)


def attributes(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def session(nodes, inits, shape, opsets):
    graph = helper.make_graph(nodes, "cut", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], inits)
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def examine(model, conv, bn, weights):
    w = weights[conv.input[1]]
    scale, bias, mean, var = (weights[name].astype(np.float64) for name in bn.input[1:5])
    factor = scale / np.sqrt(var + attributes(bn).get("epsilon", 1e-5))
    product = w.astype(np.float64) * factor[:, None, None, None]
    folded = product.astype(np.float16)
    zeroed = np.argwhere((folded == 0) & (product != 0))
    if not len(zeroed):
        return None
    conv_bias = weights[conv.input[2]].astype(np.float64) if len(conv.input) > 2 else 0.0
    folded_bias = ((conv_bias - mean) * factor + bias).astype(np.float16)
    out_channel, in_channel, dy, dx = (int(i) for i in zeroed[0])
    conv_attrs = attributes(conv)
    if conv_attrs.get("group", 1) != 1 or any(s != 1 for s in conv_attrs.get("strides", [1, 1])):
        return None  # the input element below is placed for an ungrouped stride-1 Conv
    pad_top, pad_left = conv_attrs.get("pads", [0, 0, 0, 0])[:2]
    size = 7
    shape = [1, w.shape[1], size, size]
    row, col = 3, 3  # the input element; the output element it meets through [dy, dx]
    out_row, out_col = row + pad_top - dy, col + pad_left - dx
    conv_inputs = ["x", "w"] + (["cb"] if len(conv.input) > 2 else [])
    inits = [numpy_helper.from_array(w, "w")] + [numpy_helper.from_array(weights[n], k) for n, k in
                                                 zip(list(bn.input[1:5]) + list(conv.input[2:3]), ["s", "b", "m", "v", "cb"])]
    original = session([helper.make_node("Conv", conv_inputs, ["c"], **conv_attrs),
                        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], **attributes(bn))],
                       inits, shape, model.opset_import)
    fold = session([helper.make_node("Conv", ["x", "w", "b"], ["y"], **conv_attrs)],
                   [numpy_helper.from_array(folded, "w"), numpy_helper.from_array(folded_bias, "b")],
                   shape, model.opset_import)
    x = np.abs(np.random.default_rng(0).standard_normal(shape)).astype(np.float16)
    x[0, in_channel, row, col] = np.inf
    before = original.run(None, {"x": x})[0][0, out_channel, out_row, out_col]
    after = fold.run(None, {"x": x})[0][0, out_channel, out_row, out_col]
    subnormal = int(((np.abs(folded) < SMALLEST_NORMAL) & (folded != 0)).sum())
    return (f"| {bn.name} | {len(zeroed)} of {w.size} | {subnormal} | {float(w[tuple(zeroed[0])]):.3g} x "
            f"{factor[out_channel]:.3f} = {float(product[tuple(zeroed[0])]):.3g} | {before} | {after} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("model", nargs="?", default="resnet18-fp16")
    args = parser.parse_args()
    model = onnx.load(Path(args.corpus) / f"{args.model}.onnx")
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    print("| BatchNormalization | weights rounding to 0 | to subnormals | first one (weight x factor) "
          "| output it feeds, one inf input: before | after the fold |")
    print("|---|---:|---:|---|---|---|")
    for bn in model.graph.node:
        conv = producer.get(bn.input[0]) if bn.op_type == "BatchNormalization" else None
        if conv is None or conv.op_type != "Conv" or conv.input[1] not in weights:
            continue
        if weights[conv.input[1]].dtype != np.float16:
            continue
        row = examine(model, conv, bn, weights)
        if row is not None:
            print(row)


if __name__ == "__main__":
    main()
