"""The HTML reports: a mismatch's plot keeps its axis labels apart, the worst elements are listed
with their indices and float64 values, the batch summary has a row per model with working
links; headless Chromium renders the page where it is installed."""

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnxrefine.cli.main import main
from onnxrefine.verify import verify_models
from onnxrefine.verify.report.html import _MAX_TICKS, render_html, tick_exponents


def _scaled(scale: float) -> onnx.ModelProto:
    """y = x * s: a candidate with another s computes something else, over many decades."""
    s = numpy_helper.from_array(np.array([scale, 1.0, 1e-30], np.float32).reshape(1, 3), "s")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], [s])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@given(low=st.integers(-60, 40), span=st.integers(1, 100))
def test_tick_labels_are_few_and_start_at_the_lowest_decade(low, span):
    ticks = tick_exponents(low, low + span)
    assert 2 <= len(ticks) <= _MAX_TICKS and ticks[0] == low and ticks[-1] <= low + span
    assert ticks == sorted(set(ticks))


class _Texts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.labels, self.cells, self._in = [], [], None

    def handle_starttag(self, tag, attrs):
        self._in = (tag, dict(attrs))

    def handle_data(self, data):
        if self._in and self._in[0] == "text" and data.startswith("1e"):
            self.labels.append((self._in[1], data))
        elif self._in and self._in[0] == "td":
            self.cells.append(data)


@pytest.fixture(scope="module")
def mismatch_page():
    report = verify_models(_scaled(1e30), _scaled(3e30), trials=1, seed=0, localize=False)
    assert report.verdict == "mismatch"
    return report, render_html(report)


def test_mismatch_plot_labels_do_not_overprint(mismatch_page):
    _, page = mismatch_page
    parser = _Texts()
    parser.feed(page)
    x_labels = sorted(float(a["x"]) for a, _ in parser.labels if a.get("text-anchor") == "middle")
    y_labels = sorted(float(a["y"]) for a, _ in parser.labels if a.get("text-anchor") == "end")
    assert x_labels and y_labels
    assert len(x_labels) <= _MAX_TICKS and len(y_labels) <= _MAX_TICKS
    assert all(b - a >= 36 for a, b in zip(x_labels, x_labels[1:]))  # "1e-45" is ~30 px at 10 px
    assert all(b - a >= 12 for a, b in zip(y_labels, y_labels[1:]))


def test_worst_elements_are_listed_with_indices_and_float64_values(mismatch_page):
    report, page = mismatch_page
    assert '<h2 id="worst">Worst elements</h2>' in page
    worst = report.outputs[0].worst_elements
    assert worst and not worst[0]["explained"] and worst[0]["index"][1] == 0  # the column whose scale changed
    first = worst[0]
    assert f"[{first['index'][0]}, {first['index'][1]}]" in page
    assert f"{first['original']:.17g}" in page and f"{first['reference']:.17g}" in page
    assert first["candidate"] == pytest.approx(3 * first["original"], rel=1e-6)


def test_batch_summary_has_a_row_and_links_per_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    models.mkdir()
    for name, scale in (("a", 2.0), ("b", 5.0)):
        onnx.save(_scaled(scale), models / f"{name}.onnx")
    assert main(["optimize", str(models), "--out-dir", "out", "--no-verify"]) == 0
    page = (tmp_path / "out" / "summary.html").read_text()
    rows = re.findall(r'<tr class="(?:ok|bad)">(.*?)</tr>', page)
    assert len(rows) == 2
    for row in rows:
        links = re.findall(r'href="([^"]+)"', row)
        assert {"model", "output", "json"} <= set(re.findall(r">(model|output|json)</a>", row))
        assert all((tmp_path / "out" / link).resolve().is_file() for link in links)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium on this machine (Debian: apt install chromium)")
def test_chromium_renders_the_report(tmp_path, mismatch_page):
    _, page = mismatch_page
    path = tmp_path / "report.html"
    path.write_text(page)
    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          Path(path).as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "Worst elements" in dom and "<svg" in dom and "mismatch" in dom
