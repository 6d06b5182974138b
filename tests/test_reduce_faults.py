"""The reducer under faults: the inputs it verifies on do not shift when an edit drops an unused
graph input, and a check that crashes the process (onnxruntime or the step segfaulting on an
edited model) costs that edit only, not the reduction."""

from __future__ import annotations

import os
import signal

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxrefine.fuzz.reduce import StableInputs, reduce_model
from test_fuzz_campaign import _failing_case, wrong_pad_into_maxpool


def _two_inputs(keep_unused: bool) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3]) for name in ("a", "b")]
    if not keep_unused:
        inputs = inputs[1:]
    graph = helper.make_graph([helper.make_node("Relu", ["b"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dropping_an_unused_input_keeps_the_values_of_the_others():
    """The generator draws per input position: without the stable sets, `b` got other values once
    the unused `a` before it was dropped, and a mismatch that depended on them could vanish."""
    from onnxrefine.verify.inputs import generate_labelled_inputs

    original, edited = _two_inputs(True), _two_inputs(False)
    stable = StableInputs(original, seed=3, trials=2)
    first = stable.for_model(original, {})
    after = stable.for_model(edited, {})
    assert [sorted(s) for s in after] == [["b"]] * len(first)
    for before, now in zip(first, after):
        np.testing.assert_array_equal(before["b"], now["b"])
    fresh = generate_labelled_inputs(edited, seed=3, trials=2)
    assert any(not np.array_equal(feeds["b"], s["b"]) for (_, feeds), s in zip(fresh, first))  # what it avoids


def test_a_check_that_crashes_costs_one_edit_not_the_reduction():
    """A step that segfaults on models of two nodes or fewer (as an optimizer with a native bug
    does): every such check is a failed edit, and the reduction ends with what it has."""
    case = _failing_case()

    def crashing_step(model: onnx.ModelProto) -> onnx.ModelProto:
        if len(model.graph.node) <= 2:
            os.kill(os.getpid(), signal.SIGSEGV)
        return wrong_pad_into_maxpool(model)

    result = reduce_model(case.model, crashing_step, dims=case.input_dims, seed=case.seed, max_checks=60,
                          shrink=False)
    assert 3 <= result.nodes_after < result.nodes_before
    onnx.checker.check_model(result.model, full_check=True)
