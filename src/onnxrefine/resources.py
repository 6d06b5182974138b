"""The resource budget of a run: how much memory and time evaluating a model may take.

Before a model is run (verification in onnxruntime, the float64 reference, localisation) its peak
tensor memory is estimated from shapes (`estimate_peak`): intermediate values alive at the same
time, in graph order, each freed after its last use, plus sparse initializers (densified when
loaded). Weights are not counted: they stay memory-mapped from their file. A run whose estimate
exceeds the memory budget is refused with one line (`ResourceLimitError`) instead of being tried,
and so is a Loop with a constant trip count over `MAX_LOOP_TRIPS`.

The budget: `--memory-budget` (`limits(memory_budget=...)`), else `default_memory_budget()`: half
the memory available to this process (MemAvailable, a cgroup's or an rlimit's headroom where
lower), at most `DEFAULT_BUDGET_CAP` (a verification holds several evaluations' worth at once:
onnxruntime's arena keeps a second buffer on a repeated run, the float64 reference doubles float32
values; the cap keeps a multi-GB bomb off an ordinary machine).

Where the estimate cannot be trusted (a Loop or Scan, values whose shape inference cannot tell) or
is close to the budget, verify/ort/child.py runs onnxruntime in a child process whose RSS the
parent polls and whose wall clock it bounds: a model that defeats the estimate is killed and
reported as one line, and the tool goes on (see verify/ort/runner.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.ir.opsets import STANDARD_DOMAINS
from onnxrefine.ir import contained

DEFAULT_BUDGET_FRACTION = 0.5
DEFAULT_BUDGET_CAP = 2 << 30
# onnxruntime needs about twice the estimate: measured on a ConstantOfShape of 200 MB (RSS 270 MB
# after one strict run, 470 MB after a second; 454 MB at level "all", which folds it at load).
ORT_FACTOR = 2
# Above this share of the budget the estimate is "close": the run goes to a watched child process.
CLOSE_SHARE = 0.5
MAX_LOOP_TRIPS = 1_000_000
DEFAULT_TIME_LIMIT_S = 300.0

# Operators whose output size depends on input values, not only shapes; shape inference leaves
# their outputs unknown, and so does everything downstream.
_LOOPS = ("Loop", "Scan")


class ResourceLimitError(BadInputError):
    """A run refused or stopped because it would exceed (or exceeded) the memory or time budget."""


@dataclass(frozen=True)
class Limits:
    memory_budget: int | None = None  # bytes; None: default_memory_budget()
    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # wall clock of one watched onnxruntime run


_LIMITS: ContextVar[Limits] = ContextVar("onnxrefine_limits", default=Limits())


@contextlib.contextmanager
def limits(*, memory_budget: int | None = None, time_limit_s: float | None = None):
    """Within the block, runs use this memory budget (bytes) and per-run wall-clock limit."""
    current = _LIMITS.get()
    token = _LIMITS.set(Limits(memory_budget if memory_budget is not None else current.memory_budget,
                               time_limit_s if time_limit_s is not None else current.time_limit_s))
    try:
        yield
    finally:
        _LIMITS.reset(token)


def current_limits() -> Limits:
    return _LIMITS.get()


def memory_budget() -> int:
    given = _LIMITS.get().memory_budget
    return given if given is not None else default_memory_budget()


# -- sizes ------------------------------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "KIB": 1024, "M": 1000**2, "MB": 1000**2,
          "MIB": 1024**2, "G": 1000**3, "GB": 1000**3, "GIB": 1024**3, "T": 1000**4, "TB": 1000**4,
          "TIB": 1024**4}


def parse_bytes(text: str) -> int:
    """'50MB', '1.5GiB', '200M', '1048576' -> bytes; BadInputError (one line) otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise BadInputError(f"--memory-budget: not a size: {text!r} (e.g. 500MB, 2GiB)")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise BadInputError(f"--memory-budget: must be positive, got {text!r}")
    return size


