"""The Python API: `optimize(model, passes=None)`, a drop-in for `onnxoptimizer.optimize`."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxrefine.errors import BadInputError
from onnxrefine.input_shapes import apply as fix_input_shapes
from onnxrefine.ir import heap, io
from onnxrefine.ir.budget import DEFAULT_GROWTH_RATIO, DEFAULT_PER_TENSOR_BYTES, ConstantBudget
from onnxrefine.passes.pipeline import run_passes
from onnxrefine.passes.registry import default_pass_names, get_pass
from onnxrefine.rewrite.log import RewriteLog
from onnxrefine.verified import VerifySettings, optimize_verified
from onnxrefine.verify.certificate import Certifier
from onnxrefine.version import __version__


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
    # Parts of the input the output does not carry (io.note_unkept_parts: training_info), each a
    # sentence: said in the summary and the report, never dropped silently.
    dropped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
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
            "dropped": list(self.dropped),
            **self.log.to_dict(),
        }


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
        get_pass(name)  # unknown names fail here, before any work
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
    rolled_back, verification = [], None
    certifier = Certifier() if certify else None  # each rule rewrite checked on its own subgraph
    if verify is not None and verify.enabled is not False:
        run = optimize_verified(
            model, names, settings=verify, budget=budget, fixed_point=fixed_point, on_progress=on_progress,
            on_event=on_event, certifier=certifier, source_path=source_path,
        )
        model, log, rolled_back, verification = run.model, run.log, run.rolled_back, run.summary
    else:
        log = run_passes(model, names, budget=budget, fixed_point=fixed_point, on_progress=on_progress,
                         on_event=on_event, certifier=certifier)
    heap.release_freed()  # the rewrites' freed temporaries, before the caller builds on this model
    report = OptimizationReport(
        names, nodes_before, count_nodes(model), time.perf_counter() - started, log, rolled_back, verification,
        certifier.stats.to_dict() if certifier is not None else None,
    )
    report.constant_budget = budget.summary()
    report.dropped = io.dropped_parts(model)
    if shape_changes is not None:
        report.input_shapes = shape_override_summary(shape_changes, log)
    stamp_metadata(model, report)
    return model, report


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


def optimize(model, passes: Sequence[str] | None = None, fixed_point: bool = True, **options):
    """Optimize `model` (path, onnx.ModelProto or onnx_ir.Model) and return the same type.

    A path gives back an onnx.ModelProto. `passes` takes onnxrefine or onnxoptimizer pass names;
    None runs the default pipeline. `verify=VerifySettings(...)` verifies the result end to end
    and rolls back the rewrites that bisection finds changing it.
    """
    optimized, _ = optimize_with_report(model, passes, fixed_point=fixed_point, **options)
    return optimized


def optimize_with_report(model, passes: Sequence[str] | None = None, **options):
    if isinstance(passes, str):
        raise BadInputError("passes must be a list of pass names, not a string")
    ir_model, kind = io.to_ir(model)
    if kind == "path":  # loaded from it just now: verification reads the original from the file
        options.setdefault("source_path", model)
    ir_model, report = optimize_ir(ir_model, passes, **options)
    return io.from_ir(ir_model, kind), report
