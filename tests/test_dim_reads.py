"""Each run-time dim read once (passes/dim_reads.py) and the shape facts it stands on: Reshape's -1
with the run-time dims cancelled, a run-time size past the input's rank, Range over a dim. Exact
class: the merged model's outputs are bit-identical in onnxruntime, at several sizes of each dim."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from factcheck import facts_hold
from hypothesis import given, settings
from hypothesis import strategies as st
from guardutil import expect_guard
from helpers import make_model, op_types, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass

from onnxrefine.ir.facts import StaticShapes, Sym
from onnxrefine.ir.facts.layout import inferred_dim
from onnxrefine.passes import dim_reads

MERGE = ["merge_dim_reads", "eliminate_common_subexpression", "eliminate_deadend"]
I64 = TensorProto.INT64


def _const(name, values):
    return tensor(name, np.array(values, np.int64))


def batch_read_twice():
    """x [N, S, 8]: N read from x and again from its transpose [S, N, 8], each read flattening
    its own tensor to [N, -1]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["n1"], axis=0),
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Shape", ["t"], ["st"]),
        helper.make_node("Gather", ["st", "one"], ["n2"], axis=0),
        helper.make_node("Unsqueeze", ["n1", "axes"], ["u1"]),
        helper.make_node("Unsqueeze", ["n2", "axes"], ["u2"]),
        helper.make_node("Concat", ["u1", "minus_one"], ["c1"], axis=0),
        helper.make_node("Concat", ["u2", "minus_one"], ["c2"], axis=0),
        helper.make_node("Reshape", ["x", "c1"], ["y1"]),
        helper.make_node("Reshape", ["t", "c2"], ["y2"]),
    ]
    inits = [_const("zero", 0), _const("one", 1), _const("axes", [0]), _const("minus_one", [-1])]
    return make_model(nodes, [value_info("x", shape=["N", "S", 8])],
                      [value_info("y1", shape=None), value_info("y2", shape=None)], inits)


def feeds_at(*shapes, names=("x",)):
    rng = np.random.default_rng(0)
    return [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in zip(names, group)}
            for group in shapes]


def test_one_dim_read_from_two_tensors_is_read_once():
    model = batch_read_twice()
    optimized = check_pass(model, MERGE, feeds_at([(3, 5, 8)], [(1, 4, 8)], [(6, 2, 8)]))
    # one Shape, Gather, Unsqueeze and Concat left: the transpose's read became the first one's
    assert sorted(op_types(optimized)) == ["Concat", "Gather", "Reshape", "Reshape", "Shape", "Transpose", "Unsqueeze"]


def test_without_the_pass_both_reads_stay():
    optimized = check_pass(batch_read_twice(), ["eliminate_common_subexpression", "eliminate_deadend"],
                           feeds_at([(3, 5, 8)]), changed=False)
    assert op_types(optimized).count("Gather") == 2


def two_reads(first, second, inputs, before=(), constants=()):
    """Gather(Shape(first), i) and Gather(Shape(second), j) (each `(name, index)`) after the nodes
    `before`, each an output through Unsqueeze so that neither merged value is a graph output."""
    nodes, inits = list(before), [_const("axes", [0]), *constants]
    for k, (name, index) in enumerate((first, second)):
        inits.append(_const(f"i{k}", index))
        nodes += [helper.make_node("Shape", [name], [f"s{k}"]),
                  helper.make_node("Gather", [f"s{k}", f"i{k}"], [f"g{k}"], axis=0),
                  helper.make_node("Unsqueeze", [f"g{k}", "axes"], [f"out{k}"])]
    return make_model(nodes, inputs, [value_info("out0", I64, [1]), value_info("out1", I64, [1])], inits)


def test_two_dims_of_one_tensor_are_never_merged():
    # Both are 2 at the verifier's default size, so the run that checks a merge would not object:
    # the facts must tell them apart.
    model = two_reads(("x", 0), ("x", 1), [value_info("x", shape=["N", "S"])])
    optimized = check_pass(model, MERGE, feeds_at([(3, 5)]), changed=None)  # the two Shape(x) are one
    assert op_types(optimized).count("Gather") == 2


def test_two_inputs_whose_dims_share_a_name_are_never_merged():
    # onnxruntime checks a symbolic dim against nothing: `N` of x and `N` of y may differ.
    model = two_reads(("x", 0), ("y", 0), [value_info("x", shape=["N", 4]), value_info("y", shape=["N", 4])])
    optimized = check_pass(model, MERGE, feeds_at([(2, 4), (3, 4)], names=("x", "y")), changed=False)
    assert op_types(optimized).count("Gather") == 2


