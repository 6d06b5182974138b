"""How the commands print results on stdout: readable at 80 columns, and greppable in a pipe.

On a terminal (rich), lines fit its width; a table that would not fit leaves out its optional
columns (least useful first) before rich would shrink a column, and name columns never wrap or
shrink, so a rule, pass or operator name is never split or cut. In a pipe or a file there is no
width: every line is as long as its content (no wrapping, no colour), so `| grep NAME` finds whole
rows. A pipe gets a `PlainConsole`, which lays tables out as rich does there (the same box
characters, or rich's ASCII ones where the stream's encoding is not UTF), without importing rich:
its import and layout were about a tenth of a small model's `optimize --no-verify`.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a terminal is printed to
    from rich.console import Console
    from rich.table import Table

# A pipe's "width": wide enough that nothing wraps, small enough for rich's layout arithmetic.
PIPE_WIDTH = 1 << 15


def stdout_console() -> Console | PlainConsole:
    """rich's console on a terminal, the plain one for a pipe or a file."""
    if sys.stdout.isatty():
        from rich.console import Console

        return Console(file=sys.stdout)
    return PlainConsole(sys.stdout)


class PlainConsole:
    """What the commands print, as plain lines on a stream that is not a terminal. Takes the
    calls they make of rich's console: `print` of lines, `Plain` text, tables and groups of them
    (rich's keyword arguments are accepted and have nothing to do here), and `quiet`."""

    width = PIPE_WIDTH

    def __init__(self, file) -> None:
        self.file = file
        self.quiet = False

    def print(self, *objects, **_rich_options) -> None:
        if self.quiet:
            return
        ascii_only = not (getattr(self.file, "encoding", None) or "utf-8").lower().startswith("utf")
        lines = []
        for item in objects:
            for part in item if isinstance(item, PlainGroup) else (item,):
                lines += part.lines(ascii_only) if isinstance(part, PlainTable) else [str(part)]
        self.file.write("".join(line + "\n" for line in lines))


class PlainGroup(tuple):
    """Items printed one after the other (rich's Group, for a PlainConsole; rich prints it too)."""

    def __rich__(self):
        from rich.console import Group

        return Group(*self)


def group(console: Console | PlainConsole, *items):
    """`items` as one printable: rich's Group on a terminal."""
    if isinstance(console, PlainConsole):
        return PlainGroup(items)
    from rich.console import Group

    return Group(*items)


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "left"
    name: bool = False   # holds names: never wrapped, shrunk or cut
    drop: int = 0        # 0: always shown; otherwise left out when the table is too wide, 1 first
    wrap: bool = False   # free text that may fold over lines (a summary, a reason)


def fitted_table(console: Console | PlainConsole, title: str | None, columns: Sequence[Col], rows: Sequence[Sequence],
                 section_before: Sequence[int] = ()) -> Table | PlainTable:
    """The table of `rows` with as many `columns` as the console's width takes: droppable columns
    left out (lowest `drop` first) until it fits; what still does not fit folds its free-text
    columns. `section_before`: row indices that start a new section (a rule above them). A pipe
    has no width: every column is shown."""
    if isinstance(console, PlainConsole):
        return PlainTable(title, columns, rows, section_before)
    shown = list(range(len(columns)))
    for index in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: columns[i].drop):
        if _natural_width(console, title, columns, rows, shown) <= console.width:
            break
        shown.remove(index)
    return _table(title, columns, rows, shown, section_before)


# rich's HEAVY_HEAD box and its ASCII stand-in, by line: the top, the header row, the rule under
# the header, a body row, a section's rule, the bottom. Each: left, fill, divider, right.
_BOXES = {False: ("┏━┳┓", "┃ ┃┃", "┡━╇┩", "│ ││", "├─┼┤", "└─┴┘"),
          True: ("+--+", "| ||", "|-+|", "| ||", "|-+|", "+--+")}


class PlainTable:
    """A table laid out as rich lays out `fitted_table`'s in a pipe: each column as wide as its
    widest cell (at least its header; a free-text column at least TEXT_ROOM), one space of padding
    either side, cells one line each."""

    def __init__(self, title: str | None, columns: Sequence[Col], rows: Sequence[Sequence],
                 section_before: Sequence[int] = ()) -> None:
        self.title, self.columns, self.rows = title, list(columns), [list(row) for row in rows]
        self.section_before = set(section_before)

    def __rich__(self) -> Table:  # the same table, printed to a rich console
        return _table(self.title, self.columns, self.rows, range(len(self.columns)), self.section_before)

    def lines(self, ascii_only: bool = False) -> list[str]:
        if not self.columns:
            return [""]
        top, head, head_rule, body, section, bottom = _BOXES[ascii_only]
        texts = [[str(cell) for cell in row] for row in self.rows]
        widths = [max([_cells(col.header), TEXT_ROOM if col.wrap else 0, *(_cells(row[i]) for row in texts)])
                  for i, col in enumerate(self.columns)]

        def rule(box: str) -> str:
            return box[0] + box[2].join(box[1] * (width + 2) for width in widths) + box[3]

        def row(box: str, cells: Sequence[str]) -> str:
            padded = [_justify(text, width, col.justify) for text, width, col in zip(cells, widths, self.columns)]
            return box[0] + box[2].join(f" {text} " for text in padded) + box[3]

        lines = [self.title] if self.title else []
        lines += [rule(top), row(head, [col.header for col in self.columns]), rule(head_rule)]
        for index, cells in enumerate(texts):
            if index in self.section_before:
                lines.append(rule(section))
            lines.append(row(body, cells))
        return [*lines, rule(bottom)]


def _cells(text: str) -> int:
    """Terminal cells `text` takes: wide East Asian characters two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def _justify(text: str, width: int, justify: str) -> str:
    if justify == "right":  # as rich does: trailing spaces go before the text is moved right
        text = text.rstrip()
        return " " * (width - _cells(text)) + text
    return text + " " * (width - _cells(text))


def _table(title, columns, rows, shown, section_before=()) -> Table:
    from rich.table import Column, Table

    table = Table(*[Column(columns[i].header, justify=columns[i].justify, no_wrap=not columns[i].wrap,
                           min_width=TEXT_ROOM if columns[i].wrap else len(columns[i].header),
                           overflow="fold") for i in shown], title=title)
    for index, row in enumerate(rows):
        if index in section_before:
            table.add_section()
        table.add_row(*(row[i] for i in shown))
    return table


# Room a free-text column needs beyond its longest word to be worth showing folded.
TEXT_ROOM = 24


def _natural_width(console, title, columns, rows, shown) -> int:
    """The width the shown columns need: every name column whole, free text at its longest word
    plus TEXT_ROOM."""
    from rich.console import Console

    wide = Console(width=PIPE_WIDTH, file=console.file)
    texts = sum(1 for i in shown if columns[i].wrap)
    return wide.measure(_table(title, columns, rows, shown)).minimum + TEXT_ROOM * texts
