"""Models with map-typed values (ZipMap of ai.onnx.ml, as every scikit-learn classifier export
has): optimized around the maps and verified, or written unchanged with a note; never an
unreadable-model error for a valid model."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxrefine import around_maps
from onnxrefine.cli.main import main
from onnxrefine.ir import maps


def zipmap_model(int_labels: bool = True) -> onnx.ModelProto:
    """x @ W + b + 0 -> Softmax -> ZipMap (label -> probability) and ArgMax (the label): the Add of
    zero is for optimize to remove, MatMul + Add for it to fuse."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"),
             numpy_helper.from_array(np.zeros(3, np.float32), "zero")]
    labels = dict(classlabels_int64s=[10, 20, 30]) if int_labels else dict(classlabels_strings=["a", "b", "c"])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["logits"]),
             helper.make_node("Add", ["logits", "zero"], ["z"]),
             helper.make_node("Softmax", ["z"], ["probabilities"], axis=1),
             helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0),
             helper.make_node("ZipMap", ["probabilities"], ["output_probability"], domain="ai.onnx.ml", **labels)]
    key = TensorProto.INT64 if int_labels else TensorProto.STRING
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
                               helper.make_value_info("output_probability", seq_map)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    onnx.checker.check_model(model, full_check=True)
    return model


