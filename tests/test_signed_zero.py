"""No rewrite flips the sign of an exact zero that a sign-sensitive use can see.

Each case: a model where the rewrite would turn -0.0 into +0.0 (or back) in front of 1/x, optimized
with verification off (CLI `--no-verify`, and the Python API, which verifies nothing by default):
the output must be bit-identical to the original's in onnxruntime, and the refusal must say why.
The same model without the sign-sensitive use must still be rewritten.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from helpers import make_model, op_types, run, tensor, value_info
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import onnxrefine
from onnxrefine.cli.main import main
from onnxrefine.ir.signed_zero import SignedZeroAnalysis

F = TensorProto.FLOAT
ONE = tensor("one", np.array(1.0, np.float32))


def _reciprocal(src: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Div", ["one", src], ["y"])]


def _conv_mul(sensitive: bool, scale: float = -2.0) -> onnx.ModelProto:
    """Conv(x, W, pads=1) * scale [-> 1/.]: 1x1 windows in the padding are +0.0 (onnxruntime's sums
    start at +0.0); *(-2) makes them -0.0, while the folded Conv(x, -2W) gives +0.0 there."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "s"], ["m" if sensitive else "y"])]
    inits = [tensor("w", np.full((2, 2, 1, 1), 0.5, np.float32)), tensor("s", np.array(scale, np.float32))]
    if sensitive:
        nodes += _reciprocal("m")
        inits.append(ONE)
    return make_model(nodes, [value_info("x", F, [1, 2, 3, 3])], [value_info("y", F, [1, 2, 5, 5])],
                      initializers=inits)


def _add_zero(sensitive: bool) -> onnx.ModelProto:
    """(x + 0.0) -> 1/. (or -> Relu): x = -0.0 gives +0.0 (1/. = +inf); without the Add, -inf."""
    nodes = [helper.make_node("Add", ["x", "z"], ["a"])]
    inits = [tensor("z", np.array(0.0, np.float32))]
    if sensitive:
        nodes += _reciprocal("a")
        inits.append(ONE)
    else:  # (the graph output may not alias the input, so something must follow the Add)
        nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    return make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4])], initializers=inits)


