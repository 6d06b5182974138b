"""Generated input sets at sizes the original runs at, for a verification whose original failed at
the generated sets' default sizes (every symbolic dim 2): a decoder with a KV cache reads its mask
at positions up to past + sequence, which must fit the mask's length.

The sizes are the ones the shape checks find (ort/dims.py `sizes_it_runs_at`: the same search, up
to two assignments in which every dim differs); the sets alternate between them in the plan's
order (plan.alternate), so a size-dependent difference is not judged at one point. The sizes only
choose where the models are compared: each run is still onnxruntime's on inputs the original
accepts, judged by the same rules.
"""

from __future__ import annotations

import os

import onnx
import onnx_ir as ir


def default_sizes_failed(failure: Exception) -> bool:
    """Whether `failure` (of a verification at generated inputs) may be the default sizes' fault:
    a run of the original that failed, not a resource limit."""
    from onnxrefine.errors import BadInputError
    from onnxrefine.resources import ResourceLimitError

    return isinstance(failure, BadInputError) and not isinstance(failure, ResourceLimitError)


def sets_at_runnable_sizes(original, failure: Exception, *, seed: int, trials: int,
                           stress: bool = True) -> tuple[list[tuple[str, dict]], str] | None:
    """(labelled input sets, a note naming the sizes and why) for `original` (a path, ModelProto
    or onnx_ir Model) that failed with `failure` at the default sizes; None where the sizes are
    not why (it runs there, or at no other sizes)."""
    from onnxrefine.ir import io
    from onnxrefine.verify.inputs import generate_labelled_inputs
    from onnxrefine.verify.ort import light_proto, sizes_it_runs_at
    from onnxrefine.verify.plan import alternate, choose_sets

    if not default_sizes_failed(failure):
        return None
    try:
        if isinstance(original, (str, os.PathLike)):
            model, proto = io.load_model(os.fspath(original)), light_proto(os.fspath(original), "original model")
        elif isinstance(original, onnx.ModelProto):
            model, proto = ir.from_proto(original), original
        else:
            model, proto = original, ir.to_proto(original)
    except Exception:  # noqa: BLE001 - the failure already reported says what is wrong with it
        return None
    sizes = sizes_it_runs_at(model, seed)
    if isinstance(sizes, str):
        return None
    sets = alternate([choose_sets(generate_labelled_inputs(proto, seed=seed, dims=assignment, stress=stress,
                                                           trials=trials), trials) for assignment in sizes])
    return sets, sizes_note(sizes, failure)


def sizes_note(sizes: list[dict[str, int]], failure: Exception) -> str:
    from onnxrefine.verify.ort import shown_dims

    shown = " and at ".join(shown_dims(assignment) for assignment in sizes)
    return f"{shown} (default sizes fail in the original: {str(failure).splitlines()[0]})"
