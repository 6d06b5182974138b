"""Values of a model's main graph as onnxruntime computes them, on the model's own input shapes.

Two readers: `fold_shapes` checks each value it folds against the runtime's (a folded Shape is
only as right as the shape facts it was read from), and certificates whose boundary shapes
nothing vouches for run at the shapes the model really has there (`certificate.py`).

One run: the model as it stands, cut down to the nodes the asked values depend on (their
producers back to the graph inputs, subgraph captures included; only those are serialized), the
asked values made its outputs, on one generated input set of the model's own declared shapes (a
symbolic dim takes the verifier's default size, or the size a caller gives it: `Cut` holds one
session of the cut and runs it at any sizes, which `dims.py` chooses where the default fails). Where no float value can reach an integer, a
bool or a size in the cut (no Cast to an integer, comparison, ArgMax, NonZero, ...), large float
weights are zeros made at run time: they cannot change a shape or an integer value, and the run
costs no weight bytes. The memory and time budget is the verifier's (`ModelRunner`). The model
itself is never modified.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir

# Values asked for in one run: their arrays are all held at once.
MAX_OBSERVED_VALUES = 2048
# A serialized model holds its weights in one protobuf message (onnxruntime reads at most 2 GiB).
MAX_PROTO_BYTES = 1 << 30
# Nodes of a control-flow body copied out to compute one of its values.
MAX_COPIED = 64


def observe(model: ir.Model, values: Sequence[ir.Value], seed: int = 0, shapes: bool = False,
            facts=None, dims: dict[str, int] | None = None) -> dict[int, np.ndarray] | str:
    """id(value) -> its array in one run of the main graph, or a one-line reason there is none.
    With `shapes`, (its shape, its element type) instead: onnxruntime's Shape of it and, where
    neither the model nor `facts` gives its element type, one element of it at most, so nothing
    large is held (and a value's type the facts give is not asked of the run again).
    `facts` (ir/facts StaticShapes) tells element types the model does not declare; `dims` sizes
    the symbolic input dims (verify/inputs.py's `concrete_shape`; the default size otherwise).

    A value of the main graph is its own output; a value inside a control-flow body is computed
    by copies of its producers there, when those read nothing but main-graph values and their
    own constants (a Shape of a captured outer value): the same nodes on the same values. A
    value that depends on a body's or a function's inputs is left out of the answer (it has no
    value outside an iteration or a call)."""
    from onnxrefine.resources import ResourceLimitError

    with Cut(model, values, shapes=shapes, facts=facts) as cut:
        try:
            return cut.failure or cut.run(seed, dims)
        except ResourceLimitError as exc:
            return _first_line(exc)


class Cut:
    """The part of a model some values depend on, in one onnxruntime session, run at any sizes of
    its symbolic input dims (`run`). `failure`: a one-line reason no run can be made, else None."""

    def __init__(self, model: ir.Model, values: Sequence[ir.Value], shapes: bool = False, facts=None):
        from onnxrefine.errors import BadInputError
        from onnxrefine.verify.ort.files import ModelFile
        from onnxrefine.verify.ort.runner import ModelRunner

        self.shapes, self.runner, self.failure, self.proto, self.names = shapes, None, None, None, {}
        self.known: dict[int, np.dtype] = {}  # id(value) -> the element type the model or the facts give
        self._inputs_memo: dict = {}  # the cut's inferred shapes, for its input sets at every size
        asked = list(dict.fromkeys(v for v in values if v is not None and v.name))
        if not asked:
            self.failure = "no named value was asked for"
            return
        if len(asked) > MAX_OBSERVED_VALUES:
            self.failure = f"{len(asked)} values asked for, more than {MAX_OBSERVED_VALUES} in one run"
            return
        try:
            dtype_of = (lambda v: facts.dtype(v) or v.dtype) if facts is not None else (lambda v: v.dtype)
            cut = _cut(model, asked, dtype_of, None if facts is None else facts.static_shape)
            if isinstance(cut, str):
                self.failure = cut
                return
            self.proto, self.names = cut
            if shapes:
                self.known = {id(v): dtype for v in asked
                              if id(v) in self.names and (dtype := _numpy_dtype(dtype_of(v))) is not None}
                self.names = _shapes_of(self.proto, self.names, set(self.known))
            self.runner = ModelRunner(ModelFile(self.proto, None, None), "the model (observed)", scoped=True)
        except BadInputError as exc:  # resource limits included
            self.failure = _first_line(exc)
        except Exception as exc:  # noqa: BLE001 - the serializer and onnxruntime raise many types
            self.failure = _first_line(exc)

    def __enter__(self) -> Cut:
        return self

    def __exit__(self, *exc) -> None:
        if self.runner is not None:
            self.runner.close()

    def run(self, seed: int = 0, dims: dict[str, int] | None = None) -> dict | str:
        """observe's answer for one input set generated at `dims`, or a one-line reason.
        A resource limit (not a run's failure) raises ResourceLimitError: larger sizes would
        not fit either."""
        from onnxrefine.errors import BadInputError
        from onnxrefine.resources import ResourceLimitError
        from onnxrefine.verify.inputs import generate_inputs
        from onnxrefine.verify.ort.runner import RunFailedError

        if self.failure is not None:
            return self.failure
        fetched = [n for pair in self.names.values() for n in pair if n] if self.shapes else list(self.names.values())
        try:
            feeds = {name: np.asarray(array) for name, array in
                     generate_inputs(self.proto, seed=seed, dims=dims, stress=False, trials=1,
                                     memo=self._inputs_memo)[0].items()}
            try:
                arrays = self.runner.run_outputs(fetched, feeds)
            except Exception as exc:  # noqa: BLE001 - in this process onnxruntime raises its own types
                if isinstance(exc, BadInputError) and not isinstance(exc, RunFailedError):
                    raise  # a resource limit: not tried again
                # Generated integers can be out of a model's range (position ids past a cache's
                # length): zeros index every axis. Any run the model accepts gives its shapes,
                # and a folded value no input may change.
                feeds = {name: np.zeros_like(array) if array.dtype.kind in "iub" else array
                         for name, array in feeds.items()}
                arrays = self.runner.run_outputs(fetched, feeds)
        except ResourceLimitError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime and the generator raise many types
            return _first_line(exc)
        if self.shapes:
            got = dict(zip(fetched, arrays))
            return {key: (tuple(int(d) for d in np.asarray(got[shape])),
                          np.asarray(got[first]).dtype if first else self.known[key])
                    for key, (shape, first) in self.names.items()}
        return {key: np.asarray(array) for key, array in zip(self.names, arrays)}


def _copied_cone(value: ir.Value, main: ir.Graph) -> list[ir.Node] | None:
    """The producers of `value` in its own (nested) graph, producers first, when every value
    they read from outside is the main graph's; None otherwise."""
    home, cone, stack, seen = value.graph, [], [value], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        producer = current.producer()
        if producer is None or producer.graph is not home:
            if current.graph is not main:
                return None  # a body input, a function's input, or a value of a scope in between
            continue
        if len(cone) >= MAX_COPIED:
            return None
        cone.append(producer)
        stack.extend(v for v in producer.inputs if v is not None)
        stack.extend(_captured(producer))
    order = {id(node): index for index, node in enumerate(home)}
    return sorted(dict.fromkeys(cone), key=lambda node: order[id(node)])


def _cut(model: ir.Model, values: list[ir.Value], dtype_of,
         static_shape=None) -> tuple[onnx.ModelProto, dict[int, str]] | str:
    """A ModelProto of the nodes and initializers `values` depend on, `values` its outputs, and
    id(value) -> its output name there. Only what is kept is serialized. `static_shape` (the
    facts'): the kept values' shapes it knows are declared in the cut (_declared_shapes)."""
    graph = model.graph
    names: dict[int, str] = {}
    copies: list[onnx.NodeProto] = []
    copied: list[ir.Node] = []
    needed: set[int] = set()
    for value in values:
        if value.graph is graph:
            names[id(value)] = value.name
            needed.add(id(value))
            continue
        cone = _copied_cone(value, graph)
        if cone is None:
            continue
        rename = {}
        copied.extend(cone)
        for node in cone:
            proto_node = ir.serde.serialize_node(node)
            proto_node.name = ""
            for index, name in enumerate(proto_node.output):
                if name:
                    proto_node.output[index] = rename.setdefault(name, f"__observed_{len(names)}_{index}_{len(copies)}")
            for index, name in enumerate(proto_node.input):
                proto_node.input[index] = rename.get(name, name)
            copies.append(proto_node)
            needed.update(id(v) for v in node.inputs if v is not None and v.graph is graph)
            needed.update(id(v) for v in _captured(node) if v.graph is graph)
        names[id(value)] = rename[value.name]
    if not names:
        return "none of the values can be computed outside its function or loop body"
    kept = []
    for node in reversed(list(graph)):
        if any(id(out) in needed for out in node.outputs):
            kept.append(node)
            needed.update(id(v) for v in node.inputs if v is not None)
            needed.update(id(v) for v in _captured(node))
    weights = [v for v in graph.initializers.values() if id(v) in needed]
    # No value computed from these float weights reaches an integer, a bool or a data-dependent
    # size in what runs, so their values cannot change any shape or integer value the run
    # computes: they become zeros made at run time (ConstantOfShape). Weight by weight: one that
    # reaches an integer (a scale feeding a Resize's sizes) keeps its values, the others need not.
    reaching = _reaching_integers(list(reversed(kept)) + copied, dtype_of)
    zeroed = [v for v in weights if _zeroable(v.const_value) and id(v) not in reaching]
    weights = [v for v in weights if not (_zeroable(v.const_value) and id(v) not in reaching)]
    if sum(v.const_value.nbytes for v in weights if v.const_value is not None) > MAX_PROTO_BYTES:
        return f"the values depend on more than {MAX_PROTO_BYTES >> 20} MiB of weights"
    proto = onnx.ModelProto(ir_version=model.ir_version)
    proto.opset_import.extend(onnx.helper.make_opsetid(domain, version)
                              for domain, version in model.opset_imports.items())
    proto.functions.extend(ir.serde.serialize_function(f) for f in model.functions.values())
    proto.graph.name = graph.name or "observed"
    proto.graph.input.extend(ir.serde.serialize_value(v) for v in graph.inputs if v.name not in graph.initializers)
    proto.graph.initializer.extend(ir.serde.serialize_tensor(_in_memory(v.const_value)) for v in weights)
    proto.graph.initializer.extend(onnx.helper.make_tensor(f"{v.name}__shape", onnx.TensorProto.INT64,
                                                           [len(v.const_value.shape)], list(v.const_value.shape))
                                   for v in zeroed)
    proto.graph.node.extend(onnx.helper.make_node(
        "ConstantOfShape", [f"{v.name}__shape"], [v.name],
        value=onnx.numpy_helper.from_array(np.zeros(1, v.const_value.dtype.numpy()))) for v in zeroed)
    proto.graph.node.extend(ir.serde.serialize_node(node) for node in reversed(kept))
    proto.graph.node.extend(copies)
    proto.graph.output.extend(onnx.ValueInfoProto(name=name) for name in dict.fromkeys(names.values()))
    if static_shape is not None:
        proto.graph.value_info.extend(_declared_shapes(kept, dtype_of, static_shape))
    return proto, names


def _declared_shapes(nodes: list[ir.Node], dtype_of, static_shape) -> list[onnx.ValueInfoProto]:
    """The type and static shape the facts give each output of `nodes`. The run's memory estimate
    (ModelRunner) reads them where onnx's inference cannot follow a computed size (a Slice to a
    Div of a Shape, an Expand or a Resize to a computed shape): with every value's size known the
    cut runs in this process, not in a watched child (a second interpreter's start-up, about
    0.1 s of CPU on every model that has such a value). The facts are the ones the rewrites stand
    on, and the run checks the values that matter (fold_shapes compares them to onnxruntime's)."""
    declared = []
    for node in nodes:
        for value in node.outputs:
            if not value.name or not (value.type is None or isinstance(value.type, ir.TensorType)):
                continue  # a sequence or an optional: no tensor shape to declare
            shape, dtype = static_shape(value), dtype_of(value)
            if shape is not None and dtype is not None and dtype != ir.DataType.UNDEFINED:
                declared.append(onnx.helper.make_tensor_value_info(value.name, int(dtype), list(shape)))
    return declared


def _shapes_of(proto: onnx.ModelProto, names: dict[int, str], typed: set[int]) -> dict[int, tuple[str, str]]:
    """Replace the cut's outputs by each value's Shape and, unless its key is in `typed`, its first
    element at most (a Slice of it flattened: its element type, whatever its size); the new output
    names ("" where no element is asked)."""
    helper = onnx.helper
    proto.graph.initializer.extend([helper.make_tensor("__observed_flat", onnx.TensorProto.INT64, [1], [-1]),
                                    helper.make_tensor("__observed_0", onnx.TensorProto.INT64, [1], [0]),
                                    helper.make_tensor("__observed_1", onnx.TensorProto.INT64, [1], [1])])
    pairs = {}
    for key, name in names.items():
        index = len(pairs)
        shape, flat, first = f"__observed_shape_{index}", f"__observed_flat_{index}", f"__observed_first_{index}"
        proto.graph.node.append(helper.make_node("Shape", [name], [shape]))
        if key in typed:
            pairs[key] = (shape, "")
            continue
        proto.graph.node.extend([helper.make_node("Reshape", [name, "__observed_flat"], [flat]),
                                 helper.make_node("Slice", [flat, "__observed_0", "__observed_1"], [first])])
        pairs[key] = (shape, first)
    del proto.graph.output[:]
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for pair in pairs.values() for n in pair if n)
    return pairs


# Operators through which a float input can decide an integer or bool value, or a size.
_FLOAT_TO_INTEGER = frozenset("""Cast CastLike ArgMax ArgMin Equal Less Greater LessOrEqual GreaterOrEqual
    IsNaN IsInf NonZero Unique Compress TopK NonMaxSuppression Resize Upsample Range OneHot If Loop Scan""".split())
# Of those, the ones whose first input (the data) decides only values: Resize and Upsample size the
# output by its shape and their scales or sizes, Compress by its bool condition.
_SIZED_BY_THE_DATA_SHAPE = frozenset({"Resize", "Upsample", "Compress"})
_ZEROABLE = frozenset({ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16})
ZERO_WEIGHT_BYTES = 4096  # smaller float weights are serialized as they are


def _reaching_integers(nodes, dtype_of) -> set[int]:
    """The ids of the values that reach, through `nodes` (in graph order), an operator that may
    turn them into an integer, a bool or a size: read so by a node, or read by a node whose
    outputs reach one."""
    reaching: set[int] = set()
    for node in reversed(nodes):
        read = [v for v in list(node.inputs) + _captured(node) if v is not None]
        if any(id(v) in reaching for v in node.outputs):
            reaching.update(id(v) for v in read)
        else:
            reaching.update(id(v) for v in read if _reads_float_into_integers(node, dtype_of, [v]))
    return reaching


def _reads_float_into_integers(node: ir.Node, dtype_of, read) -> bool:
    """Whether `node` may turn one of the values `read` into an integer, a bool or a size (a
    float one, or one of unknown type, read by such an operator; any node of a custom domain)."""
    if node.domain not in ("", "ai.onnx"):
        return True
    if node.op_type not in _FLOAT_TO_INTEGER:
        return False
    read_ids = {id(v) for v in read}
    if node.op_type in _SIZED_BY_THE_DATA_SHAPE:
        # the data's values decide no size here (its shape does, with scales, sizes or a condition)
        return any(v is not None and id(v) in read_ids for v in node.inputs[1:])
    if node.op_type in ("Cast", "CastLike"):
        to = node.attributes.get("to")
        target = (dtype_of(node.inputs[1]) if node.op_type == "CastLike" and len(node.inputs) > 1
                  else ir.DataType(to.value) if to is not None and not to.is_ref() else None)
        if target is not None and target.is_floating_point():
            return False  # float to float: no integer comes of it
        node_inputs = [v for v in node.inputs[:1] if v is not None and id(v) in read_ids]
        return any(dtype_of(v) is None or dtype_of(v).is_floating_point() for v in node_inputs)
    return any(dtype_of(v) is None or dtype_of(v).is_floating_point() for v in read)


def _zeroable(tensor) -> bool:
    return tensor is not None and tensor.dtype in _ZEROABLE and tensor.nbytes > ZERO_WEIGHT_BYTES


def _in_memory(tensor):
    """A tensor whose bytes a serialized model can hold: one mapped from a file is read (the
    session gets bytes, with no folder to resolve a file reference against)."""
    if isinstance(tensor, ir.ExternalTensor):
        return ir.Tensor(tensor.numpy(), dtype=tensor.dtype, name=tensor.name)
    return tensor


def _captured(node: ir.Node) -> list[ir.Value]:
    """Values a node's subgraphs read from the scopes around them."""
    found = []
    for attribute in node.attributes.values():
        if attribute.type == ir.AttributeType.GRAPH:
            bodies = [attribute.value]
        elif attribute.type == ir.AttributeType.GRAPHS:
            bodies = list(attribute.value)
        else:
            continue
        for body in bodies:
            for inner in body:
                for value in inner.inputs:
                    producer = value.producer() if value is not None else None
                    if value is not None and (producer.graph if producer is not None else None) is not body:
                        found.append(value)
                found.extend(_captured(inner))
    return found


def _numpy_dtype(dtype: ir.DataType | None) -> np.dtype | None:
    try:
        return None if dtype is None else np.dtype(dtype.numpy())
    except Exception:  # noqa: BLE001 - a type numpy has no dtype for: the run is asked
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
