"""Optimizing a model with map-typed values (ZipMap), for the API and the CLI alike: the tensor
part (the core) is optimized and verified as any model, the map operators are set aside and put
back unchanged (ir/maps.py), and the assembled model is checked end to end in onnxruntime before
anyone gets it.

The check: the set-aside nodes are back byte for byte; on generated input sets, each ZipMap's
maps hold, label by label, exactly the row of the tensor it reads (which the core's
verification compared element by element against the original), in both models; any other
set-aside output must be identical to the original's. A model that cannot be split, or
whose assembly fails the check, is handed back unchanged, with a note saying why (PassThrough).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.ir import maps


class PassThrough(Exception):
    """The model is handed back (written) unchanged; the message says why."""


@dataclass
class AroundMaps:
    original: onnx.ModelProto
    aside: maps.SetAside

    def note(self) -> str:
        outputs = ", ".join(v.name for v in self.aside.outputs if v.name in self.aside.produced)
        ops = ", ".join(sorted({n.op_type for n in self.aside.nodes}))
        return (f"map output(s) {outputs}: {ops} set aside (onnx-ir cannot hold maps), the rest optimized and "
                f"verified, then {ops} put back unchanged and checked end to end in onnxruntime")


def split_core(original: onnx.ModelProto):
    """(the core as an onnx-ir model, what to put back); PassThrough where it cannot be split."""
    from onnxrefine.ir import io

    parts = maps.split(original)
    if isinstance(parts, str):
        raise PassThrough(parts)
    core, aside = parts
    try:
        return io.proto_to_ir(core), AroundMaps(original, aside)
    except BadInputError as exc:
        raise PassThrough(f"its tensor part cannot be read either ({exc})") from None


def assembled(model, around: AroundMaps, *, seed: int = 0, dims=None) -> onnx.ModelProto:
    """The optimized core with the set-aside nodes put back, checked (see the module docstring);
    PassThrough when the assembly or its check fails."""
    from onnxrefine.ir import io

    model = maps.assemble(io.to_proto(model), around.aside)
    if isinstance(model, str):
        raise PassThrough(model)
    problem = check_end_to_end(around.original, model, around.aside, seed=seed, dims=dims)
    if problem:
        raise PassThrough(problem)
    return model


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy that also outputs `names` (the tensors the map operators read)."""
    from onnx import helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {v.name for v in copy.graph.output}
    copy.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names if n not in present)
    return copy


def _run(model: onnx.ModelProto, feeds: dict) -> dict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def _zipmap_rows_match(node: onnx.NodeProto, results: dict) -> bool:
    """Each map holds exactly its row of the ZipMap's input, label i -> column i."""
    attributes = {a.name: a for a in node.attribute}
    labels = (list(attributes["classlabels_int64s"].ints) if "classlabels_int64s" in attributes
              else [s.decode() for s in attributes["classlabels_strings"].strings])
    rows = np.asarray(results[node.input[0]])
    maps_out = results[node.output[0]]
    rows = rows.reshape(len(maps_out), -1) if len(maps_out) else rows
    return len(maps_out) == len(rows) and all(
        set(m) == set(labels) and np.array_equal(np.asarray([m[label] for label in labels], dtype=rows.dtype), row,
                                                 equal_nan=True)
        for m, row in zip(maps_out, rows))


def check_end_to_end(original: onnx.ModelProto, assembled: onnx.ModelProto, aside: maps.SetAside, *,
                     seed: int = 0, dims=None) -> str | None:
    """None when the assembled model passes (see the module docstring), else what failed."""
    from onnxrefine.verify.inputs import generate_inputs

    put_back = {tuple(n.output): n.SerializeToString() for n in assembled.graph.node}
    for node in aside.nodes:
        if put_back.get(tuple(node.output)) != node.SerializeToString():
            return f"the set-aside {node.op_type} node changed"
    try:
        input_sets = generate_inputs(original, seed=seed, dims=dims)
        for feeds in input_sets:
            before = _run(_with_outputs(original, aside.read), feeds)
            after = _run(_with_outputs(assembled, aside.read), feeds)
            for node in aside.nodes:
                if (node.domain, node.op_type) in maps.MAP_PRODUCERS:
                    if not (_zipmap_rows_match(node, before) and _zipmap_rows_match(node, after)):
                        return f"{node.op_type} output {node.output[0]} does not repack its input exactly"
            for value in aside.outputs:
                if value.name in aside.produced and not _same(before[value.name], after[value.name], aside, value.name):
                    return f"set-aside output {value.name} differs after the optimization"
    except Exception as exc:  # noqa: BLE001 - onnxruntime refusing the assembled model is a failed check
        from onnxrefine.ir.load_checks import first_line

        return f"the assembled model does not run in onnxruntime ({first_line(exc)})"
    return None


def _same(before, after, aside: maps.SetAside, name: str) -> bool:
    """A ZipMap output was checked through its input; any other set-aside output must be identical."""
    if any(name == n.output[0] and (n.domain, n.op_type) in maps.MAP_PRODUCERS for n in aside.nodes):
        return True
    if isinstance(before, np.ndarray) or isinstance(after, np.ndarray):
        return np.array_equal(np.asarray(before), np.asarray(after), equal_nan=True)
    return before == after
