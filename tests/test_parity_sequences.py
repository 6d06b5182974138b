"""split_to_sequence_as_split: SplitToSequence read only by SequenceAt at constant positions is a
Split (the dynamo exporter's torch.split). Each guard has a case it must refuse."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model, op_types, tensor, value_info
from onnx import TensorProto, helper
from passutil import check_pass, special_floats

from onnxrefine.api import optimize_with_report
from onnxrefine.passes.registry import get_pass
from onnxrefine.rewrite.rule import EXACT

RULE = "split_to_sequence_as_split"


def split_model(split=(2, 2, 2), positions=(0, 1, -1), x_shape=(3, 6), extra_reader=None, position_input=False,
                seq_output=False):
    nodes = [helper.make_node("SplitToSequence", ["x", "split"] if split is not None else ["x"], ["seq"], axis=1)]
    inits = [] if split is None else [tensor("split", np.array(split, np.int64))]
    inputs = [value_info("x", shape=list(x_shape))]
    outputs = []
    for k, position in enumerate(positions):
        if position_input and k == 0:
            inputs.append(value_info("p", TensorProto.INT64, []))
            nodes.append(helper.make_node("SequenceAt", ["seq", "p"], [f"piece{k}"]))
        else:
            inits.append(tensor(f"i{k}", np.array(position, np.int64)))
            nodes.append(helper.make_node("SequenceAt", ["seq", f"i{k}"], [f"piece{k}"]))
        nodes.append(helper.make_node("Neg", [f"piece{k}"], [f"y{k}"]))
        outputs.append(value_info(f"y{k}"))
    if extra_reader:  # SequenceErase(seq, constant) -> ConcatFromSequence: a reader that is not SequenceAt
        inits.append(tensor("erase_at", np.array(0, np.int64)))
        nodes.append(helper.make_node(extra_reader, ["seq", "erase_at"], ["rest"]))
        nodes.append(helper.make_node("ConcatFromSequence", ["rest"], ["joined"], axis=1))
        outputs.append(value_info("joined"))
    if seq_output:
        outputs.append(helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None))
    return make_model(nodes, inputs, outputs, inits)


def feeds(x_shape=(3, 6), position=None):
    result = {"x": special_floats(x_shape, seed=3)}
    if position is not None:
        result["p"] = np.array(position, np.int64)
    return [result]


def test_class_is_exact():
    assert get_pass(RULE).kind == EXACT


@pytest.mark.parametrize("split, x_shape", [((2, 2, 2), (3, 6)), ((1, 3, 2), (3, 6)), (2, (3, 6)), (4, (3, 6))])
def test_becomes_split(split, x_shape):
    model = split_model(split=split, positions=(0, 1) if split == 4 else (0, 1, -1), x_shape=x_shape)
    optimized = check_pass(model, RULE, feeds(x_shape))
    assert "SplitToSequence" not in op_types(optimized) and "SequenceAt" not in op_types(optimized)
    assert op_types(optimized).count("Split") == 1


@pytest.mark.parametrize("kwargs, run_kwargs, why", [
    ({"split": None}, {}, "no split input: keepdims decides"),
    ({"split": 2, "x_shape": (3, "n")}, {"x_shape": (3, 6)}, "chunk size over a symbolic dim"),
    ({"position_input": True}, {"position": 1}, "a position that is not constant"),
    ({"extra_reader": "SequenceErase"}, {}, "another reader of the sequence"),
    ({"seq_output": True}, {}, "the sequence is a graph output"),
])
def test_refused(kwargs, run_kwargs, why):
    model = split_model(**kwargs)
    if not kwargs.get("seq_output"):  # (a sequence output is not an array to compare)
        check_pass(model, RULE, feeds(**run_kwargs), changed=False)
    uncertified, report = optimize_with_report(model, [RULE], certify=False)
    assert "SplitToSequence" in op_types(uncertified), why
    assert report.log.refusal_counts().get(RULE) == 1, why


def test_position_out_of_range_refused():
    model = split_model(positions=(0, 3))  # 3 pieces: position 3 would be an error at run time
    uncertified, report = optimize_with_report(model, [RULE], certify=False)
    assert "SplitToSequence" in op_types(uncertified)
    assert report.log.refusal_counts().get(RULE) == 1
