"""Which value of the candidate is which value of the original (for layer-wise localisation).

Optimizers keep names, but not always for the same value. onnxoptimizer's fuse_bn_into_conv gives
the fused Conv the *Conv's* output name, so that name now holds what the BatchNormalization
computed; onnxsim and hand-written folds keep the BatchNormalization's name instead. A name alone
therefore does not say which value it holds. Roles do: a node the candidate kept (same output name,
same operator) reads, at each input, the candidate's counterpart of what the original node reads
there. So the residual Add after a folded BatchNormalization, kept by both, says that the candidate
value it reads (named like the Conv's output) is the original's BatchNormalization output.

Rules, for a value U that a main-graph node of the original produces:
- a kept node is a candidate node whose output name the original also produces with the same
  operator and attributes. Where its input slot reads a different name than the original's, the
  name it reads is suspect (it may hold another value now). A kept node of a WITNESSES operator
  with exactly one changed slot votes that the candidate value there is U (the original's value
  there), unless that candidate value is computed exactly like another original value;
- U pairs with the V its votes agree on; conflicting votes, or a V that other kept nodes read where
  the original reads yet another value, leave U unpaired;
- without votes U pairs with the candidate value of the same name unless that name is suspect;
- a name whose producer reads new values and that feeds a node standing in for an original node
  (same output name, any operator) that did not read it is suspect: its producer absorbed what
  followed it (Conv -> BN -> Conv -> BN folded into two Convs named like the first Conv and the
  last BatchNormalization);
- an If/Loop/Scan kept by name whose subgraphs now capture a name they did not makes it suspect;
- a kept node whose own output name is suspect is no witness: its slots may read new values (the
  fused Conv's weight slot reads the scaled weight), so its votes are dropped (to a fixed point).
The shape/dtype check in localize/layerwise.py stays as a further guard.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import onnx

from onnxrefine.ir import contained
from onnxrefine.verify import graphinfo
from onnxrefine.verify import judge

# Ops whose output, with the other inputs fixed, determines the input in the one slot that changed:
# only these vouch that a changed input holds the original's value. Idempotent (Relu, Abs, Floor),
# order-only (ArgMax, TopK, Softmax), selecting (Where, Slice, Gather), reshaping and casting ops
# are what eliminations simplify *through* (Relu(Relu(x)) -> Relu(x), ArgMax(Exp(x)) -> ArgMax(x),
# Where(Not(c), a, b) -> Where(c, b, a)); they only mark the names they read as suspect.
WITNESSES = frozenset({"Add", "Sub", "Mul", "Div", "Conv", "ConvTranspose", "MatMul", "Gemm", "Concat",
                       "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Sqrt", "Reciprocal", "Neg",
                       "BatchNormalization"})
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal",
                         "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output if out}


def _same_operation(a: onnx.NodeProto, b: onnx.NodeProto) -> bool:
    """Same operator with the same attributes: its input slots mean the same in both models (a
    Gemm that absorbed a Transpose through transA reads its operand differently, say)."""
    if (a.op_type, a.domain) != (b.op_type, b.domain) or len(a.attribute) != len(b.attribute):
        return False
    key = lambda attr: attr.name  # noqa: E731
    return all(x.SerializeToString(deterministic=True) == y.SerializeToString(deterministic=True)
               for x, y in zip(sorted(a.attribute, key=key), sorted(b.attribute, key=key)))


def _captures(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read without defining them (outer-scope captures, roughly)."""
    found: set[str] = set()
    for attr in node.attribute:
        for sub in _subgraphs(attr):
            defined = {i.name for i in sub.input} | {t.name for t in sub.initializer}
            defined |= {out for inner in sub.node for out in inner.output}
            for inner in sub.node:
                found.update(name for name in inner.input if name and name not in defined)
                found |= _captures(inner) - defined
            found.update(out.name for out in sub.output if out.name not in defined)
    return found


def _subgraphs(attr: onnx.AttributeProto) -> list:
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.g]
    return list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []


