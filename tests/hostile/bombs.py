"""Resource bombs: small, valid ONNX models whose tensors (or run time) explode when evaluated.

The "memory and time" class of bad input. Each case is built in code at the size asked for, so tests can
use a small one (hundreds of MB) against a small `--memory-budget`, and the hostile suite can use
the real size (several GB) against the default budget under an RSS limit.

    from tests.hostile.bombs import bomb_cases, loop_case
    for name, model, expected in bomb_cases(200 << 20): ...

`expected` (a dict) says what onnxrefine must do with the case:
  - "peak_bytes": the largest tensor the model computes (its bomb), for a memory-budget check;
  - "dead": True when the bomb is dead code (no graph output depends on it);
  - "optimize": what `onnxrefine optimize` must do with the default verification: "ok" (exit 0;
    verification runs or is skipped with a reason) when the bomb fits the budget, else
    "skip-verify" (exit 0, the summary names the memory budget) -- never a crash or an OOM kill;
  - "message": a substring the skip/refusal message holds ("memory budget").
Every model has one float input "x" [2, 3] and one output "y" [2, 3], and one Identity node on
"x" so that optimize applies a rewrite (and therefore verifies).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

OPSET = 17


def _model(name: str, nodes, inits, *, sparse=(), dead_value: str | None = None, live_value: str | None = None):
    """x -> Identity -> (+ ReduceSum(live_value)) -> y; `dead_value` is computed but unused."""
    body = [helper.make_node("Identity", ["x"], ["x_id"], name="id")] + list(nodes)
    inits = list(inits)
    if live_value is not None:
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "bomb_axes"))
        body += [helper.make_node("ReduceSum", [live_value, "bomb_axes"], ["bomb_sum"], keepdims=0,
                                  noop_with_empty_axes=0, name="bomb_sum"),
                 helper.make_node("ReduceSum", ["bomb_sum"], ["bomb_total"], keepdims=0, name="bomb_total"),
                 helper.make_node("Add", ["x_id", "bomb_total"], ["y"], name="add")]
    else:
        body.append(helper.make_node("Relu", ["x_id"], ["y"], name="relu"))
    graph = helper.make_graph(
        body, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=inits, sparse_initializer=list(sparse))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _f32(name, values):
    return numpy_helper.from_array(np.array(values, np.float32), name)


def bomb_cases(target_bytes: int = 4 << 30) -> list[tuple[str, onnx.ModelProto, dict]]:
    """Ten valid models each computing a float32 tensor of about `target_bytes` (two as dead code)."""
    n = max(1024, target_bytes // 4)  # float32 elements
    n -= n % 1024
    cases = []

    def add(name, model, peak, dead=False):
        cases.append((name, model, {"peak_bytes": peak, "dead": dead, "optimize": "skip-verify",
                                    "message": "memory budget"}))

    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    cos = helper.make_node("ConstantOfShape", ["bomb_shape"], ["bomb"], value=value, name="bomb")
    add("constantofshape", _model("constantofshape", [cos], [_i64("bomb_shape", [n])], live_value="bomb"), 4 * n)
    add("constantofshape_dead", _model("constantofshape_dead", [cos], [_i64("bomb_shape", [n])],
                                       dead_value="bomb"), 4 * n, dead=True)

    expand = helper.make_node("Expand", ["one", "bomb_shape"], ["bomb"], name="bomb")
    add("expand", _model("expand", [expand], [_f32("one", [1.0]), _i64("bomb_shape", [n])],
                         live_value="bomb"), 4 * n)

    tile = helper.make_node("Tile", ["row", "reps"], ["bomb"], name="bomb")
    tile_inits = [_f32("row", np.ones(1024)), _i64("reps", [n // 1024])]
    add("tile", _model("tile", [tile], tile_inits, live_value="bomb"), 4 * n)
    add("tile_dead", _model("tile_dead", [tile], tile_inits, dead_value="bomb"), 4 * n, dead=True)

    pad = helper.make_node("Pad", ["one", "pads", "zero"], ["bomb"], mode="constant", name="bomb")
    add("pad", _model("pad", [pad], [_f32("one", [1.0]), _i64("pads", [0, n - 1]), _f32("zero", 0.0)],
                      live_value="bomb"), 4 * n)

    side = 32
    scale = float(int(np.sqrt(n)) // side)
    resize = helper.make_node("Resize", ["img", "", "scales"], ["bomb"], mode="nearest", name="bomb")
    out_side = int(side * scale)
    add("resize", _model("resize", [resize], [_f32("img", np.ones((1, 1, side, side))),
                                              _f32("scales", [1.0, 1.0, scale, scale])],
                         live_value="bomb"), 4 * out_side * out_side)

    onehot = helper.make_node("OneHot", ["idx", "depth", "onoff"], ["bomb"], axis=-1, name="bomb")
    add("onehot", _model("onehot", [onehot], [_i64("idx", np.arange(1024) % 7), _i64("depth", n // 1024),
                                              _f32("onoff", [0.0, 1.0])], live_value="bomb"), 4 * n)

    # Concat doubling: 20 Concats of a value with itself turn 4 KiB into 4 GiB.
    steps = max(1, round(np.log2(n // 1024)))
    doubling = [helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0, name=f"cat{i}")
                for i in range(steps)]
    add("concat_doubling", _model("concat_doubling", doubling, [_f32("c0", np.ones(1024))],
                                  live_value=f"c{steps}"), 4 * 1024 << steps)

    # A sparse initializer: one stored value, dense shape of n elements.
    sparse = helper.make_sparse_tensor(_f32("sp_values", [1.0]), _i64("sp_indices", [0]), [n])
    sparse.values.name = "sparse_bomb"
    add("sparse", _model("sparse", [], [], sparse=[sparse], live_value="sparse_bomb"), 4 * n)
    return cases


def _counting_body() -> onnx.GraphProto:
    """A Loop body adding 1 to a float accumulator each iteration, never stopping on its own."""
    return helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one_b"], ["acc_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(1.0, np.float32), "one_b")])


def loop_case(trips: int = 10**9) -> tuple[str, onnx.ModelProto, dict]:
    """A Loop of `trips` iterations adding 1 to a scalar: cheap per iteration, endless in total."""
    body = _counting_body()
    nodes = [helper.make_node("Loop", ["trips", "cond", "acc0"], ["acc"], body=body, name="loop"),
             helper.make_node("Identity", ["x"], ["x_id"], name="id"),
             helper.make_node("Add", ["x_id", "acc"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "loop_bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                     numpy_helper.from_array(np.array(True), "cond"),
                     numpy_helper.from_array(np.array(0.0, np.float32), "acc0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return "loop_huge", model, {"trips": trips, "optimize": "skip-verify", "message": "Loop"}


def loop_scan_case(trips: int = 1_000_000, row: int = 1024) -> tuple[str, onnx.ModelProto, dict]:
    """A Loop under the trip-count limit whose scan output grows to trips x row float32s (4 GiB by
    default): no shape tells its size, so only a watched run (RSS cap) can stop it."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Identity", ["row_b"], ["scan_out"], name="body_row")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [row])],
        initializer=[numpy_helper.from_array(np.ones(row, np.float32), "row_b")])
    nodes = [helper.make_node("Loop", ["trips", "cond"], ["rows"], body=body, name="loop"),
             helper.make_node("ReduceSum", ["rows"], ["total"], keepdims=0, name="total"),
             helper.make_node("Identity", ["x"], ["x_id"], name="id"),
             helper.make_node("Add", ["x_id", "total"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "loop_scan_bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                     numpy_helper.from_array(np.array(True), "cond")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return "loop_scan_growth", model, {"peak_bytes": 4 * trips * row, "optimize": "skip-verify",
                                       "message": "memory budget"}


def loop_dynamic_case(per_element: int = 10**8) -> tuple[str, onnx.ModelProto, dict]:
    """A Loop whose trip count is computed from the input's size (Size(x) * per_element, x of
    shape [N, 3]): no constant tells it, so only the wall clock of a watched run can stop it."""
    body = _counting_body()
    nodes = [helper.make_node("Size", ["x"], ["size"], name="size"),
             helper.make_node("Mul", ["size", "per"], ["trips"], name="trips"),
             helper.make_node("Loop", ["trips", "cond", "acc0"], ["acc"], body=body, name="loop"),
             helper.make_node("Identity", ["x"], ["x_id"], name="id"),
             helper.make_node("Add", ["x_id", "acc"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "loop_dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        initializer=[numpy_helper.from_array(np.array(per_element, np.int64), "per"),
                     numpy_helper.from_array(np.array(True), "cond"),
                     numpy_helper.from_array(np.array(0.0, np.float32), "acc0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return "loop_dynamic", model, {"optimize": "skip-verify", "message": "time limit"}
