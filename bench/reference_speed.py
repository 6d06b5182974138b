"""How fast is the float64 reference on a ResNet-50-shaped model, and how far is it from onnxruntime float32?

Builds ResNet-50 (real layer shapes, random weights, BatchNormalization after every conv) with onnx.helper,
then prints one table: evaluate_float64 time, onnxruntime float32 time (optimizations off, 1 thread) and
the largest absolute difference between the two outputs.

    python bench/reference_speed.py [--batch 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify.reference.evaluator import evaluate_float64


class _Builder:
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def _name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def _weight(self, prefix: str, array: np.ndarray) -> str:
        name = self._name(prefix)
        self.initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv_bn(self, x: str, c_in: int, c_out: int, kernel: int, stride: int, relu: bool) -> str:
        fan_in = c_in * kernel * kernel
        w = self._weight("w", self.rng.normal(0, np.sqrt(2.0 / fan_in), (c_out, c_in, kernel, kernel)))
        conv_out = self._name("conv")
        pad = kernel // 2
        self.nodes.append(helper.make_node(
            "Conv", [x, w], [conv_out], kernel_shape=[kernel, kernel], strides=[stride, stride],
            pads=[pad] * 4,
        ))
        scale = self._weight("s", self.rng.uniform(0.5, 1.0, c_out))
        bias = self._weight("b", self.rng.normal(0, 0.1, c_out))
        mean = self._weight("m", self.rng.normal(0, 0.1, c_out))
        var = self._weight("v", self.rng.uniform(0.5, 1.5, c_out))
        bn_out = self._name("bn")
        self.nodes.append(helper.make_node("BatchNormalization", [conv_out, scale, bias, mean, var], [bn_out]))
        if not relu:
            return bn_out
        relu_out = self._name("relu")
        self.nodes.append(helper.make_node("Relu", [bn_out], [relu_out]))
        return relu_out

    def bottleneck(self, x: str, c_in: int, width: int, stride: int) -> str:
        c_out = width * 4
        y = self.conv_bn(x, c_in, width, 1, 1, relu=True)
        y = self.conv_bn(y, width, width, 3, stride, relu=True)
        y = self.conv_bn(y, width, c_out, 1, 1, relu=False)
        shortcut = x
        if stride != 1 or c_in != c_out:
            shortcut = self.conv_bn(x, c_in, c_out, 1, stride, relu=False)
        added = self._name("add")
        self.nodes.append(helper.make_node("Add", [y, shortcut], [added]))
        out = self._name("relu")
        self.nodes.append(helper.make_node("Relu", [added], [out]))
        return out


def build_resnet50(batch: int = 1) -> onnx.ModelProto:
    b = _Builder()
    x = b.conv_bn("input", 3, 64, 7, 2, relu=True)
    pooled = "stem_pool"
    b.nodes.append(helper.make_node("MaxPool", [x], [pooled], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, c_in = pooled, 64
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            x = b.bottleneck(x, c_in, width, stride)
            c_in = width * 4
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    b.nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    fc_w = b._weight("fc_w", b.rng.normal(0, 0.01, (1000, 2048)))
    fc_b = b._weight("fc_b", np.zeros(1000))
    b.nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], transB=1))
    graph = helper.make_graph(
        b.nodes, "resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    model = build_resnet50(args.batch)
    x = np.random.default_rng(1).normal(size=(args.batch, 3, 224, 224)).astype(np.float32)

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    ref_times, ort_times = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        reference = evaluate_float64(model, {"input": x})["logits"]
        ref_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        runtime = session.run(None, {"input": x})[0]
        ort_times.append(time.perf_counter() - start)

    diff = np.abs(reference - runtime.astype(np.float64))
    rows = [
        ("model", f"ResNet-50 shape, batch {args.batch}, {len(model.graph.node)} nodes"),
        ("evaluate_float64 (best / median of %d)" % args.repeat,
         f"{min(ref_times):.2f} s / {np.median(ref_times):.2f} s"),
        ("onnxruntime float32, 1 thread (best)", f"{min(ort_times):.3f} s"),
        ("reference dtype", str(reference.dtype)),
        ("max |float64 - ort float32|", f"{diff.max():.3e}"),
        ("max |float64| (output scale)", f"{np.abs(reference).max():.3e}"),
        ("max relative diff (vs max |ref|)", f"{diff.max() / np.abs(reference).max():.3e}"),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")


if __name__ == "__main__":
    main()
