"""Every tensor memory-mapped from one file reads through ONE map of it.

A map per tensor (onnx-ir's ExternalTensor) made each small weight's read fault in a neighbourhood
of up to 2 MiB in its own map: a decoder of 4 KiB weights grew 3.3 GB at 800 layers. The RSS itself
is measured by `bench/engine_scaling.py --decoder`; here: one map, shared, never closed under
another tensor's array, and the weights it gives are the file's."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from helpers import make_model, tensor, value_info
from onnx import helper

from onnxrefine.ir import io, load, sizes, wire


def _model(path, layers: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(16, 16)).astype(np.float32) for _ in range(layers)]
    nodes, x = [], "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]))
        x = f"h{i}"
    onnx.save(make_model(nodes, [value_info("x", shape=[1, 16])], [value_info(x, shape=[1, 16])],
                         [tensor(f"w{i}", w) for i, w in enumerate(weights)]), path)
    return weights


@pytest.fixture
def lazy(monkeypatch):
    monkeypatch.setattr(sizes, "LAZY_LOAD_THRESHOLD_BYTES", 0)
    monkeypatch.setattr(wire, "LAZY_THRESHOLD_BYTES", 0)


def _maps_of(path) -> int:
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(real))


def test_tensors_of_one_file_share_one_map_and_read_its_bytes(tmp_path, lazy):
    path = tmp_path / "m.onnx"
    weights = _model(path)
    model = io.load_model(path)
    tensors = [model.graph.initializers[f"w{i}"].const_value for i in range(len(weights))]
    assert all(isinstance(t, load.PinnedExternalTensor) for t in tensors)
    for t, w in zip(tensors, weights):
        np.testing.assert_array_equal(t.numpy(), w)
    assert len({id(t.raw) for t in tensors}) == 1
    if sys.platform.startswith("linux"):
        assert _maps_of(path) == 1  # was one per tensor read


def test_releasing_one_tensor_leaves_the_others_readable(tmp_path, lazy):
    """onnx-ir's release() closes the tensor's map: on the shared one that would fail (BufferError,
    another tensor's array views it) or cut every other tensor off."""
    path = tmp_path / "m.onnx"
    weights = _model(path)
    model = io.load_model(path)
    first, second = (model.graph.initializers[n].const_value for n in ("w0", "w1"))
    held = second.numpy()
    first.numpy()
    first.release()
    assert not second.raw.closed
    np.testing.assert_array_equal(held, weights[1])  # the array stays valid (pages fault in again)
    np.testing.assert_array_equal(first.numpy(), weights[0])  # and the released one reloads
    assert second.tobytes() == weights[1].tobytes()


def _mapped_rss_kib(path) -> int:
    """Resident KiB of this process's maps of `path` (/proc/self/smaps)."""
    real, total, inside = os.path.realpath(path), 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not line.startswith(("Rss", "Pss")):
                inside = line.rstrip().endswith(real)
            elif inside and line.startswith("Rss:"):
                total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_dropped_tensor_takes_its_pages_out_of_the_shared_map(tmp_path, lazy):
    """A tensor a rewrite replaced used to close its own map, and its pages left with it; the shared
    map stays open for the other tensors, so the dropped tensor gives its pages back itself."""
    path = tmp_path / "m.onnx"
    _model(path, layers=4)
    model = io.load_model(path)
    keep = model.graph.initializers["w0"].const_value  # holds the shared map open, never read
    for name in ("w1", "w2", "w3"):
        float(model.graph.initializers[name].const_value.numpy().sum())  # faults the pages in
    assert _mapped_rss_kib(path) > 0
    for name in ("w1", "w2", "w3"):
        model.graph.initializers[name].const_value = None
    assert keep.source.shared_map() is not None and not keep.source.shared_map().closed
    assert _mapped_rss_kib(path) == 0
