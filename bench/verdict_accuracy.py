"""How well does `verify_models` label rewrites, next to a plain np.allclose check?

Builds a labelled set in code: rewrites that only change float rounding (label "rounding"),
real semantic bugs ("bug") and purely structural rewrites ("exact"). For each pair, the same
generated input sets (random normal + stress sets, seed 0) go to verify_models and to
np.allclose(rtol=1e-4, atol=1e-5, equal_nan=True) per output (a shape change fails allclose).

Correct means: rounding -> verdict exact or rounding / allclose passes; bug -> verdict mismatch
(unstable is shown apart and not counted as correct) / allclose fails; exact -> verdict exact /
allclose passes.

The "no f64" column reruns verify_models with the float64 reference made unavailable (it raises
UnsupportedOperatorError), i.e. the documented fallback judged by the perturbation spread.

Run: python bench/verdict_accuracy.py [--verbose]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify import verify_models
from onnxrefine.verify.evidence import declared_feeds
from onnxrefine.verify.inputs import generate_inputs
from onnxrefine.verify.ort import ModelRunner

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = 8
    return built


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


# ------------------------------------------------------------------------------ rounding cases

def conv_bn(seed, shape, *, drop_eps=False, mean_sign=False, eps=1e-5, small_var=False):
    rng = np.random.default_rng(seed)
    cout, cin, k = 4, shape[1], 3
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    sc = rng.uniform(0.5, 2, cout).astype(np.float32)
    sh = rng.standard_normal(cout).astype(np.float32)
    mu = rng.standard_normal(cout).astype(np.float32)
    var = (rng.uniform(0.01, 0.05, cout) if small_var else rng.uniform(0.5, 2, cout)).astype(np.float32)
    ins = [("x", F32, ["N"] + list(shape[1:]))]
    orig = model([node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
                  node("BatchNormalization", ["c", "s", "t", "m", "v"], ["y"], epsilon=eps),
                  node("Relu", ["y"], ["r"])], ins, [("y", F32), ("r", F32)],
                 [("W", w), ("B", b), ("s", sc), ("t", sh), ("m", mu), ("v", var)])
    factor = (sc / np.sqrt(var if drop_eps else var + np.float32(eps))).astype(np.float32)
    fb = ((b + mu if mean_sign else b - mu) * factor + sh).astype(np.float32)
    cand = model([node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1]), node("Relu", ["y"], ["r"])],
                 ins, [("y", F32), ("r", F32)], [("W", (w * factor[:, None, None, None]).astype(np.float32)),
                                                  ("B", fb)])
    return orig, cand, {"N": shape[0]}


def matmul_add_gemm(seed, m, k, n, *, drop_bias=False):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ins = [("x", F32, [m, k])]
    orig = model([node("MatMul", ["x", "W"], ["mm"]), node("Add", ["mm", "b"], ["y"])], ins, [("y", F32)],
                 [("W", w), ("b", b)])
    if drop_bias:
        cand = model([node("MatMul", ["x", "W"], ["y"])], ins, [("y", F32)], [("W", w)])
    else:
        cand = model([node("Gemm", ["x", "W", "b"], ["y"])], ins, [("y", F32)], [("W", w), ("b", b)])
    return orig, cand, {}


def reassociate_mul(shape):
    ins = [(name, F32, list(shape)) for name in "abc"]
    orig = model([node("Mul", ["a", "b"], ["ab"]), node("Mul", ["ab", "c"], ["y"])], ins, [("y", F32)])
    cand = model([node("Mul", ["b", "c"], ["bc"]), node("Mul", ["a", "bc"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def sum_order(shape):
    ins = [(name, F32, list(shape)) for name in "abcd"]
    orig = model([node("Sum", ["a", "b", "c", "d"], ["y"])], ins, [("y", F32)])
    cand = model([node("Add", ["d", "c"], ["dc"]), node("Add", ["b", "a"], ["ba"]),
                  node("Add", ["dc", "ba"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def reduce_split(shape):
    ins = [("x", F32, list(shape))]
    axes = np.array([1, 2], np.int64)
    orig = model([node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], ins, [("y", F32)], [("axes", axes)])
    cand = model([node("ReduceSum", ["x", "a2"], ["p"], keepdims=0), node("ReduceSum", ["p", "a1"], ["y"], keepdims=0)],
                 ins, [("y", F32)], [("a2", np.array([2], np.int64)), ("a1", np.array([1], np.int64))])
    return orig, cand, {}


def constant_mul_fold(seed, shape, *, scale_error=0.0):
    rng = np.random.default_rng(seed)
    c1 = rng.uniform(0.5, 3, shape[-1]).astype(np.float32)
    c2 = rng.uniform(0.5, 3, shape[-1]).astype(np.float32)
    ins = [("x", F32, list(shape))]
    orig = model([node("Mul", ["x", "c1"], ["t"]), node("Mul", ["t", "c2"], ["y"])], ins, [("y", F32)],
                 [("c1", c1), ("c2", c2)])
    folded = (c1 * c2 * np.float32(1 + scale_error)).astype(np.float32)
    cand = model([node("Mul", ["x", "c"], ["y"])], ins, [("y", F32)], [("c", folded)])
    return orig, cand, {}


def div_to_mul(shape):
    ins = [("x", F32, list(shape))]
    orig = model([node("Div", ["x", "d"], ["y"])], ins, [("y", F32)], [("d", np.float32(3.0))])
    cand = model([node("Mul", ["x", "r"], ["y"])], ins, [("y", F32)], [("r", np.float32(1.0) / np.float32(3.0))])
    return orig, cand, {}


def matmul_chain(seed, m, k):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((k, k)).astype(np.float32)
    c = rng.standard_normal((k, k)).astype(np.float32)
    ins = [("x", F32, [m, k])]
    orig = model([node("MatMul", ["x", "B"], ["t"]), node("MatMul", ["t", "C"], ["y"])], ins, [("y", F32)],
                 [("B", b), ("C", c)])
    cand = model([node("MatMul", ["x", "BC"], ["y"])], ins, [("y", F32)], [("BC", (b @ c).astype(np.float32))])
    return orig, cand, {}


def softmax_decomposed(shape, *, wrong_axis=False):
    ins = [("x", F32, list(shape))]
    orig = model([node("Softmax", ["x"], ["y"], axis=-1)], ins, [("y", F32)])
    if wrong_axis:
        cand = model([node("Softmax", ["x"], ["y"], axis=0)], ins, [("y", F32)])
        return orig, cand, {}
    cand = model([node("ReduceMax", ["x"], ["m"], axes=[-1], keepdims=1), node("Sub", ["x", "m"], ["s"]),
                  node("Exp", ["s"], ["e"]), node("ReduceSum", ["e", "ax"], ["z"], keepdims=1),
                  node("Div", ["e", "z"], ["y"])], ins, [("y", F32)], [("ax", np.array([-1], np.int64))])
    return orig, cand, {}


# ------------------------------------------------------------------------------ bugs

def transpose_wrong():
    ins = [("x", F32, [3, 3, 3])]
    orig = model([node("Transpose", ["x"], ["t"], perm=[1, 2, 0]), node("Transpose", ["t"], ["y"], perm=[0, 2, 1])],
                 ins, [("y", F32)])
    cand = model([node("Transpose", ["x"], ["y"], perm=[2, 1, 0])], ins, [("y", F32)])  # second[first]
    return orig, cand, {}


def pad_into_maxpool():
    ins = [("x", F32, [1, 2, 6, 6])]
    orig = model([node("Pad", ["x", "p"], ["q"]), node("MaxPool", ["q"], ["y"], kernel_shape=[3, 3])], ins,
                 [("y", F32)], [("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    cand = model([node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], ins, [("y", F32)])
    return orig, cand, {}


def reshape_collapse(correct=False):
    ins = [("x", F32, [2, 12])]
    last = np.array([3, 8] if correct else [0, -1], np.int64)
    orig = model([node("Reshape", ["x", "s1"], ["r"]), node("Reshape", ["r", "s2"], ["y"])], ins, [("y", F32)],
                 [("s1", np.array([6, 4], np.int64)), ("s2", last)])
    cand = model([node("Reshape", ["x", "s2"], ["y"])], ins, [("y", F32)], [("s2", last)])
    return orig, cand, {}


def slice_off_by_one():
    ins = [("x", F32, [4, 6])]
    def sliced(start, end):
        return model([node("Slice", ["x", "st", "en", "ax"], ["y"])], ins, [("y", F32)],
                     [("st", np.array([start], np.int64)), ("en", np.array([end], np.int64)),
                      ("ax", np.array([1], np.int64))])
    return sliced(1, 5), sliced(0, 4), {}


def relu_to_leaky():
    ins = [("x", F32, [4, 8])]
    orig = model([node("Relu", ["x"], ["y"])], ins, [("y", F32)])
    cand = model([node("LeakyRelu", ["x"], ["y"], alpha=0.01)], ins, [("y", F32)])
    return orig, cand, {}


def float16_overflow_fold():
    rng = np.random.default_rng(0)
    w = rng.uniform(-2, 2, (4, 3)).astype(np.float16)
    w[0, 0], w[2, 1] = 40000, -40000
    ins = [("x", F16, [5, 4])]
    two = np.float16(2.0)
    orig = model([node("MatMul", ["x", "W"], ["m"]), node("Mul", ["m", "two"], ["y"])], ins, [("y", F16)],
                 [("W", w), ("two", two)])
    with np.errstate(over="ignore"):
        folded = (w * two).astype(np.float16)  # 80000 overflows float16 to inf
    cand = model([node("MatMul", ["x", "W"], ["y"])], ins, [("y", F16)], [("W", folded)])
    return orig, cand, {}


def sigmoid_to_hardsigmoid():
    ins = [("x", F32, [4, 8])]
    orig = model([node("Sigmoid", ["x"], ["y"])], ins, [("y", F32)])
    cand = model([node("HardSigmoid", ["x"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


# ---------------------------------------------------- the named verdict rules: legitimate cases
# Each returns (original, candidate, dims, extra input sets[, use generated sets]); the extra sets
# are judged along with the generated ones (they reach the values where the rule matters).

def _one(nodes, inits=(), shape=(4,), names=("x",)):
    return model(nodes, [(n, F32, list(shape)) for n in names], [("y", F32)], inits)


def reciprocal_signed_zero():
    inits = [("one", np.float32(1)), ("zero", np.float32(0))]
    orig = _one([node("Add", ["x", "zero"], ["s"]), node("Div", ["one", "s"], ["y"])], inits)
    cand = _one([node("Div", ["one", "x"], ["y"])], inits)
    return orig, cand, {}, [{"x": np.array([-0.0, np.inf, 2.0, -3.0], np.float32)}]


def max_as_relu_difference():
    orig = _one([node("Max", ["a", "b"], ["y"])], names=("a", "b"))
    cand = _one([node("Sub", ["a", "b"], ["d"]), node("Relu", ["d"], ["r"]), node("Add", ["r", "b"], ["y"])],
                names=("a", "b"))
    return orig, cand, {}, [{"a": np.array([np.inf, 1, -2, 0.5], np.float32),
                             "b": np.array([np.inf, 2, 3, -1], np.float32)}]


def relu_as_clip():
    orig = _one([node("Relu", ["x"], ["y"])])
    cand = _one([node("Clip", ["x", "lo"], ["y"])], [("lo", np.float32(0))])
    return orig, cand, {}, [{"x": np.array([np.inf, 1, -2, np.nan], np.float32)}]


def naive_softmax(candidate_op):
    orig = _one([node("Exp", ["x"], ["e"]), node("ReduceSum", ["e", "ax"], ["s"], keepdims=1),
                 node("Div", ["e", "s"], ["y"])], [("ax", np.array([1], np.int64))], shape=(2, 2))
    if candidate_op == "clip":
        cand = _one([node("Clip", ["x", "lo", "hi"], ["k"]), node("Softmax", ["k"], ["y"], axis=1)],
                    [("lo", np.float32(-80)), ("hi", np.float32(80))], shape=(2, 2))
    else:
        cand = _one([node("Softmax", ["x"], ["y"], axis=1)], shape=(2, 2))
        # the given set only: on the generated large-magnitude sets float64's exp overflows too
        # (original and reference NaN), and a finite candidate there is a change, not rounding
        return orig, cand, {}, [{"x": np.array([[100, 99], [1, 2]], np.float32)}], False
    return orig, cand, {}, [{"x": np.array([[100, 99], [1, 2]], np.float32)}]


def sub_constant(value):
    orig = _one([node("Sub", ["x", "c"], ["y"])], [("c", np.float32(1e6))], shape=(64,))
    cand = _one([node("Sub", ["x", "c"], ["y"])], [("c", np.float32(value))], shape=(64,))
    x = (1e6 + 8 * np.random.default_rng(0).standard_normal(64)).astype(np.float32)
    return orig, cand, {}, [{"x": x}]


def reassociate_overflow(moderate):
    if moderate:   # x * (1e10 * 1e-30) -> (x * 1e10) * 1e-30 overflows where the value is 1e10
        inits = [("a", np.float32(1e10)), ("b", np.float32(1e-30))]
        orig = _one([node("Mul", ["a", "b"], ["ab"]), node("Mul", ["x", "ab"], ["y"])], inits)
        cand = _one([node("Mul", ["x", "a"], ["xa"]), node("Mul", ["xa", "b"], ["y"])], inits)
        return orig, cand, {}, [{"x": np.array([1e30, 1, -2e30, 3], np.float32)}]
    orig = _one([node("Div", ["x", "x"], ["q"]), node("Mul", ["x", "q"], ["y"])])   # true value 1e25
    cand = _one([node("Mul", ["x", "x"], ["p"]), node("Div", ["p", "x"], ["y"])])
    return orig, cand, {}, [{"x": np.array([1e25, 2, -3e24, 0.5], np.float32)}]


def conv_bn_pool(drop_eps):
    rng = np.random.default_rng(0)
    cin, cout = 16, 32
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    b, sh, mu = ((0.1 * rng.standard_normal(cout)).astype(np.float32) for _ in range(3))
    sc, var = rng.uniform(0.5, 2, cout).astype(np.float32), rng.uniform(0.5, 2, cout).astype(np.float32)
    ins = [("x", F32, [1, cin, 16, 16])]
    orig = model([node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
                  node("BatchNormalization", ["c", "s", "t", "m", "v"], ["bn"], epsilon=1e-5),
                  node("GlobalAveragePool", ["bn"], ["y"])], ins, [("y", F32)],
                 [("W", w), ("B", b), ("s", sc), ("t", sh), ("m", mu), ("v", var)])
    factor = (sc / np.sqrt(var if drop_eps else var + np.float32(1e-5))).astype(np.float32)
    cand = model([node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), node("GlobalAveragePool", ["c"], ["y"])],
                 ins, [("y", F32)], [("W", (w * factor[:, None, None, None]).astype(np.float32)),
                                     ("B", ((b - mu) * factor + sh).astype(np.float32))])
    return orig, cand, {}, []


def sqrt_near_zero_reassociated():
    third = np.float32(1 / 3)

    def chain(constants):
        nodes, current = [], "x"
        for index in range(len(constants)):
            nodes.append(node("Add", [current, f"c{index}"], [f"a{index}"]))
            current = f"a{index}"
        return _one(nodes + [node("Sqrt", [current], ["y"])],
                    [(f"c{i}", np.float32(v)) for i, v in enumerate(constants)], shape=(8,))

    x = np.array([-0.9997454, -0.9988056, -0.999744, -0.999556, 0.0, 1.0, 2.0, 0.5], np.float32)
    return chain([1.0]), chain([third, np.float32(1) - third]), {}, [{"x": x}]


def cast_to_int(candidate_op):
    thirds = [("three", np.float32(3)), ("third", np.float32(1) / np.float32(3))]
    out = [("y", TensorProto.INT32)]
    ins = [("x", F32, [2])]
    orig = model([node("Mul", ["x", "three"], ["a"]), node("Mul", ["a", "third"], ["b"]),
                  node("Cast", ["b"], ["y"], to=TensorProto.INT32)], ins, out, thirds)
    sign = [node("Neg", ["x"], ["n"])] if candidate_op == "neg" else [node("Identity", ["x"], ["n"])]
    cand = model(sign + [node("Cast", ["n"], ["y"], to=TensorProto.INT32)], ins, out)
    return orig, cand, {}, [{"x": np.array([2.0, 2.0], np.float32)}]


def maxpool_log_softmax():
    ins = [("x", F32, [3, 2, 3])]
    pool = node("MaxPool", ["x"], ["p"], kernel_shape=[3], pads=[2, 2])
    orig = model([pool, node("Softmax", ["p"], ["s"], axis=0), node("Log", ["s"], ["y"])], ins, [("y", F32)])
    cand = model([pool, node("LogSoftmax", ["p"], ["y"], axis=0)], ins, [("y", F32)])
    inf, nan = np.inf, np.nan
    x = np.array([[[-0.0, 0.64, nan], [-0.85, -0.66, -0.2]], [[inf, 1.47, 1.41], [-0.0, -0.84, -1.2]],
                  [[inf, -0.0, 1.3], [2.33, 0.62, inf]]], np.float32)
    return orig, cand, {}, [{"x": x}]


# ------------------------------------------------------------------------------ per-element classes
# One pair per class of wrong verdict the per-element bound, the decision margins and the branch
# inputs exist for. Each returns (original, candidate, dims, extra input sets[, use generated sets]).

def _normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def scaled_column_negated():
    """y = x * w with w's first column 2^27: one large column must not lend the others an allowance."""
    w = np.ones(8, np.float32)
    w[0] = 2.0 ** 27
    flipped = -w
    flipped[0] = w[0]
    orig = _one([node("Mul", ["x", "w"], ["y"])], [("w", w)], shape=(4, 8))
    cand = _one([node("Mul", ["x", "w"], ["y"])], [("w", flipped)], shape=(4, 8))
    return orig, cand, {}, [{"x": _normal((4, 8))}], False


