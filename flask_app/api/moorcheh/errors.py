"""moorcheh-edge's error shape: `{"status": "error"|"failure", "message"}`
(never an HTML page, never a 500 for bad input)."""

from __future__ import annotations

from flask import Response, current_app, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.errors import NotAnApiError
from flask_app.api.http.messages import capped
from flask_app.errors import ServiceError
from flask_app.store import CapacityError


def _json(status: int, message: str, retry_after: int | None = None) -> tuple[Response, int]:
    # moorcheh-edge uses "failure" for conflicts with the store, "error" otherwise
    word = "failure" if status == 409 else "error"
    response = jsonify(status=word, message=capped(message))
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response, status


def render(exc: Exception) -> tuple[Response, int]:
    """The moorcheh-edge response for `exc` (NotAnApiError: not an API error)."""
    if isinstance(exc, HTTPException):
        if exc.code == 413:
            limit = current_app.config.get("MAX_CONTENT_LENGTH") or 0
            return _json(
                413, f"request body is larger than the limit of {limit} bytes (--max-body-mb)"
            )
        return _json(exc.code or 500, exc.description or exc.name)
    if isinstance(exc, CapacityError):
        # Exact body moorcheh-edge clients check (`is_item_limit_exceeded`).
        return jsonify(
            status="failure",
            message=capped(str(exc)),
            items=exc.current,
            max_items=exc.max_items,
            requested_new=exc.requested_new,
        ), 409
    if isinstance(exc, ServiceError):
        # moorcheh-edge said 400 for a failed model because its LLM was a remote
        # Ollama; a model failing here is a server error (500), its message kept
        return _json(exc.status, exc.public_message, exc.retry_after)
    raise NotAnApiError
