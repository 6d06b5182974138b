"""Cases: files that are not models, corrupt protobufs, bit flips, symlinked models and decoys."""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from hostile_cases import (B, OK, REFUSED, W, Case, Paths, base_graph, big_model, big_weights,
                           bundle_meta, w_external, write_model)

ANY_VERDICT = (0, 1, 2)
RUNS = ("optimize", "verify", "bisect")  # reduce answers 2 for a bundle that does not mismatch


def _bytes(paths: Paths, data: bytes) -> None:
    write_model(paths, data)
    bundle_meta(paths)


def _truncated(fraction: float):
    def build(paths: Paths) -> None:
        data = base_graph().SerializeToString()
        _bytes(paths, data[: max(1, int(len(data) * fraction))])
    return build


def _bitflip(seed: int):
    def build(paths: Paths) -> None:
        data = bytearray(base_graph().SerializeToString())
        rng = np.random.default_rng(seed)
        for _ in range(1 + seed % 3):
            position = int(rng.integers(0, len(data)))
            data[position] ^= 1 << int(rng.integers(0, 8))
        _bytes(paths, bytes(data))
    return build


def _ir_version(value: int):
    def build(paths: Paths) -> None:
        model = base_graph()
        model.ir_version = value
        _bytes(paths, model.SerializeToString())
    return build


def _special(kind: str):
    def build(paths: Paths) -> None:
        paths.folder.mkdir(parents=True)
        bundle_meta(paths)
        if kind == "dir":
            paths.model.mkdir()
        elif kind == "fifo":
            os.mkfifo(paths.model)
        elif kind == "devzero":
            os.symlink("/dev/zero", paths.model)
        elif kind == "dangling":
            os.symlink("nowhere.onnx", paths.model)
        elif kind == "canary":  # the model itself is a link to the canary outside the folder
            os.symlink(paths.canary, paths.model)
    return build


def _outputs_of(model_path: str, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})[0]


def _right_weights(expected_w: np.ndarray):
    """After optimize: the output computes with `expected_w`, not with a decoy's weights."""

    def check(paths: Paths, command: str) -> str | None:
        if command != "optimize":
            return None
        x = np.linspace(-1, 1, expected_w.shape[0], dtype=np.float32).reshape(1, -1)
        got = _outputs_of(str(paths.out / "model.opt.onnx"), x)
        want = x @ expected_w
        if expected_w.shape == W.shape:
            want = np.maximum(want + B, 0)
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            return f"output computes with other weights (max diff {np.abs(got - want).max():.3g})"
        return None
    return check


def _link_small(decoy: bool, chain: bool = False, external_data: bool = False):
    """model/model.onnx -> ../runs/epoch3.onnx; with `decoy`, the link's folder holds other
    files of the same names (runs/ is the real folder: they must not be read)."""

    def build(paths: Paths) -> None:
        runs = paths.root / "runs"
        runs.mkdir(parents=True)
        paths.folder.mkdir(parents=True)
        bundle_meta(paths)
        if external_data:
            real = Paths(paths.root / "runs_as_model")
            model = w_external(real)  # writes runs_as_model/model/weights.bin
            shutil.move(str(real.folder / "weights.bin"), runs / "weights.bin")
            shutil.rmtree(real.root)
        else:
            model = base_graph()
        onnx.save(model, runs / "epoch3.onnx")
        if decoy:
            (paths.folder / "weights.bin").write_bytes((W * -3).tobytes())
            onnx.save(base_graph(W * -3), runs / "model.onnx")
        if chain:
            os.symlink("epoch3.onnx", runs / "latest.onnx")
            os.symlink("../runs/latest.onnx", paths.model)
        else:
            os.symlink("../runs/epoch3.onnx", paths.model)
        # an embedded copy of the right model outside both folders, for `verify LINK COPY`
        (paths.root / "out").mkdir()
        onnx.save(base_graph(), paths.root / "out" / "reference.onnx")
    return build


def _link_big(decoy: bool, hardlink: bool = False):
    """A model over the lazy-parse threshold (weights memory-mapped from the model file itself)
    reached through a symlink whose target's folder holds a decoy of the link's name."""

    def build(paths: Paths) -> None:
        runs = paths.root / "runs"
        runs.mkdir(parents=True)
        paths.folder.mkdir(parents=True)
        bundle_meta(paths)
        w = big_weights()
        onnx.save(big_model(w), runs / "epoch3.onnx")
        if decoy:
            onnx.save(big_model(w * -1.0 + 0.5), runs / "model.onnx")
        if hardlink:  # a second hard link to the model (onnx-ir refuses files with nlink > 1)
            os.link(runs / "epoch3.onnx", runs / "epoch3.hardlink.onnx")
        os.symlink("../runs/epoch3.onnx", paths.model)
    return build