def scaled_column_negated_past_an_op_without_a_rule():
    """The same negation, then Elu (no bound rule: the magnitude of the terms is probed, not the
    output's RMS, which the large column would make about 2^24 for every element)."""
    w = np.ones(8, np.float32)
    w[0] = 2.0 ** 27
    flipped = -w
    flipped[0] = w[0]
    nodes = [node("Mul", ["x", "w"], ["t"]), node("Elu", ["t"], ["y"])]
    x = np.abs(_normal((4, 8))) + np.float32(0.5)
    return _one(nodes, [("w", w)], shape=(4, 8)), _one(nodes, [("w", flipped)], shape=(4, 8)), {}, [{"x": x}], False


def scale_beside_a_cancelling_column():
    """(x + c) - c with c = 1e6 in one column only (its cancellation error is large), then a 1%
    scale on every other column: one ill-computed column must not excuse the rest."""
    c = np.zeros(8, np.float32)
    c[0] = 1e6
    scale = np.full(8, 1.01, np.float32)
    scale[0] = 1
    orig = _one([node("Add", ["x", "c"], ["a"]), node("Sub", ["a", "c"], ["y"])], [("c", c)], shape=(4, 8))
    cand = _one([node("Add", ["x", "c"], ["a"]), node("Sub", ["a", "c"], ["b"]), node("Mul", ["b", "s"], ["y"])],
                [("c", c), ("s", scale)], shape=(4, 8))
    return orig, cand, {}, [{"x": _normal((4, 8))}], False


