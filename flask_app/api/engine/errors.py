"""The Engine error envelope: `{"request_id", "error": {"code", "message",
"retryable", "details"}}`, with `X-Request-Id` on every response and
`Retry-After` on retryable 409/429/503 (spec §3)."""

from __future__ import annotations

import logging
from typing import Any

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.errors import NotAnApiError
from flask_app.api.http.json_body import BadRequest
from flask_app.api.http.request_ids import request_id
from flask_app.inference.embed import EmbedderBusy, EmbeddingError
from flask_app.inference.llm import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.rag import RagError
from flask_app.store import CollectionUnavailable

_log = logging.getLogger("edgerag")

MAX_REQUEST_BYTES = 6_291_456
TIMEOUT_MESSAGE = "The request did not complete within 45 seconds."


class EngineError(Exception):
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
        self.retryable = retryable
        self.details = details or {}
        self.retry_after = retry_after if retry_after is not None else (5 if retryable else None)


def invalid(message: str, field: str | None = None, **details: Any) -> EngineError:
    extra = {"field": field, **details} if field else dict(details)
    return EngineError(400, "invalid_request", message, details=extra)


def not_found(what: str) -> EngineError:
    return EngineError(404, "not_found", f"Not found: {what}")


def as_engine_error(exc: Exception) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, HTTPException):
        code = exc.code or 500
        if code == 401:
            return EngineError(401, "unauthenticated", "Missing or invalid API key.")
        if code == 403:
            return EngineError(
                403, "permission_denied", "The API key cannot access this namespace."
            )
        if code == 404:
            return EngineError(404, "not_found", "Not found: no such route")
        if code == 405:
            return EngineError(405, "method_not_allowed", "Method not allowed.")
        if code == 413:
            return EngineError(
                413, "request_too_large", f"Request body exceeds {MAX_REQUEST_BYTES} bytes."
            )
        if code == 400:
            return invalid("Request body must be a JSON object.")
        if code >= 500:
            return EngineError(500, "internal", "Internal error.", retryable=True)
        return EngineError(code, "invalid_request", exc.description or exc.name)
    if isinstance(exc, BadRequest):
        if exc.status == 413:
            return EngineError(
                413, "request_too_large", f"Request body exceeds {MAX_REQUEST_BYTES} bytes."
            )
        if exc.status == 415:
            return EngineError(415, "invalid_request", exc.message)
        return invalid(exc.message)
    if isinstance(exc, (RagError, EmbeddingError)):
        return invalid(str(exc))
    if isinstance(exc, LLMTimeout):
        return EngineError(
            503,
            "temporarily_unavailable",
            TIMEOUT_MESSAGE,
            retryable=True,
        )
    if isinstance(exc, (LLMOverloaded, EmbedderBusy, LLMFailed, CollectionUnavailable)):
        if isinstance(exc, LLMFailed):
            _log.error("%s", exc)
        return EngineError(
            503, "temporarily_unavailable", "Service temporarily unavailable.", retryable=True
        )
    if isinstance(exc, LLMCancelled):
        return EngineError(499, "cancelled", "The client left.")
    raise NotAnApiError


def body(error: EngineError) -> dict[str, Any]:
    return {
        "request_id": request_id(),
        "error": {
            "code": error.code,
            "message": error.message,
            "retryable": error.retryable,
            "details": error.details,
        },
    }


def render(exc: Exception) -> tuple[Response, int]:
    error = as_engine_error(exc)
    response = jsonify(body(error))
    if error.retry_after is not None and error.status in (409, 429, 503):
        response.headers["Retry-After"] = str(error.retry_after)
    return response, error.status
