"""The verification report: per-output findings, notes and JSON (report.py; the CLI prints it),
and its HTML page (html.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.report.report import OutputReport, VerificationReport, json_safe
from onnxrefine.verify.report.html import worst_values

__all__ = ["OutputReport", "VerificationReport", "json_safe", "worst_values"]