def float16_bn_fold_behind_a_long_product():
    """MatMul of 300,000 terms then BatchNormalization, in float16, and the BN folded into the weights:
    n*u > 1, where Higham's gamma_n = n*u/(1-n*u) is negative (a legitimate fold judged a mismatch)."""
    k = 300_000
    rng = np.random.default_rng(0)
    w = (2.0 ** -14 * (1 + 3 * rng.random((k, 16)))).astype(np.float16)
    scale, beta, mean, var = (rng.uniform(*span, 16).astype(np.float16) for span in ((0.5, 2), (-1, 1), (-1, 1), (0.5, 2)))
    ins, outs = [("x", F16, [4, k])], [("y", F16)]
    orig = model([node("MatMul", ["x", "w"], ["t"]), node("BatchNormalization", ["t", "s", "b", "m", "v"], ["y"])],
                 ins, outs, [("w", w), ("s", scale), ("b", beta), ("m", mean), ("v", var)])
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    cand = model([node("MatMul", ["x", "w"], ["t"]), node("Add", ["t", "c"], ["y"])], ins, outs,
                 [("w", (w.astype(np.float64) * s).astype(np.float16)),
                  ("c", (beta - mean.astype(np.float64) * s).astype(np.float16))])
    x = (0.5 + 0.5 * np.random.default_rng(1).random((4, k))).astype(np.float16)
    return orig, cand, {}, [{"x": x}], False