def _pad_avgpool(sensitive: bool) -> onnx.ModelProto:
    """Pad(+0.0) -> AveragePool(count_include_pad=1) [-> 1/.]: onnxruntime's padded AveragePool sums
    only the real elements, so a window of -0.0 values and padding gives -0.0, not +0.0."""
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]),
             helper.make_node("AveragePool", ["p"], ["a" if sensitive else "y"], kernel_shape=[2, 2],
                              count_include_pad=1)]
    inits = [tensor("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))]
    if sensitive:
        nodes += _reciprocal("a")
        inits.append(ONE)
    return make_model(nodes, [value_info("x", F, [1, 1, 2, 2])], [value_info("y", F, [1, 1, 3, 3])],
                      initializers=inits)


def _conv_bn(sensitive: bool) -> onnx.ModelProto:
    """Conv(pads=1) -> BN(gamma=-1, B=-0.0, mean=-0.0) [-> 1/.]: shift = -0.0, so BN keeps the sign of
    y*s = -0.0 on padding windows; the folded Conv gives +0.0 there."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "v"], ["n" if sensitive else "y"])]
    inits = [tensor("w", np.full((1, 1, 1, 1), 0.5, np.float32)), tensor("g", np.array([-1.0], np.float32)),
             tensor("b", np.array([-0.0], np.float32)), tensor("mu", np.array([-0.0], np.float32)),
             tensor("v", np.array([1.0], np.float32))]
    if sensitive:
        nodes += _reciprocal("n")
        inits.append(ONE)
    return make_model(nodes, [value_info("x", F, [1, 1, 2, 2])], [value_info("y", F, [1, 1, 4, 4])],
                      initializers=inits)


# (builder, the pass whose rewrite would flip the zero, the op the rewrite removes, input shape)
CASES = {
    "fuse_mul_into_conv": (_conv_mul, "Mul", [1, 2, 3, 3]),
    "eliminate_float_add_zero": (_add_zero, "Add", [4]),
    "fuse_pad_into_pool": (_pad_avgpool, "Pad", [1, 1, 2, 2]),
    "fuse_bn_into_conv": (_conv_bn, "BatchNormalization", [1, 1, 2, 2]),
}


def _inputs(shape) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    size = int(np.prod(shape))
    return [np.full(shape, -0.0, np.float32), np.zeros(shape, np.float32),
            np.where(rng.random(size) < 0.5, -0.0, 1.5).astype(np.float32).reshape(shape)]


def _assert_bit_identical(original: onnx.ModelProto, optimized: onnx.ModelProto, shape) -> None:
    for x in _inputs(shape):
        (want,), (got,) = run(original, {"x": x}), run(optimized, {"x": x})
        assert want.tobytes() == got.tobytes(), (want, got)


def _refusal_reasons(report: dict) -> list[str]:
    return [r["reason"] for r in report["refused"] if "-0.0" in r["reason"]]


@pytest.mark.parametrize("pass_name", sorted(CASES))
def test_api_keeps_a_zero_sign_that_reaches_a_divisor(pass_name):
    build, removed, shape = CASES[pass_name]
    original = build(sensitive=True)
    # the rewrite alone, and the default pipeline: neither verifies, so the pass itself must refuse
    for passes in ([pass_name], None):
        optimized = onnxrefine.optimize(original, passes)
        assert removed in op_types(optimized), passes
        _assert_bit_identical(original, optimized, shape)
    _, report = onnxrefine.optimize_with_report(original, [pass_name])
    reasons = [r.reason for r in report.log.refused.values()]
    assert any("-0.0" in r and "Div" in r for r in reasons), reasons


@pytest.mark.parametrize("pass_name", sorted(CASES))
def test_cli_no_verify_keeps_a_zero_sign_that_reaches_a_divisor(pass_name, tmp_path, capsys):
    build, removed, shape = CASES[pass_name]
    original = build(sensitive=True)
    src, out, rep = tmp_path / "m.onnx", tmp_path / "m.opt.onnx", tmp_path / "r.json"
    onnx.save(original, src)
    assert main(["optimize", str(src), "-o", str(out), "--no-verify", "--explain", "--report", str(rep)]) == 0
    optimized = onnx.load(out)
    assert removed in op_types(optimized)
    _assert_bit_identical(original, optimized, shape)
    assert "-0.0" in capsys.readouterr().out  # --explain shows the reason
    assert _refusal_reasons(json.loads(rep.read_text()))


@pytest.mark.parametrize("pass_name", sorted(CASES))
def test_without_a_sign_sensitive_use_the_rewrite_still_applies(pass_name):
    build, removed, shape = CASES[pass_name]
    original = build(sensitive=False)
    optimized = onnxrefine.optimize(original, [pass_name])
    assert removed not in op_types(optimized)
    for x in _inputs(shape):  # equal in value (a graph output's zero may flip: reassociating class)
        (want,), (got,) = run(original, {"x": x}), run(optimized, {"x": x})
        np.testing.assert_array_equal(want, got)


def test_a_positive_scale_still_folds_in_front_of_a_divisor():
    original = _conv_mul(sensitive=True, scale=2.0)
    optimized = onnxrefine.optimize(original, ["fuse_mul_into_conv"])
    assert "Mul" not in op_types(optimized)
    _assert_bit_identical(original, optimized, [1, 2, 3, 3])


def test_add_bias_into_conv_keeps_a_negative_zero_constant():
    """Conv (no bias) + (-0.0): the folded bias must be the constant itself, not +0.0 + (-0.0) = +0.0
    (Conv + (-0.0) keeps a zero's sign, Conv + (+0.0) does not)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "k"], ["a"])] + _reciprocal("a")
    model = make_model(nodes, [value_info("x", F, [1, 2, 2, 2])], [value_info("y", F, [1, 2, 2, 2])],
                       initializers=[tensor("w", np.ones((2, 2, 1, 1), np.float32)),
                                     tensor("k", np.full((1, 2, 1, 1), -0.0, np.float32)), ONE])
    optimized = onnxrefine.optimize(model, ["fuse_add_bias_into_conv"])
    assert op_types(optimized) == ["Conv", "Div"]
    conv = optimized.graph.node[0]
    bias = next(onnx.numpy_helper.to_array(t) for t in optimized.graph.initializer if t.name == conv.input[2])
    assert np.all(np.signbit(bias)) and np.all(bias == 0)
    _assert_bit_identical(model, optimized, [1, 2, 2, 2])


@pytest.mark.parametrize("op, constant", [("Mul", 1.0), ("Div", 1.0), ("Pow", 1.0), ("Sub", 0.0), ("Add", -0.0)])
def test_unit_eliminations_are_sign_exact(op, constant):
    """x*1, x/1, x**1, x-(+0.0), x+(-0.0) keep -0.0 and +0.0 as they are, so eliminate_nop_with_unit
    (an exact pass) needs no guard even before 1/x."""
    nodes = [helper.make_node(op, ["x", "k"], ["a"])] + _reciprocal("a")
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4])],
                       initializers=[tensor("k", np.array(constant, np.float32)), ONE])
    optimized = onnxrefine.optimize(model, ["eliminate_nop_with_unit"])
    assert op_types(optimized) == ["Div"]
    x = np.array([-0.0, 0.0, -0.0, 2.0], np.float32)
    assert run(model, {"x": x})[0].tobytes() == run(optimized, {"x": x})[0].tobytes()


