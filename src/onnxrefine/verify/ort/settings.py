"""How onnxruntime runs a model: the strict way (CPU, no graph optimizations, one thread) or the way
it will be deployed (`RunSettings`: optimization level, execution providers, thread count), and the
session options that say so.

Strict: onnxruntime's own optimizations are off so that the model we run is the model we were
given; one thread so that reductions sum in the same order on every run; no weight prepacking, so
that a MatMul or Conv runs the same kernel whether its weight is an initializer or computed (a
prepacked weight takes another blocking of the sum: an exact rewrite that makes a weight constant,
a Transpose folded into it, would change the rounding), and no session copies every weight to
pack it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from onnxrefine.errors import BadInputError

ORT_LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class RunSettings:
    """How onnxruntime runs a model: graph optimization level, execution providers (in order of
    preference) and thread count (0: onnxruntime's default, one per physical core)."""

    level: str = "all"
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    threads: int = 0
    prepacking: bool = True  # onnxruntime's default: kernels repack constant weights at load

    @classmethod
    def strict(cls) -> "RunSettings":
        return cls(level="disable", providers=("CPUExecutionProvider",), threads=1, prepacking=False)

    def describe(self) -> str:
        threads = "default threads" if self.threads == 0 else f"{self.threads} thread(s)"
        return f"level {self.level}, {', '.join(self.providers)}, {threads}" + (
            "" if self.prepacking else ", no weight prepacking")

    def to_dict(self) -> dict:
        return {"level": self.level, "providers": list(self.providers), "threads": self.threads,
                "prepacking": self.prepacking}


def check_run_settings(settings: RunSettings | None, custom_op_library: str | None = None) -> None:
    """BadInputError (one line) for an unknown level or provider, a provider this onnxruntime
    build lacks, or a custom-op library that is missing or does not load."""
    if custom_op_library is None and (settings is None or settings.providers == ("CPUExecutionProvider",)) \
            and (settings is None or (settings.level in ORT_LEVELS and settings.threads >= 0)):
        return  # nothing to ask onnxruntime (every build has the CPU provider): spare its import
    from onnxrefine.runtime import require_onnxruntime
    ort = require_onnxruntime()

    if settings is not None:
        if settings.level not in ORT_LEVELS:
            raise BadInputError(f"--ort-level: unknown level {settings.level!r} (choose from {', '.join(ORT_LEVELS)})")
        if not settings.providers:
            raise BadInputError("--providers: no execution provider given")
        known, available = ort.get_all_providers(), ort.get_available_providers()
        for provider in settings.providers:
            if provider not in known:
                raise BadInputError(f"--providers: unknown execution provider {provider!r}")
            if provider not in available:
                raise BadInputError(f"--providers: {provider} is not available in this onnxruntime build "
                                    f"(available: {', '.join(available)})")
        if settings.threads < 0:
            raise BadInputError("threads must not be negative")
    if custom_op_library is not None:
        if not os.path.isfile(custom_op_library):
            raise BadInputError(f"--custom-op-library: no such file: {custom_op_library}")
        try:
            ort.SessionOptions().register_custom_ops_library(os.path.abspath(custom_op_library))
        except Exception as exc:
            raise BadInputError(f"--custom-op-library: {custom_op_library} does not load: {_first_line(exc)}") from None


def session_options(settings: RunSettings, custom_op_library: str | None = None):
    from onnxrefine.runtime import DISABLE_PREPACKING, require_onnxruntime
    ort = require_onnxruntime()

    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[settings.level]
    if settings.threads:
        options.intra_op_num_threads = settings.threads
        options.inter_op_num_threads = settings.threads
    if settings.threads == 1:
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Idle pool threads sleep instead of spinning between operators: the same outputs bit for bit,
    # about half the CPU of a run on the default threads (efficientnet_b0, resnet18, densenet121,
    # ssdlite320 on a loaded 2-core machine), where spinning threads take CPU from the one working.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not settings.prepacking:
        options.add_session_config_entry(DISABLE_PREPACKING, "1")
    options.log_severity_level = 4  # failures come back as exceptions; no console noise
    if custom_op_library is not None:
        options.register_custom_ops_library(os.path.abspath(custom_op_library))
    return options


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
