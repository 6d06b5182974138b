"""Passes that edit the model's interface on purpose, and the view verification pairs them through.

onnxoptimizer's interface passes, done right:
- `rename_input_output`: inputs and outputs renamed by position to `input_%d` / `output_%d` (or the
  patterns in OPTIMIZER_RENAME_INPUT_PATTERN / OPTIMIZER_RENAME_OUTPUT_PATTERN, onnxoptimizer's
  options). onnxoptimizer renames into a name an intermediate already holds (two values, one name:
  an invalid model) and renames a value that is both an input and an output twice; both refused.
- `rewrite_input_dtype`: int64 inputs become int32 inputs followed by a Cast to int64 (onnxoptimizer
  retypes an input that is also a graph output, changing that output's dtype too; refused). Values
  outside the int32 range can no longer be fed: that is the edit asked for.
- `split_init` / `split_predict`: the init net (what initializers alone compute: no graph input, no
  random or control-flow operator) and the predict net (the rest, reading the boundary as inputs).
  onnxoptimizer treats custom-domain nodes and model-local function calls as pure; a custom op may
  be stateful or random, and a function may hold random operators, so here they are predict-net.
Every edit is recorded in the model's metadata under `onnxrefine.interface` (JSON: renamed inputs and
outputs new -> original, retyped inputs, the split and its boundary), which `original_interface`
reads to give verification a view of the result with the original's interface.

Two passes that leave the interface alone sit here because they only name or describe it:
`set_unique_name_for_nodes` (every node named, no name twice) and `lift_lexical_references`
(the outer values each subgraph captures, written to metadata `onnxrefine.captures`: onnxoptimizer
writes them as a `__control_inputs` attribute that onnx's checker rejects; a reference nothing
defines is refused when the model is read, as onnxoptimizer's pass throws on it).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.passes import graphpass
from onnxrefine.passes.registry import GRAPH, INTERFACE, PassContext, PassSpec
from onnxrefine.rewrite.rule import EXACT

METADATA_KEY = "onnxrefine.interface"
CAPTURES_KEY = "onnxrefine.captures"
RENAME_PATTERN_ENV = {"input": "OPTIMIZER_RENAME_INPUT_PATTERN", "output": "OPTIMIZER_RENAME_OUTPUT_PATTERN"}
IMPURE_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli", "Loop", "If", "Scan"})


def interface_record(model: ir.Model) -> dict:
    text = model.metadata_props.get(METADATA_KEY)
    return json.loads(text) if text else {}


def _record(model: ir.Model, **changes) -> None:
    """Merge `changes` into the metadata record; renames compose (the newest name maps to the
    name the original had)."""
    record = interface_record(model)
    for key in ("inputs", "outputs"):
        if key in changes:
            earlier, renamed = record.get(key, {}), changes.pop(key)
            kept = {name: first for name, first in earlier.items() if name not in renamed.values()}
            record[key] = kept | {new: earlier.get(old, old) for new, old in renamed.items()}
    record.update(changes)
    model.metadata_props[METADATA_KEY] = json.dumps(record, sort_keys=True)


# --- rename_input_output ------------------------------------------------------------------------


def rename_pattern(kind: str) -> tuple[str, str]:
    """(prefix, suffix) around the position: the environment's pattern when it holds `%d`
    (onnxoptimizer's rule), else `input_%d` / `output_%d`."""
    pattern = os.environ.get(RENAME_PATTERN_ENV[kind], "")
    if "%d" not in pattern:
        pattern = f"{kind}_%d"
    prefix, _, suffix = pattern.partition("%d")
    return prefix, suffix


def run_rename_input_output(pctx: PassContext) -> int:
    graph = pctx.model.graph
    inputs = [v for v in graph.inputs if not v.is_initializer()]  # an input with an initializer is a weight
    plan = {}
    for kind, values in (("input", inputs), ("output", list(graph.outputs))):
        prefix, suffix = rename_pattern(kind)
        for index, value in enumerate(values if kind == "output" else graph.inputs):
            if kind == "input" and value.is_initializer():
                continue
            position = index if kind == "output" else inputs.index(value)
            plan[id(value)] = (value, f"{prefix}{position}{suffix}", kind)
    try:
        for value, new_name, kind in plan.values():
            if value.is_graph_input() and value.is_graph_output():
                raise RewriteRefused("rename.input_is_output",
                                     f"'{value.name}' is both an input and an output: it cannot take both names")
        targets = [new for _, new, _ in plan.values()]
        if len(set(targets)) != len(targets):
            raise RewriteRefused("rename.pattern_collision", "the rename patterns give two values one name")
        renamed = {id(v) for v, _, _ in plan.values()}
        others = set()
        for site in traversal.graphs(pctx.model):
            g = site.graph
            for v in list(g.inputs) + list(g.outputs) + list(g.initializers.values()):
                if id(v) not in renamed and v.name:
                    others.add(v.name)
            for node in g:
                others.update(v.name for v in node.outputs if id(v) not in renamed and v.name)
        taken = sorted(set(targets) & others)
        if taken:
            raise RewriteRefused("rename.name_taken", f"'{taken[0]}' already names another value of the model")
    except RewriteRefused as refusal:
        graphpass.log_refuse(pctx, "rename_input_output", graph, _anchor(graph), refusal)
        return 0
    changes = {"inputs": {}, "outputs": {}}
    for value, new_name, kind in plan.values():
        if value.name != new_name:
            changes[f"{kind}s"][new_name] = value.name
            value.name = new_name
    if not changes["inputs"] and not changes["outputs"]:
        return 0
    pctx.names.absorb(pctx.model)
    _record(pctx.model, **changes)
    pctx.log.apply(rule="rename_input_output", kind=EXACT, graph=graph.name or "", root="<interface>",
                   removed=[], added=sorted(changes["inputs"]) + sorted(changes["outputs"]))
    return len(changes["inputs"]) + len(changes["outputs"])


def _anchor(graph: ir.Graph) -> ir.Node:
    """The node a whole-graph refusal is logged against (the log keys refusals by node)."""
    node = next(iter(graph), None)
    return node if node is not None else ir.Node("", "Identity", [], name="<interface>")


# --- rewrite_input_dtype ------------------------------------------------------------------------


def run_rewrite_input_dtype(pctx: PassContext) -> int:
    graph = pctx.model.graph
    retyped = {}
    for value in list(graph.inputs):
        if value.is_initializer() or value.dtype != ir.DataType.INT64:
            continue
        if value.is_graph_output():
            graphpass.log_refuse(pctx, "rewrite_input_dtype", graph, _anchor(graph),
                                 f"'{value.name}' is also a graph output: retyping it would retype the output",
                                 guard="retype.input_is_output")
            continue
        widened = ir.Value(name=pctx.names.fresh(f"{value.name}_int64"), type=ir.TensorType(ir.DataType.INT64),
                           shape=value.shape)
        value.replace_all_uses_with(widened)
        cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", ir.DataType.INT64)], outputs=[widened],
                       name=pctx.names.fresh(f"{value.name}_Cast"))
        edit.insert_nodes(graph, [cast], before=next(iter(graph), None))
        value.type = ir.TensorType(ir.DataType.INT32)
        # Keyed by the original's name, so the record holds whichever runs first, rename or retype.
        retyped[interface_record(pctx.model).get("inputs", {}).get(value.name, value.name)] = ["int64", "int32"]
        graphpass.log_apply(pctx, "rewrite_input_dtype", EXACT, graph, cast, [cast.name])
    if retyped:
        _record(pctx.model, retyped_inputs=interface_record(pctx.model).get("retyped_inputs", {}) | retyped)
    return len(retyped)


