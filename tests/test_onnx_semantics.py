"""The ground truth of the exhaustive algebra proofs (tests/onnx_semantics.py) agrees with
onnxruntime: on a sample of each operator's cases, valid ones give the same values bit for bit
(many cases per session), invalid ones are rejected by the runtime too."""

from __future__ import annotations

import itertools
import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import session
from onnx import TensorProto, helper, numpy_helper

import onnx_semantics as sem

OPSET = 18


def _run_cases(cases) -> list:
    """Each case is (op_type, inputs as arrays, attributes, number of outputs); one model runs
    them all, the arrays given as initializers. Returns each case's outputs."""
    nodes, initializers, outputs = [], [], []
    for index, (op_type, inputs, attributes, count) in enumerate(cases):
        names = []
        for k, array in enumerate(inputs):
            if array is None:
                names.append("")
                continue
            names.append(f"c{index}_{k}")
            initializers.append(numpy_helper.from_array(np.asarray(array), names[-1]))
        produced = [f"c{index}_out{j}" for j in range(count)]
        nodes.append(helper.make_node(op_type, names, produced, **attributes))
        outputs.extend(helper.make_empty_tensor_value_info(name) for name in produced)
    graph = helper.make_graph(nodes, "cases", [helper.make_tensor_value_info("unused", TensorProto.FLOAT, [1])],
                              outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    results = session(model).run(None, {"unused": np.zeros(1, np.float32)})
    grouped, position = [], 0
    for _, _, _, count in cases:
        grouped.append(results[position:position + count])
        position += count
    return grouped


def _rejected(case) -> bool:
    try:
        _run_cases([case])
    except (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.InvalidArgument,
            ort.capi.onnxruntime_pybind11_state.RuntimeException, onnx.checker.ValidationError):
        return True
    return False


def _check(cases_with_truth) -> None:
    """(case, truth thunk) pairs: valid truths compared in one batch, invalid ones one by one."""
    valid, invalid = [], []
    for case, truth in cases_with_truth:
        try:
            expected = truth()
        except sem.Invalid:
            invalid.append(case)
            continue
        valid.append((case, expected if isinstance(expected, list) else [expected]))
    assert valid, "a sample with no valid case checks nothing"
    for (case, expected), actual in zip(valid, _run_cases([c for c, _ in valid])):
        assert len(expected) == len(actual)
        for e, a in zip(expected, actual):
            assert np.asarray(e).shape == a.shape and np.array_equal(e, a), (case, e, a)
    for case in invalid[:12]:  # every rejection costs a session of its own
        assert _rejected(case), case


# onnxruntime 1.31 (the declared minimum) leaves the reduced axes of an empty input as they were
# (keepdims or not); from 1.32 on it follows the spec, which the ground truth states.
_ORT_REDUCES_EMPTY_AS_SPECIFIED = tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 32)


def _data(shape) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1


SHAPES = [s for r in range(5) for s in itertools.product((0, 1, 2, 3), repeat=r)]


def test_transpose_matches_onnxruntime():
    rng = random.Random(1)
    cases = []
    for shape in rng.sample([s for s in SHAPES if len(s) >= 2], 40):
        perm = rng.sample(range(len(shape)), len(shape))
        x = _data(shape)
        cases.append((("Transpose", [x], {"perm": perm}, 1), lambda x=x, p=perm: sem.transpose(x, p)))
        cases.append((("Transpose", [x], {}, 1), lambda x=x: sem.transpose(x)))
    _check(cases)


def test_reshape_matches_onnxruntime():
    rng = random.Random(2)
    cases = []
    for shape in rng.sample(SHAPES, 60):
        x = _data(shape)
        for _ in range(4):
            target = [rng.choice((-1, 0, 1, 2, 3, 6)) for _ in range(rng.randint(0, 4))]
            allowzero = rng.choice((0, 1))
            cases.append((("Reshape", [x, np.array(target, np.int64)], {"allowzero": allowzero}, 1),
                          lambda x=x, t=target, z=allowzero: sem.reshape(x, t, bool(z))))
    _check(cases)


def test_squeeze_unsqueeze_flatten_match_onnxruntime():
    rng = random.Random(3)
    cases = []
    for shape in rng.sample(SHAPES, 60):
        x, rank = _data(shape), len(shape)
        axes = rng.sample(range(-rank, rank), rng.randint(0, rank)) if rank else []
        cases.append((("Squeeze", [x, np.array(axes, np.int64)], {}, 1),
                      lambda x=x, a=axes: x.reshape(sem.squeeze_shape(x.shape, a))))
        cases.append((("Squeeze", [x], {}, 1), lambda x=x: x.reshape(sem.squeeze_shape(x.shape))))
        out_axes = rng.sample(range(-rank - 2, rank + 2), rng.randint(0, 2))
        cases.append((("Unsqueeze", [x, np.array(out_axes, np.int64)], {}, 1),
                      lambda x=x, a=out_axes: x.reshape(sem.unsqueeze_shape(x.shape, a))))
        axis = rng.randint(-rank - 1, rank + 1)
        cases.append((("Flatten", [x], {"axis": axis}, 1), lambda x=x, a=axis: x.reshape(sem.flatten_shape(x.shape, a))))
    _check(cases)


