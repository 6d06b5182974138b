"""Fuzz campaigns on a real multi-node Ray cluster (ray.cluster_utils.Cluster: a head and two
worker nodes, separate raylets on this machine): the same counts as a local run for the same seeds,
code shipped to the workers by the runtime environment, a version mismatch refused in one line, and
a worker node removed mid-campaign with every case still completed exactly once; then batch
optimize over a folder of small models, each a Ray task.

Everything runs in one test on one cluster: each Ray node costs a few hundred MB and seconds to
start, and pytest-xdist would otherwise start one cluster per test process."""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'onnxrefine[ray]' (CI does)")
from ray.cluster_utils import Cluster  # noqa: E402

import onnxrefine  # noqa: E402
from onnxrefine.errors import BadInputError  # noqa: E402
from onnxrefine.fuzz import journal, ray_backend  # noqa: E402
from onnxrefine.cli.main import main  # noqa: E402
from onnxrefine.fuzz.campaign import run_campaign  # noqa: E402
from onnxrefine.fuzz.settings import CampaignSettings  # noqa: E402
from test_batch import small_model  # noqa: E402

MB = 2**20
NODE = {"num_cpus": 1, "object_store_memory": 80 * MB}
# Fast failure detection, so a removed node's tasks fail in seconds rather than half a minute.
SYSTEM = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
          "health_check_failure_threshold": 3}
SETTINGS = CampaignSettings(cases=24, seed=100, max_nodes=8, time_budget_s=None)
# Node loss: enough chunks (of 8) that the removed node still holds unfinished ones when the first
# result comes back, however fast the machine (with 24 cases an idle machine finished every chunk
# of the doomed node before it was removed, and nothing was left to re-run).
NODE_LOSS = CampaignSettings(cases=80, seed=100, max_nodes=8, time_budget_s=None)


def comparable(summary) -> dict:
    data = summary.to_dict()
    for key in ("cases_per_minute", "workers_replaced"):
        data.pop(key)
    return data


@pytest.fixture
def cluster():
    # The head has no CPU: every case runs on a worker node, so removing one matters.
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 80 * MB, "include_dashboard": False, "_system_config": SYSTEM})
    workers = [cluster.add_node(**NODE) for _ in range(2)]
    cluster.wait_for_nodes()
    try:
        yield cluster, workers
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_campaign_on_a_two_worker_cluster(cluster, tmp_path, monkeypatch):
    cluster, workers = cluster
    local = run_campaign(SETTINGS, str(tmp_path / "local"))

    # Workers import onnxrefine from the uploaded package, not from this source tree.
    ray.init(address=cluster.address, runtime_env=ray_backend.runtime_env(), log_to_driver=False)
    where = ray.get(ray.remote(num_cpus=1)(lambda: __import__("onnxrefine").__file__).remote())
    ray.shutdown()
    assert "runtime_resources" in where and not where.startswith(os.path.dirname(onnxrefine.__file__))

    on_cluster = run_campaign(SETTINGS, str(tmp_path / "cluster"), ray_address=cluster.address)
    assert comparable(on_cluster) == comparable(local)
    assert not ray.is_initialized()   # the campaign shut down the connection it opened

    # A driver whose dependencies differ from the workers' is refused, naming the package.
    real = ray_backend.driver_environment()
    monkeypatch.setattr(ray_backend, "driver_environment", lambda: {**real, "onnx_ir": "0.0.1"})
    with pytest.raises(BadInputError, match=r"version mismatch.*onnx_ir 0\.0\.1 here") as error:
        run_campaign(SETTINGS, str(tmp_path / "mismatch"), ray_address=cluster.address)
    assert "\n" not in str(error.value)
    monkeypatch.undo()

    # A worker node leaves mid-campaign: its unfinished chunks re-run on the other node. The node
    # removed is one that has delivered results and is not the one that just did, so it is working
    # on its next chunk. A chunk can still finish in the instant the node takes to die (its worker
    # returns results to the driver directly), and then nothing is lost: the campaign is retried on
    # a fresh node, up to three times, and every attempt must still count each case exactly once.
    alive = list(workers)
    local_loss = comparable(run_campaign(NODE_LOSS, str(tmp_path / "node_loss_local")))
    replaced = 0
    for attempt in range(3):
        seen, removed = set(), []

        def remove_a_busy_node(result, summary):
            seen.add(result["node"])
            if not removed and len(seen) == 2:
                busy = next(node for node in alive if node.node_id != result["node"])
                cluster.remove_node(busy, allow_graceful=False)
                alive.remove(busy)
                removed.append(busy)

        out = tmp_path / f"node_loss{attempt}"
        survived = run_campaign(NODE_LOSS, str(out), ray_address=cluster.address, on_result=remove_a_busy_node)
        assert removed and comparable(survived) == local_loss
        indices = [entry["index"] for entry in journal.read_entries(str(out))]
        assert sorted(indices) == list(range(NODE_LOSS.cases))   # every case exactly once
        replaced = survived.workers_replaced
        if replaced:
            break
        alive.append(cluster.add_node(**NODE))
        cluster.wait_for_nodes()
    assert replaced >= 1, "no chunk was lost in three node removals"

    # Batch optimize over a folder, each model a Ray task (in its own process on the worker).
    models = tmp_path / "models"
    models.mkdir()
    for index in range(3):
        small_model(models / f"m{index}.onnx", float(index + 1))
    out = tmp_path / "optimized"
    assert main(["optimize", str(models), "--ray", cluster.address, "--out-dir", str(out), "--no-verify"]) == 0
    rows = json.loads((out / "summary.json").read_text())["models"]
    assert [row["status"] for row in rows] == ["ok"] * 3
    assert all((out / f"m{index}.opt.onnx").is_file() for index in range(3))
