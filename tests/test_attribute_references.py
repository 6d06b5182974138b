"""Attribute references inside model-local functions (`Transpose(perm=@perm)`) are never read as
absent or as the default: the driver refuses a match that carries one, each reader refuses
(`attr.reference`), the shape facts answer "unknown", the plan's estimate takes either reading."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from guardutil import expect_guard, expect_refused
from helpers import plant_pass, run
from onnx import AttributeProto, helper
from onnx import TensorProto as T

import onnxrefine
from onnxrefine.ir.attrs import attr, proto_attr
from onnxrefine.ir.facts import StaticShapes
from onnxrefine.passes import registry
from onnxrefine.passes.registry import PassSpec


def _call_model(body, caller_attrs: dict, x_shape, function_attrs=("perm",)) -> onnx.ModelProto:
    """main: Y = local.F(X) with `caller_attrs`; F's body `body` reads x, writes y."""
    function = helper.make_function("local", "F", ["x"], ["y"], body, [helper.make_opsetid("", 17)],
                                    attributes=list(function_attrs))
    call = helper.make_node("F", ["X"], ["Y"], domain="local", **caller_attrs)
    graph = helper.make_graph([call], "g", [helper.make_tensor_value_info("X", T.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("Y", T.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[function])
    model.ir_version = 8
    return model


def _ref(node: onnx.NodeProto, name: str, kind=AttributeProto.INTS) -> onnx.NodeProto:
    node.attribute.append(helper.make_attribute_ref(name, kind))
    return node


def _shape_constant(name: str, dims) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, T.INT64, [len(dims)], dims))


def _transposes_model() -> onnx.ModelProto:
    # The Reshape to a constant shape makes the rank known in the body; the second Transpose's
    # perm is the caller's [0, 1, 2]. Read as absent (reversed axes), fusing the two composes the
    # wrong permutation: (2, 3, 4) became (4, 3, 2).
    body = [_shape_constant("s", [4, 2, 3]), helper.make_node("Reshape", ["x", "s"], ["r"]),
            helper.make_node("Transpose", ["r"], ["t"], perm=[1, 2, 0]),
            _ref(helper.make_node("Transpose", ["t"], ["y"]), "perm")]
    return _call_model(body, {"perm": [0, 1, 2]}, [4, 2, 3])


def _reshape_model() -> onnx.ModelProto:
    # The shape facts read Transpose(perm=@perm) as reversing (2, 3, 4) to (4, 3, 2), so the last
    # Reshape to [4, 3, 2] looked like a no-op; with the caller's perm [2, 0, 1] it is not.
    body = [_shape_constant("s", [2, 3, 4]), helper.make_node("Reshape", ["x", "s"], ["r"]),
            _ref(helper.make_node("Transpose", ["r"], ["t"]), "perm"),
            _shape_constant("target", [4, 3, 2]), helper.make_node("Reshape", ["t", "target"], ["y"])]
    return _call_model(body, {"perm": [2, 0, 1]}, [2, 3, 4])


def _feeds(model: onnx.ModelProto) -> dict:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"X": np.random.default_rng(0).standard_normal(dims).astype(np.float32)}


def test_transpose_with_a_perm_reference_is_fused_with_the_caller_s_perm():
    # Bound at the one call site (rewrite/bindings.py): the caller's [0, 1, 2], never the reversed default.
    model = _transposes_model()
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_consecutive_transposes"])
    assert [a.rule for a in report.log.applied] == ["fuse_consecutive_transposes"]
    assert run(optimized, _feeds(model))[0].shape == (2, 3, 4)
    np.testing.assert_array_equal(run(optimized, _feeds(model))[0], run(model, _feeds(model))[0])


def test_reshape_after_a_transpose_with_a_perm_reference_is_kept():
    model = _reshape_model()
    expected = run(model, _feeds(model))[0]
    optimized = onnxrefine.optimize(model, ["eliminate_nop_reshape"])
    assert [n.op_type for n in optimized.functions[0].node].count("Reshape") == 2
    np.testing.assert_array_equal(run(optimized, _feeds(model))[0], expected)
    assert expected.shape == (4, 3, 2)


