"""The Python API: `optimize(model, passes=None)`, a drop-in for `onnxoptimizer.optimize`."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir

from onnxrefine import around_maps, portable
from onnxrefine.errors import BadInputError
from onnxrefine.input_shapes import apply as fix_input_shapes
from onnxrefine.ir import heap, io, load
from onnxrefine.ir.budget import DEFAULT_GROWTH_RATIO, DEFAULT_PER_TENSOR_BYTES, ConstantBudget
from onnxrefine.ir.maps import MapTypesError
from onnxrefine.passes.pipeline import run_passes
from onnxrefine.passes.registry import default_pass_names, get_pass
from onnxrefine.rewrite.log import RewriteLog
from onnxrefine.verified import VerifySettings, optimize_verified
from onnxrefine.verify.certificate import Certifier
from onnxrefine.version import __version__

logger = logging.getLogger(__name__)

REPORT_SCHEMA_VERSION = 1


@dataclass
class OptimizationReport:
    passes: list[str]
    nodes_before: int
    nodes_after: int
    seconds: float
    log: RewriteLog
    rolled_back: list[dict] = field(default_factory=list)
    verification: dict | None = None
    certificates: dict | None = None  # per-rewrite certificates: counts and seconds (None: off)
    input_shapes: dict | None = None  # the input-shape override and what folded after it (None: none)
    # The constant budget (ir/budget.py): rewrites it refused, growth used and allowed. A run it
    # stopped short (a 1M-node chain: each Transpose -> Reshape adds a 16-byte shape) says so here.
    constant_budget: dict | None = None
    # Nodes per operator ("Conv", "com.microsoft.FusedMatMul"), subgraphs and functions included.
    operators_before: dict[str, int] = field(default_factory=dict)
    operators_after: dict[str, int] = field(default_factory=dict)
    # Bytes on disk (external data included), set by whoever saved the model (the CLI).
    file_sizes: dict | None = None
    # Parts of the input the output does not carry (io.note_unkept_parts: training_info), each a
    # sentence: said in the summary and the report, never dropped silently.
    dropped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            # Documented in onnxrefine/schemas/optimize-report.schema.json: a new field goes there
            # too; REPORT_SCHEMA_VERSION is raised only when a field is removed or changes meaning.
            "schema": "onnxrefine-optimize-report",
            "schema_version": REPORT_SCHEMA_VERSION,
            "onnxrefine_version": __version__,
            "passes": self.passes,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "seconds": round(self.seconds, 4),
            "rewrites_per_rule": dict(self.log.counts()),
            "rolled_back": self.rolled_back,
            "verification": self.verification,
            "certificates": self.certificates,
            "input_shapes": self.input_shapes,
            "constant_budget": self.constant_budget,
            "operators": operator_table(self.operators_before, self.operators_after),
            "file_sizes": self.file_sizes,
            "dropped": list(self.dropped),
            **self.log.to_dict(),
        }


def operator_table(before: Mapping[str, int], after: Mapping[str, int]) -> list[dict]:
    """One row per operator in either model, by name: {"op", "before", "after"}."""
    return [{"op": op, "before": before.get(op, 0), "after": after.get(op, 0)}
            for op in sorted(set(before) | set(after))]


def count_operators(model: ir.Model) -> dict[str, int]:
    """Nodes per operator, in the graph, its subgraphs and the model's functions; an operator
    outside the standard domain is named with its domain."""
    nodes = list(model.graph.all_nodes()) + [n for f in model.functions.values() for n in f.all_nodes()]
    return count_by_operator(nodes)


def count_by_operator(nodes) -> dict[str, int]:
    """Nodes (onnx-ir nodes or NodeProtos) per operator_name."""
    counts: dict[str, int] = {}
    for node in nodes:
        name = operator_name(node.domain, node.op_type)
        counts[name] = counts.get(name, 0) + 1
    return counts


def operator_name(domain: str, op_type: str) -> str:
    """How the summary and the report name an operator: the op_type, with its domain outside the
    standard one ("com.microsoft.FusedConv")."""
    return f"{domain}.{op_type}" if domain not in ("", "ai.onnx") else op_type


def count_nodes(model: ir.Model) -> int:
    total = sum(1 for _ in model.graph.all_nodes())
    total += sum(sum(1 for _ in f.all_nodes()) for f in model.functions.values())
    return total


def resolve_passes(passes: Sequence[str] | None, disable: Sequence[str] = ()) -> list[str]:
    names = list(default_pass_names()) if passes is None else [p.strip() for p in passes if p.strip()]
    if "default" in names:  # "default,inline_functions": the default pipeline plus opt-in passes
        at = names.index("default")
        names[at:at + 1] = [n for n in default_pass_names() if n not in names]
    for name in list(names) + list(disable):
        spec = get_pass(name)  # unknown names fail here, before any work
        if spec.name != name and len(spec.rules) > 1:
            others = ", ".join(rule.name for rule in spec.rules if rule.name != name)
            logger.warning("%s is a rule of pass %s, which is chosen (or left out) whole: its other rules "
                           "are %s", name, spec.name, others)
    disabled = {get_pass(n).name for n in disable}
    return [get_pass(n).name for n in names if get_pass(n).name not in disabled]


def optimize_ir(
    model: ir.Model,
    passes: Sequence[str] | None = None,
    *,
    disable: Sequence[str] = (),
    fixed_point: bool = True,
    per_tensor_bytes: int = DEFAULT_PER_TENSOR_BYTES,
    growth_ratio: float = DEFAULT_GROWTH_RATIO,
    on_progress: Callable[[int], None] | None = None,
    verify: VerifySettings | None = None,
    on_event: Callable[..., None] | None = None,
    certify: bool = True,
    source_path: str | os.PathLike | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> tuple[ir.Model, OptimizationReport]:
    """Optimize an onnx-ir model and return (optimized model, report).

    Every path runs the same schedule (passes/pipeline.py). Without `verify` the model is
    optimized in place and returned. With it, the result is verified end to end against the
    original, culprits found by bisection are rolled back, and a new model is returned (see
    onnxrefine.verified). `on_event(kind, **info)` sees the schedule's and verification's events.
    `source_path`: the file `model` was just loaded from (io.load_model, not modified since);
    verification then reads the original from it instead of writing the model to a temp folder,
    and the result keeps its unchanged weights memory-mapped from it.
    `input_shapes` (input name -> dims) fixes those inputs' shapes first (onnxrefine.input_shapes);
    the result is verified against the original with the same shapes.
    """
    started = time.perf_counter()
    names = resolve_passes(passes, disable)
    shape_changes = None
    if input_shapes:
        shape_changes, symbols = fix_input_shapes(model, input_shapes)
        source_path = None  # the original to verify against is the shape-fixed model, not the file
        if verify is not None and symbols:  # other inputs sharing a fixed dim name get its value
            verify = dataclasses.replace(verify, dims={**symbols, **dict(verify.dims or {})})
    budget = ConstantBudget(io.tensor_bytes(model), per_tensor_bytes=per_tensor_bytes, growth_ratio=growth_ratio)
    nodes_before = count_nodes(model)
    operators_before = count_operators(model)
    rolled_back, verification = [], None
    verifies = verify is not None and verify.enabled is not False
    # Each rule rewrite is checked on its own subgraph; one no certificate can be made for is
    # refused, unless this run's end-to-end verdict will judge it.
    certifier = Certifier(defer_uncertified=verifies) if certify else None
    if verifies:
        run = optimize_verified(
            model, names, settings=verify, budget=budget, fixed_point=fixed_point, on_progress=on_progress,
            on_event=on_event, certifier=certifier, source_path=source_path,
        )
        model, log, rolled_back, verification = run.model, run.log, run.rolled_back, run.summary
    else:
        with portable.one_blas_thread():  # the certificates' float64 work, as in a verified run
            log = run_passes(model, names, budget=budget, fixed_point=fixed_point, on_progress=on_progress,
                             on_event=on_event, certifier=certifier)
    heap.release_freed()  # the rewrites' freed temporaries, before the caller builds on this model
    report = OptimizationReport(
        names, nodes_before, count_nodes(model), time.perf_counter() - started, log, rolled_back, verification,
        certificate_summary(certifier, log),
    )
    report.constant_budget = budget.summary()
    report.operators_before, report.operators_after = operators_before, count_operators(model)
    report.dropped = io.dropped_parts(model)
    if shape_changes is not None:
        report.input_shapes = shape_override_summary(shape_changes, log)
    stamp_metadata(model, report)
    return model, report


def certificate_summary(certifier: Certifier | None, log: RewriteLog) -> dict | None:
    """The certifier's counts and seconds, and the coverage of the applied rewrites by evidence
    (None: certificates off)."""
    if certifier is None:
        return None
    return {**certifier.stats.to_dict(), "coverage": log.coverage()}


def shape_override_summary(changes: list[dict], log: RewriteLog) -> dict:
    """The fixed inputs and what the shape-reading passes folded afterwards (rewrites per rule)."""
    counts = log.counts()
    folded = {rule: n for rule, n in sorted(counts.items()) if rule in SHAPE_READING_RULES}
    return {"fixed": changes, "folded": folded}


# Rules whose rewrites read static dims: what an input-shape override can unlock.
SHAPE_READING_RULES = frozenset({"fold_shapes", "eliminate_shape_op", "eliminate_shape_gather",
                                 "eliminate_slice_after_shape", "fold_constants"})


def stamp_metadata(model: ir.Model, report: OptimizationReport) -> None:
    model.metadata_props["onnxrefine.version"] = __version__
    model.metadata_props["onnxrefine.rewrites"] = json.dumps(dict(sorted(report.log.counts().items())))


def _named_keywords(function):
    """An unknown keyword is a TypeError that lists the valid ones (Python's own names only the
    unknown one); the signature stays the function's own, for help() and editors."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def checked(*args, **kwargs):
        unknown = sorted(set(kwargs) - set(signature.parameters))
        if unknown:
            valid = ", ".join(name for name in signature.parameters if name != "model")
            raise TypeError(f"{function.__name__}() got unknown keyword argument(s) {', '.join(unknown)}; "
                            f"valid: {valid}")
        return function(*args, **kwargs)

    return checked


