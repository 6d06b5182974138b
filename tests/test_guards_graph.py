"""One test per guard of the graph-level rewrites (passes/sequences.py, passes/reshapes.py), of the
rule driver itself (rewrite/driver.py: graph outputs, shared intermediates, certificates), of
verification's rollback veto (passes/pipeline.py) and of the quantization and signed-zero guards
every rule shares (ir/quantization.py, passes/quantized.py, ir/signed_zero.py). Each model reaches
exactly that guard; the test asserts its id and, where onnxruntime runs the model, bit-identical
outputs afterwards."""

from __future__ import annotations

import numpy as np
from guardutil import expect_guard
from helpers import make_model, plant_pass, tensor, value_info
from onnx import TensorProto, helper

from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, Replacement, Rule

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def i64(name, values):
    return tensor(name, np.array(values, np.int64))


# --- split_to_sequence_as_split -----------------------------------------------------------------

SEQ = "split_to_sequence_as_split"


def _sequence(split_inputs=("x", "s"), readers=None, inits=(), inputs=None, x_shape=(4, 2), outputs=None,
              **split_attrs):
    readers = readers if readers is not None else [node("SequenceAt", ["seq", "p0"], ["y"])]
    nodes = [node("SplitToSequence", list(split_inputs), ["seq"], **split_attrs), *readers]
    graph_inputs = inputs if inputs is not None else [value_info("x", F, list(x_shape) if x_shape else None)]
    return make_model(nodes, graph_inputs, outputs or [value_info("y", F, None)],
                      [i64("p0", 0), *inits])


def x42():
    return {"x": rand(4, 2)}


def test_sequence_without_split():
    expect_guard(_sequence(("x",)), SEQ, "split_seq.no_split", x42())


def test_sequence_split_not_constant():
    model = _sequence(inputs=[value_info("x", F, [4, 2]), value_info("s", I64, [2])])
    expect_guard(model, SEQ, "split_seq.split_not_constant", {**x42(), "s": np.array([1, 3], np.int64)})


def test_sequence_split_sizes_negative():
    expect_guard(_sequence(inits=[i64("s", [5, -1])]), SEQ, "split_seq.sizes_invalid")


def test_sequence_split_of_rank_2():
    expect_guard(_sequence(inits=[i64("s", [[1, 3]])]), SEQ, "split_seq.split_rank")


def test_sequence_chunk_over_an_axis_of_unknown_size():
    expect_guard(_sequence(inits=[i64("s", 2)], x_shape=None), SEQ, "split_seq.axis_not_static", x42())


def test_sequence_chunk_not_positive():
    expect_guard(_sequence(inits=[i64("s", 0)]), SEQ, "split_seq.chunk")


def test_sequence_is_a_graph_output():
    outputs = [value_info("y", F, None), helper.make_tensor_sequence_value_info("seq", F, None)]
    model = _sequence(inits=[i64("s", [1, 3])], outputs=outputs)
    expect_guard(model, SEQ, "split_seq.graph_output")


def test_sequence_read_by_another_op():
    readers = [node("SequenceAt", ["seq", "p0"], ["y"]), node("SequenceLength", ["seq"], ["n"])]
    model = _sequence(inits=[i64("s", [1, 3])], readers=readers,
                      outputs=[value_info("y", F, None), value_info("n", I64, [])])
    expect_guard(model, SEQ, "split_seq.other_reader", x42())


def test_sequence_read_inside_a_subgraph():
    at = helper.make_graph([node("SequenceAt", ["seq", "p0"], ["t"])], "then", [], [value_info("t", F, None)])
    other = helper.make_graph([node("Identity", ["x"], ["e"])], "else", [], [value_info("e", F, None)])
    readers = [node("If", ["c"], ["y"], then_branch=at, else_branch=other)]
    model = _sequence(inits=[i64("s", [1, 3])], readers=readers,
                      inputs=[value_info("x", F, [4, 2]), value_info("c", BOOL, [])])
    expect_guard(model, SEQ, "split_seq.subgraph_reader", {**x42(), "c": np.array(True)})


def test_sequence_position_not_constant():
    readers = [node("SequenceAt", ["seq", "p"], ["y"])]
    model = _sequence(inits=[i64("s", [1, 3])], readers=readers,
                      inputs=[value_info("x", F, [4, 2]), value_info("p", I64, [])])
    expect_guard(model, SEQ, "split_seq.position_not_constant", {**x42(), "p": np.array(1, np.int64)})


def test_sequence_position_outside_the_pieces():
    readers = [node("SequenceAt", ["seq", "p5"], ["y"])]
    expect_guard(_sequence(inits=[i64("s", [1, 3]), i64("p5", 5)], readers=readers), SEQ,
                 "split_seq.position_outside")


def test_sequence_read_by_nothing():
    model = _sequence(inits=[i64("s", [1, 3])], readers=[node("Identity", ["x"], ["y"])])
    expect_guard(model, SEQ, "split_seq.no_reader", x42())


# --- eliminate_reshape_around_elementwise ----------------------------------------------------------

REGION = "eliminate_reshape_around_elementwise"


