"""Layer-wise localisation: the first intermediate value a rewrite broke (layerwise.py), which
candidate value is which original one (correspond.py), and the localisation that shares the output
check's float64 evaluations (shared.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.localize.layerwise import include_outputs, localize
from onnxrefine.verify.localize.shared import EarlyLocalisation

__all__ = ["EarlyLocalisation", "include_outputs", "localize"]
