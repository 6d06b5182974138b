"""The four verdicts, apart from the rules that reach them (verdict.py): a caller that only reads a
verdict (the optimizer deciding whether to roll back) loads no judging code."""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """A verdict, in order of severity. A str (StrEnum): it compares equal to, formats as and is
    written to JSON as its value, so reports read exactly as they did with plain strings."""

    EXACT = "exact"
    ROUNDING = "rounding"
    UNSTABLE = "unstable"
    MISMATCH = "mismatch"

    @property
    def accepted(self) -> bool:
        """A candidate with this verdict computes what the original computes (up to rounding)."""
        return self in (Verdict.EXACT, Verdict.ROUNDING)


EXACT, ROUNDING, UNSTABLE, MISMATCH = Verdict.EXACT, Verdict.ROUNDING, Verdict.UNSTABLE, Verdict.MISMATCH
VERDICTS = tuple(Verdict)  # in order of severity
