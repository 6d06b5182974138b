"""The resource budget of a run: how much memory and time evaluating a model may take.

Before a model is run (verification in onnxruntime, the float64 reference, localisation) its peak
tensor memory is estimated from shapes (ir/peak.py, `estimate_peak`). A run whose estimate exceeds
the memory budget is refused with one line (`ResourceLimitError`, `check_runnable`) instead of
being tried, and so is a Loop with a constant trip count over `MAX_LOOP_TRIPS`. The command line's
`--memory-budget` is read in cli/arguments.py; an inputs file is checked against the budget before
it is read (verify/inputs.py).

The budget: `--memory-budget` (`limits(memory_budget=...)`), else `default_memory_budget()`: half
the memory available to this process (MemAvailable, a cgroup's or an rlimit's headroom where
lower), at most `DEFAULT_BUDGET_CAP` (a verification holds several evaluations' worth at once:
onnxruntime's arena keeps a second buffer on a repeated run, the float64 reference doubles float32
values; the cap keeps a multi-GB bomb off an ordinary machine).

Where the estimate cannot be trusted (a Loop or Scan, values whose shape inference cannot tell) or
is close to the budget, verify/ort/child.py runs onnxruntime in a child process whose RSS the
parent polls and whose wall clock it bounds: a model that defeats the estimate is killed and
reported as one line, and the tool goes on (see verify/ort/runner.py).
"""

from __future__ import annotations

import contextlib
import os
import re
from contextvars import ContextVar
from dataclasses import dataclass

from onnxrefine.errors import BadInputError

DEFAULT_BUDGET_FRACTION = 0.5
DEFAULT_BUDGET_CAP = 2 << 30
# onnxruntime needs about twice the estimate: measured on a ConstantOfShape of 200 MB (RSS 270 MB
# after one strict run, 470 MB after a second; 454 MB at level "all", which folds it at load).
ORT_FACTOR = 2
# Above this share of the budget the estimate is "close": the run goes to a watched child process.
CLOSE_SHARE = 0.5
MAX_LOOP_TRIPS = 1_000_000
DEFAULT_TIME_LIMIT_S = 300.0


class ResourceLimitError(BadInputError):
    """A run refused or stopped because it would exceed (or exceeded) the memory or time budget."""


@dataclass(frozen=True)
class Limits:
    memory_budget: int | None = None  # bytes; None: default_memory_budget()
    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # wall clock of one watched onnxruntime run


_LIMITS: ContextVar[Limits] = ContextVar("onnxrefine_limits", default=Limits())


@contextlib.contextmanager
def limits(*, memory_budget: int | None = None, time_limit_s: float | None = None):
    """Within the block, runs use this memory budget (bytes) and per-run wall-clock limit."""
    current = _LIMITS.get()
    token = _LIMITS.set(Limits(memory_budget if memory_budget is not None else current.memory_budget,
                               time_limit_s if time_limit_s is not None else current.time_limit_s))
    try:
        yield
    finally:
        _LIMITS.reset(token)


def current_limits() -> Limits:
    return _LIMITS.get()


def memory_budget() -> int:
    given = _LIMITS.get().memory_budget
    return given if given is not None else default_memory_budget()


# -- sizes ------------------------------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "KIB": 1024, "M": 1000**2, "MB": 1000**2,
          "MIB": 1024**2, "G": 1000**3, "GB": 1000**3, "GIB": 1024**3, "T": 1000**4, "TB": 1000**4,
          "TIB": 1024**4}


def parse_bytes(text: str, option: str = "--memory-budget", bare_unit: str = "B") -> int:
    """'50MB', '1.5GiB', '200M', '1048576' -> bytes; BadInputError (one line) otherwise. A number
    without a unit is in `bare_unit`."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    unit = (match.group(2).upper() or bare_unit.upper()) if match else None
    if not match or unit not in _UNITS:
        raise BadInputError(f"{option}: not a size: {text!r} (e.g. 500MB, 2GiB)")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise BadInputError(f"{option}: must be positive, got {text!r}")
    return size


def format_bytes(size: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def available_memory() -> int | None:
    """Bytes this process may still use: MemAvailable, lowered by a cgroup limit or an address-space
    rlimit (their headroom) where one is set. None when nothing can be read."""
    found = []
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as handle:
            limit = handle.read().strip()
        if limit.isdigit():
            with open("/sys/fs/cgroup/memory.current") as handle:
                found.append(max(0, int(limit) - int(handle.read().strip())))
    except (OSError, ValueError):
        pass
    from onnxrefine import portable

    found.extend(portable.rlimit_headroom())
    if not found:  # no /proc (macOS, Windows): the system's own figure where psutil is installed
        psutil = portable.psutil_module()
        if psutil is not None:
            found.append(int(psutil.virtual_memory().available))
    return min(found) if found else None


def default_memory_budget() -> int:
    available = available_memory()
    if available is None:
        return DEFAULT_BUDGET_CAP
    return int(min(DEFAULT_BUDGET_CAP, available * DEFAULT_BUDGET_FRACTION))


# -- decisions ------------------------------------------------------------------------------------

def check_runnable(estimate: PeakEstimate, what: str, budget: int | None = None,
                   budget_text: str = "--memory-budget") -> None:
    """ResourceLimitError (one line) when onnxruntime should not run the model at all."""
    budget = memory_budget() if budget is None else budget
    if estimate.huge_loops:
        label, trips = estimate.huge_loops[0]
        raise ResourceLimitError(f"{what}: Loop {label!r} runs {trips} iterations (more than "
                                 f"{MAX_LOOP_TRIPS}); not evaluated")
    if ORT_FACTOR * estimate.peak_bytes > budget:
        raise ResourceLimitError(
            f"{what} needs {estimate.describe()}, about {format_bytes(ORT_FACTOR * estimate.peak_bytes)} "
            f"in onnxruntime: over the memory budget of {format_bytes(budget)} ({budget_text})")


def reference_refusal(estimate: PeakEstimate, budget: int | None = None) -> str | None:
    """Why the float64 reference should not evaluate the model, or None when it fits."""
    budget = memory_budget() if budget is None else budget
    if estimate.huge_loops:
        label, trips = estimate.huge_loops[0]
        return f"Loop {label!r} runs {trips} iterations"
    if estimate.float64_bytes > budget:
        return (f"the float64 reference needs ~{format_bytes(estimate.float64_bytes)}: over the memory "
                f"budget of {format_bytes(budget)} (--memory-budget)")
    return None


def needs_watch(estimate: PeakEstimate, budget: int | None = None) -> bool:
    """Run in a watched child process: the estimate may be low, or is close to the budget."""
    mode = os.environ.get("ONNXREFINE_WATCH", "auto")  # never | always: for benches and tests
    if mode in ("never", "always"):
        return mode == "always"
    budget = memory_budget() if budget is None else budget
    return bool(estimate.uncertain) or ORT_FACTOR * estimate.peak_bytes > CLOSE_SHARE * budget