def _absorbed(original, candidate, orig_producers) -> set[str]:
    """Names whose producer was rewritten in place and that now feed, directly, a node standing in
    for an original node that did not read them: the producer absorbed what used to follow it
    (onnxoptimizer folds a BatchNormalization into its Conv under the Conv's name, and the next
    fused node, named like the next BatchNormalization, reads that name)."""
    known = {name for node in original.graph.node for name in node.output}
    known |= {v.name for v in original.graph.input} | {t.name for t in original.graph.initializer}
    readers: dict[str, list] = {}
    for node in candidate.graph.node:
        for name in node.input:
            if name:
                readers.setdefault(name, []).append(node)
    found = set()
    for node in candidate.graph.node:
        if not any(name and name not in known for name in node.input):
            continue  # reads only values the original has: not rewritten in place
        for name in node.output:
            if name not in orig_producers:
                continue
            for reader in readers.get(name, []):
                stand_in = next((orig_producers[out] for out in reader.output if out in orig_producers), None)
                if stand_in is not None and name not in stand_in.input and name not in _captures(stand_in):
                    found.add(name)
    return found


def _votes(orig_producers, cand_producers, candidate, distrusted: set[int], proven: dict[str, set]):
    """(original value -> candidate values voted for, candidate value -> original values claimed)."""
    votes: dict[str, set[str]] = {}
    claimed: dict[str, set[str]] = {}
    for index, cand_node in enumerate(candidate.graph.node):
        orig_node = next((orig_producers[out] for out in cand_node.output if out in orig_producers), None)
        if orig_node is not None and orig_node.op_type == cand_node.op_type:
            # An If/Loop/Scan whose branches now read an outer name they did not read before: that
            # name may hold what the branches read before (a fold renamed into a capture).
            for name in _captures(cand_node) - _captures(orig_node):
                claimed.setdefault(name, set()).add("\0capture")
        if orig_node is None or not _same_operation(orig_node, cand_node):
            continue
        differing = [(o, c) for o, c in zip(orig_node.input, cand_node.input) if o != c]
        if cand_node.op_type in COMMUTATIVE and sorted(orig_node.input) == sorted(cand_node.input):
            continue  # swapped operands: nothing changed
        # Claims: a name read where the original read another value may not hold its old value.
        for orig_value, cand_value in differing:
            if cand_value not in orig_node.input:
                claimed.setdefault(cand_value, set()).add(orig_value or "\0absent")
        # Votes: only through a trusted witness whose one changed slot determines its output.
        if (index in distrusted or cand_node.op_type not in WITNESSES or len(differing) != 1
                or len(orig_node.input) != len(cand_node.input)):
            continue
        orig_value, cand_value = differing[0]
        if orig_value in orig_producers and cand_value in cand_producers \
                and orig_value in proven.get(cand_value, {orig_value}):
            votes.setdefault(orig_value, set()).add(cand_value)
    return votes, claimed


def correspondences(original: onnx.ModelProto, candidate: onnx.ModelProto,
                    orig_digests: dict | None = None, cand_digests: dict | None = None
                    ) -> tuple[dict[str, str], dict]:
    """Original value name -> candidate value name, and counts (by name, by role, reused names)."""
    orig_digests = orig_digests if orig_digests is not None else structural_digests(original)
    cand_digests = cand_digests if cand_digests is not None else structural_digests(candidate)
    orig_producers, cand_producers = _producers(original.graph), _producers(candidate.graph)
    # A candidate value computed exactly like an original value is that value, whatever reads it.
    by_digest: dict[bytes, set[str]] = {}
    for name in orig_producers:
        by_digest.setdefault(orig_digests[name], set()).add(name)
    proven = {name: by_digest[cand_digests[name]] for name in cand_producers
              if cand_digests.get(name) in by_digest}
    node_index = {out: index for index, node in enumerate(candidate.graph.node) for out in node.output if out}
    absorbed = _absorbed(original, candidate, orig_producers)
    # A kept node whose own output name is claimed for another value (onnxoptimizer's fused Conv
    # keeps the Conv's name but computes the BatchNormalization's value) is not the node it was:
    # its input slots vote for nothing (its weight slot reads the scaled weight), to a fixed point.
    distrusted: set[int] = set()
    while True:
        votes, claimed = _votes(orig_producers, cand_producers, candidate, distrusted, proven)
        for name in absorbed:
            claimed.setdefault(name, set()).add("\0absorbed")
        reused = {node_index[name] for name, origins in claimed.items()
                  if name in node_index and origins - {name}}
        if reused <= distrusted:
            break
        distrusted |= reused
    mapping: dict[str, str] = {}
    stats = {"by_name": 0, "by_role": 0, "ambiguous": 0, "name_reused": 0}
    for name in orig_producers:
        voted = votes.get(name)
        if voted:
            if len(voted) > 1:
                stats["ambiguous"] += 1
                continue
            (target,) = voted
            if claimed.get(target, set()) - {name, target, "\0absorbed", "\0capture"}:
                stats["ambiguous"] += 1  # other kept nodes read it where the original reads another value
                continue
            mapping[name] = target
            stats["by_name" if target == name else "by_role"] += 1
        elif name in cand_producers:
            if claimed.get(name, {name}) - {name}:
                stats["name_reused"] += 1
                continue
            mapping[name] = name
            stats["by_name"] += 1
    return mapping, stats


