"""Errors that reach the user as one line, never as a traceback."""


class OnnxRefineError(Exception):
    """Base for errors whose message is meant for the user as is."""


class BadInputError(OnnxRefineError):
    """The input model, file or option cannot be used (CLI exit code 2)."""


class RewriteRefused(Exception):
    """A rewrite's guard declined a match; the message is the reason shown by --explain."""
