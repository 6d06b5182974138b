"""Corpus models of the classes people deploy, derived from the float exports of build_corpus.py:
a QDQ-quantized CNN, a dynamic-quantized BERT, float16 CNN and transformer, and
a BERT with onnxruntime's contrib operators.

Each is made by onnxruntime's own tooling from `<base>.onnx` in the same corpus folder (exported
first when missing): `quantize_static` (QDQ, per-channel int8, calibrated on seeded random
inputs), `quantize_dynamic` (MatMulInteger / DynamicQuantizeLinear), the float16 converter of
onnxruntime.transformers, and `onnxruntime.transformers.optimizer` (Attention,
SkipLayerNormalization, BiasGelu, EmbedLayerNormalization). Used by build_corpus.py; the entries
it writes to manifest.json carry "class" and the base model's name.
"""
from __future__ import annotations

import collections
import os
import shutil
from pathlib import Path

import numpy as np

SEED = 0
CALIBRATION_SETS = 4


def _quantize_static(base: Path, target: Path, feeds: dict) -> str:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(SEED)
            self._sets = iter([{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
                               for _ in range(CALIBRATION_SETS)])

        def get_next(self):
            return next(self._sets, None)

    quantize_static(str(base), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    return f"quantize_static QDQ, per-channel int8 weights, uint8 activations, {CALIBRATION_SETS} random calibration sets"


def _quantize_dynamic(base: Path, target: Path, feeds: dict) -> str:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # The export keeps each Linear weight behind a Transpose (exporter folding off), which
    # quantize_dynamic skips; onnxruntime's recommended pre-processing folds those first.
    prepared = target.with_name(target.name + ".pre.onnx")
    try:
        quant_pre_process(str(base), str(prepared), skip_symbolic_shape=True)
        quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
    finally:
        prepared.unlink(missing_ok=True)
    return "quant_pre_process, then quantize_dynamic, int8 weights (MatMulInteger, DynamicQuantizeLinear)"


def _float16(keep_io_types: bool):
    def convert(base: Path, target: Path, feeds: dict) -> str:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(str(base)), keep_io_types=keep_io_types)
        onnx.save(model, str(target))
        return ("onnxruntime.transformers.float16.convert_float_to_float16"
                + (", float32 inputs/outputs (Casts at the edges)" if keep_io_types else ", float16 inputs/outputs"))
    return convert


def _contrib_bert(base: Path, target: Path, feeds: dict) -> str:
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(base), model_type="bert", num_heads=12, hidden_size=768, opt_level=0)
    optimized.save_model_to_file(str(target))
    return "onnxruntime.transformers.optimizer.optimize_model(model_type='bert', opt_level=0): contrib fusions only"


# name -> (base model, class, maker, float16 inputs)
DERIVED_MODELS = {
    "resnet18-qdq": ("resnet18", "quantized", _quantize_static, False),
    "bert-base-dynq": ("bert-base", "quantized", _quantize_dynamic, False),
    "resnet18-fp16": ("resnet18", "half", _float16(keep_io_types=False), True),
    "bert-base-fp16": ("bert-base", "half", _float16(keep_io_types=True), False),
    "bert-base-contrib": ("bert-base", "contrib", _contrib_bert, False),
}
QUANT_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
             "QLinearConv", "QLinearMatMul")


def quant_counts(histogram: dict) -> dict:
    return {op: histogram[op] for op in QUANT_OPS if histogram.get(op)}


def derive_one(name: str, corpus: Path, ensure_base, run_onnxruntime, op_histogram) -> dict:
    """Make `name` from its base model; `ensure_base(base)` exports the base when missing."""
    import onnx

    base_name, kind, maker, half_inputs = DERIVED_MODELS[name]
    ensure_base(base_name)
    base = corpus / f"{base_name}.onnx"
    with np.load(corpus / f"{base_name}.inputs.npz") as data:
        feeds = {k: data[k] for k in data.files}
    path, tmp_path = corpus / f"{name}.onnx", corpus / f".{name}.onnx.tmp"
    import time

    started = time.perf_counter()
    note = maker(base, tmp_path, feeds)
    seconds = time.perf_counter() - started
    os.replace(tmp_path, path)
    if half_inputs:
        feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
        np.savez(corpus / f"{name}.inputs.npz", **feeds)
    else:
        shutil.copyfile(corpus / f"{base_name}.inputs.npz", corpus / f"{name}.inputs.npz")
    model = onnx.load(str(path), load_external_data=False)
    run_onnxruntime(path, feeds)  # the derived model must run as made
    histogram = op_histogram(model)
    domains = collections.Counter(n.domain or "ai.onnx" for n in model.graph.node)
    return {
        "name": name,
        "file": path.name,
        "inputs_file": f"{name}.inputs.npz",
        "file_bytes": path.stat().st_size,
        "nodes": len(model.graph.node),
        "batchnorm_nodes": histogram.get("BatchNormalization", 0),
        "initializers": len(model.graph.initializer),
        "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
        "op_histogram": histogram,
        "domains": dict(domains),
        "quant_ops": quant_counts(histogram),
        "inputs": {n: [list(a.shape), str(a.dtype)] for n, a in feeds.items()},
        "export_seconds": round(seconds, 2),
        "class": kind,
        "base": base_name,
        "note": note,
    }
