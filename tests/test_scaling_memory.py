"""The API path holds a caller's weights once: no copy of the ModelProto on the way in (tensors are
read-only views of the caller's TensorProtos), and weights handed over one at a time on the way out.
Structural checks; the peak RSS itself is measured by bench/corpus_speed.py."""

from __future__ import annotations

import numpy as np
import onnx
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.ir import io
from onnxrefine.ir.protoview import ProtoTensorView


def bn_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [tensor("w", rng.normal(size=(4, 3, 3, 3)).astype(np.float32)),
             tensor("s", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
             tensor("b", rng.normal(size=4).astype(np.float32)),
             tensor("m", rng.normal(size=4).astype(np.float32)),
             tensor("v", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
             tensor("same_as_b", rng.normal(size=4).astype(np.float32)),
             tensor("shape", np.array([1, -1], np.int64)),
             tensor("names", np.array(["a", "b"], dtype=object))]
    inits[5].CopyFrom(tensor("same_as_b", onnx.numpy_helper.to_array(inits[2])))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Add", ["n", "same_as_b"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["y"]),
             helper.make_node("Constant", [], ["k"], value=tensor("kv", np.array([2.0], np.float32))),
             helper.make_node("Mul", ["y", "k"], ["z"])]
    return make_model(nodes, [value_info("x", shape=[1, 3, 4, 4])], [value_info("z", shape=[1, 64])], inits)


def test_proto_tensors_become_views_that_read_the_callers_bytes():
    proto = bn_model()
    model, kind = io.to_ir(proto)
    assert kind == "proto"
    w = model.graph.initializers["w"].const_value
    assert isinstance(w, ProtoTensorView)
    np.testing.assert_array_equal(w.numpy(), onnx.numpy_helper.to_array(proto.graph.initializer[0]))
    assert w.tobytes() == proto.graph.initializer[0].raw_data
    assert not isinstance(model.graph.initializers["names"].const_value, ProtoTensorView)  # strings: a copy
    constant = next(n for n in model.graph if n.op_type == "Constant")
    assert isinstance(constant.attributes["value"].value, ProtoTensorView)


def test_renaming_a_value_never_reaches_the_callers_proto():
    proto = bn_model()
    before = proto.SerializeToString()
    model, _ = io.to_ir(proto)
    model.graph.initializers["w"].name = "renamed_w"
    next(n for n in model.graph if n.op_type == "Constant").attributes["value"].value.name = "renamed_k"
    assert proto.SerializeToString() == before
    out = io.from_ir(model, "proto")
    assert "renamed_w" in {t.name for t in out.graph.initializer}


def test_optimized_proto_computes_the_same_and_leaves_the_input_alone():
    proto = bn_model()
    before = proto.SerializeToString()
    optimized = onnxrefine.optimize(proto)
    assert proto.SerializeToString() == before
    assert "BatchNormalization" not in {n.op_type for n in optimized.graph.node}
    onnx.checker.check_model(optimized, full_check=True)
    x = np.random.default_rng(1).normal(size=(1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(run(proto, {"x": x})[0], run(optimized, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_consuming_serialization_gives_the_same_proto_as_the_plain_one():
    proto = bn_model()
    plain = io.to_proto(io.to_ir(proto)[0])
    model = io.to_ir(proto)[0]
    consumed = io.to_proto(model, consume=True)
    assert not model.graph.initializers  # handed over to the proto
    assert [t.name for t in consumed.graph.initializer] == [t.name for t in plain.graph.initializer]
    for a, b in zip(consumed.graph.initializer, plain.graph.initializer):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a), onnx.numpy_helper.to_array(b))
    assert [n.SerializeToString() for n in consumed.graph.node] == [n.SerializeToString() for n in plain.graph.node]
    onnx.checker.check_model(consumed, full_check=True)


def test_path_input_gives_a_self_contained_proto(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(bn_model(), path)
    optimized = onnxrefine.optimize(str(path))
    assert all(t.data_location != TensorProto.EXTERNAL for t in optimized.graph.initializer)
    x = np.ones((1, 3, 4, 4), np.float32)
    np.testing.assert_allclose(run(bn_model(), {"x": x})[0], run(optimized, {"x": x})[0], rtol=1e-5, atol=1e-5)