def test_slice_matches_onnxruntime():
    rng = random.Random(4)
    big = 2**63 - 1
    cases = []
    for shape in rng.sample([s for s in SHAPES if s], 60):
        x, rank = _data(shape), len(shape)
        for _ in range(3):
            axes = rng.sample(range(-rank, rank), rng.randint(1, rank))
            starts = [rng.choice((-big - 1, -5, -2, -1, 0, 1, 2, 4, big)) for _ in axes]
            ends = [rng.choice((-big - 1, -5, -2, -1, 0, 1, 2, 4, big)) for _ in axes]
            steps = [rng.choice((-3, -2, -1, 1, 2, 3)) for _ in axes]
            arrays = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
            cases.append((("Slice", [x, *arrays], {}, 1),
                          lambda x=x, s=starts, e=ends, a=axes, st=steps: sem.slice_(x, s, e, a, st)))
    _check(cases)


def test_concat_split_gather_match_onnxruntime():
    rng = random.Random(5)
    cases = []
    for shape in rng.sample([s for s in SHAPES if s], 40):
        x, rank = _data(shape), len(shape)
        axis = rng.randint(-rank, rank - 1)
        other = list(shape)
        other[axis] = rng.choice((0, 1, 2))
        y = _data(other) * -1
        cases.append((("Concat", [x, y, x], {"axis": axis}, 1), lambda x=x, y=y, a=axis: sem.concat([x, y, x], a)))
        dim = shape[axis]
        sizes = [dim] if dim < 2 else [1, dim - 1]
        cases.append((("Split", [x, np.array(sizes, np.int64)], {"axis": axis}, len(sizes)),
                      lambda x=x, s=sizes, a=axis: sem.split(x, s, a)))
        indices = np.array([rng.randint(-dim - 1, dim) for _ in range(3)], np.int64)
        cases.append((("Gather", [x, indices], {"axis": axis}, 1), lambda x=x, i=indices, a=axis: sem.gather(x, i, a)))
    _check(cases)


def test_shape_start_end_matches_onnxruntime():
    cases = []
    for shape in [(), (2,), (2, 3, 4), (1, 2, 3, 4, 5)]:
        for start, end in itertools.product((-7, -2, -1, 0, 1, 3, 7), (None, -7, -1, 0, 2, 7)):
            attributes = {"start": start} if end is None else {"start": start, "end": end}
            cases.append((("Shape", [_data(shape)], attributes, 1),
                          lambda s=shape, a=start, b=end: np.array(sem.shape_op(s, a, b), np.int64)))
    _check(cases)


def test_broadcast_expand_match_onnxruntime():
    rng = random.Random(6)
    cases = []
    for shape in rng.sample(SHAPES, 60):
        target = [rng.choice((1, 2, 3, shape[i] if i < len(shape) else 1)) for i in range(rng.randint(0, 4))]
        x = _data(shape)
        cases.append((("Expand", [x, np.array(target, np.int64)], {}, 1),
                      lambda x=x, t=target: np.broadcast_to(x, sem.expand_shape(x.shape, t))))
        y = _data(target)
        cases.append((("Add", [x, y], {}, 1),
                      lambda x=x, y=y: np.broadcast_to(x, sem.broadcast_shape(x.shape, y.shape)) + y))
    _check(cases)


