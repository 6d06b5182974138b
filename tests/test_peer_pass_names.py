"""onnxoptimizer's pass names that onnxrefine lacked, done right: each does what onnxoptimizer
documents, refuses where onnxoptimizer's version is wrong, and is compared with onnxruntime
(interface passes through the interface they recorded)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from guardutil import expect_guard
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import assert_bit_identical, assert_close, optimize

from onnxrefine.api import optimize_with_report
from onnxrefine.errors import BadInputError
from onnxrefine.passes.registry import INTERFACE, get_pass
from onnxrefine.passes.rearrange import einsum_as_matmul
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING
from onnxrefine.verified import VerifySettings

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
RNG = np.random.default_rng(0)
ONNXOPTIMIZER_PASSES = (  # onnxoptimizer 0.4.2's get_available_passes(), and the newer squeeze/unsqueeze pass
    "adjust_add", "rename_input_output", "set_unique_name_for_nodes", "nop", "eliminate_nop_cast",
    "eliminate_nop_dropout", "eliminate_nop_flatten", "extract_constant_to_initializer",
    "eliminate_consecutive_idempotent_ops", "eliminate_if_with_const_cond", "eliminate_nop_monotone_argmax",
    "eliminate_nop_pad", "eliminate_nop_concat", "eliminate_nop_split", "eliminate_nop_expand",
    "eliminate_shape_gather", "eliminate_slice_after_shape", "eliminate_nop_transpose", "fuse_add_bias_into_conv",
    "fuse_bn_into_conv", "fuse_consecutive_concats", "fuse_consecutive_log_softmax",
    "fuse_consecutive_reduce_unsqueeze", "fuse_consecutive_squeezes", "fuse_consecutive_transposes",
    "fuse_matmul_add_bias_into_gemm", "fuse_pad_into_conv", "fuse_pad_into_pool", "fuse_transpose_into_gemm",
    "replace_einsum_with_matmul", "lift_lexical_references", "split_init", "split_predict",
    "fuse_concat_into_reshape", "eliminate_nop_reshape", "eliminate_nop_with_unit", "eliminate_common_subexpression",
    "fuse_qkv", "fuse_consecutive_unsqueezes", "eliminate_deadend", "eliminate_identity", "eliminate_shape_op",
    "fuse_consecutive_slices", "eliminate_unused_initializer", "eliminate_duplicate_initializer",
    "adjust_slice_and_matmul", "rewrite_input_dtype", "rewrite_where", "fuse_consecutive_squeeze_unsqueeze",
)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_every_onnxoptimizer_pass_name_is_known():
    assert len(ONNXOPTIMIZER_PASSES) == 49 and len(set(ONNXOPTIMIZER_PASSES)) == 49
    for name in ONNXOPTIMIZER_PASSES:
        assert get_pass(name).name == name


def test_docs_pass_table_matches_the_registry():
    from pathlib import Path

    from onnxrefine.cli.optimize_cmd import passes_markdown
    text = (Path(__file__).resolve().parents[1] / "docs" / "passes.md").read_text()
    start = text.index("<!-- passes:start -->\n") + len("<!-- passes:start -->\n")
    assert text[start:text.index("<!-- passes:end -->")] == passes_markdown(), \
        "docs/passes.md's table is stale: regenerate it with `onnxrefine optimize --list-passes --markdown`"


def test_interface_passes_say_so():
    for name in ("rename_input_output", "rewrite_input_dtype", "split_init", "split_predict"):
        spec = get_pass(name)
        assert spec.phase == INTERFACE and spec.summary.startswith("Interface change") and not spec.default
    for name in ("adjust_add", "adjust_slice_and_matmul", "replace_einsum_with_matmul"):
        assert not get_pass(name).default
    assert get_pass("adjust_add").kind == EXACT
    assert get_pass("replace_einsum_with_matmul").kind == REASSOCIATING


# --- the interface passes -----------------------------------------------------------------------


def two_part_model():
    """w2 = w + w is what the initializers alone compute (the init net); y = Gather(x * w2, idx) the rest."""
    nodes = [helper.make_node("Add", ["w", "w"], ["w2"], name="add"),
             helper.make_node("Mul", ["x", "w2"], ["m"], name="mul"),
             helper.make_node("Gather", ["m", "idx"], ["y"], axis=0, name="gather")]
    return make_model(nodes, [value_info("x", F, [3, 2]), value_info("idx", I64, [2])],
                      [value_info("y", F, [2, 2]), value_info("w2", F, [2])], [tensor("w", np.array([1.5, -2.0], np.float32))])


FEEDS = {"x": rand(3, 2), "idx": np.array([2, 0], np.int64)}


def record(model: onnx.ModelProto) -> dict:
    return json.loads({p.key: p.value for p in model.metadata_props}["onnxrefine.interface"])


def test_rename_input_output_by_position_and_verified_through_the_record():
    model = two_part_model()
    optimized, report = optimize_with_report(model, ["rename_input_output"], verify=VerifySettings())
    assert [i.name for i in optimized.graph.input] == ["input_0", "input_1"]
    assert [o.name for o in optimized.graph.output] == ["output_0", "output_1"]
    assert record(optimized) == {"inputs": {"input_0": "x", "input_1": "idx"}, "outputs": {"output_0": "y", "output_1": "w2"}}
    assert report.verification["verdict"] == "exact" and not report.rolled_back
    assert_bit_identical(run(model, FEEDS), run(optimized, {"input_0": FEEDS["x"], "input_1": FEEDS["idx"]}))


def test_rename_patterns_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPTIMIZER_RENAME_INPUT_PATTERN", "in[%d]")
    monkeypatch.setenv("OPTIMIZER_RENAME_OUTPUT_PATTERN", "no placeholder")  # without %d: the default
    optimized = optimize(two_part_model(), "rename_input_output")
    assert [i.name for i in optimized.graph.input] == ["in[0]", "in[1]"]
    assert [o.name for o in optimized.graph.output] == ["output_0", "output_1"]


def test_rename_refuses_a_name_an_intermediate_holds():
    """onnxoptimizer renames into `output_0` although an intermediate already holds it: two values of one name."""
    model = two_part_model()
    model.graph.node[1].output[0] = "output_0"
    model.graph.node[2].input[0] = "output_0"
    optimized, _ = expect_guard(model, ["rename_input_output"], "rename.name_taken")
    assert [i.name for i in optimized.graph.input] == ["x", "idx"]


def test_rename_refuses_patterns_that_collide(monkeypatch):
    monkeypatch.setenv("OPTIMIZER_RENAME_INPUT_PATTERN", "v%d")
    monkeypatch.setenv("OPTIMIZER_RENAME_OUTPUT_PATTERN", "v%d")
    expect_guard(two_part_model(), ["rename_input_output"], "rename.pattern_collision")


def test_rename_refuses_an_input_that_is_also_an_output():
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [value_info("x", F, [2])],
                       [value_info("y", F, [2]), value_info("x", F, [2])])
    expect_guard(model, ["rename_input_output"], "rename.input_is_output")


def test_rewrite_input_dtype_feeds_int32_and_casts_back():
    model = two_part_model()
    optimized, report = optimize_with_report(model, ["rewrite_input_dtype"], verify=VerifySettings())
    types = {i.name: i.type.tensor_type.elem_type for i in optimized.graph.input}
    assert types == {"x": F, "idx": I32}
    assert record(optimized) == {"retyped_inputs": {"idx": ["int64", "int32"]}}
    assert report.verification["verdict"] == "exact" and not report.rolled_back
    assert_bit_identical(run(model, FEEDS), run(optimized, {"x": FEEDS["x"], "idx": FEEDS["idx"].astype(np.int32)}))


def test_rename_and_retype_compose_in_the_record():
    optimized, report = optimize_with_report(two_part_model(), ["default", "rename_input_output", "rewrite_input_dtype"],
                                             verify=VerifySettings())
    assert record(optimized)["retyped_inputs"] == {"idx": ["int64", "int32"]}
    assert report.verification["verdict"] == "exact" and not report.rolled_back


def test_rewrite_input_dtype_refuses_an_input_that_is_also_an_output():
    """onnxoptimizer retypes it, and with it the graph output of that name."""
    model = make_model([helper.make_node("Neg", ["i"], ["y"])], [value_info("i", I64, [2])],
                       [value_info("y", I64, [2]), value_info("i", I64, [2])])
    optimized, _ = expect_guard(model, ["rewrite_input_dtype"], "retype.input_is_output",
                                {"i": np.array([3, -4], np.int64)})
    assert optimized.graph.input[0].type.tensor_type.elem_type == I64


def test_split_init_and_predict_compose_to_the_original():
    model = two_part_model()
    init, init_report = optimize_with_report(model, ["split_init"], verify=VerifySettings())
    predict, predict_report = optimize_with_report(model, ["split_predict"], verify=VerifySettings())
    assert [n.op_type for n in init.graph.node] == ["Add"] and [o.name for o in init.graph.output] == ["w2"]
    assert [n.op_type for n in predict.graph.node] == ["Mul", "Gather"] and not predict.graph.initializer
    assert [i.name for i in predict.graph.input] == ["x", "idx", "w2"]
    for report in (init_report, predict_report):
        assert report.verification["verdict"] == "exact" and not report.rolled_back
    (w2,) = run(init, {})
    assert_bit_identical(run(model, FEEDS), run(predict, {**FEEDS, "w2": w2}))


def test_split_keeps_random_and_custom_nodes_in_the_predict_net():
    """onnxoptimizer treats a custom-domain node as pure and computes it once in the init net."""
    nodes = [helper.make_node("RandomUniform", [], ["r"], shape=[2], seed=1.0),
             helper.make_node("Add", ["x", "r"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, [2])])
    assert [n.op_type for n in optimize(model, "split_predict").graph.node] == ["RandomUniform", "Add"]
    from onnxrefine.passes.interface import predict_values
    from onnxrefine.ir import io
    custom = make_model([helper.make_node("Foo", ["w"], ["c"], domain="custom.x")], [], [value_info("c", F, [2])],
                        [tensor("w", np.ones(2, np.float32))])
    custom.opset_import.append(helper.make_opsetid("custom.x", 1))
    _, predict_nodes = predict_values(io.to_ir(custom)[0].graph)
    assert [n.op_type for n in predict_nodes] == ["Foo"]


def test_set_unique_name_for_nodes_names_the_unnamed_and_the_repeated():
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Neg", ["b"], ["y"], name="n")]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, [2])])
    optimized = optimize(model, "set_unique_name_for_nodes")
    names = [n.name for n in optimized.graph.node]
    assert all(names) and len(set(names)) == 3 and names[1] == "n"
    x = rand(2)  # onnxruntime refuses the original (two nodes named n): compared with numpy
    assert np.array_equal(run(optimized, {"x": x})[0], -x)


def if_capturing(outer: str):
    branch = helper.make_graph([helper.make_node("Neg", [outer], ["t"])], "b", [], [value_info("t", F, [2])])
    nodes = [helper.make_node("Neg", ["x"], ["c"]),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch)]
    return make_model(nodes, [value_info("x", F, [2]), value_info("cond", TensorProto.BOOL, [])],
                      [value_info("y", F, [2])])


def test_lift_lexical_references_records_captures_in_metadata():
    optimized = optimize(if_capturing("c"), "lift_lexical_references")
    assert json.loads({p.key: p.value for p in optimized.metadata_props}["onnxrefine.captures"]) == {"if": ["c"]}
    assert all(not a.name.startswith("__") for n in optimized.graph.node for a in n.attribute)


def test_lift_lexical_references_rejects_unresolved_references():
    """onnxoptimizer's pass throws on them; here the model is refused when read, in one line."""
    model = if_capturing("nowhere")
    with pytest.raises(BadInputError, match="reads 'nowhere', which is never defined"):
        optimize_with_report(model, ["lift_lexical_references"])


