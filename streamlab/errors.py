"""Exceptions, and the HTTP status each one maps to.

    StreamlabError
    ├── RequestError                    refused before the first byte (400 unless below)
    │   ├── InvalidJSON                 the body is not JSON (400)
    │   ├── InvalidRequest              JSON of the wrong shape or types (422)
    │   ├── RequestTooLarge             can never fit: budget, context or cache (422)
    │   ├── BodyTooLarge                the body is over the size limit (413)
    │   ├── BodyTimeout                 the body did not arrive within --body-timeout (408)
    │   ├── UnsupportedMediaType        not application/json (415)
    │   ├── NotAllowed                  a lab-only option without --lab (403)
    │   ├── ModelNotFound               an OpenAI request names a model this server does not serve (404)
    │   ├── DuplicateRequest            request id already known to the engine (409)
    │   ├── ResumeNotPossible           a Last-Event-ID the server cannot resume from
    │   │   ├── StreamNotFound          no such stream, or resumption is off (404)
    │   │   ├── StreamGone              expired, or completed and read (410)
    │   │   └── ResumeGap               events after that id are no longer kept (409)
    │   ├── Overloaded                  the waiting limit is reached (429, Retry-After)
    │   │   └── DeadlineUnmeetable      its first token is predicted past its deadline (429, Retry-After)
    │   └── ShuttingDown                the server is draining (503)
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

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param  # the request field at fault, when there is one


class InvalidJSON(RequestError):
    error_type = "invalid_json"


class InvalidRequest(RequestError):
    error_type = "invalid_request"


class RequestTooLarge(RequestError):
    error_type = "request_too_large"


class BodyTooLarge(RequestError):
    error_type = "body_too_large"


class BodyTimeout(RequestError):
    error_type = "body_timeout"


class UnsupportedMediaType(RequestError):
    error_type = "unsupported_media_type"


class NotAllowed(RequestError):
    error_type = "not_allowed"


class ModelNotFound(RequestError):
    error_type = "model_not_found"


class ResumeNotPossible(RequestError):
    error_type = "resume_not_possible"


class StreamNotFound(ResumeNotPossible):
    error_type = "stream_not_found"


class StreamGone(ResumeNotPossible):
    error_type = "stream_gone"


class ResumeGap(ResumeNotPossible):
    error_type = "resume_gap"


class Overloaded(RequestError):
    error_type = "overloaded"


class DeadlineUnmeetable(Overloaded):
    error_type = "deadline_unmeetable"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDown(RequestError):
    error_type = "shutting_down"


class DuplicateRequest(RequestError):
    error_type = "duplicate_request"


class ModelLoadError(StreamlabError):
    """Raised with a one-line message that says how to fix it."""


class EngineBroken(StreamlabError):
    """Steps kept failing: the engine cannot go on (the server then refuses work and drains)."""


class InjectedFault(StreamlabError):
    """The lab's fault hook (FaultPlan): a model step that raises on purpose."""


class InvariantViolation(StreamlabError):
    pass


class DoubleRelease(InvariantViolation):
    pass


class BlockAccountingError(InvariantViolation):
    pass


HTTP_STATUS: dict[type[StreamlabError], int] = {
    InvalidJSON: 400,
    InvalidRequest: 422,
    RequestTooLarge: 422,
    BodyTooLarge: 413,
    BodyTimeout: 408,
    UnsupportedMediaType: 415,
    NotAllowed: 403,
    ModelNotFound: 404,
    StreamNotFound: 404,
    StreamGone: 410,
    ResumeGap: 409,
    DuplicateRequest: 409,
    Overloaded: 429,
    ShuttingDown: 503,
    RequestError: 400,
}


def envelope(error_type: str, message: str) -> dict:
    """Our error envelope: the body of every refusal outside the OpenAI routes."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def http_status(exc: StreamlabError) -> int:
    """The status for an error: the first entry in the table that the error's class inherits from."""
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500
