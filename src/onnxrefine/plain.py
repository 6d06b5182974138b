"""Names from a model printed as plain text: never parsed as rich markup (a node named `[/]`
crashed the summary after the output was written), control characters shown escaped (a name
holding an ANSI escape must not drive the terminal). Below cli/: the verification report prints
names too, and verify/ imports nothing of the CLI.

A `Plain` is not a str: rich measures a str as markup before it asks for `__rich__`. It needs no
rich to exist, so output to a pipe (cli/output.py's PlainConsole) never imports rich."""

from __future__ import annotations

from onnxrefine.ir.load_checks import one_line


class Plain:
    """A table cell or a line shown exactly as given, on one line; `style` (rich's style words,
    e.g. "bold red") colours it on a terminal and is ignored in a pipe."""

    __slots__ = ("text", "style")

    def __init__(self, text: str, style: str = "") -> None:
        self.text = text
        self.style = style

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Plain({self.text!r})"

    def __rich__(self):
        from rich.text import Text

        return Text(self.text, style=self.style)


def plain(value, style: str = "") -> Plain:
    """`value` as plain text on one line (see Plain)."""
    return Plain(one_line(str(value)), style)
