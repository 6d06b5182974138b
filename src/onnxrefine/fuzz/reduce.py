"""Shrink a failing fuzz case to a small model on which the same optimizer step still mismatches.

Greedy delta debugging over graph edits, each kept only when the edited model is still valid
(checker, strict shape inference, onnxruntime load and run) and the step still yields `mismatch`
under `verify_models` (so the original's controls stay clean: an unstable original is not a
mismatch) of the same kind (wrong values, wrong shape, broken model). Edits, repeated to a fixed
point: keep one output; move the output up to an earlier node's value; cut a node by turning the
values it produces into graph inputs of the recorded shape and type (everything only it fed then goes
away); bypass a node whose input has its output's type and shape; prune dead nodes, unused
initializers and unused inputs. Then shrinking, also to a fixed point: static input dims to 1 or
half, symbolic dim bindings to 1, float constants to all ones or to one decimal.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import helper

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.generator import random_inputs
from onnxrefine.atomic import staged_folder
from onnxrefine.ir import contained
from onnxrefine.verify.ort import inference_session

Step = Callable[[onnx.ModelProto], onnx.ModelProto]


@dataclass
class ReduceResult:
    model: onnx.ModelProto
    candidate: onnx.ModelProto | None
    checks: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    kind: str = ""   # campaign.mismatch_kind of the case, kept by every accepted edit
    dims: dict = field(default_factory=dict)   # symbolic dim bindings after shrinking
    log: list = field(default_factory=list)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    return clone


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes no output depends on, then unused initializers and graph inputs."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            kept.append(node)
            needed.update(node.input)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    needed.update(_outer_names(attr.g))
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    inputs = [i for i in graph.input if i.name in needed]
    del graph.input[:]
    graph.input.extend(inputs)
    return model


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names.update(_outer_names(attr.g))
    return names


def runtime_types(model: onnx.ModelProto, dims: dict, seed: int) -> dict[str, tuple[int, tuple]]:
    """Element type and concrete shape of every main-graph value, from one onnxruntime run."""
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    probe = _copy(model)
    declared = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for out in node.output:
            if out and out not in declared:
                probe.graph.output.append(onnx.ValueInfoProto(name=out))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    feeds = random_inputs(model, dims, seed)
    from onnxrefine import resources  # every value is an output here: all of them held at once
    from onnxrefine.ir import peak

    resources.check_runnable(peak.estimate_peak(probe, feeds), "the bundle's model")
    session = inference_session(probe, options)
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, feeds)))
    values.update(feeds)
    return {name: (helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), tuple(np.asarray(v).shape))
            for name, v in values.items()}


def valid(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
        contained.infer_shapes(model, check_type=True, strict_mode=True)  # a reduced model may abort it
        return True
    except Exception:
        return False


class StableInputs:
    """The input sets every check of a reduction verifies on: generated once from the case's own
    model (as its bundle's inputs.npz was), and restricted to the inputs an edited model still
    has. Generating them afresh for each edited model gave other values to the inputs left when an
    unused one was dropped (the generator draws per input position), so the mismatch could vanish
    with an edit that did not touch it, or appear with one that did. Inputs an edit creates (a cut
    makes a value a graph input) are generated for that model, and so is an input whose shape an
    edit changed, or every input when the dims change (a shrink: those values cannot stay)."""

    def __init__(self, model: onnx.ModelProto, seed: int, trials: int):
        self.model, self.seed, self.trials = model, seed, trials
        self._pool: dict[tuple, list] = {}

    def for_model(self, model: onnx.ModelProto, dims: dict) -> list[dict]:
        from onnxrefine.verify.inputs import generate_labelled_inputs

        key = tuple(sorted(dims.items()))
        if key not in self._pool:  # new dims (a shrink): new values, drawn for the model of that moment
            source = self.model if not self._pool else model
            self._pool[key] = generate_labelled_inputs(source, seed=self.seed, dims=dims, trials=self.trials)
        pool = self._pool[key]
        shapes = _declared_shapes(model, dims)
        keep = [name for name in shapes if name in pool[0][1] and _fits(pool[0][1][name].shape, shapes[name])]
        if len(keep) == len(shapes):
            return [{name: feeds[name] for name in shapes} for _, feeds in pool]
        fresh = generate_labelled_inputs(model, seed=self.seed, dims=dims, trials=self.trials)
        if len(fresh) != len(pool):
            return [feeds for _, feeds in fresh]
        return [{name: old[name] if name in keep else new[name] for name in shapes}
                for (_, old), (_, new) in zip(pool, fresh)]


def _declared_shapes(model: onnx.ModelProto, dims: dict) -> dict[str, tuple]:
    """Graph input name -> declared shape (ints; a symbol as its value in `dims`, else None)."""
    initializers = {init.name for init in model.graph.initializer}
    shapes = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims_of = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
        shapes[value.name] = tuple(d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param)
                                   for d in dims_of)
    return shapes


def _fits(shape: tuple, declared: tuple) -> bool:
    return len(shape) == len(declared) and all(d is None or d == s for s, d in zip(shape, declared))


def still_fails(model: onnx.ModelProto, step: Step, dims: dict, seed: int, trials: int,
                kind: str | None = None, inputs: StableInputs | None = None):
    """The step's output when the step still gives `mismatch` on this valid model, else None.

    With `kind` (see `campaign.mismatch_kind`), only a mismatch of that kind counts, so that a
    wrong-values case does not drift into another bug (a candidate that no longer loads).
    The check runs contained (ir/contained.py): an edit on which onnxruntime or the step crashes
    the process is an edit that does not keep the failure, and the reduction goes on.
    """
    try:
        sets = inputs.for_model(model, dims) if inputs is not None and valid(model) else None
        found = contained.call(_failure, model, step, dims, seed, trials, sets, what="the check")
    except contained.NativeCrash:
        return None
    except BadInputError:  # inputs that cannot be made for the edited model (too large, say)
        return None
    if found is None or kind is not None and found[1] != kind:
        return None
    return found[0]


def _failure(model, step, dims, seed, trials, sets: list[dict] | None = None):
    """(candidate, mismatch kind) when the step gives `mismatch` on this valid model."""
    from onnxrefine.fuzz.campaign import mismatch_kind
    from onnxrefine.verify import verify_models

    if not valid(model):
        return None
    try:
        candidate = step(_copy(model))
    except Exception:
        return None
    from onnxrefine.resources import ResourceLimitError

    try:
        report = verify_models(model, candidate, inputs=sets, seed=seed, dims=dims, trials=trials)
    except ResourceLimitError:
        raise  # over the memory/time budget: say so (edits only shrink the model)
    except BadInputError:
        return None   # the edited original no longer loads or runs
    return (candidate, mismatch_kind(report)) if report.verdict == "mismatch" else None


def _keep_output(model, index):
    edited = _copy(model)
    keep = edited.graph.output[index]
    del edited.graph.output[:]
    edited.graph.output.append(keep)
    return prune(edited)


def _retarget(model, index, types):
    """Make node `index`'s first output the only graph output (everything after it goes away)."""
    node = model.graph.node[index]
    name = node.output[0] if node.output else ""
    if not name or name not in types or name in {o.name for o in model.graph.output}:
        return None
    edited = _copy(model)
    dtype, shape = types[name]
    del edited.graph.output[:]
    edited.graph.output.append(helper.make_tensor_value_info(name, dtype, list(shape)))
    return prune(edited)


def _cut(model, index, types):
    """Remove node `index`; the values it produced become graph inputs."""
    edited = _copy(model)
    node = edited.graph.node[index]
    outputs = [o for o in node.output if o]
    if any(o not in types for o in outputs):
        return None
    del edited.graph.node[index]
    graph_outputs = {o.name for o in edited.graph.output}
    if any(o in graph_outputs for o in outputs):
        return None
    for out in outputs:
        dtype, shape = types[out]
        edited.graph.input.append(helper.make_tensor_value_info(out, dtype, list(shape)))
    return prune(edited)


def _bypass(model, index, types):
    """Remove node `index`, feeding its consumers one of its inputs of identical type and shape."""
    node = model.graph.node[index]
    if len(node.output) != 1 or node.output[0] not in types:
        return None
    if node.output[0] in {o.name for o in model.graph.output}:
        return None
    wanted = types[node.output[0]]
    initial = {t.name for t in model.graph.initializer}
    for name in node.input:
        if name and name not in initial and types.get(name) == wanted:
            edited = _copy(model)
            del edited.graph.node[index]
            for other in edited.graph.node:
                for slot, used in enumerate(other.input):
                    if used == node.output[0]:
                        other.input[slot] = name
            return prune(edited)
    return None


def _forget_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop declared intermediate shapes and output dim sizes (the checker wants an output shape,
    inference recomputes the sizes after a shape edit); ranks stay."""
    del model.graph.value_info[:]
    for out in model.graph.output:
        for dim in out.type.tensor_type.shape.dim:
            dim.Clear()
    return model


def _shrink_dim(model, input_index, axis, size):
    """Graph input `input_index` with static dim `axis` set to `size` (smaller than it was)."""
    edited = _copy(model)
    dim = edited.graph.input[input_index].type.tensor_type.shape.dim[axis]
    if not dim.HasField("dim_value") or dim.dim_value <= size:
        return None
    dim.dim_value = size
    return _forget_shapes(edited)


def _float_constants(model) -> list[tuple[str, onnx.TensorProto]]:
    """Float initializers and Constant-node tensors with more than one element, by name."""
    found = [(t.name, t) for t in model.graph.initializer]
    for node in model.graph.node:
        if node.op_type == "Constant":
            found.extend((node.output[0], a.t) for a in node.attribute if a.name == "value")
    return [(name, t) for name, t in found
            if helper.tensor_dtype_to_np_dtype(t.data_type).kind == "f" and np.prod(t.dims) > 1]


def _plain_constant(model, name, how: str):
    """The float constant `name` with simpler values: all ones, or rounded to one decimal."""
    edited = _copy(model)
    for found, tensor in _float_constants(edited):
        if found == name:
            array = onnx.numpy_helper.to_array(tensor)
            simpler = np.ones_like(array) if how == "ones" else np.round(array.astype(np.float64), 1).astype(array.dtype)
            if np.array_equal(simpler, array):
                return None
            tensor.CopyFrom(onnx.numpy_helper.from_array(simpler, tensor.name))
            return edited
    return None


def _shrink(result, attempt, dims: dict) -> bool:
    """Smaller input dims (static ones to 1 or half; symbolic bindings to 1), then simpler float
    constants. Returns whether anything was kept."""
    changed = False
    initial = {t.name for t in result.model.graph.initializer}
    for index, info in enumerate(result.model.graph.input):
        if info.name in initial:
            continue
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 1:
                for size in sorted({1, dim.dim_value // 2}):
                    if attempt(_shrink_dim(result.model, index, axis, size), f"{info.name} dim {axis} -> {size}"):
                        changed = True
                        break
    for symbol, size in sorted(dims.items()):
        if size > 1:
            dims[symbol] = 1
            if attempt(_copy(result.model), f"{symbol} -> 1"):
                changed = True
            else:
                dims[symbol] = size
    for name, _ in _float_constants(result.model):
        for how in ("ones", "rounded"):
            if attempt(_plain_constant(result.model, name, how), f"constant {name} {how}"):
                changed = True
                break
    return changed


def reduce_model(model: onnx.ModelProto, step: Step, *, dims: dict, seed: int, trials: int = 2,
                 max_checks: int = 300, time_budget_s: float | None = None,
                 progress: Callable[[str], None] | None = None, shrink: bool = True) -> ReduceResult:
    """Greedy reduction of a model on which `step` gives a mismatch; with `shrink`, then smaller
    input dims and simpler float constants."""
    started = time.perf_counter()
    dims = dict(dims)   # shrinking rebinds symbols; the caller's dict stays as it was
    result = ReduceResult(model=prune(_copy(model)), candidate=None, nodes_before=len(model.graph.node))
    inputs = StableInputs(result.model, seed, trials)
    try:  # contained like every later check: the parent never runs onnxruntime itself
        first = contained.call(_failure, result.model, step, dims, seed, trials, inputs.for_model(result.model, dims),
                               what="the check")
    except contained.NativeCrash as exc:
        raise BadInputError(f"the case does not give a mismatch for this step: {exc}") from None
    result.checks = 1
    if first is None:
        raise BadInputError("the case does not give a mismatch for this step (nothing to reduce)")
    result.candidate, result.kind = first

    def budget_left() -> bool:
        over_time = time_budget_s is not None and time.perf_counter() - started > time_budget_s
        return result.checks < max_checks and not over_time

    def attempt(edited, what: str) -> bool:
        if edited is None or not budget_left():
            return False
        result.checks += 1
        candidate = still_fails(edited, step, dims, seed, trials, result.kind, inputs)
        if candidate is None:
            return False
        result.model, result.candidate = edited, candidate
        result.log.append(f"{what}: {len(edited.graph.node)} nodes")
        if progress:
            progress(result.log[-1])
        return True

    changed = True
    while changed and budget_left():
        changed = False
        if len(result.model.graph.output) > 1:
            for index in range(len(result.model.graph.output)):
                if attempt(_keep_output(result.model, index), f"kept output {index}"):
                    changed = True
                    break
        for edit, name in ((_retarget, "output moved up to"), (_cut, "cut"), (_bypass, "bypassed")):
            index = 0
            while index < len(result.model.graph.node) and budget_left():
                try:
                    types = contained.call(runtime_types, result.model, dims, seed, what="onnxruntime")
                except Exception:
                    break
                op = result.model.graph.node[index].op_type
                if attempt(edit(result.model, index, types), f"{name} {op}"):
                    changed = True
                else:
                    index += 1
    if shrink:
        while budget_left() and _shrink(result, attempt, dims):
            pass
    result.dims = dict(dims)
    result.nodes_after = len(result.model.graph.node)
    return result


def _load_bundle(bundle: str) -> tuple[onnx.ModelProto, dict]:
    model_path, meta_path = os.path.join(bundle, "model.onnx"), os.path.join(bundle, "report.json")
    if not os.path.isfile(model_path) or not os.path.isfile(meta_path):
        raise BadInputError(f"{bundle} is not a fuzz bundle (needs model.onnx and report.json)")
    from onnxrefine.ir.load import load_full_proto

    model = load_full_proto(model_path)  # a one-line BadInputError naming what is wrong with it
    try:
        with open(meta_path) as handle:
            meta = json.load(handle)
        meta["optimizer"], meta["step"], int(meta["seed"])  # a bundle without them is unreadable
    except (OSError, ValueError, KeyError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
        raise BadInputError(f"{bundle}: unreadable bundle ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # protobuf decode errors have no common public base class
        raise BadInputError(f"{bundle}: unreadable bundle ({type(exc).__name__})") from None
    return model, meta


def _optimize_command(meta: dict) -> str:
    from onnxrefine.triage.adapters import get_adapter

    return get_adapter(meta["optimizer"]).command(meta["step"]).replace(
        "original.onnx", "model.onnx").replace("optimized.onnx", "model.opt.onnx")


def reduce_bundle(bundle: str, *, out_dir: str | None = None, max_checks: int = 300,
                  time_budget_s: float | None = None, progress=None) -> tuple[ReduceResult, str]:
    """Reduce a `onnxrefine fuzz` bundle; writes <bundle>/reduced/ (atomically) and returns it."""
    from onnxrefine.fuzz.campaign import optimizer_steps

    model, meta = _load_bundle(bundle)
    steps = dict(optimizer_steps(meta["optimizer"], tuple(meta.get("passes") or ()) or None))
    if meta["step"] not in steps:
        raise BadInputError(f"{meta['optimizer']} has no step {meta['step']!r}")
    result = reduce_model(model, steps[meta["step"]], dims=meta.get("input_dims") or {},
                          seed=int(meta["seed"]), trials=int(meta.get("trials", 2)),
                          max_checks=max_checks, time_budget_s=time_budget_s, progress=progress)
    final = out_dir or os.path.join(bundle, "reduced")
    with staged_folder(final, replace=True) as staging:
        onnx.save(result.model, os.path.join(staging, "model.onnx"))
        onnx.save(result.candidate, os.path.join(staging, "model.opt.onnx"))
        info = {**{k: meta[k] for k in ("optimizer", "step", "seed") if k in meta},
                "input_dims": result.dims,
                "kind": result.kind,
                "nodes_before": result.nodes_before, "nodes_after": result.nodes_after,
                "checks": result.checks, "log": result.log}
        with open(os.path.join(staging, "reduce.json"), "w") as handle:
            json.dump(info, handle, indent=2)
        dims = ",".join(f"{k}={v}" for k, v in sorted(info["input_dims"].items()))
        with open(os.path.join(staging, "README.md"), "w") as handle:
            handle.write(
                f"# Reduced repro: {meta['optimizer']} step `{meta['step']}`\n\n"
                f"{result.nodes_before} nodes reduced to {result.nodes_after} "
                f"in {result.checks} checks; the step still gives `mismatch` ({result.kind}).\n\n```sh\n"
                f"{_optimize_command(meta)}\n"
                f"onnxrefine verify model.onnx model.opt.onnx --seed {meta['seed']}"
                f"{' --dims ' + dims if dims else ''}\n```\n")
    return result, final
