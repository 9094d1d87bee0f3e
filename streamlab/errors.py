"""Exceptions, and the HTTP status each one maps to.

    StreamlabError
    ├── RequestError                    the client's fault; refused before any work
    │   ├── RequestTooLarge             can never fit: budget, context or cache (422)
    │   └── DuplicateRequest            request id already known to the engine (409)
    ├── ModelLoadError                  a model name or path that cannot be loaded
    └── InvariantViolation              the engine's books do not balance (a bug)
        ├── DoubleRelease               a sequence's blocks released a second time
        └── BlockAccountingError        unknown block, or a count below zero
"""

from __future__ import annotations


class StreamlabError(Exception):
    """Root of everything streamlab raises on purpose."""


class RequestError(StreamlabError):
    error_type = "invalid_request"


class RequestTooLarge(RequestError):
    error_type = "request_too_large"


class DuplicateRequest(RequestError):
    error_type = "duplicate_request"


class ModelLoadError(StreamlabError):
    """Raised with a one-line message that says how to fix it."""


class InvariantViolation(StreamlabError):
    pass


class DoubleRelease(InvariantViolation):
    pass


class BlockAccountingError(InvariantViolation):
    pass


HTTP_STATUS: dict[type[StreamlabError], int] = {
    RequestTooLarge: 422,
    DuplicateRequest: 409,
    RequestError: 400,
}


def http_status(exc: StreamlabError) -> int:
    """The status for an error: the first entry in the table that the error's class inherits from."""
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500
