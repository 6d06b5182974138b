"""The API checks what the CLI checks, on a path, a ModelProto and an onnx_ir model; its
parameters are explicit keywords, `verify=True` is accepted and an unknown keyword names the
valid ones."""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from helpers import make_model, run, value_info
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.cli.main import main
from onnxrefine.errors import BadInputError


def _shape_of_negative_dim() -> onnx.ModelProto:
    # onnxruntime reads the -1 as a dynamic dim; folded, Shape would be the constant [3, -1].
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"])]
    return make_model(nodes, [value_info("x", shape=[3, -1])],
                      [value_info("s", TensorProto.INT64, [2]), value_info("n", TensorProto.INT64, [])])


@pytest.mark.parametrize("kind", ["path", "proto", "ir"])
def test_a_negative_input_dim_is_refused_for_every_kind_of_model(kind, tmp_path):
    proto = _shape_of_negative_dim()
    model = {"proto": proto, "ir": ir.serde.deserialize_model(proto)}.get(kind)
    if kind == "path":
        onnx.save(proto, tmp_path / "m.onnx")
        model = str(tmp_path / "m.onnx")
    with pytest.raises(BadInputError, match=r"graph input 'x': negative dim in \[3, -1\]"):
        onnxrefine.optimize(model, ["fold_shapes", "eliminate_shape_op"])


def test_the_cli_refuses_the_same_file(tmp_path, capsys):
    onnx.save(_shape_of_negative_dim(), tmp_path / "m.onnx")
    assert main(["optimize", str(tmp_path / "m.onnx"), "--no-verify"]) == 2
    assert "negative dim in [3, -1]" in capsys.readouterr().err


def test_a_malformed_tensor_in_a_modelproto_is_refused_as_from_a_file():
    model = make_model([helper.make_node("Add", ["x", "c"], ["y"])], [value_info("x", shape=[2])],
                       [value_info("y", shape=[2])], [helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])])
    model.graph.initializer[0].dims[:] = [3]  # two values for three elements
    with pytest.raises(BadInputError, match="float_data holds 2 values, but dims \\[3\\] need 3"):
        onnxrefine.optimize(model)


def _relu_model() -> onnx.ModelProto:
    return make_model([helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                      [value_info("x", shape=[2, 3])], [value_info("y", shape=[2, 3])])


def test_verify_true_verifies_end_to_end():
    optimized, report = onnxrefine.optimize_with_report(_relu_model(), verify=True)
    assert report.verification["status"] == "verified" and report.verification["verdict"] == "exact"
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(run(optimized, {"x": x})[0], run(_relu_model(), {"x": x})[0])


def test_the_default_certifies_and_does_not_verify_end_to_end():
    _, report = onnxrefine.optimize_with_report(_relu_model())
    assert report.verification is None and report.certificates["coverage"]["certified"] + \
        report.certificates["coverage"]["proved"] == len(report.log.applied) == 1
    doc = onnxrefine.optimize.__doc__
    assert "no end-to-end verification" in doc and "verify=True" in doc


@pytest.mark.parametrize("function", ["optimize", "optimize_with_report"])
def test_an_unknown_keyword_names_the_valid_ones(function):
    with pytest.raises(TypeError) as raised:
        getattr(onnxrefine, function)(_relu_model(), verfy=True)
    message = str(raised.value)
    assert f"{function}() got unknown keyword argument(s) verfy" in message
    assert "valid: passes, fixed_point, disable, verify, certify" in message


def test_the_parameters_are_explicit_keywords():
    for function in (onnxrefine.optimize, onnxrefine.optimize_with_report):
        parameters = inspect.signature(function).parameters
        assert not any(p.kind == p.VAR_KEYWORD for p in parameters.values())
        assert {"verify", "certify", "disable", "input_shapes"} <= set(parameters)


def test_verify_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="verify must be True, False, None or onnxrefine.VerifySettings, not str"):
        onnxrefine.optimize(_relu_model(), verify="yes")


def _two_nodes(first, second, *, inputs=None, outputs=None) -> onnx.ModelProto:
    return make_model([helper.make_node(*first), helper.make_node(*second)],
                      inputs or [value_info("x", shape=[2, 3])], outputs or [value_info("y", shape=[2, 3])],
                      [helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])])


