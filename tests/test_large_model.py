"""The bench's large-model builder (bench/big_model.py), scaled down: optimizing and saving it reads
none of its large weights into Python (folding and shape facts use metadata only; the duplicate
pass reads samples with pread; saving copies file to file), and the result computes the same."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnxrefine.api import optimize_ir
from onnxrefine.ir import io

ROOT = Path(__file__).resolve().parent.parent


def _builder():
    spec = importlib.util.spec_from_file_location("big_model", ROOT / "bench" / "big_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resident_kib(tensor: ir.ExternalTensor) -> int:
    """Resident KiB of the tensor's own memory map (onnx-ir maps the data file once per tensor)."""
    if tensor.raw is None:
        return 0  # never mapped
    start = np.frombuffer(tensor.raw, np.uint8).ctypes.data
    with open("/proc/self/smaps") as smaps:
        lines = smaps.read().splitlines()
    for index, line in enumerate(lines):
        fields = line.split()
        if "-" in fields[0] and int(fields[0].split("-")[0], 16) == start:
            return next(int(f.split()[1]) for f in lines[index + 1:] if f.startswith("Rss:"))
    raise AssertionError("mapping not found")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("certify", [False, True])
def test_optimize_and_save_read_no_large_weight(tmp_path, certify):
    hidden = 256  # 256 KiB weights: every one external, all of one shape (as in an LLM)
    source = _builder().build(tmp_path / "big.onnx", layers=3, hidden=hidden)
    model = io.load_model(source)
    weights = [v.const_value for v in model.graph.initializers.values() if v.const_value.nbytes > 64 * 1024]
    assert len(weights) == 3 and all(isinstance(w, ir.ExternalTensor) for w in weights)
    model, report = optimize_ir(model, certify=certify)
    assert report.log.counts().get("fuse_matmul_add_bias_into_gemm") == 3
    out = tmp_path / "out.onnx"
    io.save_model(model, out, input_path=source)
    # Mapping a weight (numpy() of an ExternalTensor: a shape check) reads nothing; reading its
    # values would fault its pages into its map. (Biases and scales are read: x*1 and x+0 checks.)
    # A certificate reads the weights it fuses, and the driver unmaps their pages afterwards.
    assert [_resident_kib(w) for w in weights] == [0, 0, 0]
    x = np.random.default_rng(0).standard_normal((2, hidden)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    after = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.allclose(before, after, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "out.onnx.data").exists()  # the input's layout: external data
