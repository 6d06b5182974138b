"""The verification report: per-output findings, notes, JSON and the terminal table (report.py),
and its HTML page (html.py). The face below is what the rest of the package uses."""

from onnxrefine.verify.report.report import OutputReport, VerificationReport, render_table

__all__ = ["OutputReport", "VerificationReport", "render_table"]
