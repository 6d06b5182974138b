"""`onnxrefine optimize` on a model with map-typed values (ZipMap): the core optimized, the map
operators put back and checked (around_maps.py), the result written atomically, or the model
written unchanged with its report."""

from __future__ import annotations

from pathlib import Path

from onnxrefine.around_maps import AroundMaps, PassThrough, assembled, split_core
from onnxrefine.errors import BadInputError

__all__ = ["PassThrough", "load_core", "pass_through", "save", "unchanged_report"]


def load_core(source: Path):
    """(the core as an onnx-ir model, what to put back); PassThrough where it cannot be split."""
    from onnxrefine.ir import load

    return split_core(load.load_full_proto(source))


def save(model, around: AroundMaps, output: Path, *, seed: int = 0, dims=None) -> int:
    """Assemble, check and write atomically; returns the bytes written. PassThrough when the
    assembly or its check fails (nothing written yet)."""
    from onnxrefine.atomic import write_atomic

    data = assembled(model, around, seed=seed, dims=dims).SerializeToString()
    if len(data) >= 2**31:
        raise BadInputError("the assembled model is over protobuf's 2 GiB limit")
    write_atomic(output, data)
    return len(data)


def pass_through(source: Path, output: Path) -> int:
    from onnxrefine.atomic import write_atomic
    from onnxrefine.ir import load

    data = load.load_full_proto(source).SerializeToString()
    write_atomic(output, data)
    return len(data)


def unchanged_report(source: Path, reason: str, size: int) -> dict:
    """The report of a model written unchanged: no pass ran, nothing to verify."""
    from onnxrefine.api import unchanged_report as report_of
    from onnxrefine.ir import load

    report = report_of(load.load_full_proto(source), reason)
    report.file_sizes = {"before_bytes": source.stat().st_size, "after_bytes": size, "external_data_included": False}
    return report.to_dict()
