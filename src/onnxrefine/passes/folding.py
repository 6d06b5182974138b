"""Constant folding, and Constant nodes turned into initializers.

fold_constants evaluates a node whose inputs are all constants with onnxruntime itself (a
single-node model, CPU, graph optimizations off): the same kernel on the same values the runtime
would run, so the folded tensor is bit-identical to what the model computed (EXACT). Guards:
- standard domains only; never a random operator, never a node with a subgraph, never an
  operator whose output is not a tensor;
- the output size comes from ONNX shape inference over the constant inputs *before* anything is
  evaluated: a ConstantOfShape/Tile/Expand/Range over the per-tensor cap is refused without
  allocating it, and so is an operator whose output size cannot be bounded that way;
- a float result that is NaN/inf where every input was finite (an overflow) is refused;
- the result's element type and shape must be those inference promised (and the declared type,
  where there is one): otherwise the fold is refused.
onnx's reference evaluator stands in only where onnxruntime cannot run the node, and only for
integer/bool/string results, which have one right answer. The session a node's outputs come from
is, where possible, one run of all the nodes of its sweep (fold_session.py): the same kernel on
the same values, every guard above still asked of each node.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnx_ir as ir

from onnxrefine.errors import RewriteRefused
from onnxrefine.ir import edit, traversal
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir.foldmath import constant_array, constant_node_array, is_float_dtype
from onnxrefine.ir.quantization import fold_refusal
from onnxrefine.passes import graphpass
from onnxrefine.passes.fold_session import (SweepResults, add_constant, evaluate_sweep, fold_model, is_low_precision,
                                             session_options)
from onnxrefine.passes.registry import GRAPH, NO_PATTERN_YET, PassContext, PassSpec
from onnxrefine.rewrite.rule import EXACT
from onnxrefine.verify.certificate import MOVEMENT_OPS
from onnxrefine.verify.ort import inference_session

if TYPE_CHECKING:  # imported where a session is made (the CLI's start-up)
    import onnxruntime as ort

RANDOM_OPS = frozenset(
    "RandomNormal RandomUniform RandomNormalLike RandomUniformLike Multinomial Bernoulli".split()
)
# Dropout draws a random mask in training mode; the no-op passes remove it in inference mode.
_NEVER_FOLDED = RANDOM_OPS | frozenset(
    """Dropout If Loop Scan Constant SequenceConstruct SequenceEmpty SequenceInsert SequenceErase
    SequenceAt SequenceLength SplitToSequence ConcatFromSequence SequenceMap Optional OptionalHasElement
    OptionalGetElement""".split()
)
# Operators whose output never exceeds the total size of their inputs: safe to evaluate even when
# shape inference cannot tell the output size in advance.
_SIZE_BOUNDED = frozenset(
    """Abs Neg Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Floor Ceil Round Sign Not Cast CastLike
    Identity Transpose Reshape Flatten Squeeze Unsqueeze Slice Concat Split Shape Size Softmax
    LogSoftmax ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceSumSquare ArgMax ArgMin Erf Sin Cos Tan IsNaN IsInf Clip LeakyRelu Elu
    Selu Softplus Softsign HardSigmoid HardSwish Gelu NonZero Unique TopK CumSum""".split()
)

def _single_node_model(node: ir.Node, arrays: list[np.ndarray | None], opset_imports: dict[str, int],
                       ir_version: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[str]]:
    proto = ir.serde.serialize_node(node)
    input_names = []
    graph_inputs, initializers, feeds = [], [], {}
    for index, array in enumerate(arrays):
        if array is None:
            input_names.append("")
            continue
        name = f"input_{index}"
        input_names.append(name)
        add_constant(name, array, graph_inputs, initializers, feeds)
    output_names = [f"output_{i}" if out else "" for i, out in enumerate(proto.output)]
    del proto.input[:]
    proto.input.extend(input_names)
    del proto.output[:]
    proto.output.extend(output_names)
    proto.name = "fold"
    model = fold_model([proto], graph_inputs, initializers, opset_imports, ir_version)
    return model, feeds, [n for n in output_names if n]


def _inferred_outputs(model: onnx.ModelProto) -> dict[str, tuple[int, tuple | None]]:
    """name -> (elem_type, static shape or None) for each output inference could type."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # inference raising means the node is not what it claims
        raise RewriteRefused("fold.shape_inference", f"shape inference failed on the node: {str(exc).splitlines()[0][:200]}") from None
    result = {}
    for output in inferred.graph.output:
        tensor_type = output.type.tensor_type if output.type.HasField("tensor_type") else None
        if tensor_type is None or tensor_type.elem_type == 0:
            continue
        shape = None
        if tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tensor_type.shape.dim):
            shape = tuple(d.dim_value for d in tensor_type.shape.dim)
        result[output.name] = (tensor_type.elem_type, shape)
    return result


