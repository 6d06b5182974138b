"""Half and mixed precision: no rewrite changes the element type a value is
computed in, Cast chains go only where exact, folded constants are rounded once to the model's
dtype. Models: the float CNN of test_quant converted to float16 by onnxruntime's own converter
(all-float16, and autocast-style with float32 inputs/outputs and Casts at the edges), plus
hand-built Cast chains in float16, bfloat16 and integers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from helpers import make_model, tensor, value_info
from modelcheck import assert_dtypes_kept, assert_same_outputs, op_counts
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.transformers.float16 import convert_float_to_float16
from test_quant import float_cnn

import onnxrefine
from onnxrefine.api import optimize_with_report
from onnxrefine.ir.precision import cast_chain_refusal, exact_widening
from onnxrefine.verified import VerifySettings

import onnx_ir as ir


def half_cnn(keep_io_types: bool, op_block_list=None) -> onnx.ModelProto:
    return convert_float_to_float16(float_cnn(), keep_io_types=keep_io_types, disable_shape_infer=False,
                                    op_block_list=op_block_list)


def _feeds(model, dtype):
    rng = np.random.default_rng(7)
    return {"x": rng.standard_normal((1, 3, 8, 8)).astype(dtype)}


@pytest.mark.parametrize("keep_io_types", [False, True], ids=["float16", "autocast"])
def test_half_cnn_keeps_every_dtype_and_rounds_bn_fold_once(keep_io_types):
    model = half_cnn(keep_io_types)
    optimized, report = optimize_with_report(model)
    assert report.log.counts()["conv_bn"] == 1
    assert_dtypes_kept(model, optimized)
    # the float32 <-> float16 Casts at the edges of an autocast model round: they stay
    assert op_counts(optimized)["Cast"] == op_counts(model)["Cast"]
    # the folded weight is float64(W) * s rounded once to float16
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    s64 = inits["s"].astype(np.float64) / np.sqrt(inits["v"].astype(np.float64) + np.float64(np.float32(1e-5)))
    expected = (inits["w1"].astype(np.float64) * s64[:, None, None, None]).astype(np.float16)
    conv = next(n for n in optimized.graph.node if n.op_type == "Conv")
    weight = next(numpy_helper.to_array(i) for i in optimized.graph.initializer if i.name == conv.input[1])
    assert weight.dtype == np.float16 and np.array_equal(weight, expected)
    dtype = np.float32 if keep_io_types else np.float16
    assert_same_outputs(model, optimized, _feeds(model, dtype), exact=False, rtol=2e-2, atol=2e-2)


def test_mixed_precision_layer_keeps_its_precision():
    """Autocast-style: BatchNormalization kept in float32 between Casts (float16 Conv -> Cast float32 ->
    BN -> Cast float16). Folding it into the float16 Conv would compute it in float16: refused (the
    Casts stand between), and no Cast is dropped (each pair rounds)."""
    model = half_cnn(True, op_block_list=["BatchNormalization"])
    assert op_counts(model)["Cast"] >= 4
    optimized, report = optimize_with_report(model)
    assert report.log.counts()["conv_bn"] == 0
    assert op_counts(optimized)["Cast"] == op_counts(model)["Cast"]
    assert op_counts(optimized)["BatchNormalization"] == 1
    assert_dtypes_kept(model, optimized)
    assert_same_outputs(model, optimized, _feeds(model, np.float32))


def test_bfloat16_weights_cast_up_fold_exactly():
    """A bfloat16 export whose weights are widened to float32 before use: the Cast of a constant
    folds (an exact widening), every value keeps its element type, outputs are bit-identical."""
    rng = np.random.default_rng(9)
    w = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Cast", ["w_bf16"], ["w"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Cast", ["h"], ["h_bf16"], to=TensorProto.BFLOAT16),  # rounds: stays
             helper.make_node("Cast", ["h_bf16"], ["y"], to=TensorProto.FLOAT)]
    w_tensor = helper.make_tensor("w_bf16", TensorProto.BFLOAT16, w.shape, w.view(np.uint16).reshape(-1).tolist(),
                                  raw=False)
    model = make_model(nodes, [value_info("x", shape=[2, 4])], [value_info("y", shape=[2, 3])], [w_tensor])
    optimized, report = optimize_with_report(model)
    assert report.log.counts()["fold_constants"] == 1
    assert op_counts(optimized)["Cast"] == 2
    assert_dtypes_kept(model, optimized)
    assert_same_outputs(model, optimized, {"x": rng.standard_normal((2, 4)).astype(np.float32)})


@pytest.mark.slow
def test_half_cnn_verified(tmp_path):
    model = half_cnn(False)
    optimized, report = optimize_with_report(model, verify=VerifySettings(budget_s=20))
    assert report.verification["verdict"] in ("exact", "rounding"), report.verification
    assert_dtypes_kept(model, optimized)


def _cast_chain(source: int, middle: int) -> onnx.ModelProto:
    """x -> Cast(middle) -> Cast(source) -> Reshape (a real op, so the graph output is not x).
    bfloat16 travels in float32 at the edges (onnxruntime's Python API takes no bfloat16 arrays)."""
    edge = TensorProto.FLOAT if source == TensorProto.BFLOAT16 else source
    nodes = [helper.make_node("Cast", ["x"], ["m"], to=middle), helper.make_node("Cast", ["m"], ["c"], to=source),
             helper.make_node("Reshape", ["c", "flat"], ["y"])]
    if edge != source:
        nodes = [helper.make_node("Cast", ["xe"], ["x"], to=source)] + nodes[:2] + [
            helper.make_node("Reshape", ["c", "flat"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=edge)]
    return make_model(nodes, [value_info("xe" if edge != source else "x", edge, [2, 5])],
                      [value_info("y", edge, [10])], [tensor("flat", np.array([10], np.int64))])


@pytest.mark.parametrize("source,middle,removed", [
    (TensorProto.FLOAT16, TensorProto.FLOAT, True),
    (TensorProto.BFLOAT16, TensorProto.FLOAT, True),
    (TensorProto.FLOAT, TensorProto.FLOAT16, False),  # autocast: rounds to float16
    (TensorProto.FLOAT, TensorProto.BFLOAT16, False),
    (TensorProto.FLOAT16, TensorProto.BFLOAT16, False),  # different exponent range and precision
    (TensorProto.INT32, TensorProto.INT8, False),  # wraps
    (TensorProto.INT32, TensorProto.FLOAT, False),  # 2**24 + 1 has no float32
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inputs that overflow float16 on purpose
def test_cast_round_trip_removed_only_where_exact(source, middle, removed):
    model = _cast_chain(source, middle)
    # certify=False: the per-rewrite certificate would also catch a rounding chain; this tests the guard
    optimized, report = optimize_with_report(model, certify=False)
    assert op_counts(model)["Cast"] - op_counts(optimized)["Cast"] == (2 if removed else 0), op_counts(optimized)
    if not removed:
        assert "eliminate_exact_cast_chain" in {r.rule for r in report.log.refused.values()}
    np_type = onnx.helper.tensor_dtype_to_np_dtype(model.graph.input[0].type.tensor_type.elem_type)
    rng = np.random.default_rng(8)
    if np.dtype(np_type).kind == "i":
        x = np.array([[0, 1, -1, 2**24 + 1, 300], [-129, 127, 128, 2**31 - 1, -(2**31)]], dtype=np_type)
    else:
        x = (rng.standard_normal((2, 5)) * np.array([1e-6, 1, 1e3, 7e4, 1e-9])).astype(np.float64)
        x = x.astype(np.float32).astype(np_type)
        x[0, 0] = np.inf
    assert_same_outputs(model, optimized, {model.graph.input[0].name: x})


def test_widening_chain_becomes_one_exact_cast():
    nodes = [helper.make_node("Cast", ["x"], ["m"], to=TensorProto.INT32),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.INT64),
             helper.make_node("Cast", ["h"], ["hm"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["hm"], ["hy"], to=TensorProto.DOUBLE)]
    model = make_model(nodes, [value_info("x", TensorProto.INT8, [4]), value_info("h", TensorProto.FLOAT16, [4])],
                       [value_info("y", TensorProto.INT64, [4]), value_info("hy", TensorProto.DOUBLE, [4])])
    optimized = onnxrefine.optimize(model)
    assert op_counts(optimized)["Cast"] == 2
    assert_dtypes_kept(model, optimized)
    feeds = {"x": np.array([-128, -1, 0, 127], np.int8), "h": np.array([65504, -0.0, 6e-8, np.nan], np.float16)}
    assert_same_outputs(model, optimized, feeds)


def test_cast_chain_with_a_second_reader_of_the_middle_value_keeps_it():
    nodes = [helper.make_node("Cast", ["x"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT16),
             helper.make_node("Relu", ["m"], ["z"])]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT16, [3])],
                       [value_info("y", TensorProto.FLOAT16, [3]), value_info("z", TensorProto.FLOAT, [3])])
    optimized = onnxrefine.optimize(model)
    assert_dtypes_kept(model, optimized)
    assert_same_outputs(model, optimized, {"x": np.array([1.5, -2.0, 65504], np.float16)})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow to inf is what is being checked
def test_exact_widening_table_holds_every_value():
    """The table's claims, checked value by value for the small types (every bit pattern)."""
    D = ir.DataType
    for source, np_source in ((D.FLOAT16, np.float16), (D.BFLOAT16, ml_dtypes.bfloat16),
                              (D.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn), (D.FLOAT8E5M2, ml_dtypes.float8_e5m2)):
        bits = np.arange(2 ** (8 * np.dtype(np_source).itemsize), dtype=np.uint64)
        values = bits.astype({1: np.uint8, 2: np.uint16}[np.dtype(np_source).itemsize]).view(np_source)
        for target, np_target in ((D.FLOAT16, np.float16), (D.FLOAT, np.float32), (D.DOUBLE, np.float64)):
            wide = values.astype(np_target)
            as64 = values.astype(np.float64)
            exact = np.array_equal(wide.astype(np.float64), as64, equal_nan=True) and np.array_equal(
                wide.astype(np_source).astype(np.float64), as64, equal_nan=True)
            assert exact_widening(source, target) == (exact and source != target), (source, target)
    assert cast_chain_refusal(D.FLOAT, D.FLOAT16, D.FLOAT) is not None
    assert cast_chain_refusal(D.FLOAT16, D.FLOAT, D.FLOAT16) is None