# --- the rule passes ----------------------------------------------------------------------------


def test_adjust_add_puts_the_constant_second():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["b", "m"], ["y"], name="add")]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, [2, 4])],
                       [tensor("w", rand(3, 4)), tensor("b", rand(4))])
    optimized = optimize(model, "adjust_add")
    add = optimized.graph.node[-1]
    assert list(add.input) == ["m", "b"] and add.name == "add"
    feeds = {"x": rand(2, 3)}
    assert_bit_identical(run(model, feeds), run(optimized, feeds))


def slice_matmul(axes, rhs_shape, data_shape=(4, 3), x_shape=(2, 5)):
    nodes = [helper.make_node("Slice", ["data", "s", "e"] + (["axes"] if axes is not None else []), ["sl"]),
             helper.make_node("MatMul", ["sl", "rhs"], ["m"]), helper.make_node("Add", ["m", "x"], ["y"])]
    inits = [tensor("data", rand(*data_shape)), tensor("rhs", rand(*rhs_shape)),
             tensor("s", np.array([1], np.int64)), tensor("e", np.array([3], np.int64))]
    if axes is not None:
        inits.append(tensor("axes", np.array(axes, np.int64)))
    return make_model(nodes, [value_info("x", F, x_shape)], [value_info("y", F, x_shape)], inits)