def _region(middle, *, inits=(), inputs=(), outputs=(), x_shape=(2, 3), flat=(6,), back=(2, 3)):
    """x -> Reshape(flat) -> r -> `middle` nodes -> m -> Reshape(back) -> y."""
    nodes = [node("Reshape", ["x", "flat"], ["r"]), *middle, node("Reshape", ["m", "back"], ["y"])]
    return make_model(nodes, [value_info("x", F, list(x_shape)), *inputs], [value_info("y", F, None), *outputs],
                      [i64("flat", list(flat)), i64("back", list(back)), *inits])


def x23():
    return {"x": rand(2, 3)}


def test_region_reads_a_graph_input():
    model = _region([node("Add", ["r", "z"], ["m"])], inputs=[value_info("z", F, [6])])
    expect_guard(model, REGION, "reshape_region.graph_input", {**x23(), "z": rand(6)})


def test_region_reads_two_reshapes():
    middle = [node("Reshape", ["x", "flat"], ["r2"]), node("Add", ["r", "r2"], ["m"])]
    expect_guard(_region(middle), REGION, "reshape_region.two_reshapes", x23())


def test_region_holds_a_non_elementwise_op():
    middle = [node("Softmax", ["r"], ["m"])]
    expect_guard(_region(middle), REGION, "reshape_region.not_elementwise", x23())


def test_region_too_large():
    middle = [node("Neg", ["r" if i == 0 else f"n{i - 1}"], [f"n{i}" if i < 64 else "m"]) for i in range(65)]
    expect_guard(_region(middle), REGION, "reshape_region.too_large", x23())


def test_region_constant_of_several_elements():
    model = _region([node("Add", ["r", "k"], ["m"])], inits=[tensor("k", rand(6))])
    expect_guard(model, REGION, "reshape_region.constant_not_scalar", x23())


def test_region_node_with_a_missing_input():
    expect_guard(_region([node("Add", ["r", ""], ["m"])]), REGION, "reshape_region.missing_input")


def test_region_of_constants_only():
    # The exit reads Neg(a one-element constant): no first Reshape feeds the region.
    nodes = [node("Neg", ["k"], ["m"]), node("Reshape", ["m", "back"], ["y"])]
    model = make_model(nodes, [], [value_info("y", F, None)], [tensor("k", np.ones(1, np.float32)), i64("back", [1])])
    expect_guard(model, REGION, "reshape_region.empty", {})


def test_region_value_is_a_graph_output():
    model = _region([node("Neg", ["r"], ["n"]), node("Abs", ["n"], ["m"])], outputs=[value_info("n", F, None)])
    expect_guard(model, REGION, "reshape_region.graph_output", x23())


def test_region_exit_also_read_outside():
    middle = [node("Neg", ["r"], ["m"]), node("Abs", ["m"], ["z"])]
    expect_guard(_region(middle, outputs=[value_info("z", F, None)]), REGION, "reshape_region.exit_read_outside",
                 x23())


def test_region_value_read_outside():
    middle = [node("Neg", ["r"], ["n"]), node("Abs", ["n"], ["m"]), node("Relu", ["n"], ["z"])]
    expect_guard(_region(middle, outputs=[value_info("z", F, None)]), REGION, "reshape_region.read_outside", x23())


def test_region_returns_to_another_shape():
    expect_guard(_region([node("Neg", ["r"], ["m"])], back=(3, 2)), REGION, "reshape_region.shape_differs", x23())


# --- the rule driver -------------------------------------------------------------------------------


def test_driver_graph_output_would_alias_a_graph_input():
    model = make_model([node("Identity", ["x"], ["y"])], [value_info("x", F, [3])], [value_info("y", F, [3])])
    expect_guard(model, "eliminate_identity", "driver.output_alias", {"x": rand(3)})


