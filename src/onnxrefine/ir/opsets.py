"""The standard ONNX domain and which opset version a graph's nodes run under: one reading for
every caller. A leaf module: it imports nothing of onnxrefine."""

from __future__ import annotations

from collections.abc import Mapping

# "" and "ai.onnx" name the same operator set; nodes may carry either.
STANDARD_DOMAINS = ("", "ai.onnx")


def opset_version(own: Mapping[str, int] | None, model: Mapping[str, int], domain: str = "") -> int:
    """The version of `domain` that applies to a graph's nodes: the graph's or function's own
    import (`own`) when it declares one, else the model's; for the standard domain, an import
    under "ai.onnx" counts as one under "". 0 when nobody declares the domain.

    A declared version is taken as it is, 0 included: it is what onnxruntime applies to those
    nodes (and then refuses them), so a declared 0 is never replaced by the model's version.
    0 reads as older than every opset, so a guard `opset < N` refuses rather than assume
    semantics nobody declared.
    """
    names = STANDARD_DOMAINS if domain in STANDARD_DOMAINS else (domain,)
    for imports in (own or {}, model):
        for name in names:
            version = imports.get(name)
            if version is not None:
                return int(version)
    return 0