def _session(model: onnx.ModelProto, check_native: bool) -> ort.InferenceSession:
    """A session for the single-node model. With `check_native`, refuse a node onnxruntime runs
    through inserted Casts (most float16/bfloat16 arithmetic on CPU): in the whole model the
    runtime elides the Cast pair between two such nodes and keeps the intermediate in float32,
    so a folded float16 tensor would be rounded where the runtime does not round."""
    options = session_options()
    if not check_native:
        return inference_session(model, options)
    with tempfile.TemporaryDirectory() as folder:
        options.optimized_model_filepath = os.path.join(folder, "session.onnx")
        session = inference_session(model, options)
        placed = onnx.load(options.optimized_model_filepath, load_external_data=False)
    original = model.graph.node[0].op_type
    if any(node.op_type == "Cast" and original != "Cast" for node in placed.graph.node) or len(placed.graph.node) > 1:
        raise RewriteRefused("fold.float16_via_float32", f"onnxruntime computes this {original} in float32 through inserted Casts; the "
                             "folded float16 value could differ from what the runtime passes on")
    return session


def evaluate_node(node: ir.Node, arrays: list[np.ndarray | None], opset_imports: dict[str, int], ir_version: int,
                  cap_bytes: int, computed: tuple[list[np.ndarray], list[tuple[np.dtype, tuple]]] | None = None
                  ) -> list[np.ndarray]:
    """The node's outputs on constant inputs, as onnxruntime computes them; RewriteRefused when a
    guard declines. `computed`: its outputs as a run of its sweep computed them on these very
    inputs (fold_session.py) and the sweep's inference of them (dtype, static shape), checked as a
    session's would be against its own inference."""
    if computed is not None:
        return _checked(*computed, cap_bytes)
    model, feeds, outputs = _single_node_model(node, arrays, opset_imports, ir_version)
    inferred = _inferred_outputs(model)
    for name in outputs:
        if name not in inferred:
            raise RewriteRefused("fold.dtype_unknown", "the result's element type cannot be determined before evaluating")
        elem_type, shape = inferred[name]
        if shape is None:
            if node.op_type not in _SIZE_BOUNDED:
                raise RewriteRefused("fold.size_unknown", "the result's size cannot be determined before evaluating")
            continue
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
        nbytes = math.prod(shape) * max(itemsize, 1)
        if nbytes > cap_bytes:
            raise RewriteRefused("fold.size_cap", f"the folded tensor would take {nbytes} bytes, over the cap of {cap_bytes}")
    low_precision = any(is_low_precision(a.dtype) for a in arrays if a is not None) or any(
        is_low_precision(onnx.helper.tensor_dtype_to_np_dtype(inferred[name][0])) for name in outputs)
    try:
        results = _session(model, check_native=low_precision).run(outputs, feeds)
    except RewriteRefused:
        raise
    except Exception as ort_error:
        results = _reference_fallback(model, feeds, outputs, inferred, ort_error)
    types = [(onnx.helper.tensor_dtype_to_np_dtype(inferred[name][0]), inferred[name][1]) for name in outputs]
    return _checked(results, types, cap_bytes)


def _checked(results, types: list[tuple[np.dtype, tuple | None]], cap_bytes: int) -> list[np.ndarray]:
    """The results, refused unless each is a tensor of the inferred dtype and (where inference gave
    one) shape, within the cap."""
    checked = []
    for result, (expected, shape) in zip(results, types):
        if not isinstance(result, np.ndarray):
            raise RewriteRefused("fold.not_tensor", "the result is not a tensor")
        if result.dtype != expected and not (expected == np.dtype(object) and result.dtype.kind in "OU"):
            raise RewriteRefused("fold.dtype_mismatch", f"the result has dtype {result.dtype}, inference says {expected}")
        if shape is not None and tuple(result.shape) != shape:
            raise RewriteRefused("fold.shape_mismatch", f"the result has shape {result.shape}, inference says {shape}")
        if result.nbytes > cap_bytes:
            raise RewriteRefused("fold.result_size_cap", f"the folded tensor takes {result.nbytes} bytes, over the cap of {cap_bytes}")
        checked.append(result)
    return checked


def _reference_fallback(model, feeds, outputs, inferred, ort_error) -> list:
    reason = str(ort_error).splitlines()[0][:200] if str(ort_error) else type(ort_error).__name__
    for name in outputs:
        elem_type, _ = inferred[name]
        if is_float_dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)):
            raise RewriteRefused("fold.ort_cannot_float", f"onnxruntime cannot evaluate the node ({reason}); a float result "
                                 "from another evaluator may differ from the runtime's")
    try:
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(outputs, feeds)
    except Exception as exc:
        raise RewriteRefused("fold.no_evaluator", f"neither onnxruntime ({reason}) nor the reference evaluator can run the node: "
                             f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}") from None