def format_bytes(size: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def available_memory() -> int | None:
    """Bytes this process may still use: MemAvailable, lowered by a cgroup limit or an address-space
    rlimit (their headroom) where one is set. None when nothing can be read."""
    found = []
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as handle:
            limit = handle.read().strip()
        if limit.isdigit():
            with open("/sys/fs/cgroup/memory.current") as handle:
                found.append(max(0, int(limit) - int(handle.read().strip())))
    except (OSError, ValueError):
        pass
    for which in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", None)):
        if which is None:
            continue
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            found.append(max(0, soft - _virtual_size()))
    return min(found) if found else None


def _virtual_size() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def default_memory_budget() -> int:
    available = available_memory()
    if available is None:
        return DEFAULT_BUDGET_CAP
    return int(min(DEFAULT_BUDGET_CAP, available * DEFAULT_BUDGET_FRACTION))


# -- the estimate -------------------------------------------------------------------------------

@dataclass
class PeakEstimate:
    """Peak bytes of intermediate values in one evaluation (onnxruntime's element types, and as
    the float64 reference holds them), the largest value, and why the figure may be low."""

    peak_bytes: int = 0
    float64_bytes: int = 0
    largest: tuple[str, int] = ("", 0)
    uncertain: list[str] = field(default_factory=list)
    huge_loops: list[tuple[str, int]] = field(default_factory=list)

    def describe(self) -> str:
        text = f"~{format_bytes(self.peak_bytes)} of tensors at once"
        if self.largest[1]:
            text += f" (largest: {self.largest[0]!r}, {format_bytes(self.largest[1])})"
        return text


def estimate_peak(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None) -> PeakEstimate:
    """Estimate from shapes alone (no weights read, nothing evaluated); `feeds` pins the inputs'
    shapes (their values are not read)."""
    from onnxrefine.verify import graphinfo
    from onnxrefine.verify.plan import light_model

    estimate = PeakEstimate()
    light = light_model(model)
    if feeds:
        graphinfo.pin_input_shapes(light, feeds)
    try:
        inferred = infer_shapes_bounded(light)
    except Exception as exc:
        estimate.uncertain.append(f"shape inference failed ({str(exc).splitlines()[0][:120] if str(exc) else 'error'})")
        inferred = light
    graph = inferred.graph
    types: dict[str, tuple[int, tuple | None]] = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.HasField("tensor_type"):
            tensor_type = value.type.tensor_type
            shape = None
            if tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tensor_type.shape.dim):
                shape = tuple(d.dim_value for d in tensor_type.shape.dim)
            types[value.name] = (tensor_type.elem_type, shape)
    for name, array in (feeds or {}).items():
        types[name] = (types.get(name, (onnx.TensorProto.FLOAT, None))[0], tuple(np.shape(array)))
    constants = {init.name for init in graph.initializer}
    fixed = sum(_nbytes(sparse.values.data_type, tuple(sparse.dims)) for sparse in graph.sparse_initializer)
    fixed64 = sum(_nbytes(sparse.values.data_type, tuple(sparse.dims), float64=True)
                  for sparse in graph.sparse_initializer)
    for sparse in graph.sparse_initializer:
        size = _nbytes(sparse.values.data_type, tuple(sparse.dims))
        if size > estimate.largest[1]:
            estimate.largest = (sparse.values.name, size)
    outputs = {out.name for out in graph.output}
    last_use: dict[str, int] = {}
    nodes = list(graph.node)
    for index, node in enumerate(nodes):
        for name in (*node.input, *_subgraph_reads(node)):
            last_use[name] = index
    live: dict[str, tuple[int, int]] = {}
    total = [0, 0]  # running sums of `live` (a sum per node would be quadratic on wide graphs)

    def hold(name, elem, shape):
        drop(name)
        live[name] = (_nbytes(elem, shape), _nbytes(elem, shape, float64=True))
        total[0] += live[name][0]
        total[1] += live[name][1]

    def drop(name):
        sizes = live.pop(name, None)
        if sizes is not None:
            total[0] -= sizes[0]
            total[1] -= sizes[1]

    for name in (feeds or {}):
        elem, shape = types.get(name, (onnx.TensorProto.FLOAT, None))
        if shape is not None:
            hold(name, elem, shape)
    peak = peak64 = 0
    unknown = 0
    for index, node in enumerate(nodes):
        _check_loop(node, graph, estimate)
        for name in node.output:
            if not name:
                continue
            elem, shape = types.get(name, (0, None))
            if shape is None:
                unknown += 1
                continue
            hold(name, elem, shape)
            if live[name][0] > estimate.largest[1]:
                estimate.largest = (name, live[name][0])
        peak, peak64 = max(peak, total[0]), max(peak64, total[1])
        for name in node.input:
            if last_use.get(name) == index and name not in outputs and name not in constants:
                drop(name)
        for name in node.output:  # a value nobody reads (dead code) is freed once computed
            if name and name not in last_use and name not in outputs:
                drop(name)
    if unknown:
        estimate.uncertain.append(f"{unknown} value(s) of unknown shape")
    estimate.peak_bytes, estimate.float64_bytes = peak + fixed, peak64 + fixed64
    return estimate


