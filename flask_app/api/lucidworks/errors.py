"""Lucidworks' error shape: `{"status": 400, "error": "Bad Request", "message": "…"}`
for every request under /ai/ (routing 404/405 included), with the messages of
spec §9."""

from __future__ import annotations

from http import HTTPStatus

from flask import Response, jsonify

from flask_app.api.http.messages import capped
from flask_app.errors import Kind, ServiceError


class NotFound(ServiceError):
    """An unknown model, use case, prediction id or collection (404)."""

    kind = Kind.NOT_FOUND


# phrases Python's HTTPStatus words differently across versions, and 499
_PHRASES = {413: "Payload Too Large", 499: "Client Closed Request"}


def body(status: int, message: str) -> dict[str, object]:
    try:
        phrase = _PHRASES.get(status) or HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return {"status": status, "error": phrase, "message": capped(message)}


def _json(status: int, message: str, retry_after: int | None = None) -> tuple[Response, int]:
    response = jsonify(body(status, message))
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response, status


# kinds whose status and message spec §9 fixes
_DOCUMENTED: dict[Kind, tuple[int, str]] = {
    Kind.TOO_LARGE: (413, "Request body too large"),
    Kind.BUSY: (429, "Too Many Requests"),
    Kind.TIMEOUT: (504, "Model backend timeout"),
    Kind.MODEL_FAILED: (502, "Model backend error"),
}

# codes whose status and message spec §9 fixes (routing's included)
_BY_CODE: dict[str, tuple[int, str]] = {
    "malformed_json": (400, "Malformed JSON request body"),
    "context_overflow": (400, "Input exceeds the model context length"),
    "http_400": (400, "Malformed JSON request body"),
    "http_401": (401, "Unauthorized"),
    "http_404": (404, "Not Found: no such route under /ai/"),
    "http_405": (405, "Method Not Allowed"),
    "http_413": (413, "Request body too large"),
    "http_500": (500, "internal error"),
}


def status_and_message(exc: ServiceError) -> tuple[int, str, int | None]:
    """(status, message, Retry-After) for `exc`."""
    documented = _BY_CODE.get(exc.error_code) or _DOCUMENTED.get(exc.kind)
    status, message = documented or (exc.status, exc.public_message)
    return status, message, exc.retry_after


def render(exc: ServiceError) -> tuple[Response, int]:
    status, message, retry_after = status_and_message(exc)
    return _json(status, message, retry_after)


def stream_error(exc: ServiceError) -> dict[str, object]:
    """A stream's `error` event: the response body the request would have got."""
    status, message, _ = status_and_message(exc)
    return body(status, message)
