"""The seeded random model generator: validity, determinism, targeted patterns, coverage."""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.generator import check_case, generate_model
from onnxrefine.fuzz.graphquery import all_op_types, has_chain
from onnxrefine.fuzz.opspecs import OP_SPECS
from onnxrefine.fuzz.patterns import TARGET_PATTERNS, UnknownTargetError

OPSETS = (13, 15, 18, 21)
SEEDS_PER_CHUNK = 25


@pytest.mark.parametrize("chunk", range(8))
def test_generated_models_pass_checker_inference_and_run(chunk):
    # 200 seeds over four opsets; intermediates=True also checks every value's runtime shape
    # against the shape the generator computed for it.
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        case = generate_model(seed, opset=OPSETS[seed % len(OPSETS)])
        check_case(case, intermediates=True)


@pytest.mark.slow
def test_many_generated_models_are_valid():
    for seed in range(1000, 3000):
        for opset in (13, 18, 21):
            check_case(generate_model(seed, opset=opset, max_nodes=40), intermediates=True)


def test_same_seed_gives_identical_bytes():
    for seed in (0, 7, 123456789, 2**40 + 3):
        first = generate_model(seed).model.SerializeToString()
        assert generate_model(seed).model.SerializeToString() == first
    targeted = generate_model(5, target="fuse_pad_into_pool").model.SerializeToString()
    assert generate_model(5, target="fuse_pad_into_pool").model.SerializeToString() == targeted


def test_different_seeds_give_different_models():
    models = {generate_model(seed).model.SerializeToString() for seed in range(30)}
    assert len(models) == 30


def test_inputs_are_deterministic_and_cover_the_bound_symbols():
    for seed in range(40):
        case = generate_model(seed)
        first, second = case.random_inputs(), case.random_inputs()
        assert first.keys() == second.keys()
        for name in first:
            assert first[name].tobytes() == second[name].tobytes()
        symbols = {d.dim_param for i in case.model.graph.input
                   for d in i.type.tensor_type.shape.dim if d.dim_param}
        assert symbols <= set(case.input_dims)


@pytest.mark.parametrize("target", sorted(TARGET_PATTERNS))
def test_target_pattern_is_present_and_valid(target):
    pattern = TARGET_PATTERNS[target]
    for seed in range(6):
        case = generate_model(seed, opset=OPSETS[seed % len(OPSETS)], target=target)
        assert pattern.present(case.model), (target, seed, all_op_types(case.model.graph))
        check_case(case, intermediates=True)


def test_targets_cover_onnxoptimizer_default_passes():
    expected = {
        "eliminate_nop_cast", "eliminate_nop_dropout", "eliminate_nop_flatten", "eliminate_nop_pad",
        "eliminate_nop_concat", "eliminate_nop_split", "eliminate_nop_expand",
        "eliminate_nop_transpose", "eliminate_nop_reshape", "eliminate_nop_with_unit",
        "eliminate_nop_monotone_argmax", "eliminate_identity", "eliminate_shape_op",
        "eliminate_shape_gather", "eliminate_slice_after_shape", "eliminate_deadend",
        "eliminate_unused_initializer", "eliminate_duplicate_initializer",
        "eliminate_common_subexpression", "extract_constant_to_initializer",
        "eliminate_if_with_const_cond", "eliminate_consecutive_idempotent_ops", "rewrite_where",
        "fuse_add_bias_into_conv", "fuse_bn_into_conv", "fuse_pad_into_conv", "fuse_pad_into_pool",
        "fuse_matmul_add_bias_into_gemm", "fuse_transpose_into_gemm", "fuse_consecutive_transposes",
        "fuse_consecutive_squeezes", "fuse_consecutive_unsqueezes", "fuse_consecutive_slices",
        "fuse_consecutive_concats", "fuse_consecutive_log_softmax",
        "fuse_consecutive_reduce_unsqueeze", "fuse_concat_into_reshape", "fuse_qkv",
    }
    assert expected <= set(TARGET_PATTERNS)


def test_targets_generate_the_known_bug_triggers():
    def attrs(node):
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    # Reshape(Reshape(x, ...), [.., 0, ..]): a 0 in the second target.
    zero_after_reshape = False
    for seed in range(60):
        model = generate_model(seed, target="eliminate_consecutive_idempotent_ops").model
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
        producers = {o: n for n in model.graph.node for o in n.output}
        for node in model.graph.node:
            if node.op_type == "Reshape" and producers.get(node.input[0], node).op_type == "Reshape":
                zero_after_reshape |= node.input[1] in inits and 0 in inits[node.input[1]]
    assert zero_after_reshape
    # Shape with a start attribute feeding Slice.
    assert any(
        any(n.op_type == "Shape" and "start" in attrs(n) for n in model.graph.node)
        for model in (generate_model(s, target="eliminate_slice_after_shape").model for s in range(20)))
    # Pad then MaxPool, and AveragePool with count_include_pad=0.
    pools = Counter()
    for seed in range(60):
        model = generate_model(seed, target="fuse_pad_into_pool").model
        pools["max"] += has_chain(model, ("Pad", "MaxPool"))
        pools["avg0"] += any(n.op_type == "AveragePool" and attrs(n).get("count_include_pad") == 0
                             for n in model.graph.node)
    assert pools["max"] and pools["avg0"]
    # Squeeze(Squeeze(x)) with negative axes somewhere.
    assert any(
        any(n.op_type == "Squeeze" and any(v < 0 for v in onnx.numpy_helper.to_array(t))
            for n in model.graph.node for t in model.graph.initializer if t.name in n.input[1:])
        for model in (generate_model(s, target="fuse_consecutive_squeezes").model for s in range(20)))


def test_unknown_target_is_a_clear_error():
    with pytest.raises(UnknownTargetError, match="fuse_bn_into_conv"):
        generate_model(0, target="fuse_everything")
    with pytest.raises(BadInputError):
        generate_model(0, target="no_such_pass")


def test_opset_outside_range_is_rejected():
    with pytest.raises(ValueError):
        generate_model(0, opset=12)
    with pytest.raises(ValueError):
        generate_model(0, opset=22)


def _value_types(model: onnx.ModelProto) -> set[int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = list(inferred.graph.input) + list(inferred.graph.output) + list(inferred.graph.value_info)
    return {i.type.tensor_type.elem_type for i in infos}


def test_ops_dtypes_and_symbolic_dims_are_covered():
    ops, dtypes, symbolic, exposed, shape_fed = Counter(), set(), 0, 0, Counter()
    for seed in range(300):
        model = generate_model(seed, opset=18).model
        ops.update(set(all_op_types(model.graph)))
        dtypes |= _value_types(model)
        symbolic += any(d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim)
        consumed = {name for node in model.graph.node for name in node.input}
        exposed += any(o.name in consumed for o in model.graph.output)
        for consumer in ("Reshape", "Expand", "Slice", "ConstantOfShape"):
            shape_fed[consumer] += has_chain(model, ("Shape", consumer)) or has_chain(
                model, ("Shape", "Gather", "Concat", consumer)) or has_chain(
                model, ("Gather", "Concat", consumer))
    assert {spec.op for spec in OP_SPECS} <= set(ops), {spec.op for spec in OP_SPECS} - set(ops)
    P = onnx.TensorProto
    assert {P.FLOAT, P.FLOAT16, P.DOUBLE, P.INT64, P.BOOL, P.INT32} <= dtypes
    assert symbolic >= 60
    assert exposed >= 20
    assert all(shape_fed[c] for c in ("Reshape", "Expand", "Slice", "ConstantOfShape")), shape_fed
