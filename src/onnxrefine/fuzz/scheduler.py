"""Chunked, bounded, fault-tolerant scheduling of campaign cases on local processes or Ray.

Cases go out in chunks (a few case indices per task) with at most `max_in_flight` chunks out at
once, so the driver's bookkeeping is O(in flight), not O(campaign): the old loop submitted every
case up front and `ray.wait`-ed on a list as long as the campaign.

A chunk whose worker dies (a segfault in an optimizer, an OOM kill, a Ray node that leaves) comes
back as `WorkerLost`; its cases are re-queued one by one, so a case that kills its worker is
isolated from the innocent cases that shared its chunk. A single case that loses its worker
MAX_ATTEMPTS times is reported with status `crashed` (a finding in itself: the optimizer or
onnxruntime brought the process down) instead of stopping the campaign. Results only leave a
worker when its whole chunk is done, so a case is never counted twice; the driver also ignores a
result for an index it already has.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for

MAX_ATTEMPTS = 3
MAX_CHUNK = 8


@dataclass
class WorkerLost:
    reason: str


def chunk_size(remaining: int, workers: int) -> int:
    """Big enough to amortise per-task overhead, small enough that every worker gets several
    chunks (load balance) and that a lost worker loses little work."""
    return max(1, min(MAX_CHUNK, remaining // max(1, 4 * workers)))


def schedule(backend, indices: list[int], make_crashed):
    """Yield every case result for `indices` exactly once, from `backend` (submit/wait/workers).

    `make_crashed(index, reason)` builds the result of a case that lost its worker MAX_ATTEMPTS
    times."""
    size = chunk_size(len(indices), backend.workers())
    queue = deque((tuple(indices[i:i + size]), 0) for i in range(0, len(indices), size))
    in_flight: dict = {}
    delivered: set[int] = set()
    while queue or in_flight:
        limit = 2 * backend.workers()   # one running and one queued per worker
        while queue and len(in_flight) < limit:
            chunk, attempt = queue.popleft()
            in_flight[backend.submit(chunk)] = (chunk, attempt)
        for handle, outcome in backend.wait(list(in_flight)):
            chunk, attempt = in_flight.pop(handle)
            if isinstance(outcome, WorkerLost):
                if len(chunk) > 1:
                    queue.extendleft(((index,), attempt + 1) for index in reversed(chunk))
                elif attempt + 1 >= MAX_ATTEMPTS:
                    delivered.add(chunk[0])
                    yield make_crashed(chunk[0], outcome.reason)
                else:
                    queue.appendleft((chunk, attempt + 1))
                continue
            for result in outcome:
                if result["index"] not in delivered:
                    delivered.add(result["index"])
                    yield result


# -- local worker processes ------------------------------------------------------------------------
def _worker_main(conn, function, settings) -> None:
    while True:
        chunk = conn.recv()
        if chunk is None:
            return
        conn.send(function(settings, chunk))


class _Worker:
    def __init__(self, context, function, settings):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, function, settings), daemon=True)
        self.process.start()
        child.close()
        self.handle = None   # the chunk handle it works on


class LocalBackend:
    """`jobs` worker processes; a worker that dies is replaced and its chunk reported lost."""

    def __init__(self, function, settings, jobs: int):
        # forkserver, not fork: the driver may hold threads (progress display, onnxruntime
        # pools) that a forked child would inherit in an undefined state. The server imports
        # the campaign code once, so a replacement worker starts in milliseconds, not seconds.
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["onnxrefine.fuzz.campaign"])
        self._function, self._settings = function, settings
        self._workers = [_Worker(self._context, function, settings) for _ in range(jobs)]
        self._queued: deque = deque()   # (handle, chunk) not yet given to a worker
        self._next = 0
        self.replaced = 0

    def workers(self) -> int:
        return len(self._workers)

    def submit(self, chunk):
        self._next += 1
        self._queued.append((self._next, chunk))
        self._dispatch()
        return self._next

    def _dispatch(self) -> None:
        for worker in self._workers:
            if worker.handle is None and self._queued:
                worker.handle, chunk = self._queued.popleft()
                worker.conn.send(chunk)

    def wait(self, handles):
        busy = [w for w in self._workers if w.handle is not None]
        ready = wait_for([w.conn for w in busy] + [w.process.sentinel for w in busy])
        events = []
        for index, worker in enumerate(self._workers):
            if worker.handle is None or (worker.conn not in ready and worker.process.sentinel not in ready):
                continue
            handle, worker.handle = worker.handle, None
            try:
                events.append((handle, worker.conn.recv()))
            except (EOFError, OSError):
                worker.process.join(timeout=5)
                code = worker.process.exitcode
                events.append((handle, WorkerLost(f"worker process died (exit code {code})")))
                worker.conn.close()
                self._workers[index] = _Worker(self._context, self._function, self._settings)
                self.replaced += 1
        self._dispatch()
        return events

    def close(self) -> None:
        for worker in self._workers:
            try:
                if worker.handle is None and worker.process.is_alive():
                    worker.conn.send(None)
            except OSError:
                pass
        for worker in self._workers:
            worker.process.join(timeout=2)
            if worker.process.is_alive():   # busy on a case we no longer want (Ctrl-C)
                worker.process.terminate()
                worker.process.join(timeout=5)
            worker.conn.close()


class InlineBackend:
    """jobs=0 (library use): cases run in the driver itself, easy to debug, unprotected."""

    def __init__(self, function, settings):
        self._function, self._settings = function, settings
        self._pending: dict = {}
        self.replaced = 0

    def workers(self) -> int:
        return 1

    def submit(self, chunk):
        handle = max(self._pending, default=0) + 1
        self._pending[handle] = chunk
        return handle

    def wait(self, handles):
        handle = handles[0]
        return [(handle, self._function(self._settings, self._pending.pop(handle)))]

    def close(self) -> None:
        pass


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
