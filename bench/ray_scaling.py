"""Fuzz campaign throughput: --jobs 1, --jobs 2, a local Ray, and a two-worker ray Cluster.

    python bench/ray_scaling.py [--cases 800] [--seed 0]   # needs onnxrefine[ray]

Prints a markdown table: wall seconds including start-up, cases/min over the whole run and over
the steady state (10th to 90th percentile of result arrivals), plus Ray's per-task overhead measured with empty chunks
and the bytes serialized per case. Each mode runs the same seeds, and the summaries must agree
(the script checks it), so the figures compare equal work.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time

from onnxrefine.fuzz.campaign import run_campaign, run_case, run_chunk_with_environment
from onnxrefine.fuzz.settings import CampaignSettings

MB = 2**20


def timed(settings, ray_address=None, jobs=1):
    marks = []
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        summary = run_campaign(settings, out, jobs=jobs, ray_address=ray_address,
                               on_result=lambda r, s: marks.append(time.perf_counter()))
        wall = time.perf_counter() - started
    # Steady state: results between the 10th and 90th percentile of arrivals (start-up and the
    # tail of the last chunks left out; chunks arrive in bursts, so the first-to-last span is biased).
    low, high = marks[len(marks) // 10], marks[(9 * len(marks)) // 10 - 1]
    steady = 60 * ((9 * len(marks)) // 10 - len(marks) // 10 - 1) / max(high - low, 1e-9)
    first = marks[0] - started
    data = summary.to_dict()
    key = (data["cases"], tuple(sorted(data["statuses"].items())))
    return wall, first, 60 * settings.cases / wall, steady, key


def ray_task_overhead(address: str, tasks: int = 200) -> float:
    """Seconds per task for an empty chunk, 8 in flight: scheduling + (de)serialisation only."""
    import ray

    from onnxrefine.fuzz import ray_backend

    ray.init(address=address, runtime_env=ray_backend.runtime_env(), log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_chunk_with_environment)
        settings = ray.put(CampaignSettings())
        ray.get([remote.remote(settings, ()) for _ in range(4)])   # warm the workers
        started = time.perf_counter()
        pending = []
        for _ in range(tasks):
            if len(pending) >= 8:
                _, pending = ray.wait(pending, num_returns=1)
            pending.append(remote.remote(settings, ()))
        ray.get(pending)
        return (time.perf_counter() - started) / tasks
    finally:
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = CampaignSettings(cases=args.cases, seed=args.seed, time_budget_s=None)
    import ray
    from ray.cluster_utils import Cluster

    rows = []
    rows.append(("--jobs 1 (one worker process)",) + timed(settings))
    rows.append(("--jobs 2 (local processes)",) + timed(settings, jobs=2))
    rows.append(("--ray local (2 CPUs)",) + timed(settings, ray_address="local"))
    overhead_local = ray_task_overhead("local")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 80 * MB, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, object_store_memory=80 * MB)
        cluster.wait_for_nodes()
        rows.append(("ray Cluster: head + 2 workers x 1 CPU",) + timed(settings, ray_address=cluster.address))
        overhead_cluster = ray_task_overhead(cluster.address)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    keys = {row[-1] for row in rows}
    if len(keys) != 1:
        print(f"summaries differ between modes: {keys}", file=sys.stderr)
        return 1
    result = run_case(settings, 0)
    print(f"{args.cases} cases, seed {args.seed}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs\n")
    print("| mode | wall s (with start-up) | s to first result | cases/min overall | cases/min steady |")
    print("|---|---:|---:|---:|---:|")
    for name, wall, first, overall, steady, _ in rows:
        print(f"| {name} | {wall:.1f} | {first:.1f} | {overall:.0f} | {steady:.0f} |")
    print(f"\nRay per-task overhead (empty chunk, 8 in flight): local {overhead_local * 1e3:.1f} ms, "
          f"Cluster {overhead_cluster * 1e3:.1f} ms")
    print(f"serialized per case: settings once per campaign ({len(pickle.dumps(settings))} B, ray.put), "
          f"the case index, a result of {len(pickle.dumps(result))} B (a filed mismatch adds both "
          "models and the report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