@_named_keywords
def optimize(
    model,
    passes: Sequence[str] | None = None,
    fixed_point: bool = True,
    *,
    disable: Sequence[str] = (),
    verify: bool | VerifySettings | None = None,
    certify: bool = True,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    per_tensor_bytes: int = DEFAULT_PER_TENSOR_BYTES,
    growth_ratio: float = DEFAULT_GROWTH_RATIO,
    on_progress: Callable[[int], None] | None = None,
    on_event: Callable[..., None] | None = None,
):
    """Optimize `model` (path, onnx.ModelProto or onnx_ir.Model) and return the same type.

    A path gives back an onnx.ModelProto. Every kind of model gets the checks the CLI gives a
    file before any rewrite (a malformed one is a one-line BadInputError); a ModelProto is not
    modified, an onnx_ir.Model may be (it is optimized in place, as onnx-ir passes are). `passes` takes onnxrefine or onnxoptimizer pass names (None: the default
    pipeline); `disable` leaves passes out.

    By default each rewrite is checked on its own matched subgraph before it is applied (its
    certificate, or a proof) and there is no end-to-end verification: a rewrite no certificate
    can be made for is refused. `verify=True` also verifies the result end to end against
    onnxruntime and a float64 reference (a rewrite without a certificate is then left to that
    verdict), and rolls back the rewrites that bisection finds changing it;
    `verify=VerifySettings(...)` does so with its settings (budget, seed, dims, input sets).
    `certify=False` applies rewrites unchecked. `input_shapes` (input name -> dims) fixes those
    inputs' shapes first. `per_tensor_bytes` / `growth_ratio` cap the constants rewrites may add.
    `on_progress(nodes_visited)` and `on_event(kind, **info)` follow the run.
    """
    optimized, _ = optimize_with_report(
        model, passes, fixed_point, disable=disable, verify=verify, certify=certify, input_shapes=input_shapes,
        per_tensor_bytes=per_tensor_bytes, growth_ratio=growth_ratio, on_progress=on_progress, on_event=on_event)
    return optimized


