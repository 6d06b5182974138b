"""Differential fuzz campaigns: generated models through an optimizer, judged by `verify_models`.

Each case gets a seed, one optimizer step (a pass for per-pass optimizers, round robin; the whole
optimizer otherwise) and a model, usually grown around that pass's pattern. The step is applied,
and when it changed the graph the verifier (float64 reference, controls, stress inputs) gives a
verdict. Only `mismatch` cases are filed, as bundles deduplicated by (step, signature); rounding,
unstable and not-fired cases are counted. Cases run in local processes (`jobs`) or on Ray, in
chunks (fuzz/scheduler.py); every finished case is journaled in the campaign folder
(fuzz/journal.py), so an interrupted campaign resumes where it stopped.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.generator import generate_model
from onnxrefine.fuzz.graphquery import all_op_types
from onnxrefine.fuzz.patterns import TARGET_PATTERNS
from onnxrefine.fuzz.settings import CampaignSettings

FILED = "mismatch"
SUMMARY_EVERY_S = 30.0
STATUSES = ("mismatch", "rounding", "unstable", "exact", "not_fired", "optimizer_error",
            "generator_error", "crashed", "runtime_crash", "internal_error", "mutated_input")


@functools.lru_cache(maxsize=8)
def optimizer_steps(optimizer: str, passes: tuple[str, ...] | None):
    from onnxrefine.triage.adapters import get_adapter

    return get_adapter(optimizer).steps(list(passes) if passes else None)


def step_names(settings: CampaignSettings) -> list[str]:
    if settings.optimizer == "onnxrefine" and settings.passes:
        from onnxrefine.passes.registry import all_passes

        unknown = sorted(set(settings.passes) - {spec.name for spec in all_passes()})
        if unknown:
            raise BadInputError(f"onnxrefine has no pass named {', '.join(unknown)}")
    return [name for name, _ in optimizer_steps(settings.optimizer, settings.passes)]


def _essence(model: onnx.ModelProto) -> bytes:
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    del graph.value_info[:]
    return graph.SerializeToString(deterministic=True)


def mismatch_kind(report) -> str:
    """'broken_model' when onnxruntime cannot load or run the candidate, 'wrong_shape' when an
    output changed shape or type, else 'wrong_values'. Two different bugs of one pass (pads
    that exceed the kernel, a wrong fold) must not be merged into one bundle."""
    report = report if isinstance(report, dict) else report.to_dict()
    if any(note.startswith("candidate failed") for note in report.get("notes", [])):
        return "broken_model"
    for out in report.get("outputs", []):
        if out.get("verdict") == FILED and (out.get("shape") != out.get("candidate_shape")
                                            or out.get("dtype") != out.get("candidate_dtype")):
            return "wrong_shape"
    return "wrong_values"


def signature(step: str, original: onnx.ModelProto, candidate: onnx.ModelProto, report) -> str:
    """What the step did (op types removed and added), how it broke the model and how many
    outputs broke, hashed short."""
    before, after = Counter(all_op_types(original.graph)), Counter(all_op_types(candidate.graph))
    removed, added = sorted((before - after).elements()), sorted((after - before).elements())
    broken = sorted(out.verdict for out in report.outputs if out.verdict == FILED)
    text = json.dumps([step, mismatch_kind(report), removed, added, len(broken)])
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def case_step(settings: CampaignSettings, index: int) -> str:
    names = step_names(settings)
    return names[index % len(names)]


def case_pattern(settings: CampaignSettings, seed: int, step: str) -> str | None:
    """The pattern the case of `seed` is grown around (None: an untargeted case). Per-pass
    optimizers get their pass's pattern; whole-model ones a rotating pattern."""
    if (seed * 2654435761 % 1000) < settings.targeted * 1000:
        names = sorted(TARGET_PATTERNS)
        return step if step in TARGET_PATTERNS else names[seed % len(names)]
    return None


