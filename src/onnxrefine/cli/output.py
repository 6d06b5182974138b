"""How the commands print results on stdout: readable at 80 columns, and greppable in a pipe.

On a terminal, lines fit its width; a table that would not fit leaves out its optional columns
(least useful first) before rich would shrink a column, and name columns never wrap or shrink, so
a rule, pass or operator name is never split or cut. In a pipe or a file there is no width:
every line is as long as its content (no wrapping, no colour), so `| grep NAME` finds whole rows.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where something is printed (the CLI's start-up)
    from rich.console import Console
    from rich.table import Table

# A pipe's "width": wide enough that nothing wraps, small enough for rich's layout arithmetic.
PIPE_WIDTH = 1 << 15


def stdout_console() -> Console:
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(file=sys.stdout)
    return Console(file=sys.stdout, width=PIPE_WIDTH, soft_wrap=True, no_color=True, highlight=False)


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "left"
    name: bool = False   # holds names: never wrapped, shrunk or cut
    drop: int = 0        # 0: always shown; otherwise left out when the table is too wide, 1 first
    wrap: bool = False   # free text that may fold over lines (a summary, a reason)


def fitted_table(console: Console, title: str | None, columns: Sequence[Col], rows: Sequence[Sequence],
                 section_before: Sequence[int] = ()) -> Table:
    """The table of `rows` with as many `columns` as the console's width takes: droppable columns
    left out (lowest `drop` first) until it fits; what still does not fit folds its free-text
    columns. `section_before`: row indices that start a new section (a rule above them)."""
    shown = list(range(len(columns)))
    for index in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: columns[i].drop):
        if _natural_width(console, title, columns, rows, shown) <= console.width:
            break
        shown.remove(index)
    return _table(title, columns, rows, shown, section_before)


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