def map_input_model() -> onnx.ModelProto:
    """DictVectorizer reads a map-typed graph input: nothing to set aside, written unchanged."""
    map_type = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    one = numpy_helper.from_array(np.float32(1.0), "one")
    nodes = [helper.make_node("DictVectorizer", ["features"], ["v"], domain="ai.onnx.ml", string_vocabulary=["a", "b"]),
             helper.make_node("Mul", ["v", "one"], ["y"])]
    graph = helper.make_graph(nodes, "vectorize", [helper.make_value_info("features", map_type)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [one])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


def _run(path, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("int_labels", [True, False])
def test_zipmap_model_is_optimized_around_the_map_and_verified(tmp_path, capsys, int_labels):
    source, out, report_path = tmp_path / "clf.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(zipmap_model(int_labels), source)
    assert main(["optimize", str(source), str(out), "--report", str(report_path)]) == 0
    printed = capsys.readouterr().out
    assert "ZipMap set aside" in printed and "checked end to end" in printed
    optimized = onnx.load(str(out))
    onnx.checker.check_model(optimized, full_check=True)
    assert [n.op_type for n in optimized.graph.node] == ["Gemm", "Softmax", "ArgMax", "ZipMap"]
    assert [o.name for o in optimized.graph.output] == ["label", "output_probability"]
    report = json.loads(report_path.read_text())
    assert report["verification"]["status"] == "verified" and report["verification"]["verdict"] in ("exact", "rounding")
    assert "probabilities" in report["verification"]["per_output"]  # the tensor the ZipMap reads, judged
    assert {"op": "ai.onnx.ml.ZipMap", "before": 1, "after": 1} in report["operators"]
    feeds = {"x": np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)}
    (label_a, maps_a), (label_b, maps_b) = _run(source, feeds), _run(out, feeds)
    assert np.array_equal(label_a, label_b)
    assert [list(m) for m in maps_a] == [list(m) for m in maps_b]
    assert np.allclose([list(m.values()) for m in maps_a], [list(m.values()) for m in maps_b], rtol=1e-6, atol=1e-7)


def test_a_map_typed_input_is_written_unchanged_with_a_note(tmp_path, capsys):
    source, out = tmp_path / "v.onnx", tmp_path / "out.onnx"
    onnx.save(map_input_model(), source)
    assert main(["optimize", str(source), str(out), "--report", str(tmp_path / "r.json")]) == 0
    assert "note: written unchanged: a graph input is map-typed" in capsys.readouterr().out
    assert onnx.load(str(out)).SerializeToString() == onnx.load(str(source)).SerializeToString()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verification"]["status"] == "skipped" and report["nodes_after"] == 2


def test_an_assembly_that_fails_its_check_is_not_written_optimized(tmp_path, capsys, monkeypatch):
    source, out = tmp_path / "clf.onnx", tmp_path / "out.onnx"
    onnx.save(zipmap_model(), source)
    monkeypatch.setattr(around_maps, "check_end_to_end", lambda *a, **k: "planted: the maps differ")
    assert main(["optimize", str(source), str(out), "--no-verify"]) == 0
    assert "note: written unchanged: planted: the maps differ" in capsys.readouterr().out
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["MatMul", "Add", "Add", "Softmax", "ArgMax", "ZipMap"]


def test_the_end_to_end_check_catches_a_changed_zipmap_input():
    """A ZipMap that came back changed (its labels' order) fails the check."""
    original = zipmap_model()
    core, aside = maps.split(original)
    assert aside.read == ["probabilities"] and aside.added_outputs == ["probabilities"]
    broken = onnx.ModelProto()
    broken.CopyFrom(original)
    broken.graph.node[-1].attribute[0].ints[:] = [30, 20, 10]
    assert around_maps.check_end_to_end(original, broken, aside) == "the set-aside ZipMap node changed"
    assert around_maps.check_end_to_end(original, original, aside) is None
    reversed_labels = onnx.ModelProto()
    reversed_labels.CopyFrom(broken)  # labels not in ascending order: still repacked label by label
    core, aside = maps.split(reversed_labels)
    assert around_maps.check_end_to_end(reversed_labels, reversed_labels, aside) is None


def test_split_refuses_what_it_cannot_put_back():
    assert maps.split(map_input_model()) == "a graph input is map-typed"
    model = zipmap_model()
    model.graph.node[-1].input[0] = "W"  # the ZipMap reads a weight
    assert maps.split(model).startswith("the map operators read a weight")
    core, aside = maps.split(zipmap_model())
    clash = onnx.ModelProto()
    clash.CopyFrom(core)
    clash.graph.node[0].output[0] = "output_probability"
    assert maps.assemble(clash, aside) == "the optimized model now uses the name(s) output_probability"


def test_the_end_to_end_check_compares_each_map_with_the_row_it_repacks(monkeypatch):
    original = zipmap_model()
    _, aside = maps.split(original)
    real_run, calls = around_maps._run, []

    def run_with_one_value_off(model, feeds):
        results = real_run(model, feeds)
        calls.append(model)
        if len(calls) % 2 == 0:  # the assembled model's run: one probability one ulp off
            first = results["output_probability"][0]
            first[10] = float(np.nextafter(np.float32(first[10]), np.float32(2)))
        return results

    monkeypatch.setattr(around_maps, "_run", run_with_one_value_off)
    assert around_maps.check_end_to_end(original, original, aside) == \
        "ZipMap output output_probability does not repack its input exactly"


# -- verify on map models: each map's values judged in its keys' order, its keys compared as sets ----

def _with_zipmap_labels(model: onnx.ModelProto, labels: list) -> onnx.ModelProto:
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    attribute = changed.graph.node[-1].attribute[0]
    if attribute.name == "classlabels_int64s":
        attribute.ints[:] = labels
    else:
        attribute.strings[:] = [str(label).encode() for label in labels]
    return changed


def _verify(original, candidate):
    from onnxrefine.verify import verify_models

    report = verify_models(original, candidate, trials=1, stress=False, deployment=None, localize=False)
    return report.verdict, {row.name: row for row in report.outputs}


@pytest.mark.parametrize("int_labels", [True, False])
def test_verify_judges_a_zipmap_model_map_by_map(int_labels):
    model = zipmap_model(int_labels)
    labels = [10, 20, 30] if int_labels else ["a", "b", "c"]
    verdict, rows = _verify(model, model)
    assert verdict == "exact" and rows["output_probability"].verdict == "exact"
    assert rows["output_probability"].dtype == "float32"  # the maps' own type, not Python's float64

    heavier = onnx.ModelProto()
    heavier.CopyFrom(model)
    weight = numpy_helper.to_array(heavier.graph.initializer[0]).copy()
    weight[0, 0] += 0.5
    heavier.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "W"))
    verdict, rows = _verify(model, heavier)
    assert verdict == "mismatch" and rows["output_probability"].verdict == "mismatch"

    swapped = _with_zipmap_labels(model, [labels[1], labels[0], labels[2]])
    verdict, rows = _verify(model, swapped)
    assert verdict == "mismatch" and rows["output_probability"].verdict == "mismatch"
    assert rows["label"].verdict == "exact"


