"""Lucidworks' error shape: `{"status": 400, "error": "Bad Request", "message": "…"}`
for every request under /ai/ (routing 404/405 included), with the messages of
spec §9."""

from __future__ import annotations

import logging
from http import HTTPStatus

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.errors import NotAnApiError
from flask_app.api.http.json_body import BadRequest, MalformedJSON
from flask_app.api.http.messages import capped
from flask_app.inference.embed import EmbedderBusy, EmbeddingError
from flask_app.inference.llm import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.rag import ContextOverflow, RagError
from flask_app.store import CollectionUnavailable

_log = logging.getLogger("edgerag")


class NotFound(Exception):
    """An unknown model, use case, prediction id or collection (404)."""


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


def status_and_message(exc: Exception) -> tuple[int, str, int | None]:
    """(status, message, Retry-After) for `exc`; NotAnApiError when it
    is not an API error (a server bug)."""
    if isinstance(exc, HTTPException):
        code = exc.code or 500
        if code == 413:
            return 413, "Request body too large", None
        if code == 401:
            return 401, "Unauthorized", None
        if code == 404:
            return 404, "Not Found: no such route under /ai/", None
        if code == 405:
            return 405, "Method Not Allowed", None
        if code == 400:
            return 400, "Malformed JSON request body", None
        return code, exc.description or exc.name, None
    if isinstance(exc, BadRequest):
        if exc.status == 413:
            return 413, "Request body too large", None
        if isinstance(exc, MalformedJSON):
            return 400, "Malformed JSON request body", None
        return exc.status, exc.message, None
    if isinstance(exc, NotFound):
        return 404, str(exc), None
    if isinstance(exc, ContextOverflow):
        return 400, "Input exceeds the model context length", None
    if isinstance(exc, (RagError, EmbeddingError)):
        return 400, str(exc), None
    if isinstance(exc, LLMOverloaded):
        return 429, "Too Many Requests", exc.retry_after
    if isinstance(exc, EmbedderBusy):
        return 429, "Too Many Requests", 1
    if isinstance(exc, LLMTimeout):
        return 504, "Model backend timeout", None
    if isinstance(exc, LLMFailed):
        _log.error("%s", exc)
        return 502, "Model backend error", None
    if isinstance(exc, LLMCancelled):
        return 499, str(exc), None
    if isinstance(exc, CollectionUnavailable):  # e.g. a cluster's shard restarting
        return 503, str(exc), exc.retry_after
    raise NotAnApiError


def render(exc: Exception) -> tuple[Response, int]:
    status, message, retry_after = status_and_message(exc)
    return _json(status, message, retry_after)
