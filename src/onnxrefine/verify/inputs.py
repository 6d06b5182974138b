"""Input sets for verification: loaded from a file or generated from the model's input types.

Loading: `.npz` files are read with `allow_pickle=False`. A `.npz` whose keys look like
"<set index>/<input name>" holds several sets. The fuzzer `oracle.pkl` layout (a dict whose
"input" maps names to arrays, or a list of such dicts) is read only with `trust_pickle=True`,
because unpickling runs arbitrary code; without it the file is refused before it is opened.

Generation (deterministic in `seed`): symbolic dims come from `dims` (name -> int; a dim with no
name is "input[axis]"), other unknown dims default to 2. `trials` random-normal sets are followed, with `stress=True`, by stress sets:
negatives, signed zeros and tiny values (subnormals, smallest normal), large magnitudes around
sqrt(max) (sums and single products stay finite, squares and exponentials overflow), a set
sprinkled with +-inf and NaN, and the sets that reach the graph's branches (branches.py: both sides
of constant thresholds, If conditions, int32-overflowing integers). There is no set near max
itself: there nearly every intermediate overflows and legitimate rewrites differ only in which one
overflows first. Integer inputs keep to a
valid range where they feed indices ([-dim, dim) when the indexed dim is known, else [0, 2)),
onnxruntime's attention masks ([0, 2), also where the mask is their row sum) or shapes/counts/axes
(1..3); other integers are small. Bool inputs are random.
"""

from __future__ import annotations

import collections.abc
import math
import os
import re
from typing import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx

from onnxrefine.atomic import atomic_file
from onnxrefine.errors import BadInputError
from onnxrefine.resources import ResourceLimitError, format_bytes, memory_budget
from onnxrefine.verify import graphinfo

DEFAULT_DIM = 2
_MULTI_SET_KEY = re.compile(r"^(\d+)/(.+)$")

InputSet = dict  # input name -> np.ndarray


def load_inputs(path: str | os.PathLike, *, trust_pickle: bool = False) -> list[InputSet]:
    """Read input sets from `path` (.npz, or a pickle only when `trust_pickle`)."""
    path = os.fspath(path)
    lower = path.lower()
    if not lower.endswith(".npz"):
        if not trust_pickle:
            # Checked before the file is touched: unpickling runs whatever code it contains.
            raise BadInputError(
                f"refusing to unpickle {path}: loading a pickle runs arbitrary code; "
                "pass --trust-pickle if you trust this file, or convert the inputs to .npz"
            )
        return _load_pickle(path)
    if not os.path.isfile(path):
        raise BadInputError(f"inputs file not found: {path}")
    check_npz(path)  # sizes and headers before any data
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except ValueError as exc:
        raise BadInputError(f"cannot read {path} without unpickling objects: {exc}") from None
    except Exception as exc:  # a zip that is not an npz, a truncated file...
        raise BadInputError(f"cannot read inputs from {path}: {exc}") from None
    if arrays and all(_MULTI_SET_KEY.match(key) for key in arrays):
        sets: dict[int, InputSet] = {}
        for key, array in arrays.items():
            match = _MULTI_SET_KEY.match(key)
            sets.setdefault(int(match.group(1)), {})[match.group(2)] = array
        return [sets[index] for index in sorted(sets)]
    return [arrays]


