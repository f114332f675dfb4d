"""Lucidworks' error shape: `{"status": 400, "error": "Bad Request", "message": "…"}`
for every request under /ai/ (routing 404/405 included), with the messages of
spec §9."""

from __future__ import annotations

from http import HTTPStatus

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.errors import NotAnApiError
from flask_app.api.http.json_body import MalformedJSON
from flask_app.api.http.messages import capped
from flask_app.errors import Kind, ServiceError
from flask_app.rag import ContextOverflow


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

# routing statuses and their spec §9 messages
_ROUTING: dict[int, str] = {
    413: "Request body too large",
    401: "Unauthorized",
    404: "Not Found: no such route under /ai/",
    405: "Method Not Allowed",
    400: "Malformed JSON request body",
}


def status_and_message(exc: Exception) -> tuple[int, str, int | None]:
    """(status, message, Retry-After) for `exc`; NotAnApiError when it
    is not an API error (a server bug)."""
    if isinstance(exc, HTTPException):
        code = exc.code or 500
        return code, _ROUTING.get(code) or exc.description or exc.name, None
    if not isinstance(exc, ServiceError):
        raise NotAnApiError
    if isinstance(exc, MalformedJSON):
        return 400, _ROUTING[400], None
    if isinstance(exc, ContextOverflow):
        return 400, "Input exceeds the model context length", None
    status, message = _DOCUMENTED.get(exc.kind, (exc.status, exc.public_message))
    return status, message, exc.retry_after


def render(exc: Exception) -> tuple[Response, int]:
    status, message, retry_after = status_and_message(exc)
    return _json(status, message, retry_after)