def integer_sum_off_by_half():
    """A sum of integers is exact in every order: a candidate 0.5 off is no rounding."""
    axes = [("ax", np.array([1], np.int64))]
    orig = _one([node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)], axes, shape=(2, 1024))
    cand = _one([node("ReduceSum", ["x", "ax"], ["s"], keepdims=0), node("Add", ["s", "h"], ["y"])],
                axes + [("h", np.float32(0.5))], shape=(2, 1024))
    x = np.random.default_rng(0).integers(0, 200, (2, 1024)).astype(np.float32)
    return orig, cand, {}, [{"x": x}], False


def power_of_two_product_one_ulp_off():
    """x * 4 is exact: a candidate multiplying by the next float above 4 is a change."""
    orig = _one([node("Mul", ["x", "k"], ["y"])], [("k", np.float32(4))], shape=(4, 8))
    cand = _one([node("Mul", ["x", "k"], ["y"])], [("k", np.nextafter(np.float32(4), np.float32(8)))],
                shape=(4, 8))
    return orig, cand, {}, [{"x": _normal((4, 8))}], False


def bias_added_twice():
    """A bias below every element's bound but present in all 16384 of them is systematic."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    b = np.full(256, 1e-6, np.float32)
    ins = [("x", F32, [64, 256])]
    orig = model([node("MatMul", ["x", "W"], ["m"]), node("Add", ["m", "b"], ["y"])], ins, [("y", F32)],
                 [("W", w), ("b", b)])
    cand = model([node("MatMul", ["x", "W"], ["m"]), node("Add", ["m", "b"], ["n"]), node("Add", ["n", "b"], ["y"])],
                 ins, [("y", F32)], [("W", w), ("b", b)])
    return orig, cand, {}, [{"x": _normal((64, 256))}], False


def argmax_beside_a_large_constant():
    """ArgMax over x + c where one element of c is 1e9: the other rows' decisions are far from a tie,
    so a candidate that negates those rows (picks their smallest) is a change, not a boundary flip."""
    c = np.zeros((4, 8), np.float32)
    c[0, 0] = 1e9
    sign = np.ones((4, 1), np.float32)
    sign[1:] = -1
    out = [("y", TensorProto.INT64)]
    ins = [("x", F32, [4, 8])]
    orig = model([node("Add", ["x", "c"], ["a"]), node("ArgMax", ["a"], ["y"], axis=1)], ins, out, [("c", c)])
    cand = model([node("Mul", ["x", "s"], ["n"]), node("Add", ["n", "c"], ["a"]), node("ArgMax", ["a"], ["y"], axis=1)],
                 ins, out, [("c", c), ("s", sign)])
    return orig, cand, {}, [{"x": _normal((4, 8))}], False


def cast_floor_dropped():
    """Cast(Floor(x)) -> Cast(x) on inputs far from any integer: the exact integer Floor makes is
    not a value at the boundary."""
    out = [("y", TensorProto.INT32)]
    ins = [("x", F32, [6])]
    orig = model([node("Floor", ["x"], ["f"]), node("Cast", ["f"], ["y"], to=TensorProto.INT32)], ins, out)
    cand = model([node("Cast", ["x"], ["y"], to=TensorProto.INT32)], ins, out)
    x = np.array([-0.5, -1.5, -2.5, 3.5, -7.25, 0.5], np.float32)
    return orig, cand, {}, [{"x": x}], False


def topk_tie_order_reversed():
    """TopK on exact ties returns the lower index first (the spec); a candidate that reverses the
    order of tied indices changes the output."""
    ins = [("x", F32, [1, 6])]
    outs = [("v", F32), ("i", TensorProto.INT64)]
    k = [("k", np.array([3], np.int64))]
    orig = model([node("TopK", ["x", "k"], ["v", "i"], axis=1)], ins, outs, k)
    reverse = [("st", np.array([-1], np.int64)), ("en", np.array([-(2 ** 62)], np.int64)),
               ("ax", np.array([1], np.int64)), ("step", np.array([-1], np.int64)),
               ("last", np.array(5, np.int64))]
    cand = model([node("Slice", ["x", "st", "en", "ax", "step"], ["r"]), node("TopK", ["r", "k"], ["v", "j"], axis=1),
                  node("Sub", ["last", "j"], ["i"])], ins, outs, k + reverse)
    return orig, cand, {}, [{"x": np.array([[1, 3, 3, 2, 3, 0]], np.float32)}], False


def select_last_index_dropped():
    """ArgMax(select_last_index=1) -> ArgMax() on exact ties of an input: the spec decides the tie."""
    out = [("y", TensorProto.INT64)]
    ins = [("x", F32, [3, 4])]
    orig = model([node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1)], ins, out)
    cand = model([node("ArgMax", ["x"], ["y"], axis=1)], ins, out)
    x = np.array([[1, 2, 2, 0], [5, 5, 1, 5], [0, 0, 0, 0]], np.float32)
    return orig, cand, {}, [{"x": x}], False


def floor_off_by_a_thousand():
    """Floor of an input is exact (no rounding before it); on integer inputs a perturbed original
    moves by 1, but a candidate 1000 away lies outside anything the original's perturbation spans."""
    orig = _one([node("Floor", ["x"], ["y"])], shape=(6,))
    cand = _one([node("Floor", ["x"], ["f"]), node("Add", ["f", "k"], ["y"])], [("k", np.float32(1000))], shape=(6,))
    x = np.array([1, 2, 3, -4, 5, 6], np.float32)
    return orig, cand, {}, [{"x": x}], False