# onnx's data propagation holds the values it propagates (one protobuf message per element): a
# Concat doubling a 4 KiB constant 15 times took 25 s and grows with the size. Shape tensors are
# small; above this many elements a value is no shape, and propagation is not attempted.
DATA_PROP_MAX_ELEMENTS = 4096
_DATA_PROP_OPS = frozenset("Concat Add Sub Mul Div Cast Gather Slice Squeeze Unsqueeze Shape Size Range".split())


def infer_shapes_bounded(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx shape inference with data propagation (exporters compute Reshape targets from
    Shape->Gather->Concat chains) unless a plain pass shows a 0-D/1-D value of a propagating
    operator larger than DATA_PROP_MAX_ELEMENTS: then the plain pass's result."""
    plain = contained.infer_shapes(model, strict_mode=False)
    if not any(node.op_type in _DATA_PROP_OPS for node in model.graph.node):
        return plain  # nothing to propagate: one pass (a 200,000-node Relu chain: 7 s a pass here)
    sizes = {}
    for value in list(plain.graph.value_info) + list(plain.graph.output):
        tensor_type = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor_type.HasField("shape"):
            dims = tensor_type.shape.dim
            if len(dims) <= 1 and all(d.HasField("dim_value") for d in dims):
                sizes[value.name] = math.prod(d.dim_value for d in dims)
    for init in plain.graph.initializer:
        if len(init.dims) <= 1:
            sizes[init.name] = math.prod(init.dims)
    for node in plain.graph.node:
        if node.op_type in _DATA_PROP_OPS and any(sizes.get(name, 0) > DATA_PROP_MAX_ELEMENTS
                                                  for name in (*node.input, *node.output)):
            return plain
    return contained.infer_shapes(model, strict_mode=False, data_prop=True)


def _nbytes(elem_type: int, shape: tuple, float64: bool = False) -> int:
    count = math.prod(shape)
    if float64:
        return count * 8  # the float64 reference holds floats as float64, integers as int64
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except Exception:
        itemsize = 8
    return count * max(1, itemsize)


def _subgraph_reads(node: onnx.NodeProto) -> set:
    names: set = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            for inner in graph.node:
                names.update(inner.input)
                names |= _subgraph_reads(inner)
    return names


def _check_loop(node: onnx.NodeProto, graph: onnx.GraphProto, estimate: PeakEstimate) -> None:
    """A Loop or Scan (its memory and time depend on its trip count): uncertain; a Loop whose
    constant trip count exceeds MAX_LOOP_TRIPS is recorded as huge (never run)."""
    if node.op_type not in _LOOPS or node.domain not in STANDARD_DOMAINS:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                for inner in sub.node:
                    _check_loop(inner, sub, estimate)
        return
    label = node.name or node.output[0]
    estimate.uncertain.append(f"{node.op_type} {label!r}")
    if node.op_type == "Loop" and node.input and node.input[0]:
        trips = _constant_int(graph, node.input[0])
        if trips is not None and trips > MAX_LOOP_TRIPS:
            estimate.huge_loops.append((label, trips))


def _constant_int(graph: onnx.GraphProto, name: str) -> int | None:
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name and math.prod(init.dims) == 1:
            return int(numpy_helper.to_array(init).reshape(-1)[0])
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value" and math.prod(attr.t.dims) == 1:
                    return int(numpy_helper.to_array(attr.t).reshape(-1)[0])
                if attr.name == "value_int":
                    return int(attr.i)
    return None


# -- decisions ------------------------------------------------------------------------------------

def check_runnable(estimate: PeakEstimate, what: str, budget: int | None = None,
                   budget_text: str = "--memory-budget") -> None:
    """ResourceLimitError (one line) when onnxruntime should not run the model at all."""
    budget = memory_budget() if budget is None else budget
    if estimate.huge_loops:
        label, trips = estimate.huge_loops[0]
        raise ResourceLimitError(f"{what}: Loop {label!r} runs {trips} iterations (more than "
                                 f"{MAX_LOOP_TRIPS}); not evaluated")
    if ORT_FACTOR * estimate.peak_bytes > budget:
        raise ResourceLimitError(
            f"{what} needs {estimate.describe()}, about {format_bytes(ORT_FACTOR * estimate.peak_bytes)} "
            f"in onnxruntime: over the memory budget of {format_bytes(budget)} ({budget_text})")


def reference_refusal(estimate: PeakEstimate, budget: int | None = None) -> str | None:
    """Why the float64 reference should not evaluate the model, or None when it fits."""
    budget = memory_budget() if budget is None else budget
    if estimate.huge_loops:
        label, trips = estimate.huge_loops[0]
        return f"Loop {label!r} runs {trips} iterations"
    if estimate.float64_bytes > budget:
        return (f"the float64 reference needs ~{format_bytes(estimate.float64_bytes)}: over the memory "
                f"budget of {format_bytes(budget)} (--memory-budget)")
    return None


def needs_watch(estimate: PeakEstimate, budget: int | None = None) -> bool:
    """Run in a watched child process: the estimate may be low, or is close to the budget."""
    mode = os.environ.get("ONNXREFINE_WATCH", "auto")  # never | always: for benches and tests
    if mode in ("never", "always"):
        return mode == "always"
    budget = memory_budget() if budget is None else budget
    return bool(estimate.uncertain) or ORT_FACTOR * estimate.peak_bytes > CLOSE_SHARE * budget


# -- the command line ----------------------------------------------------------------------------

def add_memory_budget_argument(parser) -> None:
    """--memory-budget for a subcommand that runs models (optimize, verify, bisect, reduce)."""
    parser.add_argument("--memory-budget", metavar="SIZE", default=None,
                        help="most memory one model evaluation may take, e.g. 500MB or 4GiB (default: half "
                        f"the available memory, at most {format_bytes(DEFAULT_BUDGET_CAP)}); a model whose "
                        "estimate is over it is not run, one that exceeds it while running is stopped")


@contextlib.contextmanager
def from_args(args):
    """The run's limits from parsed arguments (a subcommand without --memory-budget: the defaults).
    A subcommand's --time-budget (verify, reduce) also bounds each watched run: no single run may
    take longer than the whole command is allowed to."""
    text = getattr(args, "memory_budget", None)
    seconds = getattr(args, "time_budget", None)
    with limits(memory_budget=parse_bytes(text) if text is not None else None,
                time_limit_s=seconds if isinstance(seconds, (int, float)) and seconds > 0 else None):
        yield


def check_sparse(model: onnx.ModelProto, budget: int | None = None) -> None:
    """ResourceLimitError when the model's sparse initializers, made dense (onnx-ir holds no sparse
    tensors), exceed the memory budget: a few stored values can declare a multi-GB shape."""
    budget = memory_budget() if budget is None else budget
    graphs, total, largest = [model.graph], 0, ("", 0)
    while graphs:
        graph = graphs.pop()
        for sparse in graph.sparse_initializer:
            size = _nbytes(sparse.values.data_type, tuple(sparse.dims))
            total += size
            largest = max(largest, (sparse.values.name, size), key=lambda item: item[1])
        for node in graph.node:
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
    if total > budget:
        raise ResourceLimitError(f"sparse initializer(s) would take {format_bytes(total)} made dense (largest: "
                                 f"{largest[0]!r}, {format_bytes(largest[1])}): over the memory budget of "
                                 f"{format_bytes(budget)} (--memory-budget)")


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