# --- split_init / split_predict -----------------------------------------------------------------


def predict_values(graph: ir.Graph) -> tuple[set[int], list[ir.Node]]:
    """(ids of the values the predict net computes or reads from the caller, its nodes): what a
    graph input reaches, and what impure operators (random, control flow, custom, function calls)
    compute."""
    values = {id(v) for v in graph.inputs if not v.is_initializer()}
    nodes = []
    for node in graph:
        impure = node.op_type in IMPURE_OPS or node.domain not in STANDARD_DOMAINS or \
            any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values())
        if impure or any(v is not None and id(v) in values for v in node.inputs):
            nodes.append(node)
            values.update(id(v) for v in node.outputs)
    return values, nodes


def boundary(graph: ir.Graph) -> tuple[list[ir.Value], set[int], list[ir.Node]]:
    """(values the init net computes that the predict net or a graph output reads, predict value
    ids, predict nodes), the boundary in graph order."""
    predict, nodes = predict_values(graph)
    found: dict[int, ir.Value] = {}
    for node in nodes:
        for v in node.inputs:
            if v is not None and id(v) not in predict:
                found.setdefault(id(v), v)
    for v in graph.outputs:
        if id(v) not in predict:
            found.setdefault(id(v), v)
    return list(found.values()), predict, nodes