def _branch(name, factor):
    return helper.make_graph([node("Mul", ["x", f"{name}_k"], [f"{name}_y"])], name, [],
                             [helper.make_tensor_value_info(f"{name}_y", F32, None)],
                             [numpy_helper.from_array(np.float32(factor), f"{name}_k")])


def if_branch_changed():
    """An If on mean(x) within 1 of 3 (never so on normal or stress sets): the candidate changes
    only the branch generated inputs must be made to reach."""
    cond = [node("ReduceMean", ["x"], ["m"], keepdims=0), node("Sub", ["m", "three"], ["d"]), node("Abs", ["d"], ["a"]),
            node("Less", ["a", "one"], ["c"])]
    consts = [("three", np.float32(3)), ("one", np.float32(1))]

    def build(then_factor):
        return _one(cond + [node("If", ["c"], ["y"], then_branch=_branch("then", then_factor),
                                 else_branch=_branch("else", 3.0))], consts, shape=(16,))
    return build(2.0), build(2.5), {}, []


def where_threshold_moved():
    """Where(x > 3.7, x, 0) -> Where(x > 3.9, x, 0): only values between the thresholds tell them apart."""
    def build(threshold):
        return _one([node("Greater", ["x", "t"], ["c"]), node("Where", ["c", "x", "zero"], ["y"])],
                    [("t", np.float32(threshold)), ("zero", np.float32(0))], shape=(64,))
    return build(3.7), build(3.9), {}, []


def clip_breakpoint_moved():
    """Clip(x, 0, 6) -> Where(x > 6.25, 6, Relu(x)): wrong only just above the breakpoint."""
    bounds = [("lo", np.float32(0)), ("hi", np.float32(6))]
    orig = _one([node("Clip", ["x", "lo", "hi"], ["y"])], bounds, shape=(64,))
    cand = _one([node("Relu", ["x"], ["r"]), node("Greater", ["x", "t"], ["c"]), node("Where", ["c", "hi", "r"], ["y"])],
                bounds + [("t", np.float32(6.25))], shape=(64,))
    return orig, cand, {}, []


