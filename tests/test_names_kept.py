"""Names kept through every rewrite: a fused node takes the name of the node whose output it now
produces, and every value that survives keeps its name (calibration tables, per-layer precision
settings and name-keyed comparisons read the optimized model by the original's names).

A name of the optimized model that the original does not have is "fresh". The only fresh names
allowed are those of values no original value holds, at most one node and one value per rewrite: the
merged MatMul that fuse_qkv makes of three (its Split's outputs keep the three MatMuls' names),
and the Reshape that reshape_through_transpose puts before the Transpose (of another shape than
any original value; the Transpose after it takes the last Reshape's names).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import make_model, run, tensor, value_info
from onnx import TensorProto, helper
from passutil import assert_close

from onnxrefine.api import optimize_with_report

F = TensorProto.FLOAT
# Rules whose rewrite makes, per application, a node and a value that no original one stands for.
NEW_INTERMEDIATES_PER_REWRITE = {"fuse_qkv": 1, "reshape_through_transpose": 1}
CORPUS = Path(os.environ.get("ONNXREFINE_BENCH_CORPUS", Path(__file__).resolve().parents[1] / "bench" / "corpus"))


def graph_names(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    """(node names, names of values nodes compute) over every graph, subgraph and function. A
    function body's Constant nodes are left out: a body holds no initializers, so a constant a
    rewrite places there (a folded value, a new shape) is a Constant node where the main graph
    gets an initializer, which is no node and computes no value."""
    nodes: set[str] = set()
    values: set[str] = set()

    def walk(graph_nodes, in_function=False):
        for node in graph_nodes:
            if in_function and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                continue
            nodes.add(node.name)
            values.update(out for out in node.output if out)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(sub.node, in_function)

    walk(model.graph.node)
    for function in model.functions:
        walk(function.node, in_function=True)
    return nodes, values


def fresh_names(original: onnx.ModelProto, optimized: onnx.ModelProto) -> tuple[set[str], set[str]]:
    old_nodes, old_values = graph_names(original)
    new_nodes, new_values = graph_names(optimized)
    return new_nodes - old_nodes, new_values - old_values


def allowed_fresh(report) -> int:
    counts = report.log.counts()
    return sum(counts.get(rule, 0) * n for rule, n in NEW_INTERMEDIATES_PER_REWRITE.items())


def small_cnn() -> onnx.ModelProto:
    """Conv+BN, Pad into Conv, a per-channel Mul and bias Add after a Conv, Transpose pairs, an
    Identity and a foldable Shape chain: every rewrite family the default pipeline fuses with."""
    rng = np.random.default_rng(0)
    c = 4
    inits = [
        tensor("w1", rng.standard_normal((c, 3, 3, 3)).astype(np.float32)),
        tensor("scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
        tensor("bias", rng.standard_normal(c).astype(np.float32)),
        tensor("mean", rng.standard_normal(c).astype(np.float32)),
        tensor("var", rng.uniform(0.5, 1.5, c).astype(np.float32)),
        tensor("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        tensor("w2", rng.standard_normal((c, c, 3, 3)).astype(np.float32)),
        tensor("mul_c", rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32)),
        tensor("add_c", rng.standard_normal((1, c, 1, 1)).astype(np.float32)),
        tensor("zero", np.array([0], np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["conv1_out"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv1_out", "scale", "bias", "mean", "var"], ["bn1_out"], name="bn1"),
        helper.make_node("Relu", ["bn1_out"], ["relu1_out"], name="relu1"),
        helper.make_node("Pad", ["relu1_out", "pads"], ["pad_out"], name="pad"),
        helper.make_node("Conv", ["pad_out", "w2"], ["conv2_out"], name="conv2"),
        helper.make_node("Mul", ["conv2_out", "mul_c"], ["mul_out"], name="mul"),
        helper.make_node("Add", ["mul_out", "add_c"], ["add_out"], name="add"),
        helper.make_node("Transpose", ["add_out"], ["t1_out"], name="t1", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["t1_out"], ["t2_out"], name="t2", perm=[0, 3, 1, 2]),
        helper.make_node("Identity", ["t2_out"], ["id_out"], name="identity"),
        helper.make_node("Shape", ["id_out"], ["shape_out"], name="shape"),
        helper.make_node("Gather", ["shape_out", "zero"], ["batch_out"], name="gather"),
        helper.make_node("Relu", ["id_out"], ["y"], name="relu2"),
    ]
    return make_model(nodes, [value_info("x", F, [1, 3, 8, 8])],
                      [value_info("y", F, [1, c, 8, 8]), value_info("batch_out", TensorProto.INT64, [1])], inits)


def test_fused_nodes_and_surviving_values_keep_their_names():
    model = small_cnn()
    optimized, report = optimize_with_report(model)
    counts = report.log.counts()
    for rule in ("conv_bn", "fuse_pad_into_conv", "conv_mul", "conv_add", "fuse_consecutive_transposes", "fold_shapes"):
        assert counts[rule] >= 1, counts
    assert fresh_names(model, optimized) == (set(), set())
    conv_names = {n.name: list(n.output) for n in optimized.graph.node if n.op_type == "Conv"}
    # Each fused Conv is named after the node whose output it now computes.
    assert conv_names == {"bn1": ["bn1_out"], "add": ["add_out"]}, conv_names
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    assert_close(run(model, feeds), run(optimized, feeds), rtol=1e-4, atol=1e-5)


def test_folded_constants_keep_the_folded_value_name():
    """A value folded to a constant is the same value: its initializer takes the value's name."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["sf"], name="cast", to=F),
        helper.make_node("Add", ["x", "sf"], ["y"], name="add"),
    ]
    model = make_model(nodes, [value_info("x", F, [2])], [value_info("y", F, [2])])
    optimized, _ = optimize_with_report(model)
    assert [n.op_type for n in optimized.graph.node] == ["Add"]
    assert list(optimized.graph.node[0].input) == ["x", "sf"]
    assert [i.name for i in optimized.graph.initializer] == ["sf"]
    feeds = {"x": np.array([1.5, -2.0], np.float32)}
    assert np.array_equal(run(model, feeds)[0], run(optimized, feeds)[0])


def corpus_models() -> list[Path]:
    manifest = CORPUS / "manifest.json"
    if not manifest.exists():
        return []
    entries = json.loads(manifest.read_text())["models"].values()
    return [CORPUS / entry["file"] for entry in entries if (CORPUS / entry["file"]).exists()]


@pytest.mark.skipif(not corpus_models(), reason="bench corpus not built (bench/build_corpus.py)")
@pytest.mark.parametrize("path", corpus_models(), ids=lambda p: p.stem)
def test_corpus_names_kept(path):
    original = onnx.load(path)
    optimized, report = optimize_with_report(original, certify=False)
    nodes, values = fresh_names(original, optimized)
    allowed = allowed_fresh(report)
    # At most: a later rewrite may fold a new intermediate away again (a new Reshape into the next).
    assert len(nodes) <= allowed and len(values) <= allowed, (sorted(nodes)[:5], sorted(values)[:5])
