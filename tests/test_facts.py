"""The shape-fact oracle (ir/facts/): its rule tables cover every operator the former if-chains
(ir/static_shapes.py, ir/contrib_shapes.py, ir/quantization.py) handled, and on random valid
models every fact it vouches for is what onnxruntime computes."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from factcheck import facts_hold

from onnxrefine.ir.facts import DTYPE_RULES, SHAPE_RULES, VALUE_RULES, StaticShapes
from onnxrefine.ir.facts.core import CONTRIB_DOMAIN, shape_rule

# The operators each old chain had a rule for, copied from it (so a dropped rule fails here).
_OLD_SAME_SHAPE = """Relu LeakyRelu Sigmoid Tanh Exp Log Sqrt Abs Neg Erf Gelu Softplus Softsign Elu Selu
    Celu HardSigmoid HardSwish Clip Identity Cast CastLike Dropout InstanceNormalization LayerNormalization
    BatchNormalization Softmax LogSoftmax Hardmax Floor Ceil Round Sign Reciprocal Not IsNaN IsInf
    LRN CumSum Mish Trilu Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh ThresholdedRelu
    Shrink BitwiseNot MeanVarianceNormalization EyeLike QuantizeLinear DequantizeLinear
    GroupNormalization RMSNormalization""".split()
_OLD_BROADCASTING = """Add Sub Mul Div Pow Mod Max Min Sum Mean Where Equal Less Greater LessOrEqual
    GreaterOrEqual And Or Xor PRelu BitShift BitwiseAnd BitwiseOr BitwiseXor""".split()
_OLD_REDUCE = """ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceSumSquare""".split()
_OLD_QUANTIZED = "DynamicQuantizeLinear DequantizeLinear MatMulInteger QLinearMatMul ConvInteger QLinearConv".split()
OLD_SHAPE_OPS = set(_OLD_SAME_SHAPE + _OLD_BROADCASTING + _OLD_REDUCE + _OLD_QUANTIZED + """Shape Size Transpose
    Reshape Flatten Squeeze Unsqueeze Concat Gather MatMul Gemm Expand ConstantOfShape Tile ArgMax ArgMin
    Resize Conv MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool Slice Pad Split""".split())
OLD_DTYPE_OPS = (set(_OLD_SAME_SHAPE + _OLD_BROADCASTING + _OLD_REDUCE + _OLD_QUANTIZED + """Transpose Reshape
    Flatten Squeeze Unsqueeze Concat Gather GatherElements GatherND Slice Expand Tile Pad Split MatMul Gemm Conv
    ConvTranspose MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool Resize DepthToSpace
    SpaceToDepth ReverseSequence TopK Einsum Shape Size ArgMax ArgMin NonZero ConstantOfShape""".split())
                 - {"EyeLike", "QuantizeLinear"})  # their element type comes from attributes: unknown
OLD_VALUE_OPS = set("Shape Size Identity Cast Gather Slice Concat Unsqueeze Squeeze Reshape Add Sub Mul Div Max Min Equal".split())
_OLD_CONTRIB_LIKE_INPUT0 = """FastGelu QuickGelu BiasGelu Gelu BiasAdd SkipLayerNormalization
    SkipSimplifiedLayerNormalization SimplifiedLayerNormalization""".split()
OLD_CONTRIB_SHAPE_OPS = set(_OLD_CONTRIB_LIKE_INPUT0 + ["Attention"])
OLD_CONTRIB_DTYPE_OPS = set(_OLD_CONTRIB_LIKE_INPUT0 + ["Attention", "FusedMatMul"])
# Operators whose rule answers for outputs other than 0.
OLD_ALL_OUTPUTS_SHAPE = {"Dropout", "Split", "DynamicQuantizeLinear"}
OLD_ALL_OUTPUTS_DTYPE = {"Dropout", "Split", "TopK", "DynamicQuantizeLinear"}


def _ops(table, domain=""):
    return {op for (d, op) in table if d == domain}


@pytest.mark.parametrize("table, expected, domain", [
    (SHAPE_RULES, OLD_SHAPE_OPS, ""), (DTYPE_RULES, OLD_DTYPE_OPS, ""), (VALUE_RULES, OLD_VALUE_OPS, ""),
    (SHAPE_RULES, OLD_CONTRIB_SHAPE_OPS, CONTRIB_DOMAIN), (DTYPE_RULES, OLD_CONTRIB_DTYPE_OPS, CONTRIB_DOMAIN),
], ids=["shape", "dtype", "value", "contrib-shape", "contrib-dtype"])
def test_tables_cover_every_operator_the_old_chains_handled(table, expected, domain):
    assert sorted(expected - _ops(table, domain)) == []  # (a new operator needs no entry here)


@pytest.mark.parametrize("table, old_ops, multi", [(SHAPE_RULES, OLD_SHAPE_OPS, OLD_ALL_OUTPUTS_SHAPE),
                                                   (DTYPE_RULES, OLD_DTYPE_OPS, OLD_ALL_OUTPUTS_DTYPE)],
                         ids=["shape", "dtype"])
def test_only_the_old_multi_output_rules_answer_for_other_outputs(table, old_ops, multi):
    assert {op for op in old_ops if table[("", op)].all_outputs} == multi


def test_a_second_rule_for_an_operator_is_refused():
    with pytest.raises(ValueError, match="two rules for"):
        shape_rule("Relu")(lambda site: None)
    assert SHAPE_RULES[("", "Relu")].fn.__name__ == "same_shape"


def test_ai_onnx_domain_reads_the_standard_rules():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    node = ir.Node("ai.onnx", "Transpose", [x], [ir.AttrInt64s("perm", [1, 0])])
    graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 18})
    facts = StaticShapes(ir.Model(graph, ir_version=9))
    assert facts.static_shape(node.outputs[0]) == (3, 2)
    assert facts.dtype(node.outputs[0]) == ir.DataType.FLOAT


# -- soundness on random models: every fact the oracle vouches for is what onnxruntime computes --


def _check_against_runtime(seed: int, opset: int) -> int:
    from onnxrefine.fuzz.generator import generate_model

    case = generate_model(seed, opset=opset, max_nodes=30)
    return facts_hold(case.model, case.random_inputs(), f"seed {seed} opset {opset}", case.value_shapes)


@pytest.mark.parametrize("first", range(0, 120, 20))
def test_facts_agree_with_onnxruntime_on_generated_models(first):
    checked = 0
    for seed in range(first, first + 20):
        checked += _check_against_runtime(seed, 17 if seed % 2 else 13)
    assert checked > 100  # the generated models do exercise the rules

