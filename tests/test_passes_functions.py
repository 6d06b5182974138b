"""inline_functions: off by default, exact when asked, names stay unique."""

from __future__ import annotations

import numpy as np
from helpers import make_model, run, value_info
from onnx import helper
from passutil import assert_bit_identical

import onnxrefine
from onnxrefine.passes.registry import default_pass_names


def model_calling_a_function_twice():
    body = [helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Add", ["sq", "a"], ["out"])]
    function = helper.make_function("local", "SquarePlus", ["a"], ["out"], body,
                                    opset_imports=[helper.make_opsetid("", 17)])
    nodes = [helper.make_node("SquarePlus", ["x"], ["sq"], domain="local"),  # "sq" is also a body name
             helper.make_node("SquarePlus", ["sq"], ["y"], domain="local")]
    model = make_model(nodes, [value_info("x", shape=[3])], [value_info("y", shape=[3])], functions=[function])
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def test_functions_are_kept_by_default():
    assert "inline_functions" not in default_pass_names()
    optimized = onnxrefine.optimize(model_calling_a_function_twice())
    assert [n.op_type for n in optimized.graph.node] == ["SquarePlus", "SquarePlus"]


def test_inlining_when_asked_is_exact_and_names_stay_unique():
    model = model_calling_a_function_twice()
    optimized = onnxrefine.optimize(model, ["inline_functions"])
    assert sorted(n.op_type for n in optimized.graph.node) == ["Add", "Add", "Mul", "Mul"]
    assert not optimized.functions
    outputs = [o for n in optimized.graph.node for o in n.output]
    assert len(outputs) == len(set(outputs))
    x = np.array([-1.5, 0.0, 2.0], np.float32)
    assert_bit_identical(run(model, {"x": x}), run(optimized, {"x": x}))


def test_every_onnxoptimizer_default_pass_name_is_accepted():
    # onnxoptimizer 0.4.2's get_fuse_and_elimination_passes(), as listed in the reference notes.
    names = """nop eliminate_nop_cast eliminate_nop_dropout eliminate_nop_flatten eliminate_nop_pad
    eliminate_nop_concat eliminate_nop_split eliminate_nop_expand eliminate_nop_transpose eliminate_nop_reshape
    eliminate_nop_with_unit eliminate_nop_monotone_argmax eliminate_identity eliminate_shape_op
    eliminate_shape_gather eliminate_slice_after_shape eliminate_deadend eliminate_unused_initializer
    eliminate_duplicate_initializer eliminate_common_subexpression extract_constant_to_initializer
    eliminate_if_with_const_cond eliminate_consecutive_idempotent_ops rewrite_where fuse_add_bias_into_conv
    fuse_bn_into_conv fuse_pad_into_conv fuse_pad_into_pool fuse_matmul_add_bias_into_gemm
    fuse_transpose_into_gemm fuse_consecutive_transposes fuse_consecutive_squeezes fuse_consecutive_unsqueezes
    fuse_consecutive_slices fuse_consecutive_concats fuse_consecutive_log_softmax
    fuse_consecutive_reduce_unsqueeze fuse_concat_into_reshape fuse_qkv""".split()
    assert len(names) == 39
    optimized = onnxrefine.optimize(model_calling_a_function_twice(), names)
    assert [n.op_type for n in optimized.graph.node] == ["SquarePlus", "SquarePlus"]


def test_default_plus_an_opt_in_pass():
    from onnxrefine.api import resolve_passes

    names = resolve_passes(["default", "inline_functions"])
    assert names == list(default_pass_names()) + ["inline_functions"]
    assert resolve_passes(["default"], disable=["fold_constants"]) == [
        n for n in default_pass_names() if n != "fold_constants"]