# -- the analysis ----------------------------------------------------------------------------------


def _analysis_of(nodes, inits=(), outputs=("y",), **kw):
    model = make_model(nodes, [value_info("x", F, [4])], [value_info(o, F, None) for o in outputs],
                       initializers=list(inits))
    irm = ir.serde.deserialize_model(model)
    values = {v.name: v for node in irm.graph for v in node.outputs}
    values.update({v.name: v for v in irm.graph.inputs})
    return SignedZeroAnalysis(irm.graph, **kw), values


def test_analysis_follows_carriers_and_stops_at_sign_losing_ops():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["t"]),
        helper.make_node("Div", ["one", "t"], ["y"]),            # r reaches a divisor through Transpose
        helper.make_node("Abs", ["x"], ["ab"]), helper.make_node("Div", ["one", "ab"], ["y2"]),
        helper.make_node("Div", ["x", "one"], ["n"]),            # numerator only: carries to output
        helper.make_node("Equal", ["x", "one"], ["eq"]),
    ]
    analysis, v = _analysis_of(nodes, [ONE], outputs=("y", "y2", "n", "eq"))
    assert analysis.observable(v["r"]) and analysis.observable(v["x"])
    assert analysis.observable(v["ab"])  # Abs stops x's sign, but ab itself feeds a divisor
    assert not analysis.observable(v["n"])  # a main-graph output, reassociating view
    assert SignedZeroAnalysis(analysis.main_graph, outputs_observable=True).observable(v["n"])


@pytest.mark.parametrize("exponent, expected", [(2.0, False), (3.0, False), (-1.0, True), (0.0, False)])
def test_analysis_pow_base(exponent, expected):
    nodes = [helper.make_node("Pow", ["x", "e"], ["y"])]
    analysis, v = _analysis_of(nodes, [tensor("e", np.array(exponent, np.float32))])
    assert analysis.observable(v["x"]) is expected


def test_analysis_is_conservative_on_unknown_and_custom_ops():
    custom = helper.make_node("Foo", ["x"], ["y"], domain="my.domain")
    analysis, v = _analysis_of([custom])
    assert analysis.observable(v["x"])


def test_analysis_handles_a_deep_chain_without_recursion():
    nodes = [helper.make_node("Neg", ["x" if i == 0 else f"v{i - 1}"], [f"v{i}"]) for i in range(5000)]
    nodes.append(helper.make_node("Reciprocal", ["v4999"], ["y"]))
    analysis, v = _analysis_of(nodes)
    assert analysis.observable(v["x"])
    assert analysis.observable(v["v2500"])


_UNARY = ["Relu", "Neg", "Abs", "Exp", "Sqrt", "Sin", "Cos", "Tanh", "Floor", "Sigmoid", "Identity", "Erf",
          "Softsign", "Sign", "Atan"]
# (op, constant, constant first): x op c, or c op x
_BINARY = [("Mul", -2.0, False), ("Div", 3.0, False), ("Div", 3.0, True), ("Pow", 2.0, False),
           ("Pow", 3.0, False), ("Pow", -1.0, False), ("Add", 1.0, False), ("Sub", 0.0, False),
           ("Max", 0.0, False), ("Min", 0.0, False)]
