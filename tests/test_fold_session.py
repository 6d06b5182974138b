"""fold_constants evaluates a sweep's constant nodes in one onnxruntime session (passes/fold_session.py):
the folded model is byte for byte the one a session per node gives, every per-node guard still
decides, and what shape inference cannot bound is never part of the sweep's run (exact class:
the same kernels on the same values, compared with np.array_equal and as serialized models)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from helpers import make_model, op_types, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.passes import fold_session, folding

FOLD = ["fold_constants"]
RNG = np.random.default_rng(7)


def _mixed_model() -> onnx.ModelProto:
    """Chains and independent nodes of constants, one of them overflowing (refused: fold.nonfinite)."""
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    v = (RNG.random(4) + 0.5).astype(np.float32)
    nodes = [
        helper.make_node("Add", ["v", "k"], ["vk"]),
        helper.make_node("Sqrt", ["vk"], ["s"]),
        helper.make_node("Div", ["w", "s"], ["ws"]),
        helper.make_node("Transpose", ["ws"], ["wt"]),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["rf", "axes"], ["ru"]),
        helper.make_node("Exp", ["big"], ["e"]),
        helper.make_node("Mul", ["e", "v"], ["ev"]),
        helper.make_node("MatMul", ["x", "wt"], ["y0"]),
        helper.make_node("Add", ["y0", "ru"], ["y1"]),
        helper.make_node("Add", ["y1", "ev"], ["y"]),
    ]
    inits = [tensor("w", w), tensor("v", v), tensor("k", np.array(1e-3, np.float32)),
             tensor("start", np.array(0, np.int64)), tensor("limit", np.array(4, np.int64)),
             tensor("delta", np.array(1, np.int64)), tensor("axes", np.array([0], np.int64)),
             tensor("big", np.full(4, 100.0, np.float32))]
    return make_model(nodes, [value_info("x", shape=[3, 4])], [value_info("y", shape=[3, 4])], inits)


def _count_sessions(monkeypatch) -> list[str]:
    """Patch both places fold_constants makes sessions; each call records which one made it."""
    made = []
    for module, label in ((folding, "node"), (fold_session, "sweep")):
        original = module.inference_session
        monkeypatch.setattr(module, "inference_session",
                            lambda model, options, _o=original, _l=label: made.append(_l) or _o(model, options))
    return made


def test_a_sweep_in_one_session_folds_what_a_session_per_node_folds(monkeypatch):
    model = _mixed_model()
    made = _count_sessions(monkeypatch)
    swept, swept_report = onnxrefine.optimize_with_report(model, FOLD)
    assert made == ["sweep"]
    with monkeypatch.context() as per_node:
        per_node.setattr(folding, "evaluate_sweep", lambda *args: None)
        made.clear()
        alone, alone_report = onnxrefine.optimize_with_report(model, FOLD)
        assert made.count("node") == 8 and "sweep" not in made
    assert swept.SerializeToString() == alone.SerializeToString()
    assert swept_report.log.refusal_guards("fold_constants") == alone_report.log.refusal_guards("fold_constants")
    assert "fold.nonfinite" in swept_report.log.refusal_guards("fold_constants")
    assert op_types(swept) == ["Exp", "Mul", "MatMul", "Add", "Add"]  # the overflow is left to run
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    assert_bit_identical(run(model, {"x": x}), run(swept, {"x": x}))


def test_what_inference_cannot_bound_is_not_run_in_the_sweep(monkeypatch):
    """A ConstantOfShape over the per-tensor cap, whose shape a Concat computes, and a MatMul
    (onnxruntime prepacks a constant weight) stay out of the sweep's model: the first is refused
    by its own guard before anything allocates it, the second gets a session of its own."""
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Concat", ["d", "d"], ["shape"], axis=0),
        helper.make_node("ConstantOfShape", ["shape"], ["z"], value=tensor("one", np.array([1.0], np.float32))),
        helper.make_node("ReduceSum", ["z"], ["zs"], keepdims=0),
        helper.make_node("Transpose", ["w"], ["wt"]),
        helper.make_node("MatMul", ["wt", "w"], ["ww"]),
        helper.make_node("MatMul", ["x", "ww"], ["y0"]),
        helper.make_node("Mul", ["y0", "zs"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", shape=[3, 4])], [value_info("y", shape=[3, 4])],
                       [tensor("d", np.array([1 << 20], np.int64)), tensor("w", w)])
    swept_ops = []
    original = fold_session.inference_session

    def spy(sweep_model, options):
        swept_ops.extend(node.op_type for node in sweep_model.graph.node)
        return original(sweep_model, options)

    monkeypatch.setattr(fold_session, "inference_session", spy)
    result, report = onnxrefine.optimize_with_report(model, FOLD)
    assert sorted(swept_ops) == ["Concat", "Transpose"]
    assert "fold.size_cap" in report.log.refusal_guards("fold_constants")
    assert op_types(result) == ["ConstantOfShape", "ReduceSum", "MatMul", "Mul"]
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    expected = run(make_model(nodes[3:6], [value_info("x", shape=[3, 4])], [value_info("y0", shape=[3, 4])],
                              [tensor("w", w)]), {"x": x})
    folded = result.graph.node[2]
    assert folded.op_type == "MatMul"
    assert_bit_identical(expected, run(make_model([folded], [value_info("x", shape=[3, 4])],
                                                  [value_info(folded.output[0], shape=[3, 4])],
                                                  list(result.graph.initializer)), {"x": x}))


def test_a_sweep_that_does_not_run_falls_back_to_a_session_per_node(monkeypatch):
    model = _mixed_model()
    expected, _ = onnxrefine.optimize_with_report(model, FOLD)

    def refuse(*args):
        raise RuntimeError("onnxruntime cannot run the sweep")

    monkeypatch.setattr(fold_session, "inference_session", refuse)
    result, _ = onnxrefine.optimize_with_report(model, FOLD)
    assert result.SerializeToString() == expected.SerializeToString()


def test_a_sweep_result_stands_only_for_the_inputs_it_was_computed_from():
    nodes = [helper.make_node("Neg", ["a"], ["n"]), helper.make_node("Abs", ["n"], ["m"]),
             helper.make_node("Add", ["m", "x"], ["y"])]
    model = ir.serde.deserialize_model(make_model(
        nodes, [value_info("x", shape=[3])], [value_info("y", shape=[3])],
        [tensor("a", np.array([1.5, -2.0, 0.0], np.float32))]))
    neg, absolute, _ = list(model.graph)
    constant = neg.inputs[0]
    sweep = fold_session.evaluate_sweep([neg, absolute], {id(constant): constant.const_value.numpy()},
                                        model.opset_imports, model.ir_version, 1 << 20)
    assert np.array_equal(sweep.outputs(neg)[0], np.array([-1.5, 2.0, -0.0], np.float32))
    assert sweep.outputs(absolute) is None  # it still reads Neg's output, not a folded constant
    folded = ir.Value(name="n_folded", const_value=ir.Tensor(sweep.outputs(neg)[0]))
    sweep.record(neg.outputs[0], folded)
    absolute.replace_input_with(0, folded)
    assert np.array_equal(sweep.outputs(absolute)[0], np.array([1.5, 2.0, 0.0], np.float32))
    other = ir.Value(name="other", const_value=ir.Tensor(np.zeros(3, np.float32)))
    absolute.replace_input_with(0, other)
    assert sweep.outputs(absolute) is None


def test_a_sweep_result_is_checked_against_the_sweeps_own_inference(monkeypatch):
    """A node whose sweep result disagrees with the shape inference the sweep planned it by (as a
    node onnxruntime computes otherwise than the spec says would) is refused, as its own session's
    result would be: the sweep's types are the guard, no second inference of each node is made."""
    real = fold_session._plan

    def planted(*args):
        planned = real(*args)
        if planned is not None:
            for name, (dtype, shape) in list(planned.types.items()):
                if shape == (4, 4):  # the Transpose's (and Div's) 4x4: inference "says" 2x8
                    planned.types[name] = (dtype, (2, 8))
        return planned

    inferences = []
    original = folding._inferred_outputs
    monkeypatch.setattr(folding, "_inferred_outputs", lambda model: inferences.append(1) or original(model))
    monkeypatch.setattr(fold_session, "_plan", planted)
    _, report = onnxrefine.optimize_with_report(_mixed_model(), FOLD)
    assert "fold.shape_mismatch" in report.log.refusal_guards("fold_constants")
    monkeypatch.setattr(fold_session, "_plan", real)
    inferences.clear()
    _, report = onnxrefine.optimize_with_report(_mixed_model(), FOLD)
    assert "fold.shape_mismatch" not in report.log.refusal_guards("fold_constants")
    assert inferences == []  # the sweep ran every node: none is inferred again alone (each of 8 was)


def test_a_folded_matmul_is_the_value_the_strict_runs_compute():
    """A MatMul of two constants is folded in a session without weight prepacking, as the strict
    verification runs of the original are made: the folded constant is their value bit for bit
    (with prepacking, 8x1024 by 1024x4 sums otherwise, and the verdict turned to rounding)."""
    from onnxrefine.verify import verify_models

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((8, 1024)).astype(np.float32), rng.standard_normal((1024, 4)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["p"]), helper.make_node("Add", ["x", "p"], ["y"])],
                       [value_info("x", shape=[8, 4])], [value_info("y", shape=[8, 4])],
                       [tensor("a", a), tensor("b", b)])
    folded = onnxrefine.optimize(model, ["fold_constants"])
    assert op_types(folded) == ["Add"]
    report = verify_models(model, folded, trials=1, stress=False, deployment=None)
    assert report.verdict == "exact" and report.outputs[0].differing == 0
    options = fold_session.session_options()
    assert options.get_session_config_entry("session.disable_prepacking") == "1"