def test_driver_branch_output_would_become_an_outer_value():
    then_branch = helper.make_graph([node("Identity", ["t"], ["a"])], "then", [], [value_info("a", F, [3])])
    else_branch = helper.make_graph([node("Abs", ["t"], ["b"])], "else", [], [value_info("b", F, [3])])
    nodes = [node("Neg", ["x"], ["t"]), node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = make_model(nodes, [value_info("x", F, [3]), value_info("c", BOOL, [])], [value_info("y", F, [3])])
    expect_guard(model, "eliminate_identity", "driver.output_outer_scope", {"x": rand(3), "c": np.array(True)})


def _captured_beside_a_shape(shape_reader: bool):
    # fuzz campaign of seed 2000000, case 38228: a no-op Reshape removed under a constant-condition If
    # whose branches read it: they would capture the Neg's output, which a Shape reads
    then_branch = helper.make_graph([node("Identity", ["r"], ["a"])], "then", [], [value_info("a", F, None)])
    else_branch = helper.make_graph([node("Abs", ["r"], ["b"])], "else", [], [value_info("b", F, None)])
    nodes = [node("Neg", ["x"], ["t"]), node("Reshape", ["t", "same"], ["r"]),
             node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    outputs = [value_info("y", F, None)]
    if shape_reader:
        nodes.append(node("Shape", ["t"], ["s"]))
        outputs.append(value_info("s", I64, None))
    return make_model(nodes, [value_info("x", F, [2, 3])], outputs, [i64("same", [2, 3]),
                                                                       tensor("c", np.array(True))])


def test_driver_subgraph_would_capture_a_value_a_shape_reads():
    import onnxruntime as ort

    import onnxrefine

    optimized, _ = expect_guard(_captured_beside_a_shape(True), "eliminate_nop_reshape", "driver.capture_beside_shape",
                                {"x": rand(2, 3)})
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ort.InferenceSession(optimized.SerializeToString(), options, providers=["CPUExecutionProvider"])
    # no Shape beside the capture: the Reshape goes
    plain = onnxrefine.optimize(_captured_beside_a_shape(False), ["eliminate_nop_reshape"])
    assert "Reshape" not in [n.op_type for n in plain.graph.node]


def _log_softmax(**extra):
    """Log(Softmax(x)): a fusion that removes its intermediate, so it refuses where others read it."""
    nodes = [node("Softmax", ["x"], ["t"], axis=-1), node("Log", ["t"], ["y"]), *extra.get("nodes", [])]
    outputs = [value_info("y", F, None), *extra.get("outputs", [])]
    return make_model(nodes, [value_info("x", F, [2, 3])], outputs)


def test_driver_intermediate_is_a_graph_output():
    expect_guard(_log_softmax(outputs=[value_info("t", F, None)]), "fuse_consecutive_log_softmax",
                 "driver.intermediate_output", {"x": rand(2, 3)})


def test_driver_intermediate_read_elsewhere():
    model = _log_softmax(nodes=[node("Neg", ["t"], ["z"])], outputs=[value_info("z", F, None)])
    expect_guard(model, "fuse_consecutive_log_softmax", "driver.intermediate_shared", {"x": rand(2, 3)})


def _planted(monkeypatch, name, rewrite):
    rule = Rule(name, Op("Neg", Var("x")), rewrite, kind=EXACT)
    spec = PassSpec(f"planted_{name}", "test only", rules=(rule,), default=False)
    plant_pass(monkeypatch, spec)
    return spec.name


def _drop_neg(m, ctx):
    """Wrong on purpose: Neg(x) -> x."""
    return Replacement([], {m.root.outputs[0]: m["x"]})


def _neg_model():
    return make_model([node("Neg", ["x"], ["n"]), node("Relu", ["n"], ["y"])], [value_info("x", F, [4])],
                      [value_info("y", F, [4])])


def test_certificate_refuses_a_wrong_rewrite(monkeypatch):
    name = _planted(monkeypatch, "drop_neg", _drop_neg)
    expect_guard(_neg_model(), name, "certificate.failed", {"x": rand(4)})


def test_verification_rolls_back_a_wrong_rewrite(monkeypatch):
    from onnxrefine.verified import VerifySettings

    name = _planted(monkeypatch, "drop_neg", _drop_neg)
    expect_guard(_neg_model(), name, "verify.rolled_back", {"x": rand(4)}, certify=False,
                 verify=VerifySettings(enabled=True))


# --- quantized units and signed zeros ---------------------------------------------------------------


def test_quantized_layer_not_fused():
    # MatMul reads a dequantized input: a Gemm would change the Q/DQ unit the runtime fuses.
    nodes = [node("QuantizeLinear", ["x", "qs"], ["q"]), node("DequantizeLinear", ["q", "qs"], ["d"]),
             node("MatMul", ["d", "W"], ["p"]), node("Add", ["p", "c"], ["y"])]
    inits = [tensor("qs", np.array(0.05, np.float32)), tensor("W", rand(4, 3)), tensor("c", rand(3))]
    model = make_model(nodes, [value_info("x", F, [2, 4])], [value_info("y", F, None)], inits)
    expect_guard(model, "fuse_matmul_add_bias_into_gemm", "quant.layer", {"x": rand(2, 4)})


def test_fold_into_a_dequantized_weight():
    nodes = [node("DequantizeLinear", ["wq", "ws"], ["w"]), node("Conv", ["x", "w"], ["c"]),
             node("Mul", ["c", "k"], ["y"])]
    inits = [tensor("wq", RNG.integers(-127, 128, (4, 3, 1, 1), dtype=np.int8)), tensor("ws", np.array(0.01, np.float32)),
             tensor("k", np.full((1, 4, 1, 1), 2.0, np.float32))]
    model = make_model(nodes, [value_info("x", F, [1, 3, 4, 4])], [value_info("y", F, None)], inits)
    expect_guard(model, "keep_quantized_layers", "quant.fold_into_layer", {"x": rand(1, 3, 4, 4)})


def test_signed_zero_reaching_a_sign_sensitive_use():
    # x + 0.0 -> x would turn 1/(-0.0 + 0.0) = +inf into 1/(-0.0) = -inf.
    nodes = [node("Add", ["x", "zero"], ["s"]), node("Reciprocal", ["s"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [3])], [value_info("y", F, None)],
                       [tensor("zero", np.zeros(3, np.float32))])
    expect_guard(model, "eliminate_float_add_zero", "signed_zero.observable",
                 {"x": np.array([-0.0, 0.0, 2.0], np.float32)})
