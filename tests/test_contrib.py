"""Contrib operators (com.microsoft) as onnxruntime's transformers optimizer makes them: kept, passes work around them, verification runs them.

The model is a small transformer block: a feed-forward half built from standard ops and fused
by `onnxruntime.transformers.optimizer` (BiasGelu, SkipLayerNormalization), plus Attention,
FastGelu, QuickGelu and FusedMatMul nodes, with the clutter exporters leave around them
(Identity, a no-op Reshape, a Transpose pair, a constant expression) for the passes to remove.
"""

from __future__ import annotations

import numpy as np
import onnx
from helpers import make_model, tensor, value_info
from modelcheck import assert_dtypes_kept, assert_same_outputs, op_counts
import pytest
from onnx import helper
from onnxruntime.transformers.optimizer import optimize_model

from onnxrefine.api import optimize_with_report
from onnxrefine.verified import VerifySettings

H, S, HEADS = 16, 8, 2
MS = "com.microsoft"
CONTRIB = ("BiasGelu", "SkipLayerNormalization", "Attention", "FastGelu", "QuickGelu", "FusedMatMul")


def _ffn(tmp_path) -> onnx.ModelProto:
    """MatMul + bias + erf-Gelu + MatMul + bias + residual + LayerNormalization, fused by onnxruntime's
    transformers optimizer into BiasGelu and SkipLayerNormalization."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    nodes = [
        helper.make_node("MatMul", ["a", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Div", ["hb", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["hb", "e1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]), helper.make_node("MatMul", ["g", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["ob"]), helper.make_node("Add", ["ob", "a"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-5),
    ]
    inits = [tensor("w1", (rng.standard_normal((H, 4 * H)) * 0.2).astype(f32)),
             tensor("b1", (rng.standard_normal(4 * H) * 0.1).astype(f32)),
             tensor("sqrt2", f32(np.sqrt(2))), tensor("one", f32(1)), tensor("half", f32(0.5)),
             tensor("w2", (rng.standard_normal((4 * H, H)) * 0.2).astype(f32)),
             tensor("b2", (rng.standard_normal(H) * 0.1).astype(f32)),
             tensor("gamma", (rng.random(H) + 0.5).astype(f32)), tensor("beta", (rng.standard_normal(H) * 0.1).astype(f32))]
    model = make_model(nodes, [value_info("a", shape=[1, S, H])], [value_info("ln", shape=[1, S, H])], inits)
    path = tmp_path / "ffn.onnx"
    onnx.save(model, path)
    fused = optimize_model(str(path), model_type="bert", num_heads=HEADS, hidden_size=H, opt_level=0)
    return fused.model


def contrib_block(tmp_path) -> onnx.ModelProto:
    ffn = _ffn(tmp_path)
    assert {"BiasGelu", "SkipLayerNormalization"} <= set(op_counts(ffn, MS)), op_counts(ffn)
    rng = np.random.default_rng(1)
    f32 = np.float32
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Attention", ["xi", "qkv_w", "qkv_b"], ["att"], domain=MS, num_heads=HEADS),
        helper.make_node("Reshape", ["att", "same_shape"], ["att_r"]),  # a no-op Reshape
        helper.make_node("Add", ["fg_b0", "fg_b1"], ["fg_b"]),  # a constant expression: folded
        helper.make_node("FastGelu", ["att_r", "fg_b"], ["fg"], domain=MS),
        helper.make_node("Transpose", ["fg"], ["t1"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),  # cancels the one before
        helper.make_node("QuickGelu", ["t2"], ["qg"], domain=MS, alpha=1.702),
        helper.make_node("FusedMatMul", ["qg", "fm_w"], ["a"], domain=MS, transB=1, alpha=0.5),
    ]
    nodes += list(ffn.graph.node)
    inits = [tensor("qkv_w", (rng.standard_normal((H, 3 * H)) * 0.3).astype(f32)),
             tensor("qkv_b", (rng.standard_normal(3 * H) * 0.1).astype(f32)),
             tensor("same_shape", np.array([1, S, H], np.int64)),
             tensor("fg_b0", (rng.standard_normal(H) * 0.1).astype(f32)), tensor("fg_b1", np.full(H, 0.25, f32)),
             tensor("fm_w", (rng.standard_normal((H, H)) * 0.3).astype(f32))] + list(ffn.graph.initializer)
    model = make_model(nodes, [value_info("x", shape=[1, S, H])], [value_info("ln", shape=[1, S, H])], inits)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    return model


def _feeds():
    return {"x": np.random.default_rng(2).standard_normal((1, S, H)).astype(np.float32)}


def test_contrib_ops_kept_and_passes_work_around_them(tmp_path):
    pytest.importorskip("sympy", reason="onnxruntime.transformers' optimizer needs sympy (not a dependency)")
    model = contrib_block(tmp_path)
    optimized, report = optimize_with_report(model)
    assert op_counts(optimized, MS) == op_counts(model, MS)
    assert set(op_counts(model, MS)) == set(CONTRIB)
    counts = op_counts(optimized)
    # the clutter around them is gone: Identity, the no-op Reshape, the Transpose pair, the constant Add
    assert not {"Identity", "Reshape", "Transpose", "Add"} & set(counts), counts
    assert report.nodes_after == report.nodes_before - 5
    assert_dtypes_kept(model, optimized)
    assert_same_outputs(model, optimized, _feeds())


def test_contrib_model_verified_end_to_end(tmp_path):
    pytest.importorskip("sympy", reason="onnxruntime.transformers' optimizer needs sympy (not a dependency)")
    model = contrib_block(tmp_path)
    optimized, report = optimize_with_report(model, verify=VerifySettings(budget_s=20))
    assert report.verification["verdict"] in ("exact", "rounding"), report.verification
    assert op_counts(optimized, MS) == op_counts(model, MS)