def run_split_init(pctx: PassContext) -> int:
    graph = pctx.model.graph
    if interface_record(pctx.model).get("split"):
        return 0
    cut, predict, predict_nodes = boundary(graph)
    outputs = [v for v in cut if v.producer() is not None or v.is_initializer()]
    edit.set_outputs(graph, outputs)
    for node in reversed(predict_nodes):
        edit.remove_nodes(graph, [node], safe=False)
    for index in reversed(range(len(graph.inputs))):
        if id(graph.inputs[index]) in predict:
            edit.remove_input(graph, index)
    _record(pctx.model, split="init", boundary=[v.name for v in outputs])
    pctx.log.apply(rule="split_init", kind=EXACT, graph=graph.name or "", root="<interface>",
                   removed=[f"{n.name} ({n.op_type})" for n in predict_nodes], added=[])
    return 1


def run_split_predict(pctx: PassContext) -> int:
    graph = pctx.model.graph
    if interface_record(pctx.model).get("split"):
        return 0
    cut, predict, predict_nodes = boundary(graph)
    kept = {id(n) for n in predict_nodes}
    fed = []
    for value in cut:
        if value.is_graph_input():
            continue
        new = ir.Value(name=value.name, type=value.type, shape=value.shape)
        for use in list(value.uses()):
            if id(use.node) in kept:
                use.node.replace_input_with(use.idx, new)
        for index, output in enumerate(graph.outputs):
            if output is value:
                edit.set_output(graph, index, new)
        if value.is_initializer():
            edit.drop_initializer(graph, value.name)
        value.name = pctx.names.fresh(f"{new.name}_init")
        edit.add_input(graph, new)
        fed.append(new.name)
    removed = [n for n in reversed(list(graph)) if id(n) not in kept]
    for node in removed:
        edit.remove_nodes(graph, [node], safe=False)
    for name in list(graph.initializers):
        edit.drop_initializer(graph, name)
    for index in reversed(range(len(graph.inputs))):
        value = graph.inputs[index]
        if not value.uses() and not value.is_graph_output():
            edit.remove_input(graph, index)
    pctx.names.absorb(pctx.model)
    _record(pctx.model, split="predict", boundary=fed)
    pctx.log.apply(rule="split_predict", kind=EXACT, graph=graph.name or "", root="<interface>",
                   removed=[f"{n.name} ({n.op_type})" for n in removed], added=[])
    return 1


# --- set_unique_name_for_nodes, lift_lexical_references -----------------------------------------


def run_set_unique_name_for_nodes(pctx: PassContext) -> int:
    """Name every unnamed node, and every node whose name an earlier node already holds (onnxoptimizer
    names only the unnamed ones, so a name held twice stays twice)."""
    seen: set[str] = set()
    changed = 0
    for site in traversal.graphs(pctx.model):
        for node in site.graph:
            if not node.name or node.name in seen:
                node.name = pctx.names.fresh(node.name or node.op_type)
                changed += 1
            seen.add(node.name)
    return changed


