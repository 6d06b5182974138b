"""What the resource budget (resources.py) costs on the fast path, and what a watched run costs.

For each corpus model: the peak-memory estimate's time, whether the runner would watch it (run
onnxruntime in a child process: the estimate is uncertain or close to the budget), and
`verify_models(model, model, localize=False)` wall time with ONNXREFINE_WATCH=never (every session
in this process), auto (the default) and always (every session in a watched child). Prints a
markdown table.

    python bench/budget_cost.py --corpus bench/corpus resnet18 resnet50 bert-base gpt2-small
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet18", "resnet50", "bert-base", "gpt2-small"])
    parser.add_argument("--corpus", default=os.environ.get("ONNXREFINE_CORPUS", "bench/corpus"))
    args = parser.parse_args()
    from onnxrefine import resources
    from onnxrefine.ir import peak
    from onnxrefine.verify import verify_models
    from onnxrefine.verify.ort import light_proto

    print("| model | estimate | estimate s | uncertain | watched (auto) | never s | auto s | always s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        path = os.path.join(args.corpus, f"{name}.onnx")
        feeds = dict(np.load(os.path.join(args.corpus, f"{name}.inputs.npz")))
        started = time.perf_counter()
        estimate = peak.estimate_peak(light_proto(path), feeds)
        estimate_s = time.perf_counter() - started
        times = {}
        for mode in ("never", "auto", "always"):
            os.environ["ONNXREFINE_WATCH"] = mode
            started = time.perf_counter()
            verify_models(path, path, inputs=feeds, localize=False)
            times[mode] = time.perf_counter() - started
        os.environ.pop("ONNXREFINE_WATCH")
        watched = resources.needs_watch(estimate)
        print(f"| {name} | {resources.format_bytes(estimate.peak_bytes)} | {estimate_s:.3f} | "
              f"{'; '.join(estimate.uncertain) or '-'} | {'yes' if watched else 'no'} | {times['never']:.2f} | "
              f"{times['auto']:.2f} | {times['always']:.2f} |")


if __name__ == "__main__":
    main()
