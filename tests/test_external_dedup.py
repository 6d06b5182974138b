"""Duplicate initializers found by fingerprints (dtype, shape, size, sampled bytes); full bytes only for
fingerprint collisions; weights memory-mapped from a file are never read into Python for it; pages a
certificate read are unmapped afterwards."""

from __future__ import annotations

import mmap
import os
import sys

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper

from onnxrefine.ir import io, tensordata
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.passes.pipeline import run_passes
from tests.helpers import make_model, tensor, value_info

N = 256  # 256 KiB float32 weights: fingerprinted by samples, not in full


def _unsampled_offset(nbytes: int) -> int:
    """A float32 element no fingerprint window reads."""
    covered = np.zeros(nbytes, bool)
    for offset, length in tensordata.sample_ranges(nbytes):
        covered[offset:offset + length] = True
    free = np.flatnonzero(~covered.reshape(-1, 4).any(axis=1))
    assert free.size
    return int(free[free.size // 2]) * 4


def _model(weights: list[np.ndarray]) -> onnx.ModelProto:
    nodes, x = [], "x"
    for i in range(len(weights)):
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"y{i}"]))
        x = f"y{i}"
    return make_model(nodes, [value_info("x", shape=[1, N])], [value_info(x, shape=[1, N])],
                      [tensor(f"W{i}", w) for i, w in enumerate(weights)])


def _external(tmp_path, weights) -> str:
    path = str(tmp_path / "m.onnx")
    onnx.save_model(_model(weights), path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    return path


def _dedup(model: ir.Model):
    return run_passes(model, ["eliminate_duplicate_initializer", "eliminate_unused_initializer"],
                      budget=ConstantBudget(io.tensor_bytes(model)), fixed_point=False)


def _ort(model: onnx.ModelProto | str, x):
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture
def weights():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, N)) / 16).astype(np.float32)
    return w


def test_same_samples_different_bytes_are_not_merged(tmp_path, weights):
    # The fingerprints collide (only an unsampled element differs): the full comparison decides.
    other = weights.copy()
    other.reshape(-1).view(np.uint8)[_unsampled_offset(weights.nbytes)] ^= 1
    assert tensordata.fingerprint(ir.Tensor(weights)) == tensordata.fingerprint(ir.Tensor(other))
    model = io.load_model(_external(tmp_path, [weights, other]))
    log = _dedup(model)
    assert log.counts().get("eliminate_duplicate_initializer", 0) == 0
    assert set(model.graph.initializers) == {"W0", "W1"}


def test_identical_external_weights_are_merged(tmp_path, weights):
    path = _external(tmp_path, [weights, weights.copy(), (weights * 2).astype(np.float32)])
    model = io.load_model(path)
    log = _dedup(model)
    assert log.counts()["eliminate_duplicate_initializer"] == 1
    assert set(model.graph.initializers) == {"W0", "W2"}
    x = np.random.default_rng(1).standard_normal((1, N)).astype(np.float32)
    out = tmp_path / "out.onnx"
    io.save_model(model, out, input_path=path)
    assert np.array_equal(_ort(path, x), _ort(str(out), x))


def test_distinct_weights_are_never_loaded(tmp_path, weights, monkeypatch):
    # Same dtype and shape (as every layer of an LLM), different contents: only samples are read,
    # with pread, never through onnx-ir's memory map.
    rng = np.random.default_rng(2)
    model = io.load_model(_external(tmp_path, [weights] + [rng.standard_normal((N, N)).astype(np.float32)
                                                           for _ in range(3)]))

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"weight {self.name} read in full")

    for method in ("numpy", "tobytes", "__array__"):
        monkeypatch.setattr(ir.ExternalTensor, method, refuse)
    log = _dedup(model)
    assert log.counts().get("eliminate_duplicate_initializer", 0) == 0


def test_in_memory_and_external_duplicates_are_merged(tmp_path, weights):
    model = io.load_model(_external(tmp_path, [weights, weights]))
    model.graph.initializers["W1"].const_value = ir.Tensor(weights.copy(), name="W1")
    log = _dedup(model)
    assert log.counts()["eliminate_duplicate_initializer"] == 1


def _mapped_rss(path: str) -> int:
    """Resident bytes of this process's mappings of `path` (from /proc/self/smaps)."""
    total, current = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if len(fields) >= 5 and "-" in fields[0] and ":" in fields[3]:
                current = len(fields) >= 6 and fields[5] == os.path.realpath(path)
            elif current and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"),
                    reason="reads /proc/self/smaps")
def test_drop_pages_unmaps_read_weights_and_keeps_them_readable(tmp_path, weights):
    model = io.load_model(_external(tmp_path, [weights]))
    tensor_ = model.graph.initializers["W0"].const_value
    array = tensor_.numpy()
    assert float(array.astype(np.float64).sum()) == pytest.approx(float(weights.astype(np.float64).sum()))
    data = str(tmp_path / "m.onnx.data")
    assert _mapped_rss(data) >= weights.nbytes // 2
    tensordata.drop_pages([tensor_])
    assert _mapped_rss(data) < weights.nbytes // 4
    assert np.array_equal(array, weights)  # the view stays valid: pages fault in again


def test_a_fingerprint_is_computed_once_per_tensor(monkeypatch, weights):
    """The duplicate-initializer pass runs in every round: a weight's fingerprint is read once, and a
    tensor made later (even at a recycled address) gets its own."""
    computed = []
    real = tensordata._fingerprint
    monkeypatch.setattr(tensordata, "_fingerprint", lambda t: computed.append(t) or real(t))
    kept = ir.Tensor(weights)
    first = tensordata.fingerprint(kept)
    assert tensordata.fingerprint(kept) == first and len(computed) == 1
    for scale in (2, 3):
        assert tensordata.fingerprint(ir.Tensor(weights * scale)) != first
    assert len(computed) == 3
