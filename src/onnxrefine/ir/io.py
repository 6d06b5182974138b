"""Loading and saving models: validated on the way in, written atomically on the way out.

Loading parses the protobuf once, checks it (external-data locations, undefined inputs, cycles),
densifies sparse initializers (onnx-ir has no sparse initializers and would drop them), and hands
the proto to onnx-ir. External tensors stay lazy and memory-mapped: their bytes are read only when
a rewrite needs their values.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path
from typing import Union

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnxrefine import atomic
from onnxrefine.errors import BadInputError
from onnxrefine.ir import heap, protoview, traversal, validate, wire

ModelLike = Union[str, os.PathLike, onnx.ModelProto, ir.Model]


def load_model(path: str | os.PathLike) -> ir.Model:
    """Read a model file into onnx-ir, refusing anything malformed with a one-line BadInputError.
    The path runs one way: read and check (ir/load.py: the real path, read through one open file,
    every tensor checked), then convert (proto_to_ir), then pin external tensors to the files the
    checks opened."""
    from onnxrefine.ir import load, load_checks

    proto, folder, files = load.load_checked_proto(path)
    try:
        model = proto_to_ir(proto, base_dir=folder)
    except BadInputError:
        raise
    except Exception as exc:  # onnx-ir and numpy on input the checks did not foresee
        raise BadInputError(f"{os.fspath(path)}: model cannot be read ({load_checks.first_line(exc)})") from None
    load.pin_external_tensors(model, files)
    return model


def proto_to_ir(proto: onnx.ModelProto, *, base_dir: str = "") -> ir.Model:
    """Validate a ModelProto and convert it to onnx-ir (the proto is not modified)."""
    if proto.graph.sparse_initializer or validate.has_nested_sparse_initializers(proto):
        from onnxrefine.ir import peak  # densifying must fit the memory budget

        peak.check_sparse(proto)
        densified = onnx.ModelProto()
        densified.CopyFrom(proto)
        validate.densify_sparse_initializers(densified)
        proto = densified
    validate.check_graph_structure(proto)
    with _quiet_ir_logging():
        try:
            model = ir.serde.deserialize_model(proto)
        except Exception as exc:  # onnx-ir raises several types on malformed input
            from onnxrefine.ir import maps

            maps.check_no_maps(proto)  # a valid model with maps: say so (the CLI optimizes around them)
            raise BadInputError(f"model cannot be read: {_first_line(exc)}") from None
    if base_dir:
        ir.external_data.set_base_dir(model.graph, base_dir)
    note_unkept_parts(proto, model)
    return model


DROPPED_KEY = "onnxrefine.dropped"


def note_unkept_parts(proto: onnx.ModelProto, model: ir.Model) -> None:
    """Record in the model's metadata what of the file the IR does not hold, so the run says so
    (the summary's notes, the report's "dropped") instead of losing it silently."""
    dropped = []
    if len(proto.training_info):
        # onnx-ir has no training_info; the optimized graph's initializers would not match the
        # training algorithm's bindings anyway (folds rename and replace weights).
        dropped.append(f"training_info ({len(proto.training_info)} entr{'y' if len(proto.training_info) == 1 else 'ies'}): "
                       "the optimized model is for inference; its initializers no longer match the training "
                       "algorithm's bindings")
    if dropped:
        model.meta[DROPPED_KEY] = dropped


def dropped_parts(model: ir.Model) -> list[str]:
    return list(model.meta.get(DROPPED_KEY) or [])


def to_ir(model: ModelLike) -> tuple[ir.Model, str]:
    """Return (ir model, kind) where kind tells `from_ir` which type to give back."""
    from onnxrefine.ir import load_checks  # the checks a file gets (ir/load.py), on every kind of model

    if isinstance(model, ir.Model):
        load_checks.check_ir_model(model)
        return model, "ir"
    if isinstance(model, onnx.ModelProto):
        # External tensors of an in-memory proto are read relative to the working folder.
        load_checks.check_model(model, Path.cwd())
        # onnx-ir wraps tensors of the proto without copying, and renaming a value renames its
        # tensor: the wrappers are swapped for read-only views (ir/protoview.py), so the caller's
        # proto is never modified and its weights are not copied (they used to be, whole).
        ir_model = proto_to_ir(model)
        protoview.detach_tensors(ir_model)
        return ir_model, "proto"
    if isinstance(model, (str, os.PathLike)):
        return load_model(model), "path"
    raise BadInputError(f"expected a path, onnx.ModelProto or onnx_ir.Model, got {type(model).__name__}")


def from_ir(model: ir.Model, kind: str) -> ir.Model | onnx.ModelProto:
    if kind == "ir":
        return model
    # The model was made by to_ir and nobody else holds it: its weights are handed over to the
    # proto one at a time instead of being held twice.
    return to_proto(model, consume=True)


def to_proto(model: ir.Model, *, consume: bool = False) -> onnx.ModelProto:
    """A self-contained ModelProto: tensors memory-mapped from the input file are embedded, so
    the proto stays valid wherever it is saved or run.

    `consume=True` (a model nobody will use again) serializes the main graph's initializers one
    at a time and drops each from the model once it is in the proto, so the peak holds each
    weight about once rather than in the model and in the proto together; the model is left
    without its main-graph initializers."""
    if not consume:
        wire.embed_external_tensors(model)
        return wire.serialize_model(model)
    wire.embed_external_tensors(model, main_graph=False)
    initializers = list(model.graph.initializers.values())
    for value in initializers:
        model.graph.initializers.pop(value.name)
    proto = wire.serialize_model(model)
    for value in initializers:
        tensor = proto.graph.initializer.add()
        if protoview.copy_to(value.const_value, tensor, value.name):  # the caller's unchanged weight
            value.const_value = None
            continue
        serialized = b"".join(wire.tensor_chunks(value))
        big = len(serialized) >= heap.RELEASE_AFTER_BYTES
        # The model's copy (a folded array, a mapped page) goes before the proto's comes: one
        # extra copy of the weight at a time, not two. Freed memory sits in the heap between live
        # weights until released (ir/heap.py).
        value.const_value = None
        if big:
            heap.release_freed()
        tensor.ParseFromString(serialized)
        del serialized
        if big:
            heap.release_freed()
    return proto


def save_model(model: ir.Model, path: str | os.PathLike, *, input_path: str | os.PathLike | None = None,
               layout=None) -> int:
    """Write `model` to `path` atomically (temp files in the same folder, then renames); returns the
    bytes written, external data included.

    Refuses to overwrite the input model. `layout` (external_save.Layout) says where the weights go:
    by default as in the input (external data stays external, in `<name>.data` beside the model),
    and always outside the model file when they exceed the protobuf limit. Unchanged weights are
    copied file to file (ir/external_save.py).
    """
    from onnxrefine.ir import external_save

    path = Path(path)
    if input_path is not None and _same_file(path, Path(input_path)):
        raise BadInputError(f"{path}: refusing to overwrite the input model; choose another output path")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise BadInputError(f"{path}: output folder does not exist")
    return external_save.save(model, path, input_path=input_path, layout=layout)


class WrittenModelInvalid(Exception):
    """The optimized model, written, does not load (onnxrefine's load checks, onnx's checker or an
    onnxruntime session refuse it where they accept the input): a fault of onnxrefine's, so not an
    OnnxRefineError (the CLI's exit code 3); nothing is written."""


def check_staged(stage, path: str | os.PathLike, input_path: str | os.PathLike | None = None) -> None:
    """Before `stage` (atomic.staging) commits: check that the model staged for `path` loads with
    its staged data files. They are moved under their final names into a scratch folder beside
    them for the check and back after it (the final names may still hold the previous outputs;
    a hard link would not do: onnx's checker refuses external data with more than one link)."""
    path = Path(path)
    folder = path.resolve().parent
    scratch = atomic.folder_beside(path, folder)
    moved: list[tuple[str, str]] = []
    try:
        for temp, target in stage.staged_files():
            if target.resolve().parent == folder:
                os.replace(temp, os.path.join(scratch, target.name))
                moved.append((temp, os.path.join(scratch, target.name)))
        check_loads(os.path.join(scratch, path.name), input_path)
    finally:
        for temp, checked in moved:
            os.replace(checked, temp)
        shutil.rmtree(scratch, ignore_errors=True)


def check_loads(path: str | os.PathLike, input_path: str | os.PathLike | None = None) -> None:
    """WrittenModelInvalid unless the model at `path` passes onnxrefine's own load checks, onnx's
    checker, and builds an onnxruntime session of its main graph (nothing run). A check the input
    model fails as well (a model onnxruntime has no kernel for, an output without a shape for the
    checker) does not count against the output."""
    problems = load_problems(path)
    if problems and input_path is not None:
        known = load_problems(input_path)
        problems = {name: problem for name, problem in problems.items() if name not in known}
    if problems:
        name, problem = next(iter(problems.items()))
        raise WrittenModelInvalid(f"the optimized model does not load ({name}: {problem}); nothing written")


def load_problems(path: str | os.PathLike) -> dict[str, str]:
    """{check: first line of what it says} for each check the model at `path` fails. The checks see
    the graph without the bytes of its large tensors, which stay in the file, memory-mapped by
    onnxruntime (a 440 MB BERT: 0.5 s and 0.1 GB; reading the file, checker and session took
    9 s and 0.9 GB)."""
    from onnxrefine.ir import load

    try:
        proto, folder, _ = load.load_checked_proto(path)
    except BadInputError as exc:
        return {"onnxrefine's load checks": str(exc)}
    problems = {}
    # The large tensors are references into the model file: given a proto, both resolve them
    # against the working folder.
    with contextlib.chdir(folder):
        for name, check in (("onnx's checker", onnx.checker.check_model), ("onnxruntime", _session)):
            try:
                check(proto)
            except Exception as exc:  # noqa: BLE001 - both raise many types
                problems[name] = _first_line(exc)
    return problems


def _session(proto: onnx.ModelProto) -> None:
    from onnxrefine.runtime import require_onnxruntime

    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    options.add_session_config_entry("session.disable_prepacking", "1")  # a load check: no weights repacked
    # and no thread pool: its threads start, spin and join for a session that never runs
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    ort.InferenceSession(proto.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])


def tensor_bytes(model: ir.Model) -> int:
    total = 0
    for site in traversal.graphs(model):
        for value in site.graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return total


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


@contextlib.contextmanager
def _quiet_ir_logging():
    """onnx-ir logs warnings for invalid models; we report those ourselves as errors."""
    logger = logging.getLogger("onnx_ir")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)
