"""Peer optimizers as sequences of steps, so a bisection can verify after each one.

Each adapter is used only when its package is installed; none is a dependency. onnxoptimizer
splits into its passes (applied one at a time, by name); the others are single steps.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx

from onnxrefine.errors import BadInputError
from onnxrefine.verify.ort import inference_session

Step = tuple[str, Callable[[onnx.ModelProto], onnx.ModelProto]]


@dataclass(frozen=True)
class Adapter:
    """One peer, declared once: its name, the package it needs, what it does, how to split it into
    steps, and the shell command that reproduces one step outside onnxrefine."""

    name: str
    package: str
    describe: str
    build: Callable[[Sequence[str] | None], list[Step]]
    command_template: str

    def available(self) -> bool:
        try:
            importlib.import_module(self.package)
        except ImportError:
            return False
        return True

    def steps(self, passes: Sequence[str] | None) -> list[Step]:
        if not self.available():
            raise BadInputError(f"optimizer '{self.name}' needs the '{self.package}' package, which is not installed")
        return self.build(passes)

    def command(self, step: str) -> str:
        return self.command_template.format(step=step)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    return clone


def _onnxoptimizer_steps(passes):
    import onnxoptimizer

    names = list(passes) if passes else list(onnxoptimizer.get_fuse_and_elimination_passes())
    known = set(onnxoptimizer.get_available_passes())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadInputError(f"onnxoptimizer has no pass named {', '.join(unknown)}")
    return [(name, lambda m, name=name: onnxoptimizer.optimize(_copy(m), [name])) for name in names]


def _onnxsim_steps(passes):
    import onnxsim

    def simplify(model):
        simplified, _ = onnxsim.simplify(_copy(model), check_n=0)
        return simplified

    return [("onnxsim.simplify", simplify)]


def _onnxslim_steps(passes):
    import onnxslim

    return [("onnxslim.slim", lambda m: onnxslim.slim(_copy(m)))]


def _onnxscript_steps(passes):
    from onnxscript import optimizer

    return [("onnxscript.optimizer.optimize", lambda m: optimizer.optimize(_copy(m)))]


def _ort_steps(passes):
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    def basic(model):
        from onnxrefine import resources  # onnxruntime folds constants while it loads
        from onnxrefine.ir import peak

        resources.check_runnable(peak.estimate_peak(model), "onnxruntime's offline optimization")
        with tempfile.TemporaryDirectory() as folder:
            target = os.path.join(folder, "optimized.onnx")
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.optimized_model_filepath = target
            # Weights of a large model go beside the optimized file (protobuf's 2 GiB limit).
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             "optimized.onnx.data")
            options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                             str(1024 * 1024))
            inference_session(model, options)
            return onnx.load(target)

    return [("onnxruntime basic offline optimization", basic)]


def _onnxrefine_steps(passes):
    from onnxrefine.api import optimize
    from onnxrefine.passes.registry import default_pass_names

    names = list(passes) if passes else default_pass_names()
    # Certificates off: triage looks for the rules' own bugs, which a certificate would hide.
    return [(name, lambda m, name=name: optimize(m, [name], certify=False)) for name in names]


def _onnxrefine_pipeline_steps(passes):
    from onnxrefine.api import optimize

    chosen = list(passes) if passes else None
    return [("onnxrefine pipeline", lambda m: optimize(m, chosen, certify=False))]


_PEERS = (
    Adapter("onnxrefine", "onnxrefine", "onnxrefine's passes, one at a time, then rewrite by rewrite",
            _onnxrefine_steps,
            "onnxrefine optimize original.onnx -o optimized.onnx --passes {step} --no-verify --no-certify"),
    Adapter("onnxrefine-pipeline", "onnxrefine", "onnxrefine's whole pipeline as one step (passes interacting)",
            _onnxrefine_pipeline_steps,
            "onnxrefine optimize original.onnx -o optimized.onnx --no-verify --no-certify"),
    Adapter("onnxoptimizer", "onnxoptimizer", "onnxoptimizer, pass by pass", _onnxoptimizer_steps,
            "python -c \"import onnx, onnxoptimizer; onnx.save(onnxoptimizer.optimize("
            "onnx.load('original.onnx'), ['{step}']), 'optimized.onnx')\""),
    Adapter("onnxsim", "onnxsim", "onnxsim.simplify as one step", _onnxsim_steps,
            "onnxsim original.onnx optimized.onnx"),
    Adapter("onnxslim", "onnxslim", "onnxslim.slim as one step", _onnxslim_steps,
            "onnxslim original.onnx optimized.onnx"),
    Adapter("onnxscript", "onnxscript", "onnxscript's optimizer as one step", _onnxscript_steps,
            "python -c \"import onnx; from onnxscript import optimizer; "
            "onnx.save(optimizer.optimize(onnx.load('original.onnx')), 'optimized.onnx')\""),
    Adapter("ort", "onnxruntime", "onnxruntime's basic offline optimization as one step", _ort_steps,
            "python -c \"import onnxruntime as ort; o = ort.SessionOptions(); "
            "o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC; "
            "o.optimized_model_filepath = 'optimized.onnx'; ort.InferenceSession('original.onnx', o)\""),
)
ADAPTERS = {adapter.name: adapter for adapter in _PEERS}


def get_adapter(name: str) -> Adapter:
    if name not in ADAPTERS:
        raise BadInputError(f"unknown optimizer '{name}' (choose from {', '.join(ADAPTERS)})")
    return ADAPTERS[name]
