"""moorcheh-edge's error shape: `{"status": "error"|"failure", "message"}`
(never an HTML page, never a 500 for bad input)."""

from __future__ import annotations

import logging

from flask import Response, current_app, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.errors import NotAnApiError
from flask_app.api.http.json_body import BadRequest
from flask_app.api.http.messages import capped
from flask_app.inference.embed import EmbedderBusy
from flask_app.inference.llm import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.rag import RagError
from flask_app.store import CapacityError, CollectionUnavailable, StoreError

_log = logging.getLogger("edgerag")


def _json(status: int, message: str) -> tuple[Response, int]:
    # moorcheh-edge uses "failure" for conflicts with the store, "error" otherwise
    word = "failure" if status == 409 else "error"
    return jsonify(status=word, message=capped(message)), status


def _retry(pair: tuple[Response, int], seconds: int) -> tuple[Response, int]:
    pair[0].headers["Retry-After"] = str(seconds)
    return pair


def render(exc: Exception) -> tuple[Response, int]:
    """The moorcheh-edge response for `exc` (NotAnApiError: not an API error)."""
    if isinstance(exc, HTTPException):
        if exc.code == 413:
            limit = current_app.config.get("MAX_CONTENT_LENGTH") or 0
            return _json(
                413, f"request body is larger than the limit of {limit} bytes (--max-body-mb)"
            )
        return _json(exc.code or 500, exc.description or exc.name)
    if isinstance(exc, BadRequest):
        return _json(exc.status, exc.message)
    if isinstance(exc, CapacityError):
        # Exact body moorcheh-edge clients check (`is_item_limit_exceeded`).
        return jsonify(
            status="failure",
            message=capped(str(exc)),
            items=exc.current,
            max_items=exc.max_items,
            requested_new=exc.requested_new,
        ), 409
    if isinstance(exc, CollectionUnavailable):
        return _retry(_json(exc.status, str(exc)), exc.retry_after)
    if isinstance(exc, StoreError):
        return _json(exc.status, str(exc))
    if isinstance(exc, RagError):
        return _json(400, str(exc))
    if isinstance(exc, LLMOverloaded):
        return _retry(_json(503, str(exc)), exc.retry_after)
    if isinstance(exc, LLMTimeout):
        return _json(504, str(exc))
    if isinstance(exc, LLMFailed):
        # the model broke, not the request: a server error (moorcheh-edge said 400
        # because its LLM was a remote Ollama; the message is kept for its clients)
        _log.error("%s", exc)
        return _json(500, "LLM request failed")
    if isinstance(exc, LLMCancelled):
        return _json(499, str(exc))  # nobody reads it: the client is gone
    if isinstance(exc, EmbedderBusy):
        return _retry(_json(503, str(exc)), 1)
    raise NotAnApiError
