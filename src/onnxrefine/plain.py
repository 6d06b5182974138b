"""Names from a model printed as plain text: never parsed as rich markup (a node named `[/]`
crashed the summary after the output was written), control characters shown escaped (a name
holding an ANSI escape must not drive the terminal). Below cli/: the verification report prints
names too, and verify/ imports nothing of the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxrefine.ir.load_checks import one_line

if TYPE_CHECKING:  # rich is imported where something is printed (the CLI's start-up)
    from rich.text import Text


def plain(value) -> Text:
    """A table cell or a line that rich shows exactly as given, on one line."""
    from rich.text import Text

    return Text(one_line(str(value)))
