"""When onnxruntime cannot load or run a model, the message says which model, at which stage, why,
and whose limit it is (onnxruntime's, protobuf's, or the model's own error)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from google.protobuf.message import EncodeError
from helpers import make_model, value_info
from onnx import TensorProto, helper

from onnxrefine.cli.main import main
from onnxrefine.errors import BadInputError
from onnxrefine.verify import verify_models
from onnxrefine.verify.ort.errors import clean, describe
from onnxrefine.verify.ort import ModelRunner, RunFailedError


def unary(op: str, dtype=TensorProto.FLOAT, domain: str = "", opset: int = 17) -> onnx.ModelProto:
    model = make_model([helper.make_node(op, ["x"], ["y"], name="n1", domain=domain)],
                       [value_info("x", dtype, [2])], [value_info("y", dtype, [2])], opset=opset)
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


def load_error(model: onnx.ModelProto, role: str = "candidate model") -> str:
    with pytest.raises(BadInputError) as caught:
        ModelRunner(model, role)
    return str(caught.value)


def test_missing_kernel_is_onnxruntimes_limit():
    # Relu-14 allows int16 in ONNX; onnxruntime's CPU provider has no int16 kernel for it.
    onnx.checker.check_model(unary("Relu", TensorProto.INT16), full_check=True)
    message = load_error(unary("Relu", TensorProto.INT16), "original model")
    assert message.startswith("onnxruntime cannot load the original model: onnxruntime ")
    assert "has no CPU kernel for Relu (opset 14)" in message and "node 'n1'" in message
    assert "a limit of onnxruntime, not an error in the original model" in message


def test_invalid_type_is_the_models_error():
    # Relu does not allow uint16 at all: the model is wrong, not onnxruntime.
    message = load_error(unary("Relu", TensorProto.UINT16))
    assert "the candidate model is invalid" in message and "uint16" in message
    assert "limit of onnxruntime" not in message


def test_unknown_op_default_domain_is_invalid_custom_domain_needs_a_library():
    message = load_error(unary("NoSuchOp"))
    assert "ONNX has no op NoSuchOp at opset 17; the candidate model is invalid" in message
    message = load_error(unary("Foo", domain="com.acme"))
    assert "knows no op Foo in domain com.acme" in message and "kernel library" in message


def test_ir_version_newer_than_onnxruntime():
    model = unary("Relu")
    model.ir_version = 99
    message = load_error(model)
    assert "has IR version 99" in message and "reads up to IR version" in message
    assert "limit of onnxruntime" in message


def test_run_failure_names_the_node_without_cpp_noise():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                       [value_info("x", shape=[None]), value_info("s", TensorProto.INT64, [1])],
                       [value_info("y", shape=None)])
    runner = ModelRunner(model, "candidate model")
    with pytest.raises(RunFailedError) as caught:
        runner.run({"x": np.ones(4, np.float32), "s": np.array([3])})
    message = str(caught.value)
    assert message.startswith("onnxruntime failed to run the candidate model: node 'rs' (Reshape) failed: ")
    assert "onnxruntime_src" not in message and "::" not in message
    with pytest.raises(RunFailedError) as caught:
        runner.run({"x": np.ones((4, 2), np.float32), "s": np.array([3])})
    assert "the inputs do not fit it: Invalid rank for input: x" in str(caught.value)


def test_protobuf_limit_is_named():
    # The exception upb raises when a ModelProto over 2 GB is serialized (the 3 GiB case).
    message = describe(EncodeError("Failed to serialize proto"), "load", "original model")
    assert "over 2 GB" in message and "protobuf's size limit" in message
    assert "not an error in the original model" in message


def test_clean_strips_status_and_source_location():
    raw = ("[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 "
           "onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&) "
           "Unsupported model IR version: 99, max supported IR version: 14\n")
    assert clean(raw) == "Unsupported model IR version: 99, max supported IR version: 14"


def test_verify_command_says_what_failed(tmp_path, capsys):
    original = tmp_path / "original.onnx"
    onnx.save(unary("Relu", TensorProto.INT16), original)
    assert main(["verify", str(original), str(original)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load the original model" in err[0] and "has no CPU kernel" in err[0]


def test_candidate_onnxruntime_cannot_load_is_a_mismatch_with_the_reason():
    original = unary("Relu", TensorProto.INT32)
    candidate = unary("Relu", TensorProto.INT16)
    candidate.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32  # inputs must match
    candidate.graph.node.insert(0, helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.INT16))
    candidate.graph.node[1].input[0] = "x16"
    candidate.graph.node.append(helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.INT32))
    candidate.graph.node[1].output[0] = "y16"
    candidate.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    report = verify_models(original, candidate, trials=1, stress=False)
    assert report.verdict == "mismatch"
    assert any("cannot load the candidate model" in note and "has no CPU kernel for Relu" in note
               for note in report.notes)