def _foldable(node: ir.Node) -> bool:
    if node.domain not in STANDARD_DOMAINS or node.op_type in _NEVER_FOLDED:
        return False
    if not any(v is not None for v in node.inputs):
        return False
    return not any(a.is_ref() or a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                   for a in node.attributes.values())


def _all_finite(array: np.ndarray) -> bool:
    if array.dtype.kind != "f":  # ml_dtypes' bfloat16 and float8 need a widening first
        array = array.astype(np.float32)
    return bool(np.isfinite(array).all())


def _overflowed(node: ir.Node, inputs: list[np.ndarray | None], result: np.ndarray) -> bool:
    # An op that only copies elements cannot make a non-finite one from finite ones: scanning a
    # folded weight transpose twice for it (vit_b_16: 60 ms) buys nothing.
    if node.op_type in MOVEMENT_OPS and node.domain in STANDARD_DOMAINS:
        return False
    if not is_float_dtype(result.dtype) or _all_finite(result):
        return False
    return all(a is None or not is_float_dtype(a.dtype) or _all_finite(a) for a in inputs)


def _is_constant(value: ir.Value) -> bool:
    if value.is_graph_input():
        return False
    if value.const_value is not None and (value.is_initializer() or value.producer() is None):
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant" and producer.domain in STANDARD_DOMAINS


def fold_graph(pctx: PassContext, graph: ir.Graph, in_function: bool, only: frozenset[str] | None = None) -> int:
    model = pctx.model
    opsets = {**model.opset_imports, **graph.opset_imports}
    folded = 0
    refused = _refusal_memo(pctx)
    sweep = _sweep(pctx, graph, only, refused, opsets)
    for node in list(graph):
        if not _evaluable(node, graph, only):
            continue
        arrays = [None if v is None else constant_array(v) for v in node.inputs]
        if any(a is None and v is not None for a, v in zip(arrays, node.inputs)):
            continue
        if any(a is not None and a.dtype.kind in "SUO" for a in arrays):
            continue  # string tensors: onnx's numpy_helper cannot feed them to a one-node model
        signature = tuple(id(v) for v in node.inputs)
        if refused.get(id(node), (None, None))[1] == signature:
            continue  # declined in an earlier round on the same inputs: evaluating again is wasted
        quantization = fold_refusal(node)
        if quantization is not None:  # a Q/DQ node keeps the model quantized (ir/quantization.py)
            graphpass.log_refuse(pctx, "fold_constants", graph, node, quantization, guard="fold.quantized")
            refused[id(node)] = (node, signature)
            continue
        source_bytes = max((a.nbytes for a in arrays if a is not None), default=0)
        cap = max(pctx.budget.per_tensor_bytes, source_bytes)
        try:
            computed = sweep.outputs(node) if sweep is not None else None
            results = evaluate_node(node, arrays, opsets, model.ir_version or 8, cap,
                                    None if computed is None else (computed, sweep.inferred(node)))
            replacements = []
            for output, result in zip([o for o in node.outputs if o.name], results):
                if _overflowed(node, arrays, result):
                    raise RewriteRefused("fold.nonfinite", "the folded value is not finite where the inputs were (overflow)")
                if output.type is not None and output.dtype is not None and output.dtype.numpy() != result.dtype \
                        and result.dtype.kind not in "OU":
                    raise RewriteRefused("fold.declared_dtype", f"the result dtype {result.dtype} differs from the declared {output.dtype}")
                replacements.append((output, result))
            freed = edit.freed_bytes([node])
            for _output, result in replacements:
                graphpass.charge_constant(pctx, result.nbytes, source_bytes, freed)
                freed = 0
        except RewriteRefused as refusal:
            graphpass.log_refuse(pctx, "fold_constants", graph, node, refusal)
            refused[id(node)] = (node, signature)  # the node is kept alive, so its id stays its own
            continue
        added = []
        for output, result in replacements:
            if not (output.uses() or output.is_graph_output()):
                continue
            hint = output.name or f"{node.name or node.op_type}_folded"
            value = edit.new_constant(pctx.names, graph, in_function, result, f"{hint}_folded", before=node)
            edit.replace_value(pctx.names, graph, output, value)
            if sweep is not None:
                sweep.record(output, value)
            added.append((output, value))
        removed, _ = edit.remove_unread(graph, [node])
        if not removed:  # every output read was replaced just above
            raise AssertionError(f"fold_constants left {node.name!r} read")
        for output, value in added:
            edit.pass_on_name(output, value)
        added = [value.name for _output, value in added]
        graphpass.log_apply(pctx, "fold_constants", EXACT, graph, node, added)
        folded += 1
    return folded