_STEPS = st.one_of(st.sampled_from(_UNARY), st.sampled_from(_BINARY))


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEPS, min_size=1, max_size=6), st.sampled_from(["Identity", "Reciprocal", "Abs"]))
def test_analysis_never_misses_an_observable_sign(chain, last):
    """Property: if the analysis says x's zero sign is not observable (graph outputs counted, as for
    an exact pass), then feeding +0.0 or -0.0 through the chain gives bit-identical outputs in
    onnxruntime."""
    nodes, inits, src = [], [], "x"
    for i, step in enumerate(chain):
        if isinstance(step, str):
            nodes.append(helper.make_node(step, [src], [f"u{i}"]))
        else:
            op, constant, constant_first = step
            inits.append(tensor(f"k{i}", np.array(constant, np.float32)))
            operands = [f"k{i}", src] if constant_first else [src, f"k{i}"]
            nodes.append(helper.make_node(op, operands, [f"u{i}"]))
        src = f"u{i}"
    nodes.append(helper.make_node(last, [src], ["y"]))
    model = make_model(nodes, [value_info("x", F, [1])], [value_info("y", F, [1])], initializers=inits)
    irm = ir.serde.deserialize_model(model)
    if SignedZeroAnalysis(irm.graph, outputs_observable=True).observable(irm.graph.inputs[0]):
        return
    plus, minus = (run(model, {"x": np.array([z], np.float32)})[0] for z in (0.0, -0.0))
    assert plus.tobytes() == minus.tobytes(), chain


def test_analysis_is_conservative_at_subgraph_captures_and_outputs():
    then_graph = helper.make_graph([helper.make_node("Abs", ["a"], ["t"])], "then", [], [value_info("t", F, [4])])
    else_graph = helper.make_graph([helper.make_node("Abs", ["a"], ["e"])], "else", [], [value_info("e", F, [4])])
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Less", ["x", "x"], ["c0"]),
             helper.make_node("ReduceMin", ["c0i"], ["c"], keepdims=0),
             helper.make_node("Cast", ["c0"], ["c0i"], to=TensorProto.INT32),
             helper.make_node("If", ["cb"], ["y"], then_branch=then_graph, else_branch=else_graph),
             helper.make_node("Cast", ["c"], ["cb"], to=TensorProto.BOOL)]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4])])
    irm = ir.serde.deserialize_model(model)
    a = next(v for node in irm.graph for v in node.outputs if v.name == "a")
    assert SignedZeroAnalysis(irm.graph).observable(a)  # captured by the If's branches: not followed
    branch_out = next(iter(irm.graph.subgraphs())).outputs[0]
    assert SignedZeroAnalysis(irm.graph).observable(branch_out)  # a subgraph output: not followed


def test_analysis_does_not_keep_a_stale_not_observable_answer():
    """A rewrite between two queries may move readers onto a value (a forwarded output); a kept
    'not observable' answer would then be wrong, so the rewrite reports the value (the driver
    does, for every value that gains readers) and the kept answers above it are dropped."""
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["a"], ["y"])]
    analysis, v = _analysis_of(nodes)
    assert not analysis.observable(v["a"])
    graph = analysis.main_graph
    one = ir.Value(name="one_v", const_value=ir.tensor(np.array(1.0, np.float32)))
    graph.register_initializer(one)
    div = ir.Node("", "Div", [one, v["a"]], name="late_div")
    graph.append(div)
    graph.outputs.append(div.outputs[0])
    analysis.new_uses([v["a"]])
    assert analysis.observable(v["a"]) and analysis.observable(v["x"])


@pytest.mark.parametrize("sensitive", [True, False])
def test_sub_negative_zero_is_guarded_like_add_zero(sensitive):
    """x - (-0.0) turns -0.0 into +0.0 as x + 0.0 does."""
    tail = _reciprocal("a") if sensitive else [helper.make_node("Relu", ["a"], ["y"])]
    model = make_model([helper.make_node("Sub", ["x", "z"], ["a"])] + tail, [value_info("x", F, [4])],
                       [value_info("y", F, [4])],
                       initializers=[tensor("z", np.array(-0.0, np.float32)), ONE])
    optimized = onnxrefine.optimize(model, ["eliminate_float_add_zero"])
    assert ("Sub" in op_types(optimized)) is sensitive
    x = np.array([-0.0, 0.0, 1.0, -2.0], np.float32)
    want, got = run(model, {"x": x})[0], run(optimized, {"x": x})[0]
    if sensitive:
        assert want.tobytes() == got.tobytes()
    else:
        np.testing.assert_array_equal(want, got)


