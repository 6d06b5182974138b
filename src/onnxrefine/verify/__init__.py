"""Differential verification: did a rewritten model change what the original computes?

`verify_models(original, candidate)` runs both in onnxruntime (CPU, optimizations off, one
thread; then both again under deployment settings, see runner.RunSettings) on given or generated
input sets, runs controls on the original (a second run and
few-ulp input perturbations), evaluates the original in float64 where the two differ, and
returns a VerificationReport whose verdict is exact, rounding, unstable or mismatch (see
verdict.py for the formula).

This module is the public API, thin: verify_models resolves its settings and hands them to a
VerificationSession (session.py), which runs the verification as named steps with its reference
evaluator injected; evidence.py holds the evidence the verdict rules read.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from onnxrefine import progress
from onnxrefine._deferred import lazy_face

if TYPE_CHECKING:
    from onnxrefine.verify.ort import RunSettings
    from onnxrefine.verify.report import VerificationReport

__all__ = [
    "EXACT", "ROUNDING", "UNSTABLE", "MISMATCH", "VERDICTS", "Verdict", "verify_models", "VerificationReport",
    "OutputReport", "generate_inputs", "load_inputs", "save_inputs", "RunSettings", "run_settings",
    "VerificationSession", "DECLINING_REFERENCE", "float64_reference", "LOCALIZE_MAX_BYTES",
]

# The API's names are imported on first use: a module that needs one room (the optimizer's
# constant folding needs verify.ort's session) does not load the verifier, its reference
# evaluator, its judge and its report with this package.
__getattr__ = lazy_face(globals(), {
    "onnxrefine.verify.inputs": ("generate_inputs", "load_inputs", "save_inputs"),
    "onnxrefine.verify.report": ("OutputReport", "VerificationReport"),
    "onnxrefine.verify.ort": ("RunSettings",),
    "onnxrefine.verify.session": ("DECLINING_REFERENCE", "DEFAULT_DEPLOYMENT", "LOCALIZE_MAX_BYTES",
                                  "VerificationSession", "float64_reference"),
    "onnxrefine.verify.judge": ("EXACT", "MISMATCH", "ROUNDING", "UNSTABLE", "VERDICTS", "Verdict"),
})

_UNSET: Any = object()
# Run settings a caller chose for every verification below it (`onnxrefine optimize` sets the
# user's flags here, so whatever verifies on its behalf runs the models the user's way).
_SCOPED: ContextVar[dict] = ContextVar("onnxrefine_verify_run_settings", default={})


@contextlib.contextmanager
def run_settings(**settings):
    """Within the block, verify_models' `deployment`, `custom_op_library`, `atol`, `rtol` and
    `reference` default to the given values (an explicit argument still wins)."""
    unknown = set(settings) - {"deployment", "custom_op_library", "atol", "rtol", "reference"}
    if unknown:
        raise TypeError(f"unknown run settings: {', '.join(sorted(unknown))}")
    token = _SCOPED.set({**_SCOPED.get(), **settings})
    try:
        yield
    finally:
        _SCOPED.reset(token)


@progress.in_phase("verify")
def verify_models(original, candidate, *,
                  inputs: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | None = None,
                  trials: int = 3, seed: int = 0, dims: Mapping[str, int] | None = None,
                  stress: bool = True, time_budget_s: float | None = None,
                  deployment: RunSettings | None = _UNSET,
                  custom_op_library: str | None = _UNSET,
                  atol: float | None = _UNSET, rtol: float | None = _UNSET,
                  localize: bool = True, reference=_UNSET,
                  match_outputs: str = "name") -> VerificationReport:
    """Compare `candidate` against `original` (paths, ModelProtos or onnx_ir Models).

    `inputs`: one input set (name -> array) or a sequence of them; when None, `trials` random
    sets plus (with `stress`) the stress sets of inputs.py are generated from `seed` and `dims`.
    `trials` is also the number of perturbation runs of the original per set (at least 8 when a
    discrete op can see what they move: verify/discrete.py). `time_budget_s`: once spent, no
    further input sets are started (the first set always runs); the report notes how many were skipped.

    Besides the strict runs (optimizations off, one thread), both models run under `deployment`
    (default: onnxruntime's default level, ORT_ENABLE_ALL; None: strict only); the candidate is
    judged there against the original run the same way, with the same float64 reference, in the
    report's `deployment` section, and it counts in the verdict. `custom_op_library`: registered
    in every session. `atol`/`rtol`: a hard bound on top of the derived one (a differing element
    beyond atol + rtol*|reference| is a mismatch). Left out, these four (and `reference`) come from an enclosing
    `run_settings(...)` block, else the defaults above.

    Models are run from files (a path as given; an in-memory model through a temp folder when it
    is large), one session at a time, so the weights are held once by onnxruntime.

    Raises BadInputError for a missing/non-ONNX file, inputs that do not fit the original, an
    original that onnxruntime cannot load or run, or bad run settings. Generated inputs (no
    `inputs`, no `dims`) at which the original fails are generated again at sizes of its symbolic
    dims it runs at, where there are such (sizes.py; the report's first note names them). A candidate that
    onnxruntime cannot load or run is a `mismatch` (the rewrite broke the model), not bad input.

    `localize`: also judge the intermediate values both models hold (paired by name or role) and
    name the first bad one (localize/layerwise.py); a mismatch there makes the verdict a mismatch. It costs
    one float64 evaluation of the original, 3 onnxruntime runs and the judging of every paired
    value per input set: about 3x the time of verification without it on resnet50.

    `match_outputs`: "name" (default: a candidate whose outputs differ from the original's by name
    or count is a mismatch of interfaces) or "position" (outputs paired in order, counts equal).

    `reference`: the float64 evaluator (session.ReferenceEvaluator; default: reference/evaluator.py's);
    None: the default. DECLINING_REFERENCE declines every model, so the no-reference fallback judges.
    """
    from onnxrefine.verify.session import DEFAULT_DEPLOYMENT, VerificationSession, float64_reference

    scoped = _SCOPED.get()
    given = {"deployment": deployment, "custom_op_library": custom_op_library, "atol": atol, "rtol": rtol,
             "reference": reference}
    defaults = {"deployment": DEFAULT_DEPLOYMENT, "custom_op_library": None, "atol": None, "rtol": None,
                "reference": float64_reference}
    chosen = {key: scoped.get(key, defaults[key]) if value is _UNSET else value for key, value in given.items()}
    chosen["reference"] = chosen["reference"] or float64_reference
    session = VerificationSession(trials=trials, seed=seed, dims=dims, stress=stress, time_budget_s=time_budget_s,
                                  localize=localize, match_outputs=match_outputs, **chosen)
    if inputs is not None or dims:
        return session.verify(original, candidate, inputs)
    from onnxrefine.errors import BadInputError
    from onnxrefine.verify.sizes import sets_at_runnable_sizes

    try:
        return session.verify(original, candidate, None)
    except BadInputError as exc:  # the default sizes of the symbolic dims may be why the original fails
        sized = sets_at_runnable_sizes(original, exc, seed=seed, trials=trials, stress=stress)
        if sized is None:
            raise
    sets, note = sized
    report = session.verify(original, candidate, [feeds for _, feeds in sets])
    report.notes.insert(0, f"verified at {note}")
    return report