def _evaluable(node: ir.Node, graph: ir.Graph, only: frozenset[str] | None,
               produced: frozenset | set = frozenset()) -> bool:
    """Whether a sweep evaluates `node`: foldable, read, and every input a constant or (ids in
    `produced`) an output of a node the sweep evaluates before it. Nothing's bytes are read."""
    if node.graph is not graph or not _foldable(node) or (only is not None and node.op_type not in only):
        return False
    if edit.is_unread(node):
        return False  # dead code is the dead-code pass's business; evaluating it buys nothing
    return all(v is None or id(v) in produced or _is_constant(v) for v in node.inputs)


def _sweep(pctx: PassContext, graph: ir.Graph, only, refused: dict, opsets: dict) -> SweepResults | None:
    """One run of every node this sweep of fold_graph may evaluate (fold_session.py), as it
    would reach them if each node before them folded."""
    produced: set[int] = set()
    nodes, arrays = [], {}
    for node in graph:
        if not _evaluable(node, graph, only, produced) or fold_refusal(node) is not None:
            continue
        if refused.get(id(node), (None, None))[1] == tuple(id(v) for v in node.inputs):
            continue
        constants = [v for v in node.inputs if v is not None and id(v) not in produced]
        read = [arrays[id(v)] if id(v) in arrays else constant_array(v) for v in constants]
        if any(a is None or a.dtype.kind in "SUO" for a in read):
            continue
        arrays.update(zip(map(id, constants), read))
        nodes.append(node)
        produced.update(id(v) for v in node.outputs)
    if len(nodes) < 2:
        return None
    return evaluate_sweep(nodes, arrays, opsets, pctx.model.ir_version or 8, pctx.budget.per_tensor_bytes)


def _refusal_memo(pctx: PassContext) -> dict:
    memo = getattr(pctx, "_fold_refused", None)
    if memo is None:
        memo = {}
        pctx._fold_refused = memo
    return memo


def run_fold_constants(pctx: PassContext) -> int:
    return sum(fold_graph(pctx, site.graph, site.in_function) for site in list(traversal.graphs(pctx.model)))


# --- extract_constant_to_initializer -----------------------------------------------------------


def run_extract_constants(pctx: PassContext) -> int:
    changes = 0
    for site in list(traversal.graphs(pctx.model)):
        if site.in_function:
            continue  # a function body cannot hold initializers (nor, by ir/edit.py's rule, its subgraphs)
        graph = site.graph
        for node in list(graph):
            if node.op_type != "Constant" or node.domain not in STANDARD_DOMAINS:
                continue
            array = constant_node_array(node)
            attr = node.attributes.get("value")
            if array is None:
                continue  # sparse_value, value_string(s): left as they are
            old = node.outputs[0]
            tensor = attr.as_tensor() if attr is not None and attr.type == ir.AttributeType.TENSOR else ir.Tensor(array)
            # The initializer takes over the Constant's output name, so readers of the file (and
            # subgraphs capturing it) still find it under the name they know.
            original = old.name or pctx.names.fresh("constant")
            tensor.name = original
            value = ir.Value(name=original, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                             const_value=tensor)
            edit.replace_value(pctx.names, graph, old, value)  # a graph output renames `old` itself
            if old.name == original:
                old.name = pctx.names.fresh(f"{original}_constant")
            edit.add_initializer(graph, value)
            edit.remove_nodes(graph, [node])
            graphpass.log_apply(pctx, "extract_constant_to_initializer", EXACT, graph, node, [value.name])
            changes += 1
    return changes


PASSES = (
    PassSpec(
        "extract_constant_to_initializer",
        "Turn Constant nodes into initializers (main graph and subgraphs; function bodies keep them)",
        run=run_extract_constants,
        kind=EXACT,
        phase=GRAPH,
        order=5,
        fuzz="constant_to_initializer",
        exactness="the Constant's tensor becomes an initializer under the same name, its bytes unchanged",
    ),
    PassSpec(
        "fold_constants",
        "Evaluate nodes whose inputs are all constants with onnxruntime (deterministic standard ops, "
        "size-capped before evaluating, overflow refused)",
        run=run_fold_constants,
        kind=EXACT,
        phase=GRAPH,
        order=10,
        not_fuzzed=NO_PATTERN_YET,
        exactness="evaluated by onnxruntime's own kernel on the same constant inputs (a non-finite result "
                  "from finite inputs refused): the value the model computes; onnx's reference evaluator only "
                  "for integer, bool and string results, which have one right answer",
    ),
)
