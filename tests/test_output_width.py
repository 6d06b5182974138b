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
