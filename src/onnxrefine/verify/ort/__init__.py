"""Running models in onnxruntime: run settings (settings.py), model files staged for a session
(files.py), sessions in this process or in a watched child process (runner.py, child.py), one-line
descriptions of onnxruntime's failures (errors.py), values of a model as one run computes them
(observed.py), and the sizes of its symbolic dims at which it runs (dims.py). The face below is what
the rest of the package uses."""

from onnxrefine.verify.ort.dims import RunnableDims, shown_dims
from onnxrefine.verify.ort.files import ModelFile, light_proto, open_model, write_temp
from onnxrefine.verify.ort.mapvalues import key_differences
from onnxrefine.verify.ort.observed import MAX_OBSERVED_VALUES, observe
from onnxrefine.verify.ort.runner import ModelRunner, RunFailedError, inference_session, peak_estimate
from onnxrefine.verify.ort.settings import RunSettings, check_run_settings

__all__ = ["MAX_OBSERVED_VALUES", "ModelFile", "ModelRunner", "RunFailedError", "RunSettings", "RunnableDims",
           "check_run_settings", "inference_session", "key_differences", "light_proto", "observe", "open_model", "peak_estimate",
           "shown_dims", "write_temp"]