def captures(graph: ir.Graph) -> dict[str, list[str]]:
    """Node name -> the outer-scope values its subgraphs read (nested subgraphs included), for
    every node of `graph` whose subgraphs capture something."""

    def outer_reads(sub: ir.Graph) -> dict[int, ir.Value]:
        local = {id(v) for v in sub.inputs} | {id(v) for v in sub.initializers.values()}
        reads: dict[int, ir.Value] = {}
        for node in sub:
            read = [v for v in node.inputs if v is not None]
            for inner in traversal.subgraphs_of(node):
                read.extend(outer_reads(inner).values())
            reads.update((id(v), v) for v in read if id(v) not in local)
            local.update(id(v) for v in node.outputs)
        return reads

    found: dict[str, list[str]] = {}
    for node in graph:
        reads: dict[int, ir.Value] = {}
        for sub in traversal.subgraphs_of(node):
            reads.update(outer_reads(sub))
        if reads:
            found[node.name or f"<{node.op_type}>"] = sorted(v.name for v in reads.values())
    return found


def run_lift_lexical_references(pctx: PassContext) -> int:
    # A reference nothing defines was refused when the model was read (ir/validate.py).
    lifted = captures(pctx.model.graph)
    text = json.dumps(lifted, sort_keys=True)
    if not lifted or pctx.model.metadata_props.get(CAPTURES_KEY) == text:
        return 0
    pctx.model.metadata_props[CAPTURES_KEY] = text
    return 1


# --- the view verification pairs the result through ---------------------------------------------


def _copy(model: ir.Model) -> ir.Model:
    """A copy to edit (onnx-ir's Model.clone where it has one; older onnx-ir through a proto)."""
    clone = getattr(model, "clone", None)
    if clone is not None:
        return clone()
    return ir.serde.deserialize_model(ir.serde.serialize_model(model))


def original_interface(candidate: ir.Model, boundary_values=None) -> ir.Model:
    """A copy of `candidate` with the interface its original had, for verification: renamed inputs
    and outputs under their original names, a retyped input fed by a Cast from the original dtype,
    and a predict net's boundary inputs bound to `boundary_values` (name -> array: what the
    original's init net computes). The candidate itself is left as it is."""
    record = interface_record(candidate)
    if not record:
        return candidate
    view = _copy(candidate)
    graph = view.graph
    by_name = {v.name: v for v in list(graph.inputs) + list(graph.outputs)}
    for new_name, old_name in list(record.get("inputs", {}).items()) + list(record.get("outputs", {}).items()):
        if new_name in by_name:
            by_name[new_name].name = old_name
    for name in record.get("retyped_inputs", {}):
        for index, value in enumerate(graph.inputs):
            if value.name == name:
                wide = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=value.shape)
                value.name = f"{name}__narrowed"
                edit.set_input(graph, index, wide)
                cast = ir.Node("", "Cast", [wide], [ir.AttrInt64("to", ir.DataType.INT32)], outputs=[value])
                edit.insert_nodes(graph, [cast], before=next(iter(graph), None))
    if record.get("split") == "predict":
        for name in record.get("boundary", []):
            for index, value in enumerate(graph.inputs):
                if value.name == name and boundary_values is not None and name in boundary_values:
                    edit.remove_input(graph, index)
                    value.const_value = ir.Tensor(np.asarray(boundary_values[name]), name=name)
                    edit.add_initializer(graph, value)
                    break
    return view


def verification_pair(original, candidate: ir.Model) -> tuple[object, ir.Model]:
    """(original, candidate) as verification compares them: unchanged for a model whose interface
    was not edited; otherwise the candidate's `original_interface` view, and for a split: the
    predict net with its boundary bound to what the original's init net computes (run by
    onnxruntime), or the init net compared with the original's values of the boundary names (the
    original read with those as its outputs; the init net declares the original's inputs, unread,
    so both take the same feeds)."""
    record = interface_record(candidate)
    if not record:
        return original, candidate
    from onnxrefine.ir import io

    path = getattr(original, "path", original)  # a verify/ort/files.py ModelFile, or a path
    split = record.get("split")
    if split == "predict":
        return original, original_interface(candidate, _init_net_values(io.load_model(path)))
    view = original_interface(candidate)
    if split != "init":
        return original, view
    original = io.load_model(path)
    values = {v.name: v for n in original.graph for v in n.outputs} | dict(original.graph.initializers)
    values |= {v.name: v for v in original.graph.inputs}
    edit.set_outputs(original.graph, [values[o.name] for o in view.graph.outputs])
    for value in original.graph.inputs:
        if not value.is_initializer():
            edit.add_input(view.graph, ir.Value(name=value.name, type=value.type, shape=value.shape))
    return original, view