# ops that read only their input's shape: its values reach nothing through them
_SHAPE_READERS = frozenset({"Shape", "Size"})


def live_values(model: onnx.ModelProto) -> set[str]:
    """Names whose values reach a graph output through main-graph nodes (what a node's subgraphs
    capture counts as its input; a Shape or Size reads no values). Dead values change nothing a model
    computes: a value only a Shape reads may hold anything of its shape."""
    live = {out.name for out in model.graph.output}
    for node in reversed(model.graph.node):  # topological order: readers come after producers
        if any(out in live for out in node.output):
            if node.op_type in _SHAPE_READERS and (node.domain or "") in ("", "ai.onnx"):
                continue
            live |= {name for name in node.input if name} | _captures(node)
    return live


def structural_digests(model: onnx.ModelProto) -> dict[str, bytes]:
    """Value name -> digest of the computation that produces it (main graph).

    Equal digests in two models mean the same ops with the same attributes on the same constants and
    graph inputs all the way up. Nodes with subgraphs (which may capture outer names) and calls to
    model-local functions get a digest unique to this call, so they never count as identical.
    """
    digests: dict[str, bytes] = {}
    graph = model.graph
    for init in graph.initializer:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(init)
        tensor.name = ""
        digests[init.name] = hashlib.blake2b(tensor.SerializeToString(deterministic=True),
                                             digest_size=16).digest()
    for value in graph.input:
        if value.name not in digests:
            digests[value.name] = hashlib.blake2b(b"input\0" + value.SerializeToString(deterministic=True),
                                                  digest_size=16).digest()
    local_functions = {(f.domain, f.name) for f in model.functions}
    salt = f"{id(model)}".encode()
    for node in graph.node:
        h = hashlib.blake2b(digest_size=16)
        if (node.domain, node.op_type) in local_functions or any(
                attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute):
            h.update(b"opaque\0" + salt + repr(list(node.output)).encode())
        else:
            h.update(f"{node.domain}\0{node.op_type}\0".encode())
            for attr in sorted(node.attribute, key=lambda a: a.name):
                h.update(attr.SerializeToString(deterministic=True))
            for name in node.input:
                h.update(digests.get(name, b"undefined\0" + name.encode()) if name else b"absent")
                h.update(b"\0")
        base = h.digest()
        for index, out in enumerate(node.output):
            if out:
                digests[out] = hashlib.blake2b(base + index.to_bytes(4, "little"), digest_size=16).digest()
    return digests


# -- the pairs localisation judges (moved from localize/layerwise.py) ------------------------------------------

UNKNOWN_VALUE_BYTES = 1 << 20  # what a value of unknown shape counts as when batching


@dataclass
class Pair:
    """One intermediate value held by both models."""

    name: str  # in the original
    candidate_name: str
    order: int  # index of the original's producing node
    node: str
    op: str
    candidate_node: str
    candidate_op: str
    est_bytes: int
    bound: judge.RoundingBound | None = None