def int32_product_overflow():
    """Cast(a)*Cast(b) in int64 -> Cast(a*b) in int32: differs only where the product overflows int32."""
    ins = [("a", TensorProto.INT32, [8]), ("b", TensorProto.INT32, [8])]
    out = [("y", TensorProto.INT64)]
    to64 = TensorProto.INT64
    orig = model([node("Cast", ["a"], ["a64"], to=to64), node("Cast", ["b"], ["b64"], to=to64),
                  node("Mul", ["a64", "b64"], ["y"])], ins, out)
    cand = model([node("Mul", ["a", "b"], ["p"]), node("Cast", ["p"], ["y"], to=to64)], ins, out)
    return orig, cand, {}, []


def float16_conversion(float32_io):
    """An fp16 conversion of a float32 MatMul+Tanh, with or without float32 inputs and outputs."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 8)) / 4).astype(np.float32)
    ins32 = [("x", F32, [4, 16])]
    orig = model([node("MatMul", ["x", "W"], ["m"]), node("Tanh", ["m"], ["y"])], ins32, [("y", F32)], [("W", w)])
    body = [node("MatMul", ["x16", "W"], ["m"]), node("Tanh", ["m"], ["y16"])]
    if float32_io:
        cand = model([node("Cast", ["x"], ["x16"], to=F16)] + body + [node("Cast", ["y16"], ["y"], to=F32)],
                     ins32, [("y", F32)], [("W", w.astype(np.float16))])
    else:
        cand = model([node("Identity", ["x"], ["x16"])] + body + [node("Identity", ["y16"], ["y"])],
                     [("x", F16, [4, 16])], [("y", F16)], [("W", w.astype(np.float16))])
    return orig, cand, {}, [{"x": _normal((4, 16))}], False


def _as_float16(orig):
    """The float32 model converted to float16 between Casts from and to float32 (weights rounded once)."""
    converted = onnx.ModelProto()
    converted.CopyFrom(orig)
    graph = converted.graph
    for init in graph.initializer:
        if init.data_type == F32:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for value in graph.input:
        rename = {value.name: value.name + "16"}
        for n in graph.node:
            n.input[:] = [rename.get(i, i) for i in n.input]
    for value in graph.output:
        for n in graph.node:
            n.output[:] = [value.name + "16" if o == value.name else o for o in n.output]
    graph.node.insert(0, node("Cast", [graph.input[0].name], [graph.input[0].name + "16"], to=F16))
    graph.node.append(node("Cast", [graph.output[0].name + "16"], [graph.output[0].name], to=F32))
    return converted


def float16_conversion_beside_a_large_channel(bug):
    """Conv -> Relu -> Conv (output channel 0 2000x the others) -> Add bias -> Relu, converted to
    float16; bug: channel 2's weights negated. The whole-output allowance at float16 (about 1 here)
    excused the flip; each element's own float16 bound does not."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((8, 3, 3, 3)) / 4).astype(np.float32)
    w2 = (rng.standard_normal((4, 8, 3, 3)) / 6).astype(np.float32)
    w2[0] *= 2000
    b2 = (rng.standard_normal((4, 1, 1)) / 8).astype(np.float32)
    nodes = [node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]), node("Add", ["c2", "B2"], ["a2"]),
             node("Relu", ["a2"], ["y"])]
    ins, outs = [("x", F32, [2, 3, 8, 8])], [("y", F32)]
    orig = model(nodes, ins, outs, [("W1", w1), ("W2", w2), ("B2", b2)])
    changed = w2.copy()
    if bug:
        changed[2] = -changed[2]
    cand = _as_float16(model(nodes, ins, outs, [("W1", w1), ("W2", changed), ("B2", b2)]))
    return orig, cand, {}, [{"x": _normal((2, 3, 8, 8))}], not bug


def float16_if_inlined():
    """Log(If(true){Exp(x)}) in float16 with the branch inlined: onnxruntime then computes Exp and Log
    in float32 with no float16 rounding between them, which the spec (and the original) make."""
    x16 = [("x", F16, [64])]
    then = helper.make_graph([node("Exp", ["x"], ["e"])], "then", [], [helper.make_tensor_value_info("e", F16, None)])
    other = helper.make_graph([node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F16, None)])
    orig = model([node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
                  node("If", ["c"], ["e"], then_branch=then, else_branch=other), node("Log", ["e"], ["y"])],
                 x16, [("y", F16)])
    cand = model([node("Exp", ["x"], ["e"]), node("Log", ["e"], ["y"])], x16, [("y", F16)])
    return orig, cand, {}, [{"x": np.linspace(-0.05, 0.05, 64).astype(np.float16)}], False


def unused_input_dropped():
    """The original declares an input it never reads; the candidate drops it (onnxslim does)."""
    ins = [("x", F32, [3, 4]), ("unused", F32, [2])]
    orig = model([node("Tanh", ["x"], ["y"])], ins, [("y", F32)])
    cand = model([node("Tanh", ["x"], ["y"])], ins[:1], [("y", F32)])
    return orig, cand, {}, []


# ------------------------------------------------------------------------------ exact cases

