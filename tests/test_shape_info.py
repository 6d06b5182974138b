"""Shape information in the saved model: value_info for every intermediate value whose type and
shape the facts know, each entry agreeing with onnx's own shape inference (and ConvTranspose's
shape rule with what onnxruntime computes); --no-shape-info writes none."""

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.cli.main import main
from onnxrefine.ir import io
from onnxrefine.ir.facts import StaticShapes


def _deconv_model(kernel=3, stride=2, pads=(1, 1, 1, 1), output_padding=(1, 1), dilation=1, group=1,
                  channels=4, size=(5, 6)) -> onnx.ModelProto:
    """Conv -> ConvTranspose -> GlobalAveragePool -> Flatten -> Gemm, batch symbolic: the shapes a
    classifier head carries."""
    rng = np.random.default_rng(0)
    conv_w = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32), "cw")
    deconv_w = numpy_helper.from_array(
        rng.standard_normal((channels, 2, kernel, kernel)).astype(np.float32), "dw")
    fc_w = numpy_helper.from_array(rng.standard_normal((2 * group, 7)).astype(np.float32), "fw")
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c", "dw"], ["d"], strides=[stride, stride], pads=list(pads),
                              output_padding=list(output_padding), dilations=[dilation, dilation], group=group),
             helper.make_node("GlobalAveragePool", ["d"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, *size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 7])], [conv_w, deconv_w, fc_w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dims(value_info):
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value_info.type.tensor_type.shape.dim]


def _agrees_with_onnx_inference(path) -> set[str]:
    """Every value_info entry the file holds agrees with onnx.shape_inference run on the file
    without them; returns the names of the entries."""
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved, full_check=True)  # strict inference against our entries
    bare = onnx.load(str(path))
    del bare.graph.value_info[:]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(bare, strict_mode=True).graph.value_info}
    for ours in saved.graph.value_info:
        theirs = inferred[ours.name]
        assert ours.type.tensor_type.elem_type == theirs.type.tensor_type.elem_type, ours.name
        mine, onnx_dims = _dims(ours), _dims(theirs)
        # Same rank; each dim as onnx infers it, or unknown where the facts cannot vouch for it.
        assert len(mine) == len(onnx_dims) and all(m is None or m == o for m, o in zip(mine, onnx_dims)), \
            (ours.name, mine, onnx_dims)
    return {v.name for v in saved.graph.value_info}


def test_saved_model_carries_the_shapes_onnx_infers(tmp_path):
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_deconv_model(), source)
    assert main(["optimize", str(source), str(out), "--no-verify"]) == 0
    names = _agrees_with_onnx_inference(out)
    assert names == {"c", "d", "p", "f"}  # every intermediate; the symbolic batch dim keeps its name
    entry = next(v for v in onnx.load(str(out)).graph.value_info if v.name == "d")
    assert _dims(entry) == ["batch", 2, 10, 12]


def test_example_model_gets_every_intermediate_shape(example, tmp_path):
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(example), str(out), "--no-verify"]) == 0
    saved = onnx.load(str(out))
    intermediates = {o for n in saved.graph.node for o in n.output} - {o.name for o in saved.graph.output}
    assert _agrees_with_onnx_inference(out) == intermediates


def test_no_shape_info_writes_none(tmp_path):
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    model = _deconv_model()
    model.graph.value_info.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))  # declared
    onnx.save(model, source)
    assert main(["optimize", str(source), str(out), "--no-verify", "--no-shape-info"]) == 0
    assert len(onnx.load(str(out)).graph.value_info) == 0


@settings(max_examples=25, deadline=None)
@given(kernel=st.integers(1, 4), stride=st.integers(1, 3), dilation=st.integers(1, 2), group=st.sampled_from([1, 2]),
       pads=st.tuples(*[st.integers(0, 2)] * 4), extra=st.integers(0, 2), size=st.tuples(st.integers(1, 6), st.integers(1, 6)))
def test_conv_transpose_shape_rule_is_what_onnxruntime_computes(kernel, stride, dilation, group, pads, extra, size):
    model = _deconv_model(kernel, stride, pads, (extra, extra), dilation, group, size=size)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("d", TensorProto.FLOAT, None))
    del model.graph.node[2:]
    ir_model = io.proto_to_ir(model)
    facts = StaticShapes(ir_model)
    known = facts.shape(next(n for n in ir_model.graph if n.op_type == "ConvTranspose").outputs[0])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        actual = session.run(None, {"x": np.zeros((2, 3, *size), np.float32)})[0].shape
    except Exception:  # noqa: BLE001 - a configuration onnxruntime refuses: the facts must not vouch for it
        assert known is None or not all(isinstance(d, int) for d in known[2:])
        return
    assert known is None if extra >= stride else known == (None, 2 * group, *actual[2:])