@_named_keywords
def optimize_with_report(
    model,
    passes: Sequence[str] | None = None,
    fixed_point: bool = True,
    *,
    disable: Sequence[str] = (),
    verify: bool | VerifySettings | None = None,
    certify: bool = True,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    per_tensor_bytes: int = DEFAULT_PER_TENSOR_BYTES,
    growth_ratio: float = DEFAULT_GROWTH_RATIO,
    on_progress: Callable[[int], None] | None = None,
    on_event: Callable[..., None] | None = None,
):
    """`optimize`, returning (optimized model, OptimizationReport); the same parameters."""
    if isinstance(passes, str):
        raise BadInputError("passes must be a list of pass names, not a string")
    settings = verify_settings(verify)
    around = None  # a model with maps: its tensor part optimized, the rest put back (around_maps.py)
    try:
        ir_model, kind = io.to_ir(model)
    except MapTypesError:
        original = load.load_full_proto(model) if isinstance(model, (str, os.PathLike)) else model
        try:
            (ir_model, around), kind = around_maps.split_core(original), "proto"
        except around_maps.PassThrough as why:
            return _unchanged(original, str(why))
    ir_model, report = optimize_ir(
        ir_model, passes, disable=disable, fixed_point=fixed_point, per_tensor_bytes=per_tensor_bytes,
        growth_ratio=growth_ratio, on_progress=on_progress, verify=settings, on_event=on_event, certify=certify,
        # loaded from it just now: verification reads the original from the file
        source_path=model if kind == "path" else None, input_shapes=input_shapes,
    )
    if around is None:
        return io.from_ir(ir_model, kind), report
    try:
        optimized = around_maps.assembled(ir_model, around, seed=settings.seed if settings else 0,
                                          dims=settings.dims if settings else None)
    except around_maps.PassThrough as why:
        return _unchanged(around.original, str(why))
    count_set_aside(report, around)
    logger.info("%s", around.note())
    return optimized, report