def test_bn_fold_with_negative_gamma_and_plus_zero_shift_needs_no_guard():
    """BN ends by adding its shift: with shift +0.0 every zero comes out +0.0, before and after the
    fold, so a negative gamma alone folds even in front of 1/x (and the bits stay the same)."""
    model = _conv_bn(sensitive=True)
    for init in model.graph.initializer:
        if init.name in ("b", "mu"):
            init.CopyFrom(tensor(init.name, np.array([0.0], np.float32)))
    optimized = onnxrefine.optimize(model, ["fuse_bn_into_conv"])
    assert "BatchNormalization" not in op_types(optimized)
    _assert_bit_identical(model, optimized, [1, 1, 2, 2])


@pytest.mark.parametrize("c", [0.0, -0.0])
def test_matmul_add_into_gemm_keeps_zero_signs(c):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "c"], ["a"])] + \
        _reciprocal("a")
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, [2, 4])],
                       initializers=[tensor("w", np.full((3, 4), -1.0, np.float32)),
                                     tensor("c", np.full((4,), c, np.float32)), ONE])
    optimized = onnxrefine.optimize(model, ["fuse_matmul_add_bias_into_gemm"])
    assert op_types(optimized) == ["Gemm", "Div"]
    _assert_bit_identical(model, optimized, [2, 3])


# -- calls of model-local functions: followed into the body and back out of every call ----------


def _conv_bn_into_function(body_op: str, reader: str | None = None) -> onnx.ModelProto:
    """_conv_bn's BatchNormalization output read by a call of a local function whose body is one
    `body_op` (Div: its formal input as the divisor); `reader` (Div: a divisor) reads the call's
    output in the main graph, else it is the model's output."""
    if body_op == "Div":
        body = [helper.make_node("Constant", [], ["f_one"], value=tensor("f_one", np.array(1.0, np.float32))),
                helper.make_node("Div", ["f_one", "f_in"], ["f_out"])]
    else:
        body = [helper.make_node(body_op, ["f_in"], ["f_out"])]
    function = helper.make_function("local.fn", "F", ["f_in"], ["f_out"], body, [helper.make_opsetid("", 17)])
    model = _conv_bn(sensitive=False)
    model.graph.node[-1].output[0] = "n"
    model.graph.node.append(helper.make_node("F", ["n"], ["called" if reader else "y"], domain="local.fn"))
    if reader:
        model.graph.node.extend(_reciprocal("called"))
        model.graph.initializer.append(ONE)
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("local.fn", 1))
    return model


@pytest.mark.parametrize("body_op, reader, observable", [
    ("Abs", None, False),      # the body loses the sign: the fold that flips it applies
    ("Neg", None, False),      # carried to the body's output, the model's output (reassociating view)
    ("Div", None, True),       # the body divides by it
    ("Neg", "Div", True),      # carried out of the call to a divisor in the caller
])
def test_the_fold_follows_a_zero_sign_through_a_local_function(body_op, reader, observable):
    original = _conv_bn_into_function(body_op, reader)
    optimized, report = onnxrefine.optimize_with_report(original, ["fuse_bn_into_conv"])
    folded = "BatchNormalization" not in op_types(optimized)
    assert folded is not observable, [r.reason for r in report.log.refused.values()]
    if observable:
        reasons = [r.reason for r in report.log.refused.values()]
        assert any("-0.0" in r and "Div" in r for r in reasons), reasons
        _assert_bit_identical(original, optimized, [1, 1, 2, 2])
    else:
        for x in _inputs([1, 1, 2, 2]):
            (want,), (got,) = run(original, {"x": x}), run(optimized, {"x": x})
            np.testing.assert_array_equal(want, got)
            if body_op == "Abs":
                assert want.tobytes() == got.tobytes()


def test_a_function_output_reaches_the_readers_of_its_call():
    """Two calls of one function, a divisor reading the second call's output: the second call's
    argument is observable through the body and back out of its call (the body is shared; every
    call's readers count, a superset of each call's own)."""
    function = helper.make_function("local.fn", "F", ["f_in"], ["f_out"], [helper.make_node("Neg", ["f_in"], ["f_out"])],
                                    [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("F", ["a"], ["fa"], domain="local.fn"),
             helper.make_node("Relu", ["x"], ["b"]), helper.make_node("F", ["b"], ["fb"], domain="local.fn"),
             helper.make_node("Div", ["one", "fb"], ["y"]), helper.make_node("Abs", ["fa"], ["y2"])]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, None), value_info("y2", F, None)],
                       initializers=[ONE], functions=[function])
    model.opset_import.append(helper.make_opsetid("local.fn", 1))
    irm = ir.serde.deserialize_model(model)
    values = {v.name: v for node in irm.graph for v in node.outputs}
    analysis = SignedZeroAnalysis(irm.graph, functions=irm.functions)
    assert analysis.observable(values["b"])
    assert analysis.observable(values["a"])  # the shared body's output reaches fb's divisor too


