"""The Engine error envelope: `{"request_id", "error": {"code", "message",
"retryable", "details"}}`, with `X-Request-Id` on every response and
`Retry-After` on retryable 409/429/503 (spec §3)."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify

from flask_app.api.http.request_ids import request_id
from flask_app.errors import Kind, ServiceError

MAX_REQUEST_BYTES = 6_291_456
TIMEOUT_MESSAGE = "The request did not complete within 45 seconds."


# the spec §3 codes: an error raised with one keeps it
CODES = frozenset(
    {
        "invalid_request",
        "unauthenticated",
        "permission_denied",
        "not_found",
        "method_not_allowed",
        "collection_empty",
        "collection_not_ready",
        "namespace_not_empty",
        "request_too_large",
        "cancelled",
        "internal",
        "temporarily_unavailable",
    }
)


class EngineError(ServiceError):
    """An error in the spec's own words (its code, status and message)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.kind = Kind.NOT_FOUND if status == 404 else Kind.INVALID
        self.details = details or {}
        self.retry_after = retry_after if retry_after is not None else (5 if retryable else None)


def invalid(message: str, field: str | None = None, **details: Any) -> EngineError:
    extra = {"field": field, **details} if field else dict(details)
    return EngineError(400, "invalid_request", message, details=extra)


def not_found(what: str) -> EngineError:
    return EngineError(404, "not_found", f"Not found: {what}")


_TOO_LARGE = f"Request body exceeds {MAX_REQUEST_BYTES} bytes."
_UNAVAILABLE = "Service temporarily unavailable."


def _routing_error(code: int, description: str) -> EngineError:
    if code == 401:
        return EngineError(401, "unauthenticated", "Missing or invalid API key.")
    if code == 403:
        return EngineError(403, "permission_denied", "The API key cannot access this namespace.")
    if code == 404:
        return EngineError(404, "not_found", "Not found: no such route")
    if code == 405:
        return EngineError(405, "method_not_allowed", "Method not allowed.")
    if code == 413:
        return EngineError(413, "request_too_large", _TOO_LARGE)
    if code == 400:
        return invalid("Request body must be a JSON object.")
    if code >= 500:
        return EngineError(500, "internal", "Internal error.", retryable=True)
    return EngineError(code, "invalid_request", description)


def as_engine_error(exc: ServiceError) -> EngineError:
    """The spec §3 error for `exc`, by its code, else its kind."""
    code = exc.error_code
    if code in CODES:
        return EngineError(
            exc.status,
            code,
            exc.public_message,
            retryable=exc.retryable,
            details=dict(exc.details),
            retry_after=exc.retry_after,
        )
    if code.startswith("http_"):
        return _routing_error(exc.status, exc.public_message)
    kind = exc.kind
    if kind is Kind.TOO_LARGE:
        return EngineError(413, "request_too_large", _TOO_LARGE)
    if kind is Kind.NOT_FOUND:
        return not_found(exc.public_message)
    if kind is Kind.TIMEOUT:
        return EngineError(503, "temporarily_unavailable", TIMEOUT_MESSAGE, retryable=True)
    if kind in (Kind.BUSY, Kind.UNAVAILABLE, Kind.MODEL_FAILED) or exc.retryable:
        # the spec has one retryable code for every passing failure
        return EngineError(
            503,
            "temporarily_unavailable",
            _UNAVAILABLE,
            retryable=True,
            retry_after=exc.retry_after,
        )
    if kind is Kind.CANCELLED:
        return EngineError(499, "cancelled", "The client left.")
    if exc.status == 415:
        return EngineError(415, "invalid_request", exc.public_message)
    # invalid input and conflicts with the store's state: the spec's 400
    return invalid(exc.public_message)


def body(error: EngineError, rid: str | None = None) -> dict[str, Any]:
    """The envelope (`rid`: the request's id, for a stream that outlives the request)."""
    return {
        "request_id": rid or request_id(),
        "error": {
            "code": error.code,
            "message": error.message,
            "retryable": error.retryable,
            "details": error.details,
        },
    }


def render(exc: ServiceError) -> tuple[Response, int]:
    error = as_engine_error(exc)
    response = jsonify(body(error))
    if error.retry_after is not None and error.status in (409, 429, 503):
        response.headers["Retry-After"] = str(error.retry_after)
    return response, error.status


def stream_error(exc: ServiceError, rid: str) -> dict[str, Any]:
    """A stream's `error` event: the envelope the request would have got."""
    return body(as_engine_error(exc), rid)
