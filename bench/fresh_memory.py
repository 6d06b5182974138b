"""What touching memory the kernel has not handed out lately costs on this machine, against memory it
just took back: system CPU of writing a file of SIZE through the page cache, to new pages and to the
pages a deleted file of the same size gave back; and of filling fresh anonymous memory (a new numpy
array) against the same array filled again.

    python bench/fresh_memory.py                 # 256 MiB, 3 rounds
    python bench/fresh_memory.py --mib 512 --rounds 5

On a virtual machine whose host backs guest memory lazily (free pages handed back to the host), the
first touch of a page the guest kernel has not used recently costs the host's fault as well; the
system CPU of `onnxrefine optimize` (and of onnxruntime writing its output) then varies with how
much such memory the run touches, and with what ran before it. bench/BENCHMARKS.md reads the
process_speed figures with this in mind.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import numpy as np


def _cost(action) -> tuple[float, float]:
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    action()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_stime - before.ru_stime, time.perf_counter() - started


def _write(path: str, chunks: list) -> None:
    with open(path, "wb") as handle:
        for chunk in chunks:
            handle.write(memoryview(chunk).cast("B"))
        handle.flush()
        os.fsync(handle.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB written and filled each round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chunks = [np.random.default_rng(i).standard_normal(1 << 17) for i in range(args.mib)]  # 1 MiB each
    rows = []
    with tempfile.TemporaryDirectory(prefix="fresh-memory-") as folder:
        for round_index in range(args.rounds):
            path = os.path.join(folder, f"new{round_index}.bin")
            rows.append(("write to a new file", *_cost(lambda: _write(path, chunks))))
            os.unlink(path)
            rows.append(("write again after deleting it", *_cost(lambda: _write(path, chunks))))
            os.unlink(path)
            array = None

            def fill_fresh():
                nonlocal array
                array = np.ones(args.mib << 17)

            rows.append(("fill a fresh array", *_cost(fill_fresh)))
            rows.append(("fill the same array again", *_cost(lambda: array.fill(2.0))))
            del array
    print(f"{args.mib} MiB a step, {args.rounds} rounds; system CPU s (min / max over rounds), wall s (min)")
    print(f"{'step':32s} {'sys min':>8s} {'sys max':>8s} {'wall min':>9s}")
    for step in dict.fromkeys(name for name, _, _ in rows):
        sys_s = [s for name, s, _ in rows if name == step]
        wall = [w for name, _, w in rows if name == step]
        print(f"{step:32s} {min(sys_s):8.3f} {max(sys_s):8.3f} {min(wall):9.3f}")


if __name__ == "__main__":
    main()
