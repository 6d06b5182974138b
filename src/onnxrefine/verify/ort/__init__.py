"""Running models in onnxruntime: run settings, model files staged for a session, sessions in this
process or in a watched child process (child.py), and one-line descriptions of onnxruntime's
failures (errors.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.ort.runner import (ModelFile, ModelRunner, RunFailedError, RunSettings, check_run_settings,
                                          inference_session, light_proto, open_model, peak_estimate)

__all__ = ["ModelFile", "ModelRunner", "RunFailedError", "RunSettings", "check_run_settings", "inference_session",
           "light_proto", "open_model", "peak_estimate"]
