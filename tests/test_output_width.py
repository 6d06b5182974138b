"""Output at 80 columns and in pipes: in a pipe every row is one whole line (grep finds it); on
an 80-column terminal a table leaves out optional columns before it would shrink a header or
split a name; every option of every command has help text."""

import argparse
import io
import subprocess
import sys

from rich.console import Console

from onnxrefine.cli.main import build_parser
from onnxrefine.cli.optimize_cmd import list_passes_table
from onnxrefine.cli.output import Col, fitted_table
from onnxrefine.passes.registry import all_passes


def test_list_passes_in_a_pipe_is_one_line_per_pass():
    out = subprocess.run([sys.executable, "-m", "onnxrefine", "optimize", "--list-passes"], capture_output=True,
                         text=True, check=True).stdout
    lines = out.splitlines()
    for spec in all_passes():
        assert any(spec.name in line and spec.summary in line for line in lines), spec.name
    assert "\x1b[" not in out  # no colour codes in a pipe


def _render(table, width: int) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(table)
    return console.file.getvalue()


def test_list_passes_at_80_columns_keeps_names_whole():
    console = Console(file=io.StringIO(), width=80)
    text = _render(list_passes_table(console), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "default" not in text.splitlines()[2]  # optional columns left out
    for spec in all_passes():
        assert any(spec.name in line for line in text.splitlines()), spec.name


def test_headers_are_never_shrunk_columns_are_dropped_instead():
    columns = [Col("step", name=True)] + [Col(h, "right", drop=i) for i, h in
                                          enumerate(("cases", "fired", "fire rate", "mismatch", "rounding"), 1)]
    rows = [("fuse_matmul_add_bias_into_gemm_and_more", "10", "9", "90%", "0", "1")] * 3
    console = Console(file=io.StringIO(), width=80)
    wide = _render(fitted_table(Console(file=io.StringIO(), width=200), None, columns, rows), 200)
    narrow = _render(fitted_table(console, None, columns, rows), 80)
    assert "fire rate" in wide and "cases" in wide
    assert "…" not in narrow and "cases" not in narrow and "rounding" in narrow  # dropped whole, lowest first
    assert all(len(line) <= 80 for line in narrow.splitlines())


def test_every_option_has_help():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    missing = [f"{name} {action.option_strings or action.dest}" for name, sub in commands.items()
               for action in sub._actions if not action.help and not isinstance(action, argparse._HelpAction)]
    assert missing == []


LONG_OUTPUT = "the_classifier_output_with_a_rather_long_name"
LONG_VALUE = "an_intermediate_value_named_at_length"


def _verify_pair(tmp_path):
    """A model whose names are long, and a candidate with one weight changed (a mismatch, so the
    intermediate-values table prints too)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(weight: float):
        nodes = [helper.make_node("Mul", ["x", "w"], [LONG_VALUE]), helper.make_node("Relu", [LONG_VALUE], [LONG_OUTPUT])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                                  [helper.make_tensor_value_info(LONG_OUTPUT, TensorProto.FLOAT, [2, 3])],
                                  [numpy_helper.from_array(np.full(3, weight, np.float32), "w")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    original, candidate = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model(1.5), original)
    onnx.save(model(2.5), candidate)
    return [sys.executable, "-m", "onnxrefine", "verify", str(original), str(candidate), "--trials", "1",
            "--no-stress"]


def _rows_naming(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if name in line]


def test_verify_in_a_pipe_prints_whole_unwrapped_lines(tmp_path):
    import os

    result = subprocess.run(_verify_pair(tmp_path), capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 1 and result.stdout.splitlines()[-1] == "verdict: mismatch"
    out = result.stdout
    assert "\x1b[" not in out and "…" not in out
    rows = [line for line in _rows_naming(out, LONG_OUTPUT) if "mismatch" in line]
    assert len(rows) == 2  # the strict table and the deployment table, each row whole on one line
    assert all(line.count("│") == 10 for line in rows)  # every column kept: there is no width in a pipe
    assert any(line.startswith("first bad value: ") and LONG_VALUE in line and "cand err vs f64" in line
               for line in out.splitlines())  # the line no 80-column wrap split


def test_verify_on_an_80_column_terminal_drops_columns_before_names(tmp_path):
    import os

    from helpers import on_a_terminal

    code, text = on_a_terminal(_verify_pair(tmp_path), {**os.environ, "COLUMNS": "80", "TERM": "xterm"})
    assert code == 1
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in text
    tables = [line for line in lines if line.startswith("┃")]
    assert tables and all("verdict" in line for line in tables) and not any("p99 ulp" in line for line in tables)
    assert len([line for line in _rows_naming(text, LONG_OUTPUT) if line.startswith("│")]) == 2
    assert [line for line in _rows_naming(text, LONG_VALUE) if line.startswith("│")]


def test_every_help_fits_80_columns(monkeypatch):
    """argparse cannot wrap a long `{a,b,c}` choice list: such an option shows a metavar instead."""
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    too_wide = [(name, line) for name, sub in [("", parser), *commands.items()]
                for line in sub.format_help().splitlines() if len(line) > 80]
    assert too_wide == []
