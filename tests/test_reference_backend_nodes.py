"""The onnx package's backend node tests, run through the float64 reference evaluator.

The onnx wheel does not ship the node test data directory, so the cases are generated with
``onnx.backend.test.case.node.collect_testcases`` (about 20 s) and cached in pytest's cache directory.
If the data directory exists (onnx installed from source), it is used instead.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxrefine.verify.reference.evaluator import UnsupportedOperatorError, evaluate_float64, supported_op_types

RTOL, ATOL = 1e-3, 1e-5

_ALLOWED_ELEM_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16,
    onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
}

# Cases whose expected output the float64 reference must not (or cannot) reproduce, each with the reason.
KNOWN_DIFFERENCES = {
    # Expected outputs computed with float32/float16 rounding steps that ideal arithmetic skips.
}


def _load_from_data_dir(root: Path) -> list[tuple]:
    cases = []
    for case_dir in sorted(root.iterdir()):
        model_path = case_dir / "model.onnx"
        data_dir = case_dir / "test_data_set_0"
        if not model_path.exists() or not data_dir.exists():
            continue
        model = onnx.load(model_path)
        inputs = [numpy_helper.to_array(onnx.TensorProto.FromString(p.read_bytes()))
                  for p in sorted(data_dir.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        outputs = [numpy_helper.to_array(onnx.TensorProto.FromString(p.read_bytes()))
                   for p in sorted(data_dir.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        cases.append((case_dir.name, model.SerializeToString(), inputs, outputs))
    return cases


def _generate() -> list[tuple]:
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = node_cases.collect_testcases()
    cases = []
    for case in collected:
        if case.model is None or not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        if not all(isinstance(v, np.ndarray) for v in [*inputs, *outputs]):
            continue
        cases.append((case.name, case.model.SerializeToString(), list(inputs), list(outputs)))
    return cases


def _node_cases(cache_dir: Path) -> list[tuple]:
    data_root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    if data_root.is_dir():
        return _load_from_data_dir(data_root)
    cache_file = cache_dir / f"onnx-{onnx.__version__}-node-cases.pkl"
    if cache_file.exists():
        with open(cache_file, "rb") as f:
            return pickle.load(f)
    cases = _generate()
    fd, tmp = tempfile.mkstemp(dir=cache_dir)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(cases, f)
    os.replace(tmp, cache_file)
    return cases


def _graph_ops(graph: onnx.GraphProto, out: set) -> None:
    for node in graph.node:
        out.add((node.domain or "", node.op_type))
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _graph_ops(attr.g, out)
            for g in attr.graphs:
                _graph_ops(g, out)


def _tensor_types_ok(value_infos) -> bool:
    for vi in value_infos:
        if not vi.type.HasField("tensor_type"):
            return False
        if vi.type.tensor_type.elem_type not in _ALLOWED_ELEM_TYPES:
            return False
    return True


def _eligible(model: onnx.ModelProto, supported: frozenset) -> bool:
    if not _tensor_types_ok([*model.graph.input, *model.graph.output]):
        return False
    ops: set = set()
    _graph_ops(model.graph, ops)
    local = {(f.domain, f.name) for f in model.functions}
    for f in model.functions:
        for node in f.node:
            ops.add((node.domain or "", node.op_type))
    return all(op in local or (domain in ("", "ai.onnx") and op in supported) for domain, op in ops)


def _check(model: onnx.ModelProto, inputs, expected) -> None:
    feeds = {vi.name: value for vi, value in zip(model.graph.input, inputs)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = evaluate_float64(model, feeds)
    for vi, want in zip(model.graph.output, expected):
        value = got[vi.name]
        if want.dtype.kind == "f":
            assert value.dtype == np.float64, f"{vi.name}: dtype {value.dtype}"
            np.testing.assert_allclose(value, want.astype(np.float64), rtol=RTOL, atol=ATOL, err_msg=vi.name)
        else:
            assert value.dtype == want.dtype, f"{vi.name}: dtype {value.dtype} != {want.dtype}"
            np.testing.assert_array_equal(value, want, err_msg=vi.name)


def test_backend_node_cases(request):
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        cache_dir = Path(cache.mkdir("onnxrefine-reference"))
    else:  # -p no:cacheprovider
        cache_dir = Path(tempfile.gettempdir()) / "onnxrefine-reference"
        cache_dir.mkdir(exist_ok=True)
    cases = _node_cases(cache_dir)
    supported = supported_op_types()
    ran, skipped_type, failures, known = 0, 0, [], []
    for name, model_bytes, inputs, expected in cases:
        model = onnx.ModelProto.FromString(model_bytes)
        if not _eligible(model, supported):
            skipped_type += 1
            continue
        try:
            _check(model, inputs, expected)
        except (AssertionError, UnsupportedOperatorError, Exception) as exc:  # noqa: BLE001
            if name in KNOWN_DIFFERENCES:
                known.append(name)
                continue
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0:6]}")
            continue
        ran += 1
    print(f"\nbackend node cases: {len(cases)} total, {ran} passed, {len(known)} known differences, "
          f"{skipped_type} not eligible (non-float32 types or unsupported ops), {len(failures)} failed")
    assert not failures, "\n".join(failures)
    assert ran > 500