def save_inputs(path: str | os.PathLike, input_sets: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Write input sets as one .npz (multi-set keys when more than one), atomically."""
    path = os.fspath(path)
    if len(input_sets) == 1:
        arrays = dict(input_sets[0])
    else:
        arrays = {f"{index}/{name}": value for index, feeds in enumerate(input_sets)
                  for name, value in feeds.items()}
    with atomic_file(path, "wb") as handle:
        np.savez(handle, **arrays)


def _load_pickle(path: str) -> list[InputSet]:
    import pickle

    if not os.path.isfile(path):
        raise BadInputError(f"inputs file not found: {path}")
    try:
        with open(path, "rb") as handle:
            data = pickle.load(handle)  # noqa: S301 - only reached with trust_pickle=True
    except Exception as exc:
        raise BadInputError(f"cannot unpickle {path}: {exc}") from None
    records = data if isinstance(data, list) else [data]
    sets = []
    for record in records:
        if isinstance(record, Mapping) and isinstance(record.get("input"), Mapping):
            record = record["input"]
        if not isinstance(record, Mapping):
            raise BadInputError(f"{path}: expected a dict whose 'input' maps input names to arrays")
        sets.append({str(name): np.asarray(value) for name, value in record.items()})
    return sets


def check_inputs(model: onnx.ModelProto, input_sets: Sequence[Mapping[str, np.ndarray]]) -> list[InputSet]:
    """Match each set to the model's inputs (see `check_input_sets`); raise BadInputError."""
    return check_input_sets(graphinfo.graph_inputs(model), input_sets)


def input_specs(model) -> list[graphinfo.InputSpec]:
    """The main graph's inputs (initializers excluded) of an onnx.ModelProto or an onnx_ir.Model."""
    if isinstance(model, onnx.ModelProto):
        return graphinfo.graph_inputs(model)
    specs = []
    for value in model.graph.inputs:
        if value.name in model.graph.initializers:
            continue
        kind = value.type
        import onnx_ir as ir

        dtype = getattr(kind, "dtype", None)
        if dtype is None or not isinstance(kind, ir.TensorType):
            specs.append(graphinfo.InputSpec(value.name, np.dtype(object), None, 0))
            continue
        shape = None
        if value.shape is not None:
            shape = tuple(dim if isinstance(dim, int) else (getattr(dim, "value", None) or None)
                          for dim in value.shape)
        specs.append(graphinfo.InputSpec(value.name, graphinfo.np_dtype(dtype.value), shape, dtype.value))
    return specs


def check_input_sets(specs: Sequence[graphinfo.InputSpec],
                     input_sets: Sequence[Mapping[str, np.ndarray]]) -> list[InputSet]:
    """Each set gives every input of the model and nothing else, with the model's dtype, rank and
    fixed dims; a symbolic dim takes one value across the inputs of a set (`N` of `X[N,4]` and
    `Z[N,4]`). Any mismatch is a BadInputError naming the set and the input."""
    from onnxrefine.ir.load_checks import one_line

    expected = {spec.name: spec for spec in specs}
    checked = []
    for index, feeds in enumerate(input_sets):
        where = f"input set {index}" if len(input_sets) > 1 else "inputs"
        missing = [one_line(name) for name in expected if name not in feeds]
        if missing:
            given = ", ".join(one_line(str(name)) for name in list(feeds)[:6]) + (" ..." if len(feeds) > 6 else "")
            raise BadInputError(f"{where}: missing model input(s) {', '.join(missing)} ("
                                + (f"given: {given}; several sets are keyed '<n>/<name>', n = 0, 1, ...)" if feeds
                                   else "no arrays given)"))
        extra = [one_line(str(name)) for name in feeds if name not in expected]
        if extra:
            raise BadInputError(f"{where}: not inputs of the model: {', '.join(extra)}")
        clean, bound = {}, {}
        for name, spec in expected.items():
            array = np.asarray(feeds[name])
            shown = repr(one_line(name))
            if spec.dtype != np.dtype(object) and array.dtype != spec.dtype:
                raise BadInputError(
                    f"{where}: input {shown} is {array.dtype}, the model expects {spec.dtype}")
            if spec.shape is not None:
                if array.ndim != len(spec.shape):
                    raise BadInputError(f"{where}: input {shown} has rank {array.ndim}, "
                                        f"the model expects rank {len(spec.shape)}")
                for axis, (got, want) in enumerate(zip(array.shape, spec.shape)):
                    if isinstance(want, int) and want > 0 and got != want:
                        raise BadInputError(f"{where}: input {shown} has shape {array.shape}, "
                                            f"the model expects {spec.shape} (axis {axis})")
                    if isinstance(want, str):
                        first = bound.setdefault(want, (got, name))
                        if first[0] != got:
                            raise BadInputError(
                                f"{where}: input {shown} has {want}={got} (axis {axis}), but input "
                                f"{one_line(first[1])!r} has {want}={first[0]}")
            clean[name] = array
        checked.append(clean)
    return checked


def concrete_shape(spec: graphinfo.InputSpec, dims: Mapping[str, int] | None) -> tuple[int, ...]:
    dims = dims or {}
    if spec.shape is None:
        return (DEFAULT_DIM,)
    shape = []
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(int(dims[dim]))
        elif dim is None and unnamed_dim(spec.name, axis) in dims:
            shape.append(int(dims[unnamed_dim(spec.name, axis)]))
        elif dim == 0:
            shape.append(0)
        else:
            shape.append(DEFAULT_DIM)
    return tuple(shape)


def unnamed_dim(input_name: str, axis: int) -> str:
    """The key that sizes a dim with neither a size nor a name in `dims`: "input[axis]"."""
    return f"{input_name}[{axis}]"


def generate_inputs(model: onnx.ModelProto, *, seed: int = 0, dims: Mapping[str, int] | None = None,
                    stress: bool = True, trials: int = 3, memo: dict | None = None) -> list[InputSet]:
    """Random-normal sets (`trials` of them), then stress sets when `stress`."""
    return [feeds for _, feeds in generate_labelled_inputs(model, seed=seed, dims=dims,
                                                           stress=stress, trials=trials, memo=memo)]


STRESS_KINDS = ("negative", "zeros_tiny", "large", "inf_nan")


class DeferredSet(collections.abc.Mapping):
    """A generated set whose arrays are made when first read: a plan that keeps two of seven sets
    makes only those (each set has its own generator, so the arrays are the same either way)."""

    def __init__(self, make):
        self._make, self._feeds = make, None

    def _made(self) -> dict:
        if self._feeds is None:
            self._feeds, self._make = self._make(), None
        return self._feeds

    def __getitem__(self, name):
        return self._made()[name]

    def __iter__(self):
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


def generate_labelled_inputs(model: onnx.ModelProto, *, seed: int = 0,
                             dims: Mapping[str, int] | None = None, stress: bool = True,
                             trials: int = 3, memo: dict | None = None,
                             deferred: bool = False) -> list[tuple[str, InputSet]]:
    """`memo`: a dict the caller keeps for one model it generates sets for again and again (at
    other sizes: a shape observation's tries), where the model's inferred shapes are kept.
    `deferred`: each set a DeferredSet (made when read; `dict(feeds)` makes it a plain one)."""
    specs = graphinfo.graph_inputs(model)
    shapes = {spec.name: concrete_shape(spec, dims) for spec in specs}
    check_generated_size(specs, shapes)
    roles = {}
    if any(spec.dtype.kind in "iu" for spec in specs):  # only integer inputs have a role (shape inference's cost)
        if memo is None or "static_shapes" not in memo:
            inferred = graphinfo.static_shapes(model, None)  # at no input's size: the same for every call
            if memo is None:
                memo = {}
            memo["static_shapes"] = inferred
        known_shapes = dict(memo["static_shapes"])
        known_shapes.update(shapes)
        users = graphinfo.consumers(model)
        roles = {spec.name: graphinfo.integer_role(model, spec.name, known_shapes, users)
                 for spec in specs if spec.dtype.kind in "iu"}
    kinds = [f"random{index}" for index in range(max(1, trials))]
    if stress:
        kinds += [f"stress:{kind}" for kind in STRESS_KINDS]

    def make(set_index: int, kind: str) -> dict:
        feeds = {}
        for input_index, spec in enumerate(specs):
            rng = np.random.default_rng([seed, set_index, input_index])
            feeds[spec.name] = _make_array(spec, shapes[spec.name], kind, rng, roles.get(spec.name))
        return feeds

    sets = [(kind, DeferredSet(lambda i=set_index, k=kind: make(i, k)) if deferred else make(set_index, kind))
            for set_index, kind in enumerate(kinds)]
    if stress and sets:
        from onnxrefine.verify.branches import branch_sets

        sets += branch_sets(model, specs, roles, sets[0][1], np.random.default_rng([seed, len(kinds)]))
    return sets


def generation_limit_bytes() -> int:
    """Most bytes one generated input set may take: a quarter of the machine's memory."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def check_generated_size(specs, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Refuse (one line, naming the input) before allocating a set that cannot fit in memory:
    a declared dim of 2^40 would otherwise ask numpy for terabytes."""
    from onnxrefine.ir.load_checks import one_line

    limit, total = generation_limit_bytes(), 0
    for spec in specs:
        count = 1
        for dim in shapes[spec.name]:
            count *= int(dim)
        size = count * (spec.dtype.itemsize if spec.dtype != np.dtype(object) else 8)
        total += size
        if total > limit:
            raise BadInputError(
                f"input {one_line(spec.name)!r} of shape {shapes[spec.name]} is too large to generate "
                f"({size / 2**30:.3g} GiB for one input set, the limit is {limit / 2**30:.3g} GiB); "
                "give --inputs, smaller --dims, or --no-verify")


def _make_array(spec, shape, kind, rng, role):
    dtype = spec.dtype
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return _make_ints(dtype, shape, rng, role or ("plain",))
    if graphinfo.is_float_dtype(dtype):
        return _make_floats(dtype, shape, kind, rng)
    if dtype == np.dtype(object):
        raise BadInputError(f"cannot generate values for input {spec.name!r} (not a tensor); "
                            "pass --inputs")
    raise BadInputError(f"cannot generate values for input {spec.name!r} of type {dtype}; "
                        "pass --inputs")


def _make_ints(dtype, shape, rng, role):
    if role[0] == "index":
        dim = role[1]
        low, high = (-dim, dim) if dim else (0, 2)
    elif role[0] == "shape":
        low, high = 1, 4
    else:
        low, high = (0, 4) if dtype.kind == "u" else (-3, 4)
    return rng.integers(low, high, size=shape).astype(dtype)


def _make_floats(dtype, shape, kind, rng):
    info = ml_dtypes.finfo(dtype)
    big = float(info.max)
    base = rng.standard_normal(shape)
    if kind.startswith("random"):
        values = base
    elif kind == "stress:negative":
        values = -np.abs(base) - float(info.tiny)
    elif kind == "stress:zeros_tiny":
        choices = np.array([0.0, -0.0, float(info.tiny), -float(info.tiny),
                            float(info.smallest_subnormal), 1.0, -1.0], dtype=np.float64)
        values = np.where(rng.random(shape) < 0.6, choices[rng.integers(0, len(choices), shape)], base)
    elif kind == "stress:large":
        values = base * np.sqrt(big) * 0.5
    elif kind == "stress:inf_nan":
        specials = np.array([np.inf, -np.inf, np.nan, -0.0], dtype=np.float64)
        values = np.where(rng.random(shape) < 0.3, specials[rng.integers(0, 4, shape)], base)
    else:
        raise ValueError(kind)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, dtype=np.float64).astype(dtype)