def test_pad_reduce_gemm_match_onnxruntime():
    rng = random.Random(7)
    cases = []
    for shape in rng.sample([s for s in SHAPES if s], 40):
        x, rank = _data(shape), len(shape)
        pads = [rng.randint(-1, 2) for _ in range(2 * rank)]
        cases.append((("Pad", [x, np.array(pads, np.int64)], {"mode": "constant"}, 1),
                      lambda x=x, p=pads: sem.pad_zeros(x, p)))
        axes = rng.sample(range(-rank, rank), rng.randint(1, rank))
        axis_pads = [rng.randint(0, 2) for _ in range(2 * len(axes))]
        cases.append((("Pad", [x, np.array(axis_pads, np.int64), None, np.array(axes, np.int64)], {}, 1),
                      lambda x=x, p=axis_pads, a=axes: sem.pad_zeros(x, p, a)))
        for keepdims in (0, 1):
            if 0 in shape and not _ORT_REDUCES_EMPTY_AS_SPECIFIED:
                continue  # onnxruntime before 1.32 keeps the reduced axes of an empty input
            cases.append((("ReduceSum", [x, np.array(axes, np.int64)], {"keepdims": keepdims}, 1),
                          lambda x=x, a=axes, k=keepdims: sem.reduce_sum(x, a, bool(k))))
    a, b = _data((2, 3)), _data((3, 4))
    for trans_a, trans_b in itertools.product((0, 1), repeat=2):
        left, right = (a.T.copy() if trans_a else a), (b.T.copy() if trans_b else b)
        cases.append((("Gemm", [left, right], {"transA": trans_a, "transB": trans_b}, 1),
                      lambda l=left, r=right, ta=trans_a, tb=trans_b: sem.gemm(l, r, ta, tb)))
    _check(cases)


@pytest.mark.parametrize("op_type", ["Conv", "AveragePool"])
def test_window_input_is_what_conv_and_pool_pad(op_type):
    """Conv(x, pads=p) equals an unpadded Conv over window_input(x, p), and so does
    AveragePool(count_include_pad=1): the reading of pads the Pad-fusion proof rests on."""
    rng = random.Random(8)
    cases = []
    for spatial in (1, 2, 3):
        for _ in range(6):
            x = _data([1, 2, *[rng.randint(1, 3) for _ in range(spatial)]])
            pads = [rng.randint(0, 2) for _ in range(2 * spatial)]
            kernel = [1 + max(pads[i], pads[i + spatial]) for i in range(spatial)]
            padded = sem.window_input(x, pads)
            if op_type == "Conv":
                w = _data([3, 2, *kernel]) % 5 - 2
                cases.append(((op_type, [x, w], {"pads": pads}, 1), None))
                cases.append(((op_type, [padded, w], {}, 1), None))
            else:
                attributes = {"kernel_shape": kernel, "count_include_pad": 1}
                cases.append(((op_type, [x], {**attributes, "pads": pads}, 1), None))
                cases.append(((op_type, [padded], attributes, 1), None))
    results = _run_cases([c for c, _ in cases])
    for padded_by_op, padded_first in zip(results[0::2], results[1::2]):
        assert np.array_equal(padded_by_op[0], padded_first[0])


def test_split_to_sequence_and_sequence_at_match_onnxruntime():
    nodes, initializers, outputs, expected = [], [], [], []
    for dim, chunk, position in itertools.product((1, 4, 5, 7), (1, 2, 3, 7, 9), (-3, -1, 0, 1, 2)):
        x = _data((2, dim))
        try:
            piece = sem.sequence_at(sem.split_to_sequence(x, chunk, -1), position)
        except sem.Invalid:
            continue
        k = len(expected)
        initializers += [numpy_helper.from_array(x, f"x{k}"), numpy_helper.from_array(np.array(chunk, np.int64), f"c{k}"),
                         numpy_helper.from_array(np.array(position, np.int64), f"p{k}")]
        nodes += [helper.make_node("SplitToSequence", [f"x{k}", f"c{k}"], [f"s{k}"], axis=-1),
                  helper.make_node("SequenceAt", [f"s{k}", f"p{k}"], [f"y{k}"])]
        outputs.append(helper.make_empty_tensor_value_info(f"y{k}"))
        expected.append(piece)
    graph = helper.make_graph(nodes, "sequences", [helper.make_tensor_value_info("unused", TensorProto.FLOAT, [1])],
                              outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    actual = session(model).run(None, {"unused": np.zeros(1, np.float32)})
    assert len(actual) == len(expected) > 50
    for e, a in zip(expected, actual):
        assert e.shape == a.shape and np.array_equal(e, a)


def test_integer_arithmetic_matches_onnxruntime():
    rng = random.Random(9)
    cases = []
    for dtype in (np.int64, np.int32):
        limit = sem.INT_LIMITS[np.dtype(dtype)]
        pool = [-limit, -limit + 1, -7, -3, -1, 0, 1, 2, 3, 7, limit - 1]
        for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal"):
            for _ in range(6):
                a = np.array([rng.choice(pool) for _ in range(4)], dtype)
                b = np.array([rng.choice([p for p in pool if p or op != "Div"]) for _ in range(rng.choice((1, 4)))], dtype)
                if op == "Div":
                    a[a == -limit] = -limit + 1  # INT_MIN / -1 traps in the CPU's division
                cases.append(((op, [a, b], {}, 1), lambda op=op, a=a, b=b: sem.integer_binary(op, a, b)))
    _check(cases)
