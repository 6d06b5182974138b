"""Campaign cases on a Ray cluster: connection, code shipping, version checks, lost workers.

Workers get onnxrefine from the driver through Ray's runtime environment (`py_modules` = the
driver's own onnxrefine package folder, uploaded once and content-hashed), so a cluster needs only
the dependencies (onnx, onnx-ir, onnxruntime, numpy, ml_dtypes, rich) in its image, not onnxrefine.
Every chunk reports the versions its worker imported; one that differs from the driver's is a
one-line error, because a different onnxruntime or onnx-ir can change verdicts.
"""

from __future__ import annotations

import logging
import os
import time

from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.scheduler import WorkerLost

LOCAL = "local"
PACKAGES = ("onnx", "onnx_ir", "onnxruntime", "numpy", "ml_dtypes")
REFRESH_S = 10.0   # how often the cluster's CPU count (and so the in-flight bound) is re-read


def environment() -> dict:
    """What a result depends on besides onnxrefine's own code (shipped with the job)."""
    import importlib
    import platform

    from onnxrefine.version import __version__

    versions = {"python": ".".join(platform.python_version_tuple()[:2]), "onnxrefine": __version__}
    for name in PACKAGES:
        versions[name] = getattr(importlib.import_module(name), "__version__", "?")
    return versions


def driver_environment() -> dict:
    return environment()


def environment_difference(driver: dict, worker: dict) -> str | None:
    differing = [f"{name} {driver.get(name)} here, {worker.get(name)} on the worker"
                 for name in sorted(set(driver) | set(worker)) if driver.get(name) != worker.get(name)]
    return "; ".join(differing) or None


def runtime_env() -> dict:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this file is fuzz/ray_backend.py
    return {"py_modules": [package],
            "excludes": ["__pycache__", "*.pyc"]}


def _reachable(address: str) -> None:
    """Ray retries an explicit GCS address for minutes; a closed port is a one-line error now."""
    import socket

    if address in (LOCAL, "auto"):
        return
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise BadInputError(f"--ray {address}: expected auto, local, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise BadInputError(f"--ray {address}: cannot reach a Ray cluster there ({exc.strerror or exc}); "
                            "start one with `ray start --head`, or use --ray local") from None


def connect(address: str):
    """ray.init for `address` ('local' starts a private one-machine cluster); one-line errors for
    a missing ray, an unreachable cluster and a Ray/Python version mismatch. Returns (ray, owned):
    `owned` when this call initialised Ray (and so must shut it down)."""
    try:
        import ray
    except ImportError:
        raise BadInputError("--ray needs the 'ray' package: pip install 'onnxrefine[ray]'") from None
    if ray.is_initialized():
        return ray, False
    _reachable(address)
    # Job-level runtime_env: Ray uploads local folders only at ray.init, not per task. A caller
    # that initialises Ray itself must pass runtime_env=runtime_env() (or install onnxrefine).
    options = dict(runtime_env=runtime_env(), logging_level=logging.ERROR, log_to_driver=False)
    if address == LOCAL:
        # Results are small dicts: a small object store is plenty and spares /dev/shm.
        options.update(address="local", include_dashboard=False, object_store_memory=256 * 2**20)
    else:
        options.update(address=address)
    try:
        ray.init(**options)
    except ConnectionError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(f"--ray {address}: cannot reach a Ray cluster ({first}); start one with "
                            "`ray start --head` or give its address, or use --ray local") from None
    except (RuntimeError, ValueError) as exc:
        text = " ".join(str(exc).split())
        if "version mismatch" in text.lower():
            raise BadInputError(f"--ray {address}: Ray or Python version differs between this machine "
                                f"and the cluster: {text[:300]}") from None
        raise BadInputError(f"--ray {address}: {text[:300]}") from None
    return ray, True


class RayBackend:
    def __init__(self, function, settings, address: str):
        self._ray, self._owned = connect(address)
        ray = self._ray
        # max_retries=0: the scheduler decides about retries, so a case that kills its worker is
        # isolated and counted, and a chunk's results can never arrive twice.
        # SPREAD: chunks go to every node, not packed onto the first until it is half busy (Ray's
        # default), so a campaign uses the cluster and a lost node costs only its share.
        self._remote = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(function)
        self._settings = ray.put(settings)
        self._driver = driver_environment()
        self._cpus, self._read_at = 1, 0.0
        self._out: set = set()
        self.replaced = 0

    def workers(self) -> int:
        if time.monotonic() - self._read_at > REFRESH_S:
            self._cpus = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
            self._read_at = time.monotonic()
        return self._cpus

    def submit(self, chunk):
        ref = self._remote.remote(self._settings, chunk)
        self._out.add(ref)
        return ref

    def wait(self, handles):
        ray = self._ray
        ready, _ = ray.wait(handles, num_returns=1)
        events = []
        for ref in ready:
            self._out.discard(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                # Our own code raised on the worker (run_case catches case-level errors), most
                # likely a missing or broken dependency there: not worth retrying elsewhere.
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                raise BadInputError(f"a Ray worker failed before running its cases: "
                                    f"{type(cause).__name__}: {str(cause).splitlines()[0][:300]}"
                                    " (install onnxrefine's dependencies on the cluster nodes)") from None
            except ray.exceptions.RayError as exc:   # worker or node died, object lost
                self.replaced += 1
                events.append((ref, WorkerLost(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")))
                continue
            difference = environment_difference(self._driver, outcome["env"])
            if difference:
                raise BadInputError(f"version mismatch between this machine and a Ray worker: {difference}")
            events.append((ref, outcome["results"]))
        return events

    def close(self) -> None:
        for ref in self._out:   # an interrupted campaign leaves no work running on a shared cluster
            try:
                self._ray.cancel(ref, force=True)
            except Exception:   # already finished or its node is gone: nothing to cancel
                pass
        if self._owned:
            self._ray.shutdown()