def _init_net_values(model: ir.Model) -> dict[str, np.ndarray]:
    """What the init net of `model` computes at its outputs, by onnxruntime (optimizations off)."""
    from onnxrefine.ir import io
    from onnxrefine.ir.names import NameAllocator
    from onnxrefine.ir.budget import ConstantBudget
    from onnxrefine.runtime import DISABLE_PREPACKING, require_onnxruntime

    run_split_init(PassContext(model, NameAllocator(model), ConstantBudget()))
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry(DISABLE_PREPACKING, "1")  # as the strict runs it is compared with
    session = ort.InferenceSession(io.to_proto(model).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {})))


# The two halves of a split keep every node as it was (inputs, attributes, order): composed, the
# init net's outputs feeding the predict net's new inputs, they compute the original graph;
# verification composes them through the recorded interface.
SPLIT_EXACTNESS = ("every node keeps its inputs, attributes and order; the init net's outputs fed to the predict "
                   "net's new inputs compute the original graph (verification composes them)")

PASSES = (
    PassSpec("rename_input_output", "Interface change: rename inputs and outputs by position to input_%d / "
             "output_%d (patterns from OPTIMIZER_RENAME_INPUT_PATTERN / _OUTPUT_PATTERN); refused where a "
             "new name is taken", run=run_rename_input_output, kind=EXACT, phase=INTERFACE, order=10,
             default=False, not_fuzzed="renames the interface: tests pair it by position",
             exactness="renames graph inputs and outputs only: every value keeps its producer and data, and verification pairs the names through the recorded interface"),
    PassSpec("rewrite_input_dtype", "Interface change: int64 inputs become int32 inputs followed by a Cast to "
             "int64 (values outside int32 can no longer be fed)", run=run_rewrite_input_dtype, kind=EXACT,
             phase=INTERFACE, order=20, default=False, not_fuzzed="retypes the interface: tested on its own",
             exactness="a Cast back to int64 follows the int32 input: every feed the new interface takes reaches the graph with the value it had (verification feeds it through the recorded interface)"),
    PassSpec("split_init", "Interface change: keep only the init net (what initializers alone compute), its "
             "outputs the values the predict net reads", run=run_split_init, kind=EXACT, phase=INTERFACE,
             order=30, default=False, not_fuzzed="splits the model: tested by composing the two nets",
             exactness=SPLIT_EXACTNESS),
    PassSpec("split_predict", "Interface change: keep only the predict net, the init net's values read as "
             "new inputs", run=run_split_predict, kind=EXACT, phase=INTERFACE, order=30, default=False,
             not_fuzzed="splits the model: tested by composing the two nets", exactness=SPLIT_EXACTNESS),
    PassSpec("set_unique_name_for_nodes", "Name every unnamed node, and rename a node whose name an earlier "
             "node holds", run=run_set_unique_name_for_nodes, kind=EXACT, phase=INTERFACE, order=5,
             default=False, not_fuzzed="names nodes only: nothing computed changes",
             exactness="node names only: no value, input, attribute or order changes"),
    PassSpec("lift_lexical_references", "Record the outer values each If/Loop/Scan subgraph captures in "
             "metadata onnxrefine.captures; unresolved references are an error",
             run=run_lift_lexical_references, kind=EXACT, phase=GRAPH, order=1, default=False,
             not_fuzzed="writes metadata only: nothing computed changes",
             exactness="writes metadata only: the graph is untouched"),
)
