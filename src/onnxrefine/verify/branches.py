"""Generated input sets that reach the graph's branches (inputs.generate_labelled_inputs adds them).

Random-normal and stress sets rarely land between two nearby breakpoints, make an If condition
come out the other way, or multiply integers into int32 overflow, so a rewrite that is wrong only
there would be judged `exact`. Three kinds of set, each drawn only where the graph has the branch:

- branch:thresholds  each float input that a breakpoint reads directly (through pass-through ops)
  gets values on both sides of every constant threshold: the comparisons and Where conditions
  against a constant, Clip's bounds, the kinks of Relu-like activations, Max/Min against a
  constant. Per threshold t: t, one ulp below and above, and t -/+ max(1e-3*|t|, 1e-3).
- branch:if-*        an If whose condition depends on the inputs: the condition is evaluated in
  float64 on the random set moved and scaled by the constants behind it (a search, not a solve),
  and the first sets that make it true and false are kept.
- branch:int-range   integer inputs used as plain numbers (not indices, shapes or counts) take values
  up to 2^20 in magnitude, so a product of two overflows int32 where int64 holds it.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import numpy_helper

from onnxrefine.verify import graphinfo

COMPARISONS = frozenset({"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"})
_PASS_THROUGH = frozenset({"Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                           "Expand", "Dropout"})
_KINK_AT_ZERO = frozenset({"Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sign", "Abs"})
INT_RANGE = 2 ** 20
SEARCH_LIMIT = 48  # condition evaluations per If
SEARCH_MAX_NODES = 2000  # an If behind more nodes than this is not searched (each try evaluates them)


def _constants(graph: onnx.GraphProto) -> dict:
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer
              if int(np.prod(init.dims, dtype=np.int64)) <= 64}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and int(np.prod(attr.t.dims, dtype=np.int64)) <= 64:
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _attr(node, name, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def _origins(graph: onnx.GraphProto, inputs) -> dict:
    """Value name -> the graph input it carries unchanged (through pass-through ops)."""
    origin = {name: name for name in inputs}
    for node in graph.node:
        if node.op_type in _PASS_THROUGH and node.input and node.input[0] in origin:
            for out in node.output[:1]:
                origin[out] = origin[node.input[0]]
    return origin


def thresholds(model: onnx.ModelProto) -> dict:
    """Float graph input name -> the sorted finite constant thresholds its values are compared with."""
    graph = model.graph
    floats = [spec.name for spec in graphinfo.graph_inputs(model) if graphinfo.is_float_dtype(spec.dtype)]
    origin, constants = _origins(graph, floats), _constants(graph)
    found: dict = {}

    def add(name, values):
        if name in origin:
            array = np.asarray(values, dtype=np.float64).ravel()
            found.setdefault(origin[name], set()).update(float(v) for v in array[np.isfinite(array)])

    for node in graph.node:
        ins = list(node.input)
        if node.op_type in COMPARISONS and len(ins) == 2:
            for data, bound in ((ins[0], ins[1]), (ins[1], ins[0])):
                if bound in constants:
                    add(data, constants[bound])
        elif node.op_type == "Clip" and ins:
            bounds = [constants[name] for name in ins[1:3] if name and name in constants]
            bounds += [value for value in (_attr(node, "min"), _attr(node, "max")) if value is not None]
            for bound in bounds:
                add(ins[0], bound)
        elif node.op_type in ("Max", "Min"):
            for data in ins:
                for other in ins:
                    if other != data and other in constants:
                        add(data, constants[other])
        elif node.op_type in _KINK_AT_ZERO and ins:
            add(ins[0], 0.0)
        elif node.op_type == "ThresholdedRelu" and ins:
            add(ins[0], _attr(node, "alpha", 1.0))
        elif node.op_type == "Shrink" and ins:
            lambd = _attr(node, "lambd", 0.5)
            add(ins[0], [-lambd, lambd])
        elif node.op_type == "HardSigmoid" and ins:
            alpha, beta = _attr(node, "alpha", 0.2), _attr(node, "beta", 0.5)
            add(ins[0], [-beta / alpha, (1 - beta) / alpha])
        elif node.op_type == "HardSwish" and ins:
            add(ins[0], [-3.0, 3.0])
    return {name: sorted(values) for name, values in found.items()}


def near_threshold_arrays(base: np.ndarray, points, dtype, most: int = 4) -> list:
    """Copies of `base` (at most `most`) whose leading elements take values on both sides of each
    point; a small tensor spreads them over several copies."""
    dtype = np.dtype(dtype)
    values = []
    for point in points:
        t = np.asarray(point, dtype=dtype)
        delta = max(1e-3 * abs(float(point)), 1e-3)
        values += [float(t), float(np.nextafter(t, dtype.type(-np.inf))), float(np.nextafter(t, dtype.type(np.inf))),
                   float(point) - delta, float(point) + delta]
    flat = np.array(base, dtype=np.float64).ravel()
    if flat.size == 0:
        return []
    arrays = []
    for start in range(0, min(len(values), most * flat.size), flat.size):
        chunk = values[start:start + flat.size]
        filled = flat.copy()
        filled[:len(chunk)] = chunk
        with np.errstate(over="ignore"):
            arrays.append(filled.reshape(np.shape(base)).astype(dtype))
    return arrays


def branch_sets(model: onnx.ModelProto, specs, roles, random_feeds: dict, rng) -> list:
    """The (label, feeds) sets of the module docstring, each built on the first random set."""
    sets = []
    per_input = {name: near_threshold_arrays(random_feeds[name], points, random_feeds[name].dtype)
                 for name, points in thresholds(model).items() if name in random_feeds}
    for index in range(max((len(arrays) for arrays in per_input.values()), default=0)):
        feeds = dict(random_feeds)
        feeds.update({name: arrays[index] for name, arrays in per_input.items() if index < len(arrays)})
        sets.append((f"branch:thresholds{index}", feeds))
    plain = plain_integer_inputs(model, specs, roles)
    if plain:
        feeds = dict(random_feeds)
        for name in plain:
            value = random_feeds[name]
            feeds[name] = rng.integers(-INT_RANGE, INT_RANGE, size=value.shape).astype(value.dtype)
        sets.append(("branch:int-range", feeds))
    try:
        sets += search_if_sets(model, random_feeds)
    except Exception:  # noqa: BLE001 - an unreadable condition: no search, the other sets stand
        pass
    return sets


def plain_integer_inputs(model, specs, roles) -> list:
    """Integer inputs used as plain numbers that reach arithmetic (a Mul, Add, MatMul...)."""
    arithmetic = {"Mul", "Add", "Sub", "MatMul", "Gemm", "Pow", "Sum", "Neg", "Abs", "Div", "Cast", "CumSum",
                  "ReduceSum", "ReduceProd"}
    users = graphinfo.consumers(model)
    return [spec.name for spec in specs if spec.dtype.kind in "iu" and spec.dtype.itemsize >= 4
            and roles.get(spec.name, ("plain",))[0] == "plain"
            and any(node.op_type in arithmetic for node, _ in users.get(spec.name, []))]


def if_conditions(model: onnx.ModelProto) -> list:
    """Names of main-graph If conditions that depend on a graph input."""
    graph = model.graph
    inputs = {spec.name for spec in graphinfo.graph_inputs(model)}
    depends = set(inputs)
    for node in graph.node:
        if any(name in depends for name in node.input):
            depends.update(node.output)
    return [node.input[0] for node in graph.node if node.op_type == "If" and node.input[0] in depends]


def _cone(graph: onnx.GraphProto, name: str) -> list:
    producers = {out: node for node in graph.node for out in node.output}
    needed, pending = set(), [name]
    while pending:
        node = producers.get(pending.pop())
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        pending.extend(node.input)
    return [node for node in graph.node if id(node) in needed]


def search_if_sets(model: onnx.ModelProto, random_feeds: dict) -> list:
    """(label, feeds) per If condition and truth value the random set does not reach: the random
    set's float inputs shifted by the constants behind the condition and scaled, evaluated in float64."""
    from onnxrefine.verify.reference import evaluate_float64

    graph = model.graph
    found = []
    for cond in if_conditions(model):
        cone = _cone(graph, cond)
        if len(cone) > SEARCH_MAX_NODES:
            continue
        used = {name for node in cone for name in node.input}
        inits = [init for init in graph.initializer if init.name in used]
        sub_graph = onnx.helper.make_graph(cone, "condition", [value for value in graph.input if value.name in used],
                                           [onnx.helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, None)],
                                           inits)
        sub = onnx.helper.make_model(sub_graph, opset_imports=list(model.opset_import))
        sub.ir_version = model.ir_version
        constants = sorted({float(v) for node in cone for name in node.input if name in _constants(graph)
                            for v in np.asarray(_constants(graph)[name], dtype=np.float64).ravel() if np.isfinite(v)})
        shifts = [0.0] + [sign * value for value in constants for sign in (1, -1)] + [
            a + b for a, b in itertools.combinations(constants, 2)] + [a - b for a, b in itertools.permutations(constants, 2)]
        feeds_in = {name: value for name, value in random_feeds.items() if name in used}
        seen: dict = {}
        for shift, scale in itertools.islice(itertools.product(dict.fromkeys(shifts), (1.0, 0.01, 10.0)), SEARCH_LIMIT):
            moved = (shift, scale) != (0.0, 1.0)
            feeds = {name: (np.asarray(value, np.float64) * scale + shift).astype(np.asarray(value).dtype)
                     if graphinfo.is_float_dtype(np.asarray(value).dtype) else value
                     for name, value in random_feeds.items()}
            try:
                value = evaluate_float64(sub, {name: feeds[name] for name in feeds_in}, error_bounds=False)[cond]
            except Exception:  # noqa: BLE001 - an unevaluable condition is not searched further
                break
            truth = bool(np.asarray(value).ravel()[0]) if np.size(value) else None
            if truth is not None and truth not in seen:
                seen[truth] = feeds if moved else None  # None: the random set reaches it as it is
            if len(seen) == 2:
                break
        found += [(f"branch:if-{cond}-{str(truth).lower()}", feeds) for truth, feeds in seen.items()
                  if feeds is not None]
    return found
