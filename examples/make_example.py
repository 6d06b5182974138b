"""Build examples/tiny_cnn.onnx: a small CNN with the patterns onnxrefine folds.

Conv+BN+Relu blocks, a Conv -> Add(per-channel constant) -> BN, a ConvTranspose+BN, a grouped
Conv+BN, and a Gemm+BN head; random weights from a fixed seed, a symbolic batch dimension.
Run: python examples/make_example.py [OUT]
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def bn(prefix, x, channels):
        const(f"{prefix}_scale", rng.uniform(0.5, 1.5, channels))
        const(f"{prefix}_bias", rng.normal(0, 0.1, channels))
        const(f"{prefix}_mean", rng.normal(0, 0.1, channels))
        const(f"{prefix}_var", rng.uniform(0.5, 1.5, channels))
        out = f"{prefix}_out"
        nodes.append(helper.make_node(
            "BatchNormalization", [x] + [f"{prefix}_{k}" for k in ("scale", "bias", "mean", "var")], [out],
            name=prefix, epsilon=1e-5))
        return out

    def conv(prefix, x, c_in, c_out, group=1, bias=True):
        const(f"{prefix}_w", rng.normal(0, 0.3, (c_out, c_in // group, 3, 3)))
        inputs = [x, f"{prefix}_w"]
        if bias:
            inputs.append(const(f"{prefix}_b", rng.normal(0, 0.1, c_out)))
        nodes.append(helper.make_node("Conv", inputs, [f"{prefix}_out"], name=prefix, pads=[1, 1, 1, 1], group=group))
        return f"{prefix}_out"

    x = "image"
    x = bn("bn1", conv("conv1", x, 3, 8), 8)
    nodes.append(helper.make_node("Relu", [x], ["relu1"], name="relu1"))
    x = bn("bn2", conv("conv2", "relu1", 8, 8, group=4, bias=False), 8)
    nodes.append(helper.make_node("Relu", [x], ["relu2"], name="relu2"))
    c3 = conv("conv3", "relu2", 8, 8)
    const("offset3", rng.normal(0, 0.1, (8, 1, 1)))
    nodes.append(helper.make_node("Add", ["offset3", c3], ["add3"], name="add3"))
    x = bn("bn3", "add3", 8)
    const("deconv_w", rng.normal(0, 0.3, (8, 4, 2, 2)))
    nodes.append(helper.make_node("ConvTranspose", [x, "deconv_w"], ["deconv_out"], name="deconv", strides=[2, 2]))
    x = bn("bn4", "deconv_out", 4)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"))
    const("fc_w", rng.normal(0, 0.3, (4, 10)))
    const("fc_b", rng.normal(0, 0.1, 10))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc_out"], name="fc"))
    x = bn("bn5", "fc_out", 10)
    nodes.append(helper.make_node("Softmax", [x], ["probabilities"], name="softmax", axis=1))
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxrefine-example")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "examples/tiny_cnn.onnx"
    onnx.save(build(), out)
    print(f"wrote {out}")
