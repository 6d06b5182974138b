"""Which discrete ops the original's perturbation runs can move (verify/discrete.py): more runs
where one can, two where none can (the shape arithmetic of an exported model, a mask made from
integer ids), and a discrete op inside a function or a branch is seen."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.verify import verify_models
from onnxrefine.verify.discrete import SHAPE_FROM_SHAPES, SHAPE_INPUTS, perturbation_sees_discrete_ops
from onnxrefine.verify.judge import perturbation_runs

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), functions=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def _x(shape=(1, 2, 4, 4)):
    return helper.make_tensor_value_info("x", F, list(shape))


def _upsample_by_shape_arithmetic():
    """Resize to Floor(H * 2.0) x Floor(W * 2.0), the sizes computed from Shape as exporters write
    them: a Cast to float, Mul, Floor, a Cast to int64 -- discrete ops that read only shapes."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=F),
        helper.make_node("Mul", ["sf", "scale"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["fl"]),
        helper.make_node("Cast", ["fl"], ["sizes"], to=I64),
        helper.make_node("Resize", ["r", "", "", "sizes"], ["y"], mode="nearest"),
    ]
    scale = np.array([1, 1, 2, 2], np.float32)
    return _model(nodes, [_x()], [helper.make_tensor_value_info("y", F, None)], [("scale", scale)])


def test_discrete_ops_on_shapes_alone_get_no_extra_runs():
    model = _upsample_by_shape_arithmetic()
    assert not perturbation_sees_discrete_ops(model)
    assert perturbation_runs(2, perturbation_sees_discrete_ops(model)) == 2


def test_a_discrete_op_on_a_float_inputs_values_is_seen():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Floor", ["r"], ["y"])]
    model = _model(nodes, [_x()], [helper.make_tensor_value_info("y", F, None)])
    assert perturbation_sees_discrete_ops(model)
    assert perturbation_runs(2, True) == 8


def test_a_mask_from_integer_ids_is_not_moved_but_one_from_floats_is():
    ids = helper.make_tensor_value_info("ids", I64, [1, 4])
    zero = ("zero", np.array(0, np.int64))
    nodes = [helper.make_node("Equal", ["ids", "zero"], ["mask"]),
             helper.make_node("Where", ["mask", "x", "x"], ["y"])]
    y = helper.make_tensor_value_info("y", F, None)
    assert not perturbation_sees_discrete_ops(_model(nodes, [_x((1, 4)), ids], [y], [zero]))
    cast = [helper.make_node("Cast", ["x"], ["xi"], to=I64)]  # the same mask from the float input
    nodes = cast + [helper.make_node("Equal", ["xi", "zero"], ["mask"]),
                    helper.make_node("Where", ["mask", "x", "x"], ["y"])]
    assert perturbation_sees_discrete_ops(_model(nodes, [_x((1, 4))], [y], [zero]))