def _one_call(body_op: str, initializers=()):
    """x -> Neg -> a -> F(a) -> y, F's body one `body_op`: (the IR model, its values by name, the
    analysis that follows F)."""
    function = helper.make_function("local.fn", "F", ["f_in"], ["f_out"], [helper.make_node(body_op, ["f_in"], ["f_out"])],
                                    [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("F", ["a"], ["y"], domain="local.fn")]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, None)], initializers=list(initializers),
                       functions=[function])
    model.opset_import.append(helper.make_opsetid("local.fn", 1))
    irm = ir.serde.deserialize_model(model)
    values = {v.name: v for node in irm.graph for v in node.outputs}
    return irm, values, SignedZeroAnalysis(irm.graph, functions=irm.functions)


def test_a_reader_gained_inside_a_function_body_drops_the_kept_answers():
    irm, values, analysis = _one_call("Abs")
    a = values["a"]
    assert not analysis.observable(a)
    body = next(iter(irm.functions.values()))
    formal = body.inputs[0]
    reciprocal = ir.Node("", "Reciprocal", [formal], name="late_reciprocal")
    body.append(reciprocal)
    body.outputs.append(reciprocal.outputs[0])
    analysis.new_uses([formal])
    assert analysis.observable(a)


def test_a_new_call_gives_the_body_outputs_new_readers():
    """A call added later whose output reaches a divisor makes the first call's argument
    observable through the shared body: the kept 'not observable' answers go with it."""
    irm, values, analysis = _one_call("Neg", [ONE])
    a = values["a"]
    assert not analysis.observable(a)  # carried to the model's output only
    x, one = irm.graph.inputs[0], irm.graph.initializers["one"]
    call = ir.Node("local.fn", "F", [x], name="late_call")
    irm.graph.append(call)
    divide = ir.Node("", "Div", [one, call.outputs[0]], name="late_div")
    irm.graph.append(divide)
    irm.graph.outputs.append(divide.outputs[0])
    analysis.new_uses([x])
    assert analysis.observable(a)


def test_a_function_named_as_a_runtime_op_is_not_followed():
    """onnxruntime runs its own kernel for an op it knows, not a local function of that name: a
    local com.microsoft::Inverse whose body is Abs still inverts, so the fold upstream of it must
    see a reader that tells -0 from +0 (followed, the fold applied and the inverse of -0 turned
    from -inf to +inf)."""
    model = _conv_bn(sensitive=False)
    model.graph.node[-1].output[0] = "n"
    model.graph.initializer.append(tensor("shape", np.array([16, 1, 1], np.int64)))
    model.graph.node.extend([helper.make_node("Reshape", ["n", "shape"], ["r"]),
                             helper.make_node("Inverse", ["r"], ["y"], domain="com.microsoft")])
    model.graph.output[0].type.tensor_type.ClearField("shape")
    model.functions.append(helper.make_function("com.microsoft", "Inverse", ["f_in"], ["f_out"],
                                                [helper.make_node("Abs", ["f_in"], ["f_out"])],
                                                [helper.make_opsetid("", 17)]))
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    optimized, report = onnxrefine.optimize_with_report(model, ["fuse_bn_into_conv"])
    assert "BatchNormalization" in op_types(optimized), [r.reason for r in report.log.refused.values()]
    _assert_bit_identical(model, optimized, [1, 1, 2, 2])


def test_a_reader_gained_after_a_call_drops_the_answers_upstream_of_it():
    irm, values, analysis = _one_call("Neg")
    assert not analysis.observable(values["a"])
    reciprocal = ir.Node("", "Reciprocal", [values["y"]], name="late_reciprocal")
    irm.graph.append(reciprocal)
    irm.graph.outputs.append(reciprocal.outputs[0])
    analysis.new_uses([values["y"]])
    assert analysis.observable(values["a"])
