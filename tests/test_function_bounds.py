"""Model-local functions and If branches in the float64 reference: a function's body (and the branch an
If takes) is tracked as the main graph is (reference/bound.py's BoundTracker.for_function and
for_subgraph), so a call's outputs get the per-element bound,
probable scale and magnitude of terms that the same nodes inlined get; attribute references are
resolved from each call, also for ops that onnx.reference evaluates.
"""

from __future__ import annotations

import numpy as np
from helpers import make_model, value_info
from onnx import TensorProto, helper

from onnxrefine.verify.reference import bound_of, evaluate_float64, magnitude_of, probable_scale_of

F = TensorProto.FLOAT


def _constant(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name + "_v", F, [], [value]))


def _body(alpha_attr):
    leaky = helper.make_node("LeakyRelu", ["s"], ["r"])
    leaky.attribute.append(alpha_attr)
    return [_constant("c", 1e4), _constant("k", 0.37), helper.make_node("Add", ["a", "c"], ["p"]),
            helper.make_node("Sub", ["p", "c"], ["d"]), helper.make_node("Mul", ["d", "k"], ["s"]), leaky,
            helper.make_node("ReduceSum", ["r"], ["q"], keepdims=1)]


def _as_function(alpha):
    reference = helper.AttributeProto(name="alpha", ref_attr_name="slope", type=helper.AttributeProto.FLOAT)
    function = helper.make_function("local", "Block", ["a"], ["q"], _body(reference), [helper.make_opsetid("", 17)],
                                    attributes=["slope"])
    model = make_model([helper.make_node("Block", ["x"], ["y"], domain="local", slope=alpha)],
                       [value_info("x", F, [4, 16])], [value_info("y", F, None)], functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def _inlined(alpha):
    nodes = _body(helper.make_attribute("alpha", alpha))
    renamed = {"a": "x", "q": "y"}
    for node in nodes:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        node.output[:] = [renamed.get(name, name) for name in node.output]
    return make_model(nodes, [value_info("x", F, [4, 16])], [value_info("y", F, None)])


def test_a_functions_outputs_get_the_bounds_of_its_inlined_body():
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    called = evaluate_float64(_as_function(0.2), {"x": x})["y"]
    inlined = evaluate_float64(_inlined(0.2), {"x": x})["y"]
    np.testing.assert_array_equal(np.asarray(called), np.asarray(inlined))
    for read in (bound_of, probable_scale_of, magnitude_of):
        assert read(called) is not None and np.all(np.isfinite(read(called)))
        np.testing.assert_allclose(read(called), read(inlined), rtol=1e-12)


def test_an_attribute_reference_sets_the_bound_as_its_value_does():
    # LeakyRelu's bound reads alpha: 0.2 and 0.9 from the call give the inlined bounds of each
    x = -np.abs(np.random.default_rng(1).standard_normal((4, 16))).astype(np.float32)
    for alpha in (0.2, 0.9):
        called = evaluate_float64(_as_function(alpha), {"x": x})["y"]
        np.testing.assert_allclose(bound_of(called), bound_of(evaluate_float64(_inlined(alpha), {"x": x})["y"]),
                                   rtol=1e-12)


def test_a_function_that_casts_to_another_float_type_gets_no_bound():
    # function bodies are not typed: one float type is assumed throughout, and a Cast to float64
    # inside breaks that, so no bound is derived (and the call's magnitude is probed)
    body = [helper.make_node("Cast", ["a"], ["w"], to=TensorProto.DOUBLE), helper.make_node("Mul", ["w", "w"], ["m"]),
            helper.make_node("Cast", ["m"], ["q"], to=TensorProto.FLOAT)]
    function = helper.make_function("local", "Wide", ["a"], ["q"], body, [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("Wide", ["x"], ["y"], domain="local")], [value_info("x", F, [8])],
                       [value_info("y", F, None)], functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    x = np.linspace(0.5, 4, 8).astype(np.float32)
    value = evaluate_float64(model, {"x": x})["y"]
    assert np.all(np.isnan(bound_of(value)))
    np.testing.assert_allclose(magnitude_of(value), 2 * x.astype(np.float64) ** 2, rtol=1e-4)


def test_a_functions_node_that_onnx_reference_runs_takes_each_calls_attributes():
    # LpNormalization has no native kernel: its onnx.reference session was kept per node, so the
    # second call (p=1) ran with the first call's p=2
    norm = helper.make_node("LpNormalization", ["a"], ["q"], axis=-1)
    norm.attribute.append(helper.AttributeProto(name="p", ref_attr_name="order", type=helper.AttributeProto.INT))
    function = helper.make_function("local", "Norm", ["a"], ["q"], [norm], [helper.make_opsetid("", 17)],
                                    attributes=["order"])
    model = make_model([helper.make_node("Norm", ["x"], ["two"], domain="local", order=2),
                        helper.make_node("Norm", ["x"], ["one"], domain="local", order=1)],
                       [value_info("x", F, [2, 4])], [value_info("two", F, None), value_info("one", F, None)],
                       functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    x = np.array([[1, 2, 3, 4], [0.5, 0.5, 1, 2]], np.float32)  # positive: onnx.reference takes no |x| for p=1
    out = evaluate_float64(model, {"x": x})
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out["two"], x64 / np.linalg.norm(x64, axis=-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(out["one"], x64 / np.abs(x64).sum(axis=-1, keepdims=True), rtol=1e-12)


def test_an_if_branch_gets_the_bounds_its_inlined_nodes_get():
    # the branch taken is tracked as the graph around it is, reading the enclosing graph's values
    # (x) through; an If's output had no bound and no magnitude, so each element was judged by its
    # own |R| alone (a fused bias inside a branch was a false alarm)
    body = _inlined(0.2).graph
    then_branch = helper.make_graph(list(body.node), "then", [], [value_info("y", F, None)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "else", [], [value_info("z", F, None)])
    model = make_model([helper.make_node("If", ["cond"], ["out"], then_branch=then_branch, else_branch=else_branch)],
                       [value_info("x", F, [4, 16]), value_info("cond", TensorProto.BOOL, [])],
                       [value_info("out", F, None)])
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    branched = evaluate_float64(model, {"x": x, "cond": np.array(True)})["out"]
    inlined = evaluate_float64(_inlined(0.2), {"x": x})["y"]
    for read in (bound_of, probable_scale_of, magnitude_of):
        assert read(branched) is not None and np.all(np.isfinite(read(branched)))
        np.testing.assert_allclose(read(branched), read(inlined), rtol=1e-12)