def run_case(settings: CampaignSettings, index: int) -> dict:
    """One case, self-contained so that it can run in another process or on a Ray worker."""
    from onnxrefine.verify import verify_models

    seed = settings.seed + index
    step = case_step(settings, index)
    result = {"index": index, "seed": seed, "step": step, "status": None, "pattern": None}
    started = time.perf_counter()
    pattern = case_pattern(settings, seed, step)
    result["pattern"] = pattern
    try:
        case = generate_model(seed, max_nodes=settings.max_nodes, opset=settings.opset, target=pattern)
    except Exception as exc:  # a generator bug must not stop a campaign
        result.update(status="generator_error", error=f"{type(exc).__name__}: {exc}")
        return result
    result["input_dims"] = case.input_dims
    apply = dict(optimizer_steps(settings.optimizer, settings.passes))[step]
    pristine = case.model.SerializeToString()
    given = onnx.ModelProto()
    given.CopyFrom(case.model)
    try:
        candidate = apply(given)
        # An optimizer that edits the caller's model in place is a bug of its own; the
        # verification below still uses the pristine original.
        result["mutated_input"] = given.SerializeToString() != pristine
    except Exception as exc:
        result.update(status="optimizer_error", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return result
    if _essence(candidate) == _essence(case.model):
        result.update(status="not_fired", seconds=time.perf_counter() - started)
        return result
    result["fired"] = True
    try:
        report = verify_models(case.model, candidate, seed=seed, dims=case.input_dims,
                               trials=settings.trials, time_budget_s=settings.time_budget_s)
    except BadInputError as exc:
        result.update(status="generator_error", error=str(exc))
        return result
    result.update(status=report.verdict, seconds=time.perf_counter() - started)
    if report.verdict == FILED:
        result["signature"] = signature(step, case.model, candidate, report)
        result["kind"] = mismatch_kind(report)
        result["model"] = case.model.SerializeToString()
        result["candidate"] = candidate.SerializeToString()
        result["report"] = report.to_dict()
        result["opset"] = settings.opset
        result["max_nodes"] = settings.max_nodes
    return result


@dataclass
class CampaignSummary:
    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    per_step: dict = field(default_factory=dict)   # step -> Counter(cases, fired, mismatch)
    bundles: list = field(default_factory=list)
    duplicates: int = 0
    mutating_steps: set = field(default_factory=set)
    workers_replaced: int = 0   # this session's lost workers (not part of the comparable summary)
    started: float = field(default_factory=time.perf_counter)

    def add(self, result: dict) -> None:
        self.cases += 1
        self.statuses[result["status"]] += 1
        counts = self.per_step.setdefault(result["step"], Counter())
        counts["cases"] += 1
        counts["fired"] += bool(result.get("fired"))
        counts[result["status"]] += 1
        if result.get("mutated_input"):
            self.statuses["mutated_input"] += 1
            counts["mutated_input"] += 1
            self.mutating_steps.add(result["step"])

    @property
    def cases_per_minute(self) -> float:
        return 60.0 * self.cases / max(time.perf_counter() - self.started, 1e-9)

    def fire_rate(self, step: str) -> float:
        counts = self.per_step.get(step, Counter())
        return counts["fired"] / counts["cases"] if counts["cases"] else 0.0

    def line(self) -> str:
        shown = ", ".join(f"{s} {self.statuses[s]}" for s in STATUSES if self.statuses[s])
        fired = sum(c["fired"] for c in self.per_step.values())
        return (f"{self.cases} cases, fired {fired}, {shown or 'no results yet'}, "
                f"{len(self.bundles)} filed, {self.cases_per_minute:.0f} cases/min")

    def to_dict(self) -> dict:
        return {
            "cases": self.cases,
            "statuses": dict(self.statuses),
            "cases_per_minute": round(self.cases_per_minute, 1),
            "per_step": {step: {**counts, "fire_rate": round(self.fire_rate(step), 3)}
                         for step, counts in sorted(self.per_step.items())},
            "bundles": list(self.bundles),
            "duplicates": self.duplicates,
            "steps_that_mutate_their_input": sorted(self.mutating_steps),
            "workers_replaced": self.workers_replaced,
        }


def _readme(settings: CampaignSettings, result: dict, folder: str) -> str:
    from onnxrefine.triage.adapters import get_adapter

    dims = ",".join(f"{k}={v}" for k, v in sorted(result.get("input_dims", {}).items()))
    dims_flag = f" --dims {dims}" if dims else ""
    pattern = f", target={result['pattern']!r}" if result["pattern"] else ""
    optimize = get_adapter(settings.optimizer).command(result["step"]).replace(
        "original.onnx", "model.onnx").replace("optimized.onnx", "model.opt.onnx")
    return f"""# {settings.optimizer} step `{result['step']}` changes what a model computes

Found by `onnxrefine fuzz` (case {result['index']}, seed {result['seed']}); verdict `mismatch`
from `onnxrefine verify` (float64 reference, controls on the original, stress inputs).

Files: `model.onnx` (generated), `model.opt.onnx` (after the step), `inputs.npz` (the input sets
the verification used), `report.json` (case metadata and the full verification report).

Reproduce:

```sh
cd {folder}
# regenerate the original (byte-identical)
python -c "import onnx; from onnxrefine.fuzz.generator import generate_model; onnx.save(generate_model({result['seed']}, max_nodes={settings.max_nodes}, opset={settings.opset}{pattern}).model, 'model.onnx')"
# apply the step
{optimize}
# verify (the same input sets as the campaign: --trials {settings.trials}; or exactly these: --inputs inputs.npz)
onnxrefine verify model.onnx model.opt.onnx --seed {result['seed']} --trials {settings.trials}{dims_flag}
# shrink to a minimal repro
onnxrefine reduce .
```
"""


def write_bundle(out_dir: str, settings: CampaignSettings, result: dict) -> str:
    """Write case_<n>_seed<s>/ atomically (temp folder, then rename)."""
    from onnxrefine.atomic import staged_folder
    from onnxrefine.verify.inputs import generate_labelled_inputs, save_inputs

    name = f"case_{result['index']}_seed{result['seed']}"
    final = os.path.join(out_dir, name)
    with staged_folder(final, replace=True) as staging:
        model = onnx.load_from_string(result["model"])
        with open(os.path.join(staging, "model.onnx"), "wb") as handle:
            handle.write(result["model"])
        with open(os.path.join(staging, "model.opt.onnx"), "wb") as handle:
            handle.write(result["candidate"])
        sets = generate_labelled_inputs(model, seed=result["seed"], dims=result["input_dims"],
                                        trials=settings.trials)
        save_inputs(os.path.join(staging, "inputs.npz"), [feeds for _, feeds in sets])
        meta = {key: result.get(key) for key in ("index", "seed", "step", "pattern", "signature",
                                                 "kind", "input_dims", "opset", "max_nodes")}
        meta.update(optimizer=settings.optimizer, passes=list(settings.passes or []),
                    trials=settings.trials, input_set_labels=[label for label, _ in sets],
                    verification=result["report"])
        with open(os.path.join(staging, "report.json"), "w") as handle:
            json.dump(meta, handle, indent=2)
        with open(os.path.join(staging, "README.md"), "w") as handle:
            handle.write(_readme(settings, result, name))
    return final


CRASHED = "crashed"
# the worker died on the case, and onnxruntime dies on the case's original model alone: the step is
# not what crashed, and nothing can be judged (counted, no bundle)
RUNTIME_CRASH = "runtime_crash"


def original_crashes_runtime(settings: CampaignSettings, result: dict) -> bool:
    """Whether onnxruntime itself dies on the case's ORIGINAL model: the original verified against
    itself as the case verifies it (its sessions under the strict and the deployment settings, its
    runs on the case's input sets), in a contained child. False where the generator crashes or the
    original runs."""
    from onnxrefine.ir.contained import NativeCrash, call

    pattern = case_pattern(settings, result["seed"], result["step"])
    try:
        model = call(_generated, result["seed"], settings.max_nodes, settings.opset, pattern,
                     what="the generator")
        call(_verified_against_itself, model, result["seed"], settings.trials, what="onnxruntime on the original")
    except NativeCrash as exc:
        return "onnxruntime on the original" in str(exc)
    except Exception:  # noqa: BLE001 - it fails without dying: the worker's crash stays unexplained
        return False
    return False


def _verified_against_itself(model: bytes, seed: int, trials: int) -> bool:
    from onnxrefine.verify import verify_models

    proto = onnx.load_from_string(model)
    verify_models(proto, proto, seed=seed, trials=trials, localize=False)
    return True


def write_crash_bundle(out_dir: str, settings: CampaignSettings, result: dict) -> str:
    """case_<n>_seed<s>/ for a case whose worker died every time (a segfault, an abort, an OOM
    kill in the step or in onnxruntime): the generated model, the reason, and how to reproduce."""
    from onnxrefine.atomic import staged_folder
    from onnxrefine.ir import contained
    from onnxrefine.triage.adapters import get_adapter

    name = f"case_{result['index']}_seed{result['seed']}"
    pattern = case_pattern(settings, result["seed"], result["step"])
    # Generated where a crash of the generator's own onnxruntime check cannot take the campaign.
    model = contained.call(_generated, result["seed"], settings.max_nodes, settings.opset, pattern,
                           what="the generator")
    final = os.path.join(out_dir, name)
    optimize = get_adapter(settings.optimizer).command(result["step"]).replace(
        "original.onnx", "model.onnx").replace("optimized.onnx", "model.opt.onnx")
    target = f", target={pattern!r}" if pattern else ""
    with staged_folder(final, replace=True) as staging:
        with open(os.path.join(staging, "model.onnx"), "wb") as handle:
            handle.write(model)
        meta = {key: result.get(key) for key in ("index", "seed", "step", "status", "error")}
        meta.update(pattern=pattern, optimizer=settings.optimizer, trials=settings.trials,
                    max_nodes=settings.max_nodes, opset=settings.opset)
        with open(os.path.join(staging, "report.json"), "w") as handle:
            json.dump(meta, handle, indent=2)
        with open(os.path.join(staging, "README.md"), "w") as handle:
            handle.write(f"""# {settings.optimizer} step `{result['step']}` crashes the process

Found by `onnxrefine fuzz` (case {result['index']}, seed {result['seed']}): the worker running this case
died every time it was tried ({result.get('error') or 'no reason given'}). The step, or onnxruntime
verifying its output, crashes on this model.

Reproduce:

```sh
cd {name}
# regenerate the original (byte-identical to model.onnx)
python -c "import onnx; from onnxrefine.fuzz.generator import generate_model; onnx.save(generate_model({result['seed']}, max_nodes={settings.max_nodes}, opset={settings.opset}{target}).model, 'model.onnx')"
# apply the step (the crash is here, or in the verify below)
{optimize}
onnxrefine verify model.onnx model.opt.onnx --seed {result['seed']} --trials {settings.trials}
```
""")
    return final


def _generated(seed: int, max_nodes: int, opset: int, pattern: str | None) -> bytes:
    return generate_model(seed, max_nodes=max_nodes, opset=opset, target=pattern).model.SerializeToString()


def run_chunk(settings: CampaignSettings, indices) -> list[dict]:
    """Several cases in one task. A case that raises out of run_case (a verifier bug) is counted
    as `internal_error` rather than ending a campaign of thousands of cases."""
    results = []
    for index in indices:
        try:
            results.append(run_case(settings, index))
        except Exception as exc:
            results.append({"index": index, "seed": settings.seed + index, "step": case_step(settings, index),
                            "status": "internal_error", "pattern": None,
                            "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    return results


def run_chunk_with_environment(settings: CampaignSettings, indices) -> dict:
    """run_chunk on a Ray worker, with the versions it imported (checked by the driver)."""
    from onnxrefine.fuzz.ray_backend import environment

    import ray

    env = environment()   # before the cases: a missing dependency fails the task at once
    node = ray.get_runtime_context().get_node_id()
    results = run_chunk(settings, indices)
    for result in results:   # journaled: which node ran a case, for a campaign on a flaky cluster
        result["node"] = node
    return {"env": env, "results": results}


def _crashed(settings: CampaignSettings):
    def make(index: int, reason: str) -> dict:
        seed, step = settings.seed + index, case_step(settings, index)
        # One bundle per step that crashes: the crash's reason varies with the address it died at.
        return {"index": index, "seed": seed, "step": step, "status": CRASHED,
                "pattern": case_pattern(settings, seed, step), "error": reason, "signature": CRASHED}
    return make


def _crash_bundle_or_none(out_dir: str, settings: CampaignSettings, result: dict) -> str | None:
    from onnxrefine.ir.contained import NativeCrash

    try:
        return write_crash_bundle(out_dir, settings, result)
    except NativeCrash:  # the generator itself crashes on this seed: the journal has the seed
        return None


def _backend(settings: CampaignSettings, jobs: int, ray_address: str | None):
    from onnxrefine.fuzz import scheduler

    if ray_address:
        from onnxrefine.fuzz.ray_backend import RayBackend

        return RayBackend(run_chunk_with_environment, settings, ray_address)
    if jobs == 0:   # library use only: in this process, no protection from a crashing case
        return scheduler.InlineBackend(run_chunk, settings)
    # Even --jobs 1 runs in a worker process: a case that segfaults onnxruntime (seed 585 of the
    # default target does) would otherwise end the campaign, and --resume would re-run it forever.
    return scheduler.LocalBackend(run_chunk, settings, jobs)


def run_campaign(settings: CampaignSettings | None, out_dir: str, *, jobs: int = 1,
                 ray_address: str | None = None, on_result=None, resume: bool = False) -> CampaignSummary:
    """Run every case not yet in out_dir's journal, file deduplicated mismatch bundles under
    out_dir, return the summary. Cases run in `jobs` worker processes (0: in this process), or on
    the Ray cluster at `ray_address`. With `resume`, the settings are the ones stored in out_dir
    (`settings` may be None) and the cases already journaled are replayed, not re-run."""
    from onnxrefine.fuzz import journal
    from onnxrefine.fuzz.scheduler import schedule
    from onnxrefine.atomic import write_atomic

    os.makedirs(out_dir, exist_ok=True)
    settings = journal.open_campaign(out_dir, settings, resume)
    step_names(settings)   # fail early on an unknown optimizer or pass
    summary = CampaignSummary()
    filing = journal.Filing(out_dir, summary)
    done: set[int] = set()
    for entry in journal.read_entries(out_dir):
        if entry["index"] not in done and entry["index"] < settings.cases:
            done.add(entry["index"])
            summary.add(entry)
            filing.replay(entry)

    def save_summary() -> None:
        write_atomic(os.path.join(out_dir, "summary.json"),
                     json.dumps({"settings": asdict(settings), **summary.to_dict()}, indent=2) + "\n")

    todo = [index for index in range(settings.cases) if index not in done]
    backend = _backend(settings, jobs, ray_address) if todo else None
    last_saved = time.perf_counter()
    try:
        with journal.Writer(out_dir) as log:
            for result in (schedule(backend, todo, _crashed(settings)) if todo else ()):
                bundle = None
                if result["status"] == FILED:
                    bundle = filing.file(result, lambda: write_bundle(out_dir, settings, result))
                elif result["status"] == CRASHED and original_crashes_runtime(settings, result):
                    result = {**result, "status": RUNTIME_CRASH, "signature": RUNTIME_CRASH}
                elif result["status"] == CRASHED:
                    bundle = filing.file(result, lambda: _crash_bundle_or_none(out_dir, settings, result))
                log.append(result, bundle)   # after the bundle: a journaled case is complete
                summary.add(result)
                if on_result is not None:
                    on_result(result, summary)
                if time.perf_counter() - last_saved > SUMMARY_EVERY_S:
                    save_summary()   # long campaigns can be polled while they run
                    log.sync()
                    last_saved = time.perf_counter()
    finally:
        if backend is not None:
            summary.workers_replaced = backend.replaced
            backend.close()
        save_summary()
    return summary
