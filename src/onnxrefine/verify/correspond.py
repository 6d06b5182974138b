"""Which value of the candidate is which value of the original (for layer-wise localisation).

Optimizers keep names, but not always for the same value. onnxoptimizer's fuse_bn_into_conv gives
the fused Conv the *Conv's* output name, so that name now holds what the BatchNormalization
computed; onnxsim and hand-written folds keep the BatchNormalization's name instead. A name alone
therefore does not say which value it holds. Roles do: a node the candidate kept (same output name,
same operator) reads, at each input, the candidate's counterpart of what the original node reads
there. So the Relu after a folded BatchNormalization, kept by both, says that the candidate value it
reads (named like the Conv's output) is the original's BatchNormalization output.

Rules, for a value U that a main-graph node of the original produces:
- role votes: every kept node (same output name, operator and attributes) whose input slot reads
  U in the original and V in the candidate (both node outputs) votes U -> V. Commutative ops vote
  only when exactly one operand differs by name (a residual Add whose branch was fused); swapped
  operands say nothing; where several differ, the candidate names read there are marked as
  holding some other value;
- U pairs with the V its votes agree on; conflicting votes leave U unpaired;
- without votes U pairs with the candidate value of the same name, unless votes say that name now
  plays another value's role (then the name was reused and U is left unpaired);
- a kept node whose own output name was reused is no witness: its slots may read new values (the
  fused Conv's weight slot reads the scaled weight), so its votes are dropped (to a fixed point).
The shape/dtype check in localize.py stays as a further guard.
"""

from __future__ import annotations

import hashlib

import onnx

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


def _votes(original, candidate, orig_producers, cand_producers, distrusted: set[int]):
    """(original value -> candidate values voted for, candidate value -> original values claimed)."""
    votes: dict[str, set[str]] = {}
    claimed: dict[str, set[str]] = {}
    for index, cand_node in enumerate(candidate.graph.node):
        if index in distrusted:
            continue
        orig_node = next((orig_producers[out] for out in cand_node.output if out in orig_producers), None)
        if orig_node is None or not _same_operation(orig_node, cand_node):
            continue
        slots = list(zip(orig_node.input, cand_node.input))
        if cand_node.op_type in COMMUTATIVE:
            differing = [(o, c) for o, c in slots if o != c]
            if len(differing) > 1 and sorted(orig_node.input) != sorted(cand_node.input):
                # Several operands changed (both branches of a residual Add were fused): which is
                # which is unknown, but the names read there no longer hold their old values.
                for _, cand_value in differing:
                    if cand_value not in orig_node.input:
                        claimed.setdefault(cand_value, set()).add("\0ambiguous")
                continue
            if len(differing) != 1:
                continue
            slots = differing
        for orig_value, cand_value in slots:
            if orig_value in orig_producers and cand_value in cand_producers:
                votes.setdefault(orig_value, set()).add(cand_value)
                claimed.setdefault(cand_value, set()).add(orig_value)
    return votes, claimed


def correspondences(original: onnx.ModelProto, candidate: onnx.ModelProto) -> tuple[dict[str, str], dict]:
    """Original value name -> candidate value name, and counts (by name, by role, reused names)."""
    orig_producers, cand_producers = _producers(original.graph), _producers(candidate.graph)
    node_index = {out: index for index, node in enumerate(candidate.graph.node) for out in node.output if out}
    # A kept node whose own output name is claimed for another value (onnxoptimizer's fused Conv
    # keeps the Conv's name but computes the BatchNormalization's value) is not the node it was:
    # its input slots say nothing (its weight slot reads the scaled weight). Drop such nodes as
    # witnesses until none is left.
    distrusted: set[int] = set()
    while True:
        votes, claimed = _votes(original, candidate, orig_producers, cand_producers, distrusted)
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
            mapping[name] = target
            stats["by_name" if target == name else "by_role"] += 1
        elif name in cand_producers:
            if claimed.get(name, {name}) - {name}:
                stats["name_reused"] += 1
                continue
            mapping[name] = name
            stats["by_name"] += 1
    return mapping, stats


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
