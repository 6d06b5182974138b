"""A small model with graphs nested every way the traversal must reach (tests/test_traversal.py,
tests/test_edit.py):

    main graph "test":     a = local.f(X, C); Y = If(C, then_main: Add(a, k_main), else_main: Identity(a))
    function local.f(x, c): y = Loop(1, body: acc_out = If(c, then_fn: Add(acc, Constant 1.5) -> g(.),
                                                               else_fn: Identity(acc)))
    function local.g(v):    w = Neg(v)        (called from inside then_fn)

So there is an If inside a Loop inside a function, and a function called from that If.
"""

from __future__ import annotations

import numpy as np
import onnx
from helpers import make_model, tensor, value_info
from onnx import TensorProto, helper

# traversal.graphs order: main graph, its subgraphs, then each function body and its subgraphs
# (onnx.helper sorts a node's attributes by name: else_branch comes before then_branch).
ORDER = ["test", "else_main", "then_main", "f", "loop_fn", "else_fn", "then_fn", "g"]


def _constant(name: str, array) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=tensor(name, np.asarray(array)), name=f"{name}_node")


def nested_model(*, fn_subgraph_initializer: bool = False) -> onnx.ModelProto:
    then_fn_nodes = [
        _constant("k_fn", np.array([1.5], np.float32)),
        helper.make_node("Add", ["acc", "k_fn"], ["t_fn"], name="add_fn"),
        helper.make_node("g", ["t_fn"], ["t_fn_g"], domain="local", name="call_g"),
    ]
    then_fn_inits = []
    if fn_subgraph_initializer:  # ONNX allows initializers in a subgraph inside a function
        then_fn_nodes.append(helper.make_node("Add", ["t_fn_g", "init_fn"], ["t_fn_out"], name="add_init_fn"))
        then_fn_inits.append(tensor("init_fn", np.zeros(3, np.float32)))
    then_fn = helper.make_graph(
        then_fn_nodes, "then_fn", [], [value_info("t_fn_out" if fn_subgraph_initializer else "t_fn_g")],
        then_fn_inits)
    else_fn = helper.make_graph([helper.make_node("Identity", ["acc"], ["e_fn"])], "else_fn", [], [value_info("e_fn")])
    loop_fn = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("If", ["c"], ["acc_out"], then_branch=then_fn, else_branch=else_fn, name="if_fn")],
        "loop_fn",
        [value_info("i", TensorProto.INT64, []), value_info("cond_in", TensorProto.BOOL, []),
         value_info("acc", shape=[3])],
        [value_info("cond_out", TensorProto.BOOL, []), value_info("acc_out", shape=[3])],
    )
    f = helper.make_function(
        "local", "f", ["x", "c"], ["y"],
        [_constant("trip", np.array(1, np.int64)),
         helper.make_node("Loop", ["trip", "", "x"], ["y"], body=loop_fn, name="loop")],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
    )
    g = helper.make_function("local", "g", ["v"], ["w"], [helper.make_node("Neg", ["v"], ["w"])],
                             [helper.make_opsetid("", 17)])
    then_main = helper.make_graph([helper.make_node("Add", ["a", "k_main"], ["t_main"], name="add_main")],
                                  "then_main", [], [value_info("t_main")],
                                  [tensor("k_main", np.array([2.5], np.float32))])
    else_main = helper.make_graph([helper.make_node("Identity", ["a"], ["e_main"])], "else_main", [],
                                  [value_info("e_main")])
    model = make_model(
        [helper.make_node("f", ["X", "C"], ["a"], domain="local", name="call_f"),
         helper.make_node("If", ["C"], ["Y"], then_branch=then_main, else_branch=else_main, name="if_main")],
        [value_info("X", shape=[3]), value_info("C", TensorProto.BOOL, [])], [value_info("Y", shape=[3])],
        functions=[f, g],
    )
    model.opset_import.append(helper.make_opsetid("local", 1))
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds() -> list[dict[str, np.ndarray]]:
    x = np.array([1.0, -2.0, 0.25], np.float32)
    return [{"X": x, "C": np.array(True)}, {"X": x, "C": np.array(False)}]