def test_the_shape_facts_answer_unknown_for_a_reference():
    model = ir.serde.deserialize_model(_reshape_model())
    body = next(iter(model.functions.values()))
    transpose = next(n for n in body if n.op_type == "Transpose")
    facts = StaticShapes(model)
    assert facts.symbolic_shape(transpose.inputs[0]) == (2, 3, 4)  # the facts do reach into the body
    assert facts.symbolic_shape(transpose.outputs[0]) is None


def _resolving(pass_name: str, monkeypatch) -> str:
    """A test pass with `pass_name`'s rules marked as resolving references, so the driver lets the
    match through and the rule's own reading of the attribute is what is tested."""
    rules = tuple(dataclasses.replace(rule, resolves_references=True) for rule in registry.get_pass(pass_name).rules)
    spec = PassSpec(f"resolving_{pass_name}", "test only", rules=rules, default=False)
    plant_pass(monkeypatch, spec)
    return spec.name


def test_a_rule_reading_a_reference_refuses_by_itself(monkeypatch):
    # The pass readers (opargs): even past the driver, the rule never composes a reversed perm.
    model = _transposes_model()
    optimized, _ = expect_guard(model, [_resolving("fuse_consecutive_transposes", monkeypatch)], "attr.reference",
                                _feeds(model), rule="fuse_consecutive_transposes")
    assert run(optimized, _feeds(model))[0].shape == (2, 3, 4)


def _conv_bn_model(reference: str) -> onnx.ModelProto:
    rng = np.random.default_rng(1)

    def const(name, array):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, T.FLOAT, array.shape, array.astype(np.float32).reshape(-1)))

    body = [const("w", rng.normal(0, 0.5, (3, 2, 1, 1))), const("sc", rng.uniform(0.5, 1.5, 3)),
            const("b", rng.normal(0, 0.2, 3)), const("m", rng.normal(0, 0.2, 3)), const("v", rng.uniform(0.5, 1, 3)),
            _shape_constant("s", [1, 2, 3, 3]), helper.make_node("Reshape", ["x", "s"], ["r"]),
            helper.make_node("Conv", ["r", "w"], ["c"]),
            _ref(helper.make_node("BatchNormalization", ["c", "sc", "b", "m", "v"], ["y"]), reference,
                 AttributeProto.FLOAT)]
    return _call_model(body, {reference: 0.5}, [1, 2, 3, 3], function_attrs=(reference,))


def test_batchnorm_epsilon_reference_is_bound_by_the_driver_and_refused_by_the_rule(monkeypatch):
    # The caller's epsilon 0.5, read as the default 1e-5, would fold the wrong scale: the driver
    # binds it at the call site (the fold is then right: reassociating, within rounding), the rule
    # alone refuses it.
    model = _conv_bn_model("epsilon")
    folded, report = onnxrefine.optimize_with_report(model, ["fuse_bn_into_conv"])
    assert [a.rule for a in report.log.applied] == ["conv_bn"]
    np.testing.assert_allclose(run(folded, _feeds(model))[0], run(model, _feeds(model))[0], rtol=1e-5, atol=1e-6)
    optimized, _ = expect_guard(model, [_resolving("fuse_bn_into_conv", monkeypatch)], "attr.reference",
                                _feeds(model), rule="conv_bn")
    assert "BatchNormalization" in [n.op_type for n in optimized.functions[0].node]