def _verify_against_reference(command: str, paths: Paths):
    if command == "verify":
        return ["verify", str(paths.model), str(paths.out / "reference.onnx"), "--no-localize"]
    return None


def _big_check(paths: Paths, command: str) -> str | None:
    if command != "optimize":
        return None
    w = big_weights()
    x = np.linspace(-1, 1, w.shape[0], dtype=np.float32).reshape(1, -1)
    got = _outputs_of(str(paths.out / "model.opt.onnx"), x)
    want = x @ w
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        return f"output computes with other weights (max diff {np.abs(got - want).max():.3g})"
    return None


def cases() -> list[Case]:
    out = [
        Case("empty_file", "file", lambda p: _bytes(p, b""), message=r"model\.onnx.*(empty|not .*ONNX|no graph)"),
        Case("garbage", "file", lambda p: _bytes(p, bytes(range(256)) * 4), message=r"not .*ONNX|protobuf|cannot be read"),
        Case("text_file", "file", lambda p: _bytes(p, b"hello, I am not a model\n"), message=r"not .*ONNX|protobuf|no graph"),
        Case("zeros", "file", lambda p: _bytes(p, bytes(4096)), message=r"not .*ONNX|protobuf|no graph"),
        Case("json_file", "file", lambda p: _bytes(p, b'{"graph": {}}'), message=r"not .*ONNX|protobuf|no graph"),
        Case("model_is_folder", "file", _special("dir"), message=r"not a regular file|folder"),
        Case("model_is_fifo", "file", _special("fifo"), commands=RUNS, message=r"not a regular file"),
        Case("model_is_dev_zero", "file", _special("devzero"), commands=RUNS, message=r"not a regular file"),
        Case("model_dangling_link", "file", _special("dangling"), commands=RUNS, message=r"no such file|not found"),
        Case("model_link_to_canary", "file", _special("canary"), commands=RUNS, message=r"not a regular file"),
        Case("ir_version_huge", "file", _ir_version(2**40), expect=(0, 2), commands=RUNS, message=r"ir_version|IR version"),
        Case("ir_version_max_varint", "file", _ir_version(2**63 - 1), expect=(0, 2), commands=RUNS, message=r"ir_version|IR version"),
        Case("ir_version_zero", "file", _ir_version(0), expect=(0, 2), commands=RUNS, message=r"ir_version|IR version"),
    ]
    for fraction in (0.05, 0.25, 0.5, 0.75, 0.95, 0.99):
        out.append(Case(f"truncated_{int(fraction * 100)}pct", "file", _truncated(fraction),
                        message=r"not .*ONNX|protobuf|truncated|cannot be read|never defined|no graph|model"))
    for seed in range(24):
        out.append(Case(f"bitflip_{seed}", "file", _bitflip(seed), expect=ANY_VERDICT, message=r".+"))
    out += [
        Case("symlinked_model", "link", _link_small(decoy=False), expect=OK,
             check=_right_weights(W), argv=_verify_against_reference, commands=RUNS),
        Case("symlinked_model_decoy", "link", _link_small(decoy=True), expect=OK,
             check=_right_weights(W), argv=_verify_against_reference, commands=RUNS),
        Case("symlink_chain", "link", _link_small(decoy=True, chain=True), expect=OK,
             check=_right_weights(W), argv=_verify_against_reference, commands=RUNS),
        Case("symlinked_model_external_decoy", "link", _link_small(decoy=True, external_data=True),
             expect=OK, check=_right_weights(W), argv=_verify_against_reference, commands=RUNS),
        Case("symlinked_big_model_decoy", "link", _link_big(decoy=True), expect=OK, check=_big_check,
             commands=("optimize", "verify")),
        Case("symlinked_big_model", "link", _link_big(decoy=False), expect=OK, check=_big_check,
             commands=("optimize",)),
        Case("hardlinked_big_model", "link", _link_big(decoy=False, hardlink=True), expect=OK,
             check=_big_check, commands=("optimize",)),
    ]
    return out
