"""Certificates inside control-flow bodies: a body's inputs (a Loop's iteration number, condition
and carried values, a Scan's states and scanned slices) take the types and shapes of its first
iteration, so a rewrite there is certified instead of refused ("the element type of 's' is not
known"), and a wrong one is caught."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model, run, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical
from test_certificate_reach import planted  # noqa: F401 - the fixture planting relu_to_abs (Relu -> Abs)

import onnxrefine

BODY_NOTE = "in a control-flow body, at its first iteration's shapes"


def _relus(source: str, out: str, twice: bool) -> list:
    if not twice:
        return [helper.make_node("Relu", [source], [out])]
    return [helper.make_node("Relu", [source], [f"{out}_r"]), helper.make_node("Relu", [f"{out}_r"], [out])]


def _loop(twice: bool = True, branch: bool = False, unknown_initial: bool = False) -> onnx.ModelProto:
    # v <- relu(v + x) per iteration; the body's 's' reads the carried v_in, which no fact types.
    # With `branch`, the Relus sit in an If inside the body; with `unknown_initial`, the initial
    # value's shape is chosen at run time (Expand over a Where: a run of the model says it).
    if branch:
        then = helper.make_graph(_relus("s", "t", twice), "then", [], [value_info("t")])
        other = helper.make_graph([helper.make_node("Neg", ["s"], ["o"])], "else", [], [value_info("o")])
        step = [helper.make_node("If", ["cond_in"], ["v_out"], then_branch=then, else_branch=other)]
    else:
        step = _relus("s", "v_out", twice)
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "x"], ["s"]), *step, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [value_info("i", TensorProto.INT64, []), value_info("cond_in", TensorProto.BOOL, []),
                 value_info("v_in")],
        [value_info("cond_out", TensorProto.BOOL, []), value_info("v_out")])
    nodes, inits = [helper.make_node("Loop", ["n", "", "v0"], ["v"], body=body)], []
    inputs = [value_info("x", shape=[2, 3]), value_info("n", TensorProto.INT64, [])]
    if unknown_initial:
        nodes[:0] = [helper.make_node("Where", ["pick", "wide", "narrow"], ["target"]),
                     helper.make_node("Expand", ["start", "target"], ["v0"])]
        inits = [helper.make_tensor("wide", TensorProto.INT64, [2], [2, 3]),
                 helper.make_tensor("narrow", TensorProto.INT64, [2], [1, 3])]
        inputs += [value_info("start", shape=[1, 3]), value_info("pick", TensorProto.BOOL, [2])]
    else:
        inputs.append(value_info("v0", shape=["N", 3]))
    return make_model(nodes, inputs, [value_info("v")], inits)


def _scan(twice: bool = True) -> onnx.ModelProto:
    # state <- relu(state + column): the body's inputs are the state and one column of xs (axis 1)
    body = helper.make_graph(
        [helper.make_node("Add", ["state", "column"], ["s"]), *_relus("s", "state_out", twice),
         helper.make_node("Identity", ["s"], ["each"])],
        "body", [value_info("state"), value_info("column")], [value_info("state_out"), value_info("each")])
    nodes = [helper.make_node("Scan", ["state0", "xs"], ["final", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1])]
    return make_model(nodes, [value_info("state0", shape=[3]), value_info("xs", shape=[3, 5])],
                      [value_info("final"), value_info("ys")])


MODELS = {
    "loop body": _loop,
    "if branch in a loop body": lambda twice=True: _loop(twice, branch=True),
    "loop of an initial value of unknown shape": lambda twice=True: _loop(twice, unknown_initial=True),
    "scan body": _scan,
}


def _feeds(model: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(0)
    shapes = {"x": (2, 3), "v0": (2, 3), "start": (1, 3), "state0": (3,), "xs": (3, 5)}
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    feeds.update(n=np.array(3, np.int64), pick=np.array([True, False]))
    return {i.name: feeds[i.name] for i in model.graph.input}


@pytest.mark.parametrize("where", sorted(MODELS))
def test_a_right_rewrite_in_a_control_flow_body_is_certified(where):
    model = MODELS[where]()
    optimized, report = onnxrefine.optimize_with_report(model, ["eliminate_consecutive_idempotent_ops"])
    [entry] = [a for a in report.log.applied if a.rule == "idempotent_relu_chain"]
    assert entry.evidence == "certified" and BODY_NOTE in entry.certificate
    assert not [r for r in report.log.refused.values() if r.guard.startswith("certificate")]
    assert_bit_identical(run(model, _feeds(model)), run(optimized, _feeds(model)))


@pytest.mark.parametrize("where", sorted(MODELS))
def test_a_wrong_rewrite_in_a_control_flow_body_is_caught(planted, where):
    model = MODELS[where](twice=False)
    optimized, report = onnxrefine.optimize_with_report(model, [planted("relu_to_abs")])
    [(guard, reason)] = [(r.guard, r.reason) for r in report.log.refused.values() if r.rule == "relu_to_abs"]
    assert guard == "certificate.failed" and "exact rewrite differs" in reason
    assert_bit_identical(run(model, _feeds(model)), run(optimized, _feeds(model)))


def test_a_body_in_a_function_still_has_no_facts(planted):
    # A function's inputs are each caller's: the body facts stop there, the certificate is skipped.
    loop = _loop(twice=False)
    function = helper.make_function("local", "step", ["x", "n", "v0"], ["v"], list(loop.graph.node),
                                    [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("step", ["x", "n", "v0"], ["v"], domain="local")],
                       list(loop.graph.input), [value_info("v")], functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    _, report = onnxrefine.optimize_with_report(model, [planted("relu_to_abs")])
    [(guard, reason)] = [(r.guard, r.reason) for r in report.log.refused.values() if r.rule == "relu_to_abs"]
    assert guard == "certificate.uncertifiable" and "is not known" in reason