def test_a_read_that_is_a_graph_output_is_kept_with_both_names():
    nodes = [helper.make_node("Shape", ["x"], ["s0"]), helper.make_node("Gather", ["s0", "i"], ["g0"], axis=0),
             helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("Shape", ["t"], ["s1"]),
             helper.make_node("Gather", ["s1", "j"], ["g1"], axis=0),
             helper.make_node("Unsqueeze", ["g0", "axes"], ["out0"])]
    model = make_model(nodes, [value_info("x", shape=["N", 4])], [value_info("out0", I64, [1]), value_info("g1", I64, [])],
                       [_const("i", 0), _const("j", 1), _const("axes", [0])])
    optimized, _ = expect_guard(model, MERGE, "merge_dim_reads.graph_output", feeds_at([(3, 4)])[0],
                                rule="merge_dim_reads")
    # Merged, the first read would have to take the output's name and lose its own.
    assert [n.output[0] for n in optimized.graph.node if n.op_type == "Gather"] == ["g0", "g1"]


def test_a_merge_onnxruntime_disagrees_with_is_refused(monkeypatch):
    # A wrong fact planted: every one-element read is "the same". N (2 in the checking run) and 3
    # differ there, so the run refuses the merge; without the check the output would be wrong.
    monkeypatch.setattr(dim_reads, "fact_key", lambda elements: None if elements is None else
                        (elements.dtype, elements.scalar, len(elements.items)))
    model = two_reads(("x", 0), ("x", 1), [value_info("x", shape=["N", 3])])
    optimized, _ = expect_guard(model, MERGE, "merge_dim_reads.runtime_disagrees", feeds_at([(5, 3)])[0],
                                rule="merge_dim_reads")
    assert op_types(optimized).count("Gather") == 2


def test_a_merge_of_two_dims_equal_at_the_default_size_is_refused_at_the_second_assignment(monkeypatch):
    # The same wrong fact, on x [N, S]: at the default size both dims are 2 and the merged reads
    # agree; at N=3, S=4 they do not, so the merge is refused there.
    monkeypatch.setattr(dim_reads, "fact_key", lambda elements: None if elements is None else
                        (elements.dtype, elements.scalar, len(elements.items)))
    model = two_reads(("x", 0), ("x", 1), [value_info("x", shape=["N", "S"])])
    optimized, report = expect_guard(model, MERGE, "merge_dim_reads.runtime_disagrees", feeds_at([(5, 3)])[0],
                                     rule="merge_dim_reads")
    [refusal] = [r for r in report.log.refused.values() if r.guard == "merge_dim_reads.runtime_disagrees"]
    assert refusal.reason.endswith("at N=3, S=4")
    assert op_types(optimized).count("Gather") == 2


def test_a_merge_no_run_can_check_is_refused_without_verification():
    # Reshape(x, [3, -1]) fails at the default size N=2: the two reads of its dim 1 cannot be run.
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Relu", ["r"], ["q"])]
    model = two_reads(("r", 1), ("q", 1), [value_info("x", shape=["N"])], nodes, [_const("target", [3, -1])])
    optimized, _ = expect_guard(model, MERGE, "certificate.graph_uncertifiable", feeds_at([(6,)])[0],
                                rule="merge_dim_reads")
    assert op_types(optimized).count("Gather") == 2


# -- the facts the merges read ------------------------------------------------------------------


def _facts(model):
    graph = ir.serde.deserialize_model(model)
    return graph, StaticShapes(graph)


def _value(model_ir, name):
    return next(v for node in model_ir.graph for v in node.outputs if v.name == name)


def reshape_model(target, shape=("N", "S", 64)):
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Shape", ["r"], ["s"])]
    return make_model(nodes, [value_info("x", shape=list(shape))], [value_info("s", I64, [len(target)])],
                      [_const("target", target)])


@pytest.mark.parametrize("target, expected", [
    ([0, 0, -1, 16], 4),  # (N, S, 64) -> (N, S, 4, 16): N and S on both sides
    ([0, 0, 4, -1], 16),
    ([0, -1], None),      # (N, S*64): S is left over with 64, which no one token or int says
])
def test_reshape_minus_one_cancels_the_same_run_time_dims(target, expected):
    model = reshape_model(target)
    model_ir, facts = _facts(model)
    inferred = facts.symbolic_shape(_value(model_ir, "r"))[target.index(-1)]
    assert isinstance(inferred, Sym) if expected is None else inferred == expected
    for shape in [(2, 3, 64), (1, 5, 64), (4, 1, 64)]:
        assert facts_hold(model, {"x": np.zeros(shape, np.float32)}, f"{target} at {shape}") == 2


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_inferred_minus_one_is_the_runtime_quotient(data):
    # Data dims and the other target dims drawn from the same few run-time dims and small ints;
    # wherever the runtime would infer -1 (other dims non-zero, the count divisible), the fact
    # (an int, or one of the dims) is its quotient, at every size of the dims.
    syms = [Sym(f"d{i}") for i in range(3)]
    dim = st.one_of(st.integers(1, 6), st.sampled_from(syms))
    shape = data.draw(st.lists(dim, max_size=4), label="shape")
    others = data.draw(st.lists(st.one_of(st.sampled_from(shape), dim) if shape else dim, max_size=4), label="others")
    fact = inferred_dim(tuple(shape), others)
    for sizes in data.draw(st.lists(st.tuples(*[st.integers(1, 5)] * 3), min_size=1, max_size=5), label="sizes"):
        size = {id(s): v for s, v in zip(syms, sizes)}
        total = int(np.prod([size[id(d)] if isinstance(d, Sym) else d for d in shape]))
        rest = int(np.prod([size[id(d)] if isinstance(d, Sym) else d for d in others]))
        if rest == 0 or total % rest:
            continue  # the runtime refuses this Reshape
        if isinstance(fact, Sym):
            assert size[id(fact)] == total // rest
        elif fact is not None:
            assert fact == total // rest