def test_a_shape_the_values_decide_moves_its_shape_arithmetic():
    # NonZero's length follows x's values: Shape of it, and an Equal on that, can move
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Shape", ["nz"], ["s"]),
             helper.make_node("Equal", ["s", "two"], ["y"])]
    model = _model(nodes, [_x((4,))], [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
                   [("two", np.array([1, 2], np.int64))])
    assert perturbation_sees_discrete_ops(model)
    # a Reshape whose target is computed from x's values: its shape moves too
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Cast", ["a"], ["target"], to=I64),
             helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Equal", ["s", "two"], ["y"])]
    model = _model(nodes, [_x((1,))], [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
                   [("two", np.array([1], np.int64))])
    # the Cast to int64 of a value is itself discrete: seen there already; without it, at the Equal
    assert perturbation_sees_discrete_ops(model)
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Equal", ["s", "two"], ["y"])]
    target = helper.make_tensor_value_info("target", I64, [1])
    model = _model(nodes, [_x((1,)), target], [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
                   [("two", np.array([1], np.int64))])
    assert not perturbation_sees_discrete_ops(model)  # integer target: never moved


def test_a_discrete_op_inside_a_local_function_is_seen():
    # the whole-graph check looked at the main graph's nodes only: a Floor in a function was missed
    body = [helper.make_node("Floor", ["a"], ["b"])]
    function = helper.make_function("local", "FloorIt", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("FloorIt", ["x"], ["y"], domain="local")]
    model = _model(nodes, [_x()], [helper.make_tensor_value_info("y", F, None)], functions=[function])
    assert perturbation_sees_discrete_ops(model)
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    assert verify_models(model, model, inputs=[{"x": x}], deployment=None, trials=2).settings["perturbation_runs"] == 8
    # a function without one is no discrete op
    calm = helper.make_function("local", "FloorIt", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                [helper.make_opsetid("", 17)])
    model = _model(nodes, [_x()], [helper.make_tensor_value_info("y", F, None)], functions=[calm])
    assert not perturbation_sees_discrete_ops(model)


def test_a_discrete_op_inside_a_branch_is_seen():
    out = helper.make_tensor_value_info("b", F, None)
    then = helper.make_graph([helper.make_node("Round", ["x"], ["b"])], "then", [], [out])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "else", [], [out])
    nodes = [helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)]
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    model = _model(nodes, [_x(), flag], [helper.make_tensor_value_info("y", F, None)])
    assert perturbation_sees_discrete_ops(model)


def test_random_values_move_on_every_run():
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[4]), helper.make_node("Floor", ["u"], ["y"])]
    model = _model(nodes, [], [helper.make_tensor_value_info("y", F, None)])
    assert perturbation_sees_discrete_ops(model)
    # a Dropout in training mode draws its mask anew on every run, on constant inputs too
    nodes = [helper.make_node("Dropout", ["ones", "ratio", "training"], ["d"]), helper.make_node("Floor", ["d"], ["y"])]
    model = _model(nodes, [], [helper.make_tensor_value_info("y", F, None)],
                   [("ones", np.ones(4, np.float32)), ("ratio", np.array(0.5, np.float32)),
                    ("training", np.array(True))])
    assert perturbation_sees_discrete_ops(model)
    # also from inside a function that reads nothing that moves: its output moves on its own
    noise = helper.make_function("local", "Noise", ["shape"], ["u"],
                                 [helper.make_node("RandomUniformLike", ["shape"], ["u"])], [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Noise", ["zeros"], ["u"], domain="local"), helper.make_node("Floor", ["u"], ["y"])]
    model = _model(nodes, [], [helper.make_tensor_value_info("y", F, None)], [("zeros", np.zeros(4, np.float32))],
                   functions=[noise])
    assert perturbation_sees_discrete_ops(model)


def test_the_shape_tables_are_ops_onnx_knows_and_do_not_overlap():
    known = {schema.name for schema in onnx.defs.get_all_schemas_with_history() if schema.domain == ""}
    assert SHAPE_FROM_SHAPES <= known and set(SHAPE_INPUTS) <= known
    assert not SHAPE_FROM_SHAPES & set(SHAPE_INPUTS)
    # an op whose output shape a data input's values decide is in neither
    assert not {"NonZero", "Unique", "Compress", "TopK"} & SHAPE_FROM_SHAPES


def test_verification_of_shape_arithmetic_makes_two_perturbation_runs():
    original = _upsample_by_shape_arithmetic()
    candidate = onnx.ModelProto()
    candidate.CopyFrom(original)
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    report = verify_models(original, candidate, inputs=[{"x": x}], deployment=None, trials=2)
    assert report.settings["perturbation_runs"] == 2  # the whole-graph check made 8
    assert not any("discrete ops" in note for note in report.notes)
    floor = _model([helper.make_node("Floor", ["x"], ["y"])], [_x()], [helper.make_tensor_value_info("y", F, None)])
    report = verify_models(floor, floor, inputs=[{"x": x}], deployment=None, trials=2)
    assert report.settings["perturbation_runs"] == 8
