"""Input-shape override: fix a model's symbolic input dims (`--input-shape NAME:DIMS`).

Like onnxsim's `--overwrite-input-shape`: the given graph inputs get a fully static declared shape.
onnxruntime checks every feed against the declared static dims, so from then on the dims are
trusted facts (ir/facts/) and the shape arithmetic that reads them folds. The override
changes what the model accepts (only those shapes), never what it computes on them: the optimized
model is verified against the original with the same override, on inputs of exactly those shapes.

Checked before any work (one-line BadInputError): the name is a graph input that is fed (not an
initializer), every dim is a positive integer, the rank matches the declared rank, a dim that is
already static keeps its value, and a symbolic dim name (dim_param) gets one value across inputs
(ONNX: the same dim_param denotes the same size).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import onnx_ir as ir

from onnxrefine.errors import BadInputError

OPTION = "--input-shape"


def parse_input_shape(text: str) -> tuple[str, list[int]]:
    """'NAME:D1,D2,...' -> (NAME, [D1, D2, ...]). The last ':' splits, so names may hold ':'."""
    name, sep, dims_text = text.rpartition(":")
    if not sep or not name.strip():
        raise BadInputError(f"{OPTION}: expected NAME:DIMS (e.g. input:1,3,224,224), got {text!r}")
    name = name.strip()
    parts = [part.strip() for part in dims_text.split(",")] if dims_text.strip() else []
    dims = []
    for part in parts:
        try:
            dims.append(int(part))
        except ValueError:
            raise BadInputError(f"{OPTION}: {name!r}: dim {part!r} is not an integer") from None
    return name, _check_dims(name, dims)


def parse_input_shapes(items: Iterable[str] | None) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for item in items or ():
        name, dims = parse_input_shape(item)
        if name in shapes:
            raise BadInputError(f"{OPTION}: input {name!r} given twice")
        shapes[name] = dims
    return shapes


def _check_dims(name: str, dims: Sequence) -> list[int]:
    checked = []
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, int) and not hasattr(dim, "__index__"):
            raise BadInputError(f"{OPTION}: {name!r}: dim {dim!r} is not an integer")
        value = int(dim)
        if value < 1:
            raise BadInputError(f"{OPTION}: {name!r}: dims must be positive integers, got {value}")
        checked.append(value)
    return checked


def _shape_text(shape) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join(str(d) if isinstance(d, int) else (str(d) if str(d) else "?") for d in shape) + "]"


def resolve(model: ir.Model, shapes: Mapping[str, Sequence[int]]) -> tuple[list[dict], dict[str, int]]:
    """Check `shapes` against the model; return (the changes, symbolic dim name -> value).

    Nothing is modified. Each change is {"input", "before", "after"} (shapes as text and lists).
    """
    if not isinstance(shapes, Mapping):
        raise BadInputError(f"input_shapes must map input names to dims, not {type(shapes).__name__}")
    fed = {value.name: value for value in model.graph.inputs if not value.is_initializer()}
    changes, symbols, owner = [], {}, {}
    for name, raw_dims in shapes.items():
        if name not in fed:
            known = ", ".join(fed) or "none"
            raise BadInputError(f"{OPTION}: {name!r} is not an input of the model (inputs: {known})")
        if isinstance(raw_dims, (str, bytes)) or not isinstance(raw_dims, Iterable):
            raise BadInputError(f"{OPTION}: {name!r}: dims must be a list of integers")
        dims = _check_dims(name, list(raw_dims))
        declared = fed[name].shape
        if declared is not None:
            if len(declared) != len(dims):
                raise BadInputError(f"{OPTION}: {name!r} has rank {len(declared)} {_shape_text(declared)}, "
                                    f"got {len(dims)} dims")
            for axis, (old, new) in enumerate(zip(declared, dims)):
                if isinstance(old, int):
                    if old != new:
                        raise BadInputError(f"{OPTION}: {name!r} axis {axis} is fixed at {old} in the model, "
                                            f"got {new}")
                    continue
                symbol = old.value if isinstance(old, ir.SymbolicDim) else None
                if symbol:
                    if symbol in symbols and symbols[symbol] != new:
                        raise BadInputError(
                            f"{OPTION}: dim {symbol!r} is {symbols[symbol]} for {owner[symbol]!r} "
                            f"but {new} for {name!r}")
                    symbols[symbol], owner[symbol] = new, name
        changes.append({"input": name, "before": _shape_text(declared), "after": list(dims)})
    return changes, symbols


def apply(model: ir.Model, shapes: Mapping[str, Sequence[int]]) -> tuple[list[dict], dict[str, int]]:
    """Fix the declared shapes of the inputs in `shapes` (checked by `resolve` first)."""
    changes, symbols = resolve(model, shapes)
    fed = {value.name: value for value in model.graph.inputs}
    for change in changes:
        fed[change["input"]].shape = ir.Shape(change["after"])
    return changes, symbols


def describe(changes: Sequence[dict]) -> str:
    return "; ".join(f"{c['input']} {c['before']} -> {_shape_text(c['after'])}" for c in changes)