def test_adjust_slice_and_matmul_moves_the_slice_after():
    model = slice_matmul([0], (3, 5))
    optimized = optimize(model, "adjust_slice_and_matmul")
    assert [n.op_type for n in optimized.graph.node] == ["MatMul", "Slice", "Add"]
    feeds = {"x": rand(2, 5)}
    assert_close(run(model, feeds), run(optimized, feeds))


def test_adjust_slice_and_matmul_refuses_the_contracted_axis():
    expect_guard(slice_matmul([1], (2, 5), x_shape=(4, 5)), ["adjust_slice_and_matmul"],
                 "slice_matmul.contracted_axis", {"x": rand(4, 5)})


def test_adjust_slice_and_matmul_refuses_a_batched_right_operand():
    """onnxoptimizer moves it: MatMul broadcasts the sliced batch of 1 against rhs's 3, the moved Slice keeps 1."""
    model = slice_matmul([0], (3, 2, 5), data_shape=(4, 1, 2), x_shape=(3, 1, 5))
    model.graph.initializer[2].CopyFrom(tensor("s", np.array([0], np.int64)))
    model.graph.initializer[3].CopyFrom(tensor("e", np.array([1], np.int64)))
    expect_guard(model, ["adjust_slice_and_matmul"], "slice_matmul.rhs_batch", {"x": rand(3, 1, 5)})


