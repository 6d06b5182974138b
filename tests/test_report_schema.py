"""The JSON report of `onnxrefine optimize --report` against its documented schema
(onnxrefine/schemas/optimize-report.schema.json, shipped in the package): real reports of
verified, unverified, skipped and shape-fixed runs validate, they hold no non-JSON numbers, and
the checker itself rejects what the schema forbids."""

import json
from importlib import resources

import pytest

from onnxrefine.api import REPORT_SCHEMA_VERSION
from onnxrefine.cli.main import main
from onnxrefine.cli.optimize_cmd import write_json_atomically
from schema_check import errors

SCHEMA = json.loads(resources.files("onnxrefine").joinpath("schemas/optimize-report.schema.json").read_text())


def _refuse_constant(token):
    raise AssertionError(f"non-JSON number {token} in the report")


def _report(tmp_path, *options) -> dict:
    path = tmp_path / "report.json"
    assert main(["optimize", str(tmp_path / "tiny.onnx"), str(tmp_path / "out.onnx"), "--report", str(path),
                 *options]) == 0
    return json.loads(path.read_text(), parse_constant=_refuse_constant)


@pytest.mark.parametrize("options", [(), ("--no-verify", "--no-certify"), ("--verify-budget", "0.000001"),
                                     ("--no-verify", "--input-shape", "image:2,3,16,16")])
def test_reports_validate(example, tmp_path, options):
    report = _report(tmp_path, *options)
    assert errors(report, SCHEMA) == []
    assert report["schema"] == "onnxrefine-optimize-report" and report["schema_version"] == REPORT_SCHEMA_VERSION
    assert {row["op"] for row in report["operators"]} >= {"Conv", "BatchNormalization"}
    assert report["file_sizes"]["after_bytes"] == (tmp_path / "out.onnx").stat().st_size


def test_verdicts_and_statuses_are_the_documented_words(example, tmp_path):
    verified = _report(tmp_path)["verification"]
    assert verified["status"] == "verified" and verified["verdict"] in SCHEMA["$defs"]["verdict"]["enum"]
    skipped = _report(tmp_path, "--verify-budget", "0.000001")["verification"]
    assert skipped["status"] == "skipped" and skipped["reason"]


def test_non_finite_numbers_are_written_as_documented_strings(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomically(path, {"seconds": float("inf"), "nested": [float("nan"), -float("inf"), 1.5]})
    data = json.loads(path.read_text(), parse_constant=_refuse_constant)
    assert data == {"seconds": "inf", "nested": ["nan", "-inf", 1.5]}
    assert errors(data["seconds"], SCHEMA["$defs"]["number"], SCHEMA) == []


def test_the_checker_rejects_what_the_schema_forbids(example, tmp_path):
    report = _report(tmp_path, "--no-verify")
    broken = dict(report, nodes_before="16", schema_version=2)
    del broken["operators"]
    found = " ".join(errors(broken, SCHEMA))
    assert "missing 'operators'" in found and "$.nodes_before" in found and "$.schema_version" in found
    assert errors(dict(report, verification={"status": "verified", "verdict": "clean"}), SCHEMA)
    with pytest.raises(ValueError, match="does not know"):
        errors({}, {"patternProperties": {}})
