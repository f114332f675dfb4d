"""moorcheh-edge's error shape: `{"status": "error"|"failure", "message"}`
(never an HTML page, never a 500 for bad input), for responses and for a
stream's `error` event (`{"message"}`) from the same table."""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, jsonify

from flask_app.api.http.messages import capped
from flask_app.errors import ServiceError


def _message(exc: ServiceError) -> str:
    if exc.error_code == "http_413":
        limit = current_app.config.get("MAX_CONTENT_LENGTH") or 0
        return f"request body is larger than the limit of {limit} bytes (--max-body-mb)"
    return exc.public_message


def body(exc: ServiceError) -> dict[str, Any]:
    """moorcheh-edge says "failure" for conflicts with the store, "error"
    otherwise; a full store adds the counts its clients check
    (`is_item_limit_exceeded`). A failed model is a 500 here (moorcheh-edge
    said 400 because its LLM was a remote Ollama), its message kept."""
    out: dict[str, Any] = {
        "status": "failure" if exc.status == 409 else "error",
        "message": capped(_message(exc)),
    }
    if exc.error_code == "item_limit_exceeded":
        out.update(exc.details)
    return out


def render(exc: ServiceError) -> tuple[Response, int]:
    response = jsonify(body(exc))
    if exc.retry_after is not None:
        response.headers["Retry-After"] = str(exc.retry_after)
    return response, exc.status


def stream_error(exc: ServiceError) -> dict[str, Any]:
    """A stream's `error` event: the same message."""
    return {"message": body(exc)["message"]}