def check_npz(path: str, budget: int | None = None) -> None:
    """BadInputError before an .npz is read: every member's declared size (the zip's central
    directory) and its .npy header (dtype, shape) are read without decompressing any data. Refused:
    members whose total exceeds the memory budget (a zip bomb), a header whose shape needs more or
    fewer bytes than the member holds, a member that is not an .npy array."""
    import zipfile

    budget = memory_budget() if budget is None else budget
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadInputError(f"cannot read inputs from {path}: {exc}") from None
    with archive:
        members = archive.infolist()
        total = sum(member.file_size for member in members)
        if total > budget:
            raise ResourceLimitError(f"inputs file {path} holds {format_bytes(total)} uncompressed: over the "
                                     f"memory budget of {format_bytes(budget)} (--memory-budget)")
        for member in members:
            name = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
            try:
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    reader = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                              else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = reader(stream, max_header_size=10000)
                    header = stream.tell() if stream.seekable() else None
            except Exception as exc:
                raise BadInputError(f"inputs file {path}: member {name!r} is not an .npy array "
                                    f"({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
            if dtype.hasobject:
                continue  # refused by the loader (no pickles) with its own message
            need = math.prod(shape) * dtype.itemsize
            if header is not None and need != member.file_size - header:
                raise BadInputError(f"inputs file {path}: array {name!r} declares shape {tuple(shape)} "
                                    f"({format_bytes(need)}) but holds {format_bytes(member.file_size - header)}")