def test_verify_calls_maps_with_other_keys_a_mismatch_even_where_the_values_agree():
    """Labels renamed in their order: the values in sorted-key order agree, the keys do not."""
    model = zipmap_model()
    verdict, rows = _verify(model, _with_zipmap_labels(model, [10, 20, 31]))
    assert verdict == "mismatch"
    assert rows["output_probability"].notes == [
        "the maps hold other keys: the original's [10, 20, 30], the candidate's [10, 20, 31]"]
    assert rows["label"].verdict == "exact"


def test_map_values_keep_their_type_and_sequence_order():
    from onnxrefine.verify.ort.mapvalues import values_and_keys

    values, keys = values_and_keys([{"b": 2.0, "a": 1.0}, {"a": 3.0, "b": 4.0}], np.float32)
    assert keys == ("a", "b") and values.dtype == np.float32 and values.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    values, keys = values_and_keys(np.asarray({2: 0.5, 1: 0.25}), np.float32)  # one map, as a child returns it
    assert keys == (1, 2) and values.tolist() == [0.25, 0.5]
    values, keys = values_and_keys([{1: 1.0}, {1: 2.0, 2: 3.0}], np.float32)
    assert keys == ((1,), (1, 2)) and values.tolist() == [1.0, 2.0, 3.0]
    values, keys = values_and_keys([], np.float32)
    assert keys == () and values.shape == (0, 0)


# -- the Python API: the same behaviour as the CLI -------------------------------------------------

@pytest.mark.parametrize("given", ["path", "proto"])
def test_the_api_optimizes_a_zipmap_model_around_its_maps(tmp_path, given):
    import onnxrefine

    model = zipmap_model()
    source = tmp_path / "clf.onnx"
    onnx.save(model, source)
    before = model.SerializeToString()
    optimized, report = onnxrefine.optimize_with_report(str(source) if given == "path" else model)
    assert model.SerializeToString() == before  # the caller's proto is not modified
    assert isinstance(optimized, onnx.ModelProto)
    onnx.checker.check_model(optimized, full_check=True)
    assert [n.op_type for n in optimized.graph.node] == ["Gemm", "Softmax", "ArgMax", "ZipMap"]
    assert [o.name for o in optimized.graph.output] == ["label", "output_probability"]
    assert report.nodes_before == 6 and report.nodes_after == 4
    assert report.operators_after["ai.onnx.ml.ZipMap"] == 1
    out = tmp_path / "out.onnx"
    onnx.save(optimized, out)
    feeds = {"x": np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)}
    (label_a, maps_a), (label_b, maps_b) = _run(source, feeds), _run(out, feeds)
    assert np.array_equal(label_a, label_b) and [list(m) for m in maps_a] == [list(m) for m in maps_b]
    assert onnxrefine.optimize(model).graph.node[-1].op_type == "ZipMap"  # optimize() as well


def test_the_api_hands_back_a_model_it_cannot_split_unchanged_saying_why(caplog):
    import onnxrefine

    model = map_input_model()
    with caplog.at_level("WARNING", logger="onnxrefine"):
        optimized, report = onnxrefine.optimize_with_report(model)
    assert optimized.SerializeToString() == model.SerializeToString() and optimized is not model
    assert report.verification == {"status": "skipped", "reason": "left unchanged: a graph input is map-typed"}
    assert "model left unchanged: a graph input is map-typed" in caplog.text


def test_the_api_hands_back_a_model_whose_assembly_fails_its_check_unchanged(monkeypatch):
    import onnxrefine

    monkeypatch.setattr(around_maps, "check_end_to_end", lambda *a, **k: "planted: the maps differ")
    model = zipmap_model()
    optimized, report = onnxrefine.optimize_with_report(model, verify=True)
    assert optimized.SerializeToString() == model.SerializeToString()
    assert report.verification["reason"] == "left unchanged: planted: the maps differ"
