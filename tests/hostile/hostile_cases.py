"""The bad-input suite's cases: each builds broken, hostile or merely unusual files in a folder and
says what every command must answer (exit code, and for a refusal a pattern the one-line message
must match, so the message names the problem).

Layout of a case folder (`root`):
    root/model/model.onnx     the model (also a fuzz bundle: root/model/report.json, for `reduce`)
    root/model/...            its external data, decoys, links
    root/secret.bin           the canary: a FIFO outside the model's folder; opening it for
                              reading is detected by the runner (hostile_runner.py)
    root/out/                 where outputs go

Families: `file` (not a model, corrupt protobufs, bit flips), `link` (symlinked models, decoys),
`extdata` (external-data tricks), `tensor` (raw_data/dims/dtype defects), `names` (invalid UTF-8,
rich markup, control characters), `graph` (structure defects), `cli` (output-path misuse),
`inputs` (inputs files that do not match the model), `valid` (unusual but valid models that must
work), `bombs` (resource bombs: skipped until `onnxrefine.resources` exists; owned by the memory
budget work).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

COMMANDS = ("optimize", "verify", "bisect", "reduce")
OK = (0,)
REFUSED = (2,)


@dataclass
class Case:
    name: str
    family: str
    build: Callable[[Path], None]  # writes root/model/model.onnx and friends
    expect: tuple[int, ...] = REFUSED
    message: str = ""  # regex the error line must match when the exit code is 2
    commands: tuple[str, ...] = COMMANDS
    # argv per command, from the case's paths (None: the runner's default argv)
    argv: Callable[[str, "Paths"], list[str] | None] | None = None
    # extra check after a run that exited 0: (paths, command) -> problem or None
    check: Callable[["Paths", str], str | None] | None = None
    slow: bool = False
    requires: str = ""  # a module that must exist for the case to run (bombs: onnxrefine.resources)


@dataclass
class Paths:
    root: Path

    @property
    def folder(self) -> Path:
        return self.root / "model"

    @property
    def model(self) -> Path:
        return self.folder / "model.onnx"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def canary(self) -> Path:
        return self.root / "secret.bin"


# --- model builders ---------------------------------------------------------------------------

W = (np.arange(16, dtype=np.float32).reshape(4, 4) - 7.5) / 4.0
B = np.array([0.5, -0.25, 1.0, 0.0], dtype=np.float32)


def base_graph(w: np.ndarray = W, *, name_prefix: str = "", w_tensor: TensorProto | None = None,
               input_shape=(1, 4), input_type=TensorProto.FLOAT) -> onnx.ModelProto:
    """X[1,4] -> MatMul W -> Add B -> Identity -> Relu -> Y (the Identity gives optimize work)."""
    p = name_prefix
    w_init = w_tensor if w_tensor is not None else numpy_helper.from_array(w, f"{p}W")
    nodes = [
        helper.make_node("MatMul", [f"{p}X", w_init.name], [f"{p}mm"], name=f"{p}matmul"),
        helper.make_node("Add", [f"{p}mm", f"{p}B"], [f"{p}add"], name=f"{p}add"),
        helper.make_node("Identity", [f"{p}add"], [f"{p}id"], name=f"{p}identity"),
        helper.make_node("Relu", [f"{p}id"], [f"{p}Y"], name=f"{p}relu"),
    ]
    graph = helper.make_graph(
        nodes, f"{p}g", [helper.make_tensor_value_info(f"{p}X", input_type, list(input_shape))],
        [helper.make_tensor_value_info(f"{p}Y", TensorProto.FLOAT, [1, 4])],
        [w_init, numpy_helper.from_array(B, f"{p}B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_model(paths: Paths, model: onnx.ModelProto | bytes, name: str = "model.onnx") -> Path:
    paths.folder.mkdir(parents=True, exist_ok=True)
    target = paths.folder / name
    target.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return target


def external(tensor: TensorProto, location: str, offset: int | None = None,
             length: int | None = None, keep_dims=True) -> TensorProto:
    """`tensor` turned into an external reference (its data removed)."""
    out = TensorProto()
    out.CopyFrom(tensor)
    out.ClearField("raw_data")
    out.ClearField("float_data")
    out.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    for key, value in entries:
        entry = out.external_data.add()
        entry.key, entry.value = key, value
    return out


def w_external(paths: Paths, location: str = "weights.bin", offset=None, length=None,
               data: bytes | None = None, write: bool = True) -> onnx.ModelProto:
    """The base model with W in external data `location` (written unless `write` is False)."""
    raw = W.tobytes()
    if write:
        paths.folder.mkdir(parents=True, exist_ok=True)
        (paths.folder / location).write_bytes(data if data is not None else raw)
    tensor = external(numpy_helper.from_array(W, "W"), location, offset, length)
    return base_graph(w_tensor=tensor)


def bundle_meta(paths: Paths) -> None:
    """A report.json beside the model, so the model folder is also a fuzz bundle for `reduce`."""
    paths.folder.mkdir(parents=True, exist_ok=True)
    (paths.folder / "report.json").write_text(json.dumps(
        {"optimizer": "onnxrefine", "step": "eliminate_identity", "seed": 0, "input_dims": {}}))


def big_weights(shape=(1024, 1024 * 2 + 256)) -> np.ndarray:
    """A >8 MiB weight so the model file is parsed lazily (ir/sizes.py LAZY_LOAD_THRESHOLD_BYTES)."""
    rng = np.random.default_rng(3)
    return rng.standard_normal(shape).astype(np.float32)


def big_model(w: np.ndarray) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["X", "W"], ["mm"], name="matmul"),
             helper.make_node("Identity", ["mm"], ["Y"], name="identity")]
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, w.shape[0]])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, w.shape[1]])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
