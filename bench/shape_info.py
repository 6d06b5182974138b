"""How many intermediate values carry shape information (value_info) in the saved model:
onnxrefine (its trusted facts), onnxsim and onnxslim (each where installed), per corpus model.

    python bench/shape_info.py --corpus bench/corpus [--models mobilenet_v3_small,resnet18]

Prints a table: per model, the intermediate values of onnxrefine's output and, per tool, the
value_info entries its output holds (onnxrefine verification off: this measures the shapes only).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

DEFAULT_MODELS = "mobilenet_v3_small,resnet18,efficientnet_b0,bert-base,gpt2-small"


def _value_info(path: Path) -> tuple[int, int]:
    model = onnx.load(str(path), load_external_data=False)
    outputs = {o.name for o in model.graph.output}
    intermediates = {o for n in model.graph.node for o in n.output if o and o not in outputs}
    return len(model.graph.value_info), len(intermediates)


def _onnxrefine(source: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "onnxrefine", "optimize", str(source), str(out), "--no-verify"],
                   check=True, capture_output=True)


def _onnxsim(source: Path, out: Path) -> None:
    import onnxsim

    model, ok = onnxsim.simplify(onnx.load(str(source)))
    onnx.save(model, str(out))


def _onnxslim(source: Path, out: Path) -> None:
    import onnxslim

    onnx.save(onnxslim.slim(onnx.load(str(source))), str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="bench/corpus")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    args = parser.parse_args()
    tools = [("onnxrefine", _onnxrefine)]
    for name, run in (("onnxsim", _onnxsim), ("onnxslim", _onnxslim)):
        try:
            __import__(name)
            tools.append((name, run))
        except ImportError:
            print(f"({name} not installed: left out)")
    print(f"{'model':<24}{'intermediates':>14}" + "".join(f"{name + ' value_info':>22}" for name, _ in tools))
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models.split(","):
            source = Path(args.corpus) / f"{model}.onnx"
            counts, intermediates = [], None
            for name, run in tools:
                out = Path(folder) / f"{model}.{name}.onnx"
                started = time.perf_counter()
                run(source, out)
                entries, total = _value_info(out)
                intermediates = total if name == "onnxrefine" else intermediates
                counts.append(f"{entries} ({time.perf_counter() - started:.1f} s)")
            print(f"{model:<24}{intermediates:>14}" + "".join(f"{c:>22}" for c in counts))


if __name__ == "__main__":
    main()