def _unchanged(original: onnx.ModelProto, reason: str):
    """A valid model this optimizer cannot hold, handed back as it came (a copy), saying why."""
    logger.warning("model left unchanged: %s", reason)
    copy = onnx.ModelProto()
    copy.CopyFrom(original)
    return copy, unchanged_report(original, reason)


def unchanged_report(original: onnx.ModelProto, reason: str) -> OptimizationReport:
    """The report of a model left unchanged: no pass ran, nothing to verify."""
    nodes = len(original.graph.node)
    report = OptimizationReport([], nodes, nodes, 0.0, RewriteLog(),
                                verification={"status": "skipped", "reason": f"left unchanged: {reason}"})
    report.constant_budget = {"refused": 0, "growth_bytes": 0, "allowed_growth_bytes": 0, "per_tensor_bytes": 0}
    report.operators_before = report.operators_after = count_by_operator(original.graph.node)
    return report


def count_set_aside(report: OptimizationReport, around) -> None:
    """The nodes set aside around the maps, unchanged, in the report's node and operator counts."""
    for name, count in count_by_operator(around.aside.nodes).items():
        for counts in (report.operators_before, report.operators_after):
            counts[name] = counts.get(name, 0) + count
    report.nodes_before += len(around.aside.nodes)
    report.nodes_after += len(around.aside.nodes)


def verify_settings(verify: bool | VerifySettings | None) -> VerifySettings | None:
    """The API's `verify`: None/False no end-to-end verification, True always, or the settings."""
    if verify is None or verify is False:
        return None
    if verify is True:
        return VerifySettings(enabled=True)
    if isinstance(verify, VerifySettings):
        return verify
    raise TypeError(f"verify must be True, False, None or onnxrefine.VerifySettings, not {type(verify).__name__}")
