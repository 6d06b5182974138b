"""Batch optimize / verify over a collection of models, each in its own process.

Every model runs the ordinary single-model command (`onnxrefine optimize MODEL -o OUT --report R`
or `onnxrefine verify MODEL MODEL.opt.onnx --json R`) in a child process with its own wall-clock
limit and resident-memory cap, so one model that hangs, runs out of memory or crashes onnxruntime
costs that model only. Children run on local threads (`jobs`) or as Ray tasks (`ray ADDRESS`; the
model paths must then be visible to the workers, e.g. a shared filesystem).

The isolation helper here (`run_isolated`) is deliberately small: polling the child tree's
RSS (onnxrefine.portable: /proc, psutil or ps), killing the process group past either limit.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from onnxrefine.errors import BadInputError

POLL_S = 0.1
LIST_SUFFIXES = (".txt", ".lst", ".list")


@dataclass
class Job:
    command: str            # "optimize" or "verify"
    model: str
    output: str             # optimize: the optimized model; verify: the candidate
    report: str             # the child's JSON report
    argv: list = field(default_factory=list)   # extra child options
    time_limit_s: float | None = None
    memory_limit_mb: float | None = None


# -- which models ----------------------------------------------------------------------------------
def is_glob(path: str) -> bool:
    """A pattern to expand (the shell left it quoted), not a file whose name holds * ? or [."""
    return any(c in path for c in "*?[") and not os.path.exists(path)


def _is_model(path: Path) -> bool:
    return path.suffix == ".onnx" and not path.name.endswith(".opt.onnx")


def collect_models(paths: list[str]) -> list[tuple[Path, Path]]:
    """(model, root) for each model named by `paths`: .onnx files, folders (every .onnx under
    them, optimized outputs *.opt.onnx excluded), globs (the .onnx files they match, outputs
    excluded) or list files (one path per line, # comments).
    `root` is the folder a model was found under (for --out-dir's layout), else its own folder."""
    found: list[tuple[Path, Path]] = []
    for text in paths:
        path = Path(text)
        if is_glob(text):
            matches = sorted(Path(p) for p in glob.glob(text, recursive=True) if _is_model(Path(p)))
            if not matches:
                raise BadInputError(f"{text}: no .onnx model matches this pattern")
            found.extend((model, model.parent) for model in matches)
        elif path.is_dir():
            models = sorted(p for p in path.rglob("*.onnx") if _is_model(p))
            if not models:
                raise BadInputError(f"{path}: no .onnx model in this folder")
            found.extend((model, path) for model in models)
        elif path.is_file() and path.suffix in LIST_SUFFIXES:
            base = path.resolve().parent
            for line in path.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    entry = Path(line) if os.path.isabs(line) else base / line
                    found.extend(collect_models([str(entry)]))
        elif path.is_file():
            found.append((path, path.parent))
        else:
            raise BadInputError(f"{path}: no such file or folder")
    seen, unique = set(), []
    for model, root in found:
        if model.resolve() not in seen:
            seen.add(model.resolve())
            unique.append((model, root))
    if not unique:
        raise BadInputError("no models given")
    return unique


def output_path(model: Path, root: Path, out_dir: str | None) -> Path:
    stem = model.name[: -len(".onnx")] if model.name.endswith(".onnx") else model.name
    name = f"{stem}.opt.onnx"
    if out_dir is None:
        return model.with_name(name)
    relative = model.resolve().parent.relative_to(root.resolve()) if model.resolve().is_relative_to(
        root.resolve()) else Path()
    return Path(out_dir) / relative / name


def report_name(index: int, model: Path) -> str:
    return f"{index:04d}_{model.name[:-5] if model.name.endswith('.onnx') else model.name}.json"


# -- one model in its own process ----------------------------------------------------------------
def _tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its descendants (a verification may start helpers)."""
    from onnxrefine import portable

    return (portable.tree_rss(pid) or 0) / 2**20


def run_isolated(argv: list[str], time_limit_s: float | None, memory_limit_mb: float | None) -> dict:
    """Run argv in a new process group; kill the group past either limit. Returns exit code,
    peak RSS (MiB), seconds, the last stderr line and which limit (if any) ended it."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    peak, limit_hit = 0.0, None
    errors: list[str] = []
    import threading

    reader = threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True)
    reader.start()
    while process.poll() is None:
        peak = max(peak, _tree_rss_mb(process.pid))
        if memory_limit_mb is not None and peak > memory_limit_mb:
            limit_hit = "memory"
        elif time_limit_s is not None and time.perf_counter() - started > time_limit_s:
            limit_hit = "time"
        if limit_hit:
            from onnxrefine import portable

            portable.kill_group(process)
            process.wait()
            break
        time.sleep(POLL_S)
    reader.join(timeout=5)
    lines = [line.strip() for line in errors if line.strip() and not line.startswith("onnxrefine [")]
    return {"exit_code": process.returncode, "peak_rss_mb": round(peak, 1),
            "seconds": round(time.perf_counter() - started, 2), "limit": limit_hit,
            "error": lines[-1][:300] if lines else ""}


def run_job(job: Job) -> dict:
    """One model, isolated; the row of the batch summary. Runs on a thread or a Ray worker."""
    argv = [sys.executable, "-m", "onnxrefine", job.command]
    if job.command == "optimize":
        argv += [job.model, "-o", job.output, "--report", job.report]
    else:
        argv += [job.model, job.output, "--json", job.report, "--html", html_report_of(job)]
    run = run_isolated(argv + list(job.argv), job.time_limit_s, job.memory_limit_mb)
    row = {"model": job.model, "output": job.output, "report": job.report, **run}
    if job.command == "verify" and os.path.isfile(html_report_of(job)):
        row["html"] = html_report_of(job)
    try:
        row["size_before"] = os.path.getsize(job.model)
    except OSError:
        row["size_before"] = None
    if run["limit"] == "time":
        row.update(status="timeout", error=f"stopped after the {job.time_limit_s:g} s time limit")
    elif run["limit"] == "memory":
        row.update(status="memory", error=f"stopped past the {job.memory_limit_mb:g} MiB memory limit")
    elif run["exit_code"] not in (0, 1) or not os.path.isfile(job.report):
        row.update(status="failed", error=run["error"] or f"exit code {run['exit_code']}")
    else:
        row.update(_from_report(job, run["exit_code"]))
    return row


def html_report_of(job: Job) -> str:
    """verify's page of one model, beside its JSON report (the batch summary links it)."""
    return job.report[: -len(".json")] + ".html" if job.report.endswith(".json") else job.report + ".html"


def _from_report(job: Job, code: int) -> dict:
    with open(job.report) as handle:
        report = json.load(handle)
    if job.command == "verify":
        return {"status": "ok" if code == 0 else "failed", "verdict": report.get("verdict"),
                "error": "" if code == 0 else f"verdict {report.get('verdict')}"}
    verification = report.get("verification") or {}
    verdict = verification.get("verdict") if verification.get("status") == "verified" else \
        verification.get("status", "off")
    return {"status": "ok", "verdict": verdict, "nodes_before": report.get("nodes_before"),
            "nodes_after": report.get("nodes_after"), "size_after": os.path.getsize(job.output),
            "refused": len(report.get("refused") or []), "rolled_back": len(report.get("rolled_back") or [])}


# -- many models ---------------------------------------------------------------------------------
def run_jobs(jobs: list[Job], *, workers: int = 1, ray_address: str | None = None, on_row=None) -> list[dict]:
    """Every job's row, in job order; `on_row(row, done)` as each finishes."""
    rows: list[dict | None] = [None] * len(jobs)

    def finished(index: int, row: dict) -> None:
        rows[index] = row
        if on_row is not None:
            on_row(row, sum(r is not None for r in rows))

    if ray_address:
        _run_on_ray(jobs, ray_address, finished)
    else:
        from concurrent.futures import ThreadPoolExecutor, as_completed

        # Threads suffice: each job's work happens in its own child process.
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = {pool.submit(run_job, job): index for index, job in enumerate(jobs)}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    return rows


def _run_on_ray(jobs: list[Job], address: str, finished) -> None:
    from onnxrefine.fuzz.ray_backend import connect

    ray, owned = connect(address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(run_job)   # a lost node: the model re-runs
        limit = 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))
        queue, pending = list(enumerate(jobs)), {}
        while queue or pending:
            while queue and len(pending) < limit:
                index, job = queue.pop(0)
                pending[remote.remote(job)] = index
            ready, _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ready[0])
            try:
                finished(index, ray.get(ready[0]))
            except ray.exceptions.RayError as exc:
                job = jobs[index]
                finished(index, {"model": job.model, "output": job.output, "report": job.report,
                                 "status": "failed", "error": f"Ray: {type(exc).__name__}"})
    finally:
        if owned:
            ray.shutdown()
