"""The functions the exhaustive algebra proofs check are the ones the rules run: optimizing a
small model with each pass calls the function (looked up on its module, as the proof does), and
the rules whose rewrite function the proof runs itself hold that very function."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.ir.facts import indexing, layout, values
from onnxrefine.passes import fusion_chains, fusion_matmul, fusion_pad, noop, sequences, shapes, transposes, where

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, shape, inits=(), out_dtype=F, opset=18, dims=None):
    return make_model(nodes, [value_info("x", F, dims or shape)], [value_info("y", out_dtype, None)],
                      [tensor(name, np.asarray(v)) for name, v in inits], opset=opset)


def _ints(*values):
    return np.array(values, np.int64)


N = helper.make_node
CASES = [
    ("fuse_consecutive_transposes", fusion_chains, "compose_perms",
     _model([N("Transpose", ["x"], ["m"], perm=[1, 0, 2]), N("Transpose", ["m"], ["y"], perm=[2, 1, 0])], [2, 3, 4])),
    ("fuse_consecutive_squeezes", fusion_chains, "compose_squeezes",
     _model([N("Squeeze", ["x", "a"], ["m"]), N("Squeeze", ["m", "b"], ["y"])], [1, 2, 1, 3],
            [("a", _ints(0)), ("b", _ints(1))])),
    ("fuse_consecutive_unsqueezes", fusion_chains, "compose_unsqueezes",
     _model([N("Unsqueeze", ["x", "a"], ["m"]), N("Unsqueeze", ["m", "b"], ["y"])], [2, 3],
            [("a", _ints(0)), ("b", _ints(-1))])),
    ("fuse_consecutive_slices", fusion_chains, "fused_slice_params",
     _model([N("Slice", ["x", "s", "e", "a0"], ["m"]), N("Slice", ["m", "s", "e", "a1"], ["y"])], [4, 5],
            [("s", _ints(1)), ("e", _ints(3)), ("a0", _ints(0)), ("a1", _ints(-1))])),
    ("fuse_consecutive_concats", fusion_chains, "same_concat_axis",
     _model([N("Concat", ["x", "x"], ["m"], axis=0), N("Concat", ["m", "x"], ["y"], axis=-2)], [2, 3])),
    ("fuse_consecutive_reduce_unsqueeze", fusion_chains, "unsqueeze_restores",
     _model([N("ReduceSum", ["x", "a"], ["m"], keepdims=0), N("Unsqueeze", ["m", "a"], ["y"])], [2, 3],
            [("a", _ints(1))])),
    ("fuse_concat_into_reshape", fusion_chains, "constant_reshape_target",
     _model([N("Concat", ["p", "q"], ["t"], axis=0), N("Reshape", ["x", "t"], ["y"])], [2, 3],
            [("p", _ints(3)), ("q", _ints(-1))])),
    ("fuse_pad_into_conv", fusion_pad, "spatial_pads",
     _model([N("Pad", ["x", "p"], ["m"]), N("Conv", ["m", "w"], ["y"])], [1, 1, 3, 3],
            [("p", _ints(0, 0, 1, 1, 0, 0, 1, 1)), ("w", np.ones((1, 1, 2, 2), np.float32))])),
    ("fuse_pad_into_conv", fusion_pad, "merged_pads",
     _model([N("Pad", ["x", "p"], ["m"]), N("Conv", ["m", "w"], ["y"])], [1, 1, 3, 3],
            [("p", _ints(0, 0, 1, 1, 0, 0, 1, 1)), ("w", np.ones((1, 1, 2, 2), np.float32))])),
    ("transpose_to_reshape", transposes, "reshape_target",
     _model([N("Transpose", ["x"], ["y"], perm=[2, 0, 1, 3])], [1, 3, 1, 4])),
    ("reshape_through_transpose", transposes, "through_transpose",
     _model([N("Reshape", ["x", "r0"], ["a"]), N("Transpose", ["a"], ["b"], perm=[0, 2, 1, 3]),
             N("Reshape", ["b", "r1"], ["y"])], [6, 4], [("r0", _ints(1, 2, 3, 4)), ("r1", _ints(3, 2, 4))])),
    ("eliminate_nop_reshape", noop, "reshape_keeps_shape",
     _model([N("Reshape", ["x", "t"], ["y"])], [2, 3], [("t", _ints(2, -1))])),
    ("eliminate_nop_split", noop, "split_covers_axis",
     _model([N("Split", ["x", "s"], ["y"], axis=-1)], [2, 3], [("s", _ints(3))])),
    ("eliminate_nop_expand", noop, "expand_keeps_shape",
     _model([N("Expand", ["x", "t"], ["y"])], [2, 3], [("t", _ints(2, 1))])),
    ("eliminate_nop_with_unit", noop, "operand_keeps_shape",
     _model([N("Mul", ["x", "one"], ["y"])], [2, 3], [("one", np.ones((1, 3), np.float32))])),
    ("eliminate_where_with_constant_condition", where, "_broadcast",
     _model([N("Cast", ["x"], ["i"], to=I64), N("Where", ["c", "i", "i"], ["y"])], [2, 3],
            [("c", np.array([True, True, True]))], out_dtype=I64)),
    ("merge_reshape_unit_axes", layout, "squeezed_shape",
     _model([N("Reshape", ["x", "t"], ["m"]), N("Squeeze", ["m", "a"], ["y"])], [2, 3],
            [("t", _ints(1, 6)), ("a", _ints(-2))])),
    ("fold_shapes", shapes, "copying_target",
     _model([N("Shape", ["x"], ["s"], end=1), N("Concat", ["s", "q"], ["t"], axis=0), N("Reshape", ["x", "t"], ["y"])],
            None, [("q", _ints(-1))], dims=["n", 3])),
    ("fold_shapes", values, "shape_range",
     _model([N("Shape", ["x"], ["y"], start=-1)], [2, 3], out_dtype=I64)),
    ("eliminate_shape_gather", values, "gathered",
     _model([N("Shape", ["x"], ["s"]), N("Gather", ["s", "i"], ["y"])], [2, 3], [("i", _ints(-1))], out_dtype=I64)),
    ("split_to_sequence_as_split", sequences, "chunk_sizes",
     _model([N("SplitToSequence", ["x", "c"], ["s"], axis=1), N("SequenceAt", ["s", "p"], ["y"])], [2, 5],
            [("c", np.array(2, np.int64)), ("p", np.array(-1, np.int64))])),
    ("fold_shapes", values, "arithmetic",
     _model([N("Shape", ["x"], ["s"]), N("Add", ["s", "one"], ["y"])], [2, 3], [("one", _ints(1))], out_dtype=I64)),
    ("fold_shapes", values, "equal",
     _model([N("Shape", ["x"], ["s"]), N("Equal", ["s", "m"], ["y"])], [2, 3], [("m", _ints(-1))],
            out_dtype=TensorProto.BOOL)),
    ("fold_shapes", layout, "reshaped_shape",
     _model([N("Reshape", ["x", "t"], ["r"]), N("Shape", ["r"], ["y"])], [2, 3], [("t", _ints(0, -1))], out_dtype=I64)),
    ("fold_shapes", indexing, "concat_shape",
     _model([N("Concat", ["x", "x"], ["c"], axis=-1), N("Shape", ["c"], ["y"])], [2, 3], out_dtype=I64)),
    ("fold_shapes", indexing, "slice_positions",
     _model([N("Slice", ["x", "s", "e"], ["m"]), N("Shape", ["m"], ["y"])], [4, 3],
            [("s", _ints(-1)), ("e", _ints(-9))], out_dtype=I64)),
]


@pytest.mark.parametrize("pass_name, module, name, model", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_the_rule_runs_the_function_the_proof_checks(pass_name, module, name, model, monkeypatch):
    original, calls = getattr(module, name), []

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    onnxrefine.optimize(model, [pass_name])
    assert calls, f"{pass_name} did not call {module.__name__}.{name}"


@pytest.mark.parametrize("rule, function", [
    (noop.TRANSPOSE, noop.drop_identity_transpose),
    (noop.RESHAPE_CHAIN, noop.collapse_reshape_chain),
    (noop.FLATTEN_CHAIN, noop.collapse_flatten_to_row),
    (noop.FLATTEN, noop.drop_flatten_of_matrix),
    (noop.PAD, noop.drop_zero_pad),
])
def test_rules_proven_through_their_own_function_hold_it(rule, function):
    assert rule.rewrite is function


def test_imported_algebra_is_the_proven_function():
    """fold_shapes' value rules read these through their own import; the proofs check the originals."""
    assert values.shape_range is layout.shape_range
    assert values.slice_positions is indexing.slice_positions


def test_gemm_rules_call_the_proven_function(monkeypatch):
    calls = []
    original = fusion_matmul._transpose_into_gemm
    monkeypatch.setattr(fusion_matmul, "_transpose_into_gemm", lambda *a: calls.append(a) or original(*a))
    model = make_model([N("Transpose", ["x"], ["t"]), N("Gemm", ["t", "b"], ["y"])], [value_info("x", F, [3, 2])],
                       [value_info("y", F, None)], [tensor("b", np.ones((3, 4), np.float32))])
    onnxrefine.optimize(model, ["fuse_transpose_into_gemm"])
    assert calls
