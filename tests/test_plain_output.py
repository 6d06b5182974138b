"""Results printed to a pipe without rich (cli/output.py's PlainConsole): the same lines rich
printed there, so scripts that read the output see no change, and rich stays unimported."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from onnxrefine.cli.output import PIPE_WIDTH, Col, PlainConsole, fitted_table, group
from onnxrefine.plain import plain

# Names as models hold them: markup-looking brackets, wide East Asian characters, accents, spaces.
TEXT = st.text(st.sampled_from("ab_Z09 .:-/[]=漢字éß→"), max_size=12)
COLUMN = st.builds(Col, header=st.text(st.sampled_from("abc xyz"), min_size=1, max_size=8),
                   justify=st.sampled_from(["left", "right"]), name=st.booleans(), wrap=st.booleans())


def rich_in_a_pipe(printable, encoding: str) -> str:
    """What rich printed for a pipe before PlainConsole (the settings stdout_console gave it)."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    Console(file=stream, width=PIPE_WIDTH, soft_wrap=True, no_color=True, highlight=False).print(printable)
    stream.flush()
    return stream.buffer.getvalue().decode(encoding)


def plain_in_a_pipe(printable, encoding: str) -> str:
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    PlainConsole(stream).print(printable)
    stream.flush()
    return stream.buffer.getvalue().decode(encoding)


@settings(max_examples=30, deadline=None)
@given(columns=st.lists(COLUMN, min_size=1, max_size=4), data=st.data(),
       title=st.one_of(st.none(), st.text(st.sampled_from("onnxrefine optimize-"), max_size=20)),
       encoding=st.sampled_from(["utf-8", "ascii"]))
def test_a_table_prints_in_a_pipe_as_rich_printed_it(columns, data, title, encoding):
    rows = data.draw(st.lists(st.lists(TEXT.map(plain), min_size=len(columns), max_size=len(columns)), max_size=4))
    sections = data.draw(st.sets(st.integers(1, max(1, len(rows) - 1)), max_size=2)) if len(rows) > 1 else set()
    if encoding == "ascii":
        rows = [[plain(str(cell).encode("ascii", "replace").decode()) for cell in row] for row in rows]
    table = fitted_table(PlainConsole(io.StringIO()), title, columns, rows, sorted(sections))
    assert plain_in_a_pipe(table, encoding) == rich_in_a_pipe(table, encoding)


def test_a_group_of_tables_and_lines_prints_as_rich_printed_it():
    console = PlainConsole(io.StringIO())
    rows = [(plain("Conv"), "1", "1"), (plain("all"), "2", "1")]
    printable = group(console, fitted_table(console, "nodes per operator", [Col("operator", name=True),
                                                                              Col("before", "right"),
                                                                              Col("after", "right")], rows, (1,)),
                      plain("nodes: 2 -> 1"), plain("wrote [/]out.onnx"))
    assert plain_in_a_pipe(printable, "utf-8") == rich_in_a_pipe(printable, "utf-8")
    assert plain_in_a_pipe(printable, "utf-8").endswith("nodes: 2 -> 1\nwrote [/]out.onnx\n")


def test_a_quiet_console_prints_nothing():
    stream = io.StringIO()
    console = PlainConsole(stream)
    console.quiet = True  # what the CLI sets once the reader of stdout has gone
    console.print(plain("verification: ..."))
    assert stream.getvalue() == ""