def test_reshape_minus_one_keeps_a_lone_run_time_dim():
    # (N, S, 4, 16) -> (N, -1, 64): the quotient is S itself.
    model = reshape_model([0, -1, 64], shape=("N", "S", 4, 16))
    model_ir, facts = _facts(model)
    x_dims = facts.symbolic_shape(model_ir.graph.inputs[0])
    assert facts.symbolic_shape(_value(model_ir, "r"))[1] is x_dims[1]
    facts_hold(model, {"x": np.zeros((3, 5, 4, 16), np.float32)}, "lone dim")


def test_a_run_time_size_past_the_input_rank_is_that_size():
    # Reshape(m [S, S], [1, 1, S, S]) (a causal mask): target element 2 is S past m's rank 2,
    # where a 0 would be refused, so the output dim is S; at element 1 (within the rank) a dim of
    # another tensor could be 0 and copy m's dim, so it stays unknown.
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Gather", ["sx", "one"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["s", "axes"], ["us"]),
             helper.make_node("Concat", ["ones", "us", "us"], ["target"], axis=0),
             helper.make_node("Reshape", ["m", "target"], ["r"]),
             helper.make_node("Concat", ["one_", "us"], ["inner"], axis=0),
             helper.make_node("Reshape", ["m2", "inner"], ["r2"])]
    model = make_model(nodes, [value_info("x", shape=["N", "S"]), value_info("m", shape=["S2", "S2"]),
                               value_info("m2", shape=["A", "B"])],
                       [value_info("r", shape=None), value_info("r2", shape=None)],
                       [_const("one", 1), _const("axes", [0]), _const("ones", [1, 1]), _const("one_", [-1])])
    model_ir, facts = _facts(model)
    s_dim = facts.symbolic_shape(model_ir.graph.inputs[0])[1]
    assert facts.symbolic_shape(_value(model_ir, "r"))[2:] == (s_dim, s_dim)
    inner = facts.symbolic_shape(_value(model_ir, "r2"))
    assert inner[1] is not s_dim and isinstance(inner[1], Sym)
    feeds = {"x": np.zeros((2, 3), np.float32), "m": np.zeros((3, 3), np.float32), "m2": np.zeros((3, 3), np.float32)}
    facts_hold(model, feeds, "mask")


@pytest.mark.parametrize("start, delta, follows_dim", [(0, 1, True), (1, 1, False), (0, 2, False)])
def test_range_over_a_run_time_dim(start, delta, follows_dim):
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Gather", ["sx", "zero"], ["n"], axis=0),
             helper.make_node("Range", ["start", "n", "delta"], ["r"])]
    model = make_model(nodes, [value_info("x", shape=["N"])], [value_info("r", I64, None)],
                       [_const("zero", 0), _const("start", start), _const("delta", delta)])
    model_ir, facts = _facts(model)
    n_dim = facts.symbolic_shape(model_ir.graph.inputs[0])[0]
    shape = facts.symbolic_shape(_value(model_ir, "r"))
    assert (shape == (n_dim,)) if follows_dim else (shape is None)
    for size in (1, 4, 7):
        facts_hold(model, {"x": np.zeros(size, np.float32)}, f"Range({start}, N, {delta}) at {size}")


@pytest.mark.parametrize("start, limit, delta", [(2, 10, 3), (5, 0, -2), (3, 3, 1), (4, 1, 1)])
def test_range_of_constants_has_its_length(start, limit, delta):
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]), helper.make_node("Shape", ["r"], ["s"])]
    model = make_model(nodes, [], [value_info("s", I64, [1])],
                       [_const("start", start), _const("limit", limit), _const("delta", delta)])
    model_ir, facts = _facts(model)
    assert facts.symbolic_shape(_value(model_ir, "r")) == (len(range(start, limit, delta)),)
    facts_hold(model, {}, "constant Range")