def _rename_output(proto, op_type: str, name: str):
    """`proto` in onnx-ir with `op_type`'s output renamed: a defect onnx-ir's reader refuses, but an
    onnx_ir model built or edited in code can hold."""
    def edit():
        model = ir.serde.deserialize_model(proto)
        next(node for node in model.graph if node.op_type == op_type).outputs[0].name = name
        return model
    return edit


_DANGLING_BRANCH = helper.make_graph([helper.make_node("Neg", ["ghost"], ["o"])], "then", [], [value_info("o")])
_CLEAN = _two_nodes(("Relu", ["x"], ["t"]), ("Add", ["t", "w"], ["y"]))
# Each check a file gets, and the model that fails it: (file's model, the onnx_ir model or None to
# read the file's model into onnx-ir as it is, the message all three kinds of model get).
LOAD_CHECKS = {
    "dangling reference": (_two_nodes(("Relu", ["x"], ["t"]), ("Add", ["ghost", "w"], ["y"])), None,
                           r"node 'Add' \(Add\) reads 'ghost', which is never defined"),
    "dangling reference in a branch": (
        make_model([helper.make_node("If", ["c"], ["y"], then_branch=_DANGLING_BRANCH, else_branch=_DANGLING_BRANCH)],
                   [value_info("c", TensorProto.BOOL, [])], [value_info("y")]), None,
        r"node 'If' \(If\) reads 'ghost', which is never defined"),
    "name written twice": (_two_nodes(("Relu", ["x"], ["y"]), ("Add", ["x", "w"], ["y"])),
                           _rename_output(_CLEAN, "Relu", "y"), r"tensor 'y' is written by two nodes"),
    "graph input overwritten": (_two_nodes(("Relu", ["x"], ["x"]), ("Add", ["x", "w"], ["y"])),
                                _rename_output(_CLEAN, "Relu", "x"),
                                r"node 'Relu' \(Relu\) writes 'x', which is already a graph input or initializer"),
    "cycle": (_two_nodes(("Add", ["x", "y"], ["t"]), ("Add", ["t", "w"], ["y"])), None,
              r"the graph has a cycle \(through node 'Add'\)"),
    "output never defined": (_two_nodes(("Relu", ["x"], ["t"]), ("Add", ["t", "w"], ["z"])), None,
                             r"output 'y' is never defined"),
    "input of no element type": (_two_nodes(("Relu", ["x"], ["t"]), ("Add", ["t", "w"], ["y"]),
                                            inputs=[value_info("x", TensorProto.UNDEFINED, [2, 3])]), None,
                                 r"graph input 'x': element type is UNDEFINED \(0\)"),
    "negative input dim": (_two_nodes(("Relu", ["x"], ["t"]), ("Add", ["t", "w"], ["y"]),
                                      inputs=[value_info("x", shape=[2, -1])]), None,
                           r"graph input 'x': negative dim in \[2, -1\]"),
}


@pytest.mark.parametrize("kind", ["path", "proto", "ir"])
@pytest.mark.parametrize("check", sorted(LOAD_CHECKS))
def test_every_load_check_runs_on_every_kind_of_model(check, kind, tmp_path):
    proto, make_ir, message = LOAD_CHECKS[check]
    if kind == "path":
        onnx.save(proto, tmp_path / "m.onnx")
        model = str(tmp_path / "m.onnx")
    elif kind == "proto":
        model = proto
    else:
        model = make_ir() if make_ir else ir.serde.deserialize_model(proto)
    with pytest.raises(BadInputError, match=message):
        onnxrefine.optimize(model)


def test_an_onnx_ir_model_refused_by_a_check_is_left_as_it_was():
    model = ir.serde.deserialize_model(LOAD_CHECKS["dangling reference"][0])
    weights = dict(model.graph.initializers)
    nodes = list(model.graph)
    with pytest.raises(BadInputError):
        onnxrefine.optimize(model)
    assert dict(model.graph.initializers) == weights and list(model.graph) == nodes
    assert all(value.const_value is not None for value in model.graph.initializers.values())


def test_a_clean_onnx_ir_model_passes_the_checks_and_is_optimized():
    optimized = onnxrefine.optimize(ir.serde.deserialize_model(_CLEAN))
    assert isinstance(optimized, ir.Model) and list(optimized.graph.initializers) == ["w"]
