"""Running models in onnxruntime: run settings, model files staged for a session, sessions in this
process or in a watched child process (child.py), and one-line descriptions of onnxruntime's
failures (errors.py); values of a model as one run computes them (observed.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.ort.observed import MAX_OBSERVED_VALUES, observe
from onnxrefine.verify.ort.runner import (ModelFile, ModelRunner, RunFailedError, RunSettings, check_run_settings,
                                          inference_session, light_proto, open_model, peak_estimate)

__all__ = ["MAX_OBSERVED_VALUES", "observe", "ModelFile", "ModelRunner", "RunFailedError", "RunSettings", "check_run_settings", "inference_session",
           "light_proto", "open_model", "peak_estimate"]
