"""Errors that reach the user as one line, never as a traceback."""

import re


class OnnxRefineError(Exception):
    """Base for errors whose message is meant for the user as is."""


class BadInputError(OnnxRefineError):
    """The input model, file or option cannot be used (CLI exit code 2)."""


# A guard id: family and guard, lower-case, dot-separated ("bn.spatial", "pad_pool.ceil_mode").
GUARD_ID = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


class CertificatePostponed(Exception):
    """A certifier's answer to a request that may be postponed (rewrite/rule.py
    CertificateRequest.may_postpone): asked again later, the certificate may be made without the
    run of the model it would need now. The driver offers the node again on its next run, before
    any other rule is tried on it. Not a refusal: nothing is logged."""


class RewriteRefused(Exception):
    """A rewrite's guard declined a match. `guard` is the guard's stable id, written as a literal
    at the raise site (tests assert it, tests/test_guard_coverage.py finds every one); the message
    is the reason shown by --explain, unchanged."""

    def __init__(self, guard: str, reason: str):
        if not GUARD_ID.fullmatch(guard):
            raise ValueError(f"RewriteRefused needs a guard id like 'bn.spatial' first, got {guard!r}")
        super().__init__(reason)
        self.guard = guard
        self.reason = reason

    def __reduce__(self):  # pickled with both arguments (a worker process may send one back)
        return (type(self), (self.guard, self.reason))