def test_adjust_slice_and_matmul_needs_explicit_axes():
    expect_guard(slice_matmul(None, (3, 5)), ["adjust_slice_and_matmul"], "slice_matmul.axes", {"x": rand(2, 5)})


@pytest.mark.parametrize("equation, expected", [
    ("ij,jk->ik", False), ("bij,bjk->bik", False), ("ik,jk->ij", True), ("b ik, bjk -> bij", True),
    ("ii,ij->ij", None), ("ij,jk->ki", None), ("ij,jk", None), ("...ij,...jk->...ik", None), ("bij,bjb->bib", None),
    ("ij,jk,kl->il", None), ("i,i->i", None),
])
def test_einsum_equations_read_as_matmul(equation, expected):
    assert einsum_as_matmul(equation) is expected


def einsum(equation, a_shape, b_shape, dtype=F):
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)
    return make_model([node], [value_info("a", dtype, list(a_shape)), value_info("b", dtype, list(b_shape))],
                      [value_info("y", dtype, None)])


@pytest.mark.parametrize("equation, a_shape, b_shape, ops", [
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5), ["MatMul"]),
    ("ik,jk->ij", (3, 4), (5, 4), ["Transpose", "MatMul"]),
])
def test_einsum_becomes_matmul(equation, a_shape, b_shape, ops):
    model = einsum(equation, a_shape, b_shape)
    optimized = optimize(model, "replace_einsum_with_matmul")
    assert [n.op_type for n in optimized.graph.node] == ops
    feeds = {"a": rand(*a_shape), "b": rand(*b_shape)}
    assert_close(run(model, feeds), run(optimized, feeds), rtol=1e-5, atol=1e-5)