def test_split_to_sequence_axis_reference_is_refused():
    # The sequences pass (graph-level): axis=@axis is not read as axis 0.
    body = [helper.make_node("Constant", [], ["sizes"], value=helper.make_tensor("sizes", T.INT64, [2], [1, 1])),
            _ref(helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"]), "axis", AttributeProto.INT),
            helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", T.INT64, [], [0])),
            helper.make_node("SequenceAt", ["seq", "zero"], ["y"])]
    model = _call_model(body, {"axis": 1}, [2, 2], function_attrs=("axis",))
    optimized, _ = expect_guard(model, ["split_to_sequence_as_split"], "attr.reference", _feeds(model),
                                rule="split_to_sequence_as_split")
    assert "SplitToSequence" in [n.op_type for n in optimized.functions[0].node]


def _node_with_reference(op: str, inputs, name: str, kind: ir.AttributeType, **attributes) -> ir.Node:
    given = [ir.convenience.convert_attribute(k, v) for k, v in attributes.items()]
    return ir.Node("", op, inputs, [*given, ir.RefAttr(name, name, kind)])


def test_reshape_target_reads_allowzero_reference_as_unknown():
    # passes/shapes.py: a partially known target with allowzero=@a is not rewritten to a 0-copy.
    from onnxrefine.passes import shapes

    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["n", 6]))
    graph_shape = ir.Node("", "Shape", [x])
    reshape = _node_with_reference("Reshape", [x, graph_shape.outputs[0]], "allowzero", ir.AttributeType.INT)
    graph = ir.Graph([x], reshape.outputs, nodes=[graph_shape, reshape], opset_imports={"": 17})
    model = ir.Model(graph, ir_version=8)
    expect_refused("attr.reference", shapes._reshape_target, reshape, StaticShapes(model))


def test_certificate_window_and_split_readers_refuse_a_reference():
    from onnxrefine.verify.certificate import inputs as certificate_inputs
    from onnxrefine.verify.certificate.proofs import affine, matmul

    x = ir.Value(name="x")
    pool = _node_with_reference("MaxPool", [x], "kernel_shape", ir.AttributeType.INTS)
    expect_refused("attr.reference", certificate_inputs._window, pool, 0, {})
    split = _node_with_reference("Split", [x], "axis", ir.AttributeType.INT)
    expect_refused("attr.reference", matmul._split_sizes, split, 2)
    # Two convolutions with strides=@a and strides=@b must not compare equal (both values unknown).
    conv = _node_with_reference("Conv", [x], "strides", ir.AttributeType.INTS)
    expect_refused("attr.reference", affine._attrs, conv)


def test_signed_zero_and_constant_readers_take_a_reference_as_unknown():
    from onnxrefine.ir import foldmath, signed_zero

    cast = _node_with_reference("Cast", [ir.Value(name="x")], "to", ir.AttributeType.INT)
    assert signed_zero._classify(cast, 0) == "sink"  # not "stop": the target type is the caller's
    constant = _node_with_reference("Constant", [], "value", ir.AttributeType.TENSOR)
    assert foldmath.constant_node_array(constant) is None


def test_the_plan_counts_a_gemm_with_a_transa_reference_at_the_larger_depth():
    from onnxrefine.verify import plan as verify_plan

    gemm = _ref(helper.make_node("Gemm", ["a", "b"], ["y"]), "transA", AttributeProto.INT)
    flops = verify_plan._flops(gemm, {"a": [64, 8], "b": [64, 4]}, out_count=32)
    assert flops == 2.0 * 32 * 64  # transA=0 would count a depth of 8
    with pytest.raises(onnxrefine.errors.RewriteRefused):
        proto_attr(gemm, "transA", 0)


def test_the_reader_reads_values_and_defaults():
    node = ir.Node("", "Transpose", [ir.Value(name="x")], [ir.AttrInt64s("perm", [1, 0])])
    assert list(attr(node, "perm")) == [1, 0] and attr(node, "missing", 7) == 7
    assert proto_attr(helper.make_node("Gemm", ["a", "b"], ["y"], transA=1), "transA", 0) == 1


def test_an_if_whose_branch_is_a_reference_is_not_inlined():
    # passes/cleanup.py: a constant condition, but then_branch=@b is each caller's graph.
    from onnxrefine.passes import cleanup

    cond = ir.Value(name="c", const_value=ir.Tensor(np.array(True)))
    node = _node_with_reference("If", [cond], "then_branch", ir.AttributeType.GRAPH)
    assert cleanup._constant_condition(node) is None