def find_pairs(original: onnx.ModelProto, candidate: onnx.ModelProto, feeds, u: float
               ) -> tuple[list[Pair], dict]:
    """The intermediate values worth judging, in the original's topological order, and counts."""
    orig_digests, cand_digests = structural_digests(original), structural_digests(candidate)
    mapping, stats = correspondences(original, candidate, orig_digests, cand_digests)
    cand_producers = {out: node for node in candidate.graph.node for out in node.output if out}
    output_names = {out.name for out in original.graph.output}
    stats.update(paired=0, identical_computation=0, dead=0, type_differs=[])
    orig_live, cand_live = live_values(original), live_values(candidate)
    pairs = []
    for order, node in enumerate(original.graph.node):
        for name in node.output:
            cand_name = mapping.get(name)
            if not name or name in output_names or cand_name is None:
                continue
            if name not in orig_live or cand_name not in cand_live:
                stats["dead"] += 1  # reaches no output: whatever it holds changes nothing
                continue
            stats["paired"] += 1
            if orig_digests.get(name) == cand_digests.get(cand_name):
                stats["identical_computation"] += 1
                continue
            cand_node = cand_producers[cand_name]
            pairs.append(Pair(name, cand_name, order, node.name, node.op_type, cand_node.name,
                              cand_node.op_type, UNKNOWN_VALUE_BYTES))
    if not pairs:
        return pairs, stats
    orig_types = _value_types(original, feeds, [p.name for p in pairs])
    cand_types = _value_types(candidate, feeds, [p.candidate_name for p in pairs])
    kept = []
    for pair in pairs:
        mine, theirs = orig_types.get(pair.name), cand_types.get(pair.candidate_name)
        if mine and theirs and not _types_agree(mine, theirs):
            stats["type_differs"].append(pair.name)
            continue
        if mine and mine[1] is not None and all(isinstance(d, int) for d in mine[1]):
            itemsize = np.dtype(graphinfo.np_dtype(mine[0])).itemsize if mine[0] else 4
            pair.est_bytes = int(np.prod(mine[1], dtype=np.int64)) * itemsize
        kept.append(pair)
    depths = _depths(original, feeds, [p.name for p in kept])
    for pair in kept:
        pair.bound = judge.RoundingBound.for_output(
            u, *depths.get(pair.name, (1, graphinfo.UNKNOWN_DIM)))
    return kept, stats


def _types_agree(mine, theirs) -> bool:
    if mine[0] and theirs[0] and mine[0] != theirs[0]:
        return False
    if mine[1] is None or theirs[1] is None or len(mine[1]) != len(theirs[1]):
        return mine[1] is None or theirs[1] is None
    return all(a is None or b is None or a == b for a, b in zip(mine[1], theirs[1]))


def _light_copy(model: onnx.ModelProto, outputs) -> onnx.ModelProto:
    """The model without the bytes of large initializers (shape inference needs only their dims),
    with `outputs` as its graph outputs."""
    light = onnx.ModelProto()
    graph = model.graph
    light.CopyFrom(onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                                   functions=model.functions))
    light.graph.name = graph.name
    light.graph.node.extend(graph.node)
    light.graph.input.extend(graph.input)
    light.graph.value_info.extend(graph.value_info)
    for init in graph.initializer:
        if int(np.prod(init.dims, dtype=np.int64)) <= 64:
            light.graph.initializer.append(init)
        else:
            light.graph.initializer.add(name=init.name, dims=init.dims, data_type=init.data_type)
    for name in outputs:
        light.graph.output.add().name = name
    return light


def _value_types(model, feeds, names) -> dict:
    """Name -> (elem_type or 0, shape tuple or None) from shape inference, inputs pinned to feeds."""
    light = _light_copy(model, [])
    graphinfo.pin_input_shapes(light, feeds)
    try:
        light = contained.infer_shapes(light, strict_mode=False)  # pinned shapes may be impossible
    except Exception:  # shape inference is a help here, never a requirement
        pass
    wanted, found = set(names), {}
    for value in light.graph.value_info:
        if value.name in wanted and value.type.HasField("tensor_type"):
            tensor_type = value.type.tensor_type
            shape = None
            if tensor_type.HasField("shape"):
                shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
            found[value.name] = (tensor_type.elem_type, shape)
    return found


def _depths(model, feeds, names) -> dict:
    try:
        return graphinfo.accumulation_depths(_light_copy(model, names), feeds)
    except Exception:
        return {}