def test_einsum_with_a_repeated_letter_is_not_a_matmul():
    """onnxoptimizer turns "ii,ij->ij" (A[i,i] * B[i,j]) into MatMul (a sum over i): different values."""
    expect_guard(einsum("ii,ij->ij", (3, 3), (3, 2)), ["replace_einsum_with_matmul"], "einsum.not_matmul",
                 {"a": rand(3, 3), "b": rand(3, 2)})


def test_einsum_of_a_type_matmul_does_not_take():
    model = einsum("ij,jk->ik", (2, 3), (3, 2), dtype=TensorProto.INT8)
    expect_guard(model, ["replace_einsum_with_matmul"], "einsum.dtype")


def squeeze_pair(first, second, x_shape, first_axes, second_axes):
    nodes = [helper.make_node(first, ["x", "a1"], ["s"]), helper.make_node(second, ["s", "a2"], ["u"]),
             helper.make_node("Neg", ["u"], ["y"])]
    return make_model(nodes, [value_info("x", F, x_shape)], [value_info("y", F, None)],
                      [tensor("a1", np.array(first_axes, np.int64)), tensor("a2", np.array(second_axes, np.int64))])


@pytest.mark.parametrize("first, second, axes1, axes2", [
    ("Squeeze", "Unsqueeze", [1], [-2]), ("Unsqueeze", "Squeeze", [0, 3], [-2, 0]),
])
def test_squeeze_unsqueeze_pairs_vanish(first, second, axes1, axes2):
    model = squeeze_pair(first, second, [2, 1, 3], axes1, axes2)
    optimized = optimize(model, "fuse_consecutive_squeeze_unsqueeze")
    assert [n.op_type for n in optimized.graph.node] == ["Neg"]
    feeds = {"x": rand(2, 1, 3)}
    assert_bit_identical(run(model, feeds), run(optimized, feeds))


def test_squeeze_unsqueeze_on_other_axes_stays():
    expect_guard(squeeze_pair("Squeeze", "Unsqueeze", [2, 1, 3], [1], [0]), ["fuse_consecutive_squeeze_unsqueeze"],
                 "squeeze_unsqueeze.axes_differ", {"x": rand(2, 1, 3)})
    expect_guard(squeeze_pair("Unsqueeze", "Squeeze", [2, 1, 3], [0], [2]), ["fuse_consecutive_squeeze_unsqueeze"],
                 "unsqueeze_squeeze.axes_differ", {"x": rand(2, 1, 3)})


def test_squeeze_unsqueeze_negative_axes_of_unknown_rank_stay():
    expect_guard(squeeze_pair("Squeeze", "Unsqueeze", None, [1], [-2]), ["fuse_consecutive_squeeze_unsqueeze"],
                 "squeeze_unsqueeze.negative_axes")
    expect_guard(squeeze_pair("Unsqueeze", "Squeeze", None, [1], [-2]), ["fuse_consecutive_squeeze_unsqueeze"],
                 "unsqueeze_squeeze.negative_axes")


def test_squeeze_of_a_dim_not_known_to_be_one_stays():
    """Squeeze fails where the dim is not 1; removing the pair would turn that error into x."""
    expect_guard(squeeze_pair("Squeeze", "Unsqueeze", [2, "n", 3], [1], [1]), ["fuse_consecutive_squeeze_unsqueeze"],
                 "squeeze_unsqueeze.dim_not_one", {"x": rand(2, 1, 3)})