def identity_removed():
    ins = [("x", F32, [3, 4])]
    orig = model([node("Identity", ["x"], ["i"]), node("Tanh", ["i"], ["y"])], ins, [("y", F32)])
    cand = model([node("Tanh", ["x"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def transpose_cancel():
    ins = [("x", F32, [2, 3, 4])]
    orig = model([node("Transpose", ["x"], ["t"], perm=[2, 0, 1]), node("Transpose", ["t"], ["u"], perm=[1, 2, 0]),
                  node("Relu", ["u"], ["y"])], ins, [("y", F32)])
    cand = model([node("Relu", ["x"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def dropout_removed():
    ins = [("x", F32, [3, 5])]
    orig = model([node("Dropout", ["x"], ["d"]), node("Sigmoid", ["d"], ["y"])], ins, [("y", F32)])
    cand = model([node("Sigmoid", ["x"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def squeeze_unsqueeze_cancel():
    ins = [("x", F32, [3, 1, 4])]
    orig = model([node("Squeeze", ["x", "a"], ["s"]), node("Unsqueeze", ["s", "a"], ["u"]), node("Neg", ["u"], ["y"])],
                 ins, [("y", F32)], [("a", np.array([1], np.int64))])
    cand = model([node("Neg", ["x"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def cse_merge():
    ins = [("x", F32, [4, 4])]
    orig = model([node("Exp", ["x"], ["e1"]), node("Exp", ["x"], ["e2"]), node("Add", ["e1", "e2"], ["y"])],
                 ins, [("y", F32)])
    cand = model([node("Exp", ["x"], ["e1"]), node("Add", ["e1", "e1"], ["y"])], ins, [("y", F32)])
    return orig, cand, {}


def cases():
    rounding = [
        ("bn fold conv 2x3x8x8 s0", lambda: conv_bn(0, (2, 3, 8, 8))),
        ("bn fold conv 1x8x6x6 s1", lambda: conv_bn(1, (1, 8, 6, 6))),
        ("bn fold conv 3x16x5x5 s2", lambda: conv_bn(2, (3, 16, 5, 5))),
        ("matmul+add->gemm 4x16x8", lambda: matmul_add_gemm(0, 4, 16, 8)),
        ("matmul+add->gemm 8x64x32", lambda: matmul_add_gemm(1, 8, 64, 32)),
        ("(a*b)*c -> a*(b*c) 4x8", lambda: reassociate_mul((4, 8))),
        ("(a*b)*c -> a*(b*c) 2x3x16", lambda: reassociate_mul((2, 3, 16))),
        ("sum order 3x7", lambda: sum_order((3, 7))),
        ("reduce split 2x6x10", lambda: reduce_split((2, 6, 10))),
        ("const mul fold 4x8", lambda: constant_mul_fold(0, (4, 8))),
        ("div->mul by reciprocal", lambda: div_to_mul((5, 6))),
        ("matmul chain fold 6x16", lambda: matmul_chain(0, 6, 16)),
        ("softmax decomposed 3x10", lambda: softmax_decomposed((3, 10))),
        ("conv-bn-gap, correct fold", lambda: conv_bn_pool(False)),
        ("x*(x/x) -> (x*x)/x, true value 1e25", lambda: reassociate_overflow(False)),
        ("naive softmax -> Softmax (orig overflows)", lambda: naive_softmax("softmax")),
        ("sqrt near 0, add reassociated", sqrt_near_zero_reassociated),
        ("maxpool log(softmax) -> logsoftmax, inf/nan", maxpool_log_softmax),
        ("fp16 conversion, float32 inputs/outputs", lambda: float16_conversion(True)),
        ("fp16 conversion, float16 inputs/outputs", lambda: float16_conversion(False)),
        ("fp16 conversion beside a large channel", lambda: float16_conversion_beside_a_large_channel(False)),
        ("float16 If inlined (a rounding skipped)", float16_if_inlined),
        ("float16 BN fold behind 300,000-term products", float16_bn_fold_behind_a_long_product),
    ]
    bugs = [
        ("bn fold, epsilon dropped", lambda: conv_bn(0, (2, 3, 8, 8), drop_eps=True, eps=1e-2, small_var=True)),
        ("bn fold, mean sign flipped", lambda: conv_bn(1, (1, 8, 6, 6), mean_sign=True)),
        ("transpose pair composed wrong", transpose_wrong),
        ("zero pad folded into maxpool", pad_into_maxpool),
        ("reshape [6,4]->[0,-1] collapse", reshape_collapse),
        ("dropped bias", lambda: matmul_add_gemm(0, 4, 16, 8, drop_bias=True)),
        ("softmax wrong axis", lambda: softmax_decomposed((3, 10), wrong_axis=True)),
        ("slice off by one", slice_off_by_one),
        ("relu -> leakyrelu(0.01)", relu_to_leaky),
        ("scale error 1e-3", lambda: constant_mul_fold(0, (4, 8), scale_error=1e-3)),
        ("float16 overflow fold", float16_overflow_fold),
        ("sigmoid -> hardsigmoid", sigmoid_to_hardsigmoid),
        # subtle ones, below allclose's rtol
        ("scale error 1e-5", lambda: constant_mul_fold(1, (4, 8), scale_error=1e-5)),
        ("bn fold, epsilon 1e-4 dropped", lambda: conv_bn(2, (2, 3, 8, 8), drop_eps=True, eps=1e-4)),
        # what looser exemptions once excused: each must stay a mismatch
        ("1/(x+0) -> 1/x, x=-0 (signed zero)", reciprocal_signed_zero),
        ("Max(a,b) -> Relu(a-b)+b", max_as_relu_difference),
        ("Relu -> Clip(x, 0) (inf -> FLT_MAX)", relu_as_clip),
        ("naive softmax -> Softmax(Clip(x,+-80))", lambda: naive_softmax("clip")),
        ("x-1e6 -> x-999999.5", lambda: sub_constant(999999.5)),
        ("x*(1e10*1e-30) -> (x*1e10)*1e-30", lambda: reassociate_overflow(True)),
        ("conv-bn-gap, epsilon 1e-5 dropped", lambda: conv_bn_pool(True)),
        ("Cast(x*3*(1/3)) -> Cast(-x) at x=2", lambda: cast_to_int("neg")),
        # per-element classes: global terms, exactness, systematic error, decisions, controls, branches
        ("x*w, 2^27 column, others negated", scaled_column_negated),
        ("x*w, 2^27 column, others negated, then Elu", scaled_column_negated_past_an_op_without_a_rule),
        ("1% scale beside a cancelling column", scale_beside_a_cancelling_column),
        ("integer sum + 0.5 (exact sum)", integer_sum_off_by_half),
        ("x*4 -> x*nextafter(4) (exact product)", power_of_two_product_one_ulp_off),
        ("bias added twice (systematic)", bias_added_twice),
        ("ArgMax(x+c) -> ArgMin, c holds 1e9", argmax_beside_a_large_constant),
        ("Cast(Floor(x)) -> Cast(x), far from integers", cast_floor_dropped),
        ("TopK tie order reversed", topk_tie_order_reversed),
        ("ArgMax select_last_index dropped on ties", select_last_index_dropped),
        ("Floor(x) -> Floor(x)+1000 on integers", floor_off_by_a_thousand),
        ("If branch changed (generated inputs)", if_branch_changed),
        ("Where threshold 3.7 -> 3.9 (generated)", where_threshold_moved),
        ("Clip(0,6) breakpoint moved (generated)", clip_breakpoint_moved),
        ("int64 product -> int32 product (generated)", int32_product_overflow),
        ("fp16 conversion, channel negated beside a large one", lambda: float16_conversion_beside_a_large_channel(True)),
    ]
    exact = [
        ("identity removed", identity_removed),
        ("transpose pair cancelled", transpose_cancel),
        ("dropout removed", dropout_removed),
        ("squeeze/unsqueeze cancelled", squeeze_unsqueeze_cancel),
        ("reshape pair collapsed correctly", lambda: reshape_collapse(correct=True)),
        ("common subexpression merged", cse_merge),
        ("unused graph input dropped", unused_input_dropped),
    ]
    return [("rounding", *c) for c in rounding] + [("bug", *c) for c in bugs] + [("exact", *c) for c in exact]


def allclose_passes(original, candidate, input_sets) -> bool:
    first, second = ModelRunner(original, "original"), ModelRunner(candidate, "candidate")
    with np.errstate(all="ignore"):
        for feeds in input_sets:
            a, b = first.run(feeds), second.run(declared_feeds(candidate, feeds))
            for name, value in a.items():
                other = b.get(name)
                if other is None or other.shape != value.shape:
                    return False
                if not np.allclose(other.astype(np.float64), value.astype(np.float64), rtol=1e-4, atol=1e-5,
                                   equal_nan=True):
                    return False
    return True


def verify_without_reference(original, candidate, input_sets):
    """verify_models with a float64 reference that declines every model (injected, session.py)."""
    from onnxrefine.verify.session import DecliningReference

    return verify_models(original, candidate, inputs=input_sets,
                         reference=DecliningReference("disabled for this benchmark column"))


def is_correct(label, verdict):
    if label == "bug":
        return verdict == "mismatch"
    if label == "rounding":
        return verdict in ("exact", "rounding")
    return verdict == "exact"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    rows, totals = [], {}
    for label, name, build in cases():
        original, candidate, dims, *extra = build()
        generated = extra[1] if len(extra) > 1 else True
        input_sets = (generate_inputs(original, seed=0, dims=dims, stress=True, trials=3) if generated else []) \
            + (list(extra[0]) if extra else [])
        started = time.perf_counter()
        report = verify_models(original, candidate, inputs=input_sets)
        elapsed = time.perf_counter() - started
        plain = allclose_passes(original, candidate, input_sets)
        fallback = verify_without_reference(original, candidate, input_sets).verdict
        verify_ok = is_correct(label, report.verdict)
        plain_ok = (not plain) if label == "bug" else plain
        fallback_ok = is_correct(label, fallback)
        references = sorted({out.reference for out in report.outputs if out.reference != "not needed"})
        rows.append((label, name, report.verdict, fallback, "pass" if plain else "fail", verify_ok, plain_ok,
                     elapsed, ",".join(references) or "-"))
        stats = totals.setdefault(label, [0, 0, 0, 0])
        stats[0] += 1
        stats[1] += verify_ok
        stats[2] += plain_ok
        stats[3] += fallback_ok
        if args.verbose and not verify_ok:
            print(name, report.to_json()[:3000])

    console = Console(width=130)
    detail = Table(title="labelled cases")
    for column in ("label", "case", "verify verdict", "no f64", "allclose", "verify ok", "allclose ok",
                   "time s", "reference"):
        detail.add_column(column)
    for label, name, verdict, fallback, plain, verify_ok, plain_ok, elapsed, reference in rows:
        detail.add_row(label, name, verdict, fallback, plain, "yes" if verify_ok else "NO",
                       "yes" if plain_ok else "NO", f"{elapsed:.2f}", reference)
    console.print(detail)
    summary = Table(title="accuracy per label")
    for column in ("label", "cases", "verify_models", "verify_models, no f64 reference",
                   "np.allclose(rtol=1e-4, atol=1e-5)"):
        summary.add_column(column)

    def share(right, count):
        return f"{right}/{count} ({100 * right / count:.0f}%)"

    for label in ("rounding", "bug", "exact"):
        count, verify_right, plain_right, fallback_right = totals[label]
        summary.add_row(label, str(count), share(verify_right, count), share(fallback_right, count),
                        share(plain_right, count))
    count, verify_right, plain_right, fallback_right = (sum(t[i] for t in totals.values()) for i in range(4))
    summary.add_row("all", str(count), share(verify_right, count), share(fallback_right, count),
                    share(plain_right, count))
    console.print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
