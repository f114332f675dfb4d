"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

import logging
from typing import Any

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.errors import NotAnApiError
from flask_app.api.http.json_body import BadRequest
from flask_app.api.http.messages import capped
from flask_app.inference.embed import EmbedderBusy, EmbeddingError
from flask_app.inference.llm import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.rag import RagError
from flask_app.store import CollectionUnavailable

_log = logging.getLogger("edgerag")


class OpenAIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status,
            message,
            kind,
            param,
            code,
        )


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param, code)


def body(
    status: int, message: str, kind: str, param: str | None, code: str | None
) -> dict[str, Any]:
    return {"error": {"message": capped(message), "type": kind, "param": param, "code": code}}


def _classify(exc: Exception) -> tuple[OpenAIError, int | None]:
    if isinstance(exc, OpenAIError):
        return exc, None
    if isinstance(exc, HTTPException):
        code = exc.code or 500
        if code == 401:
            return OpenAIError(
                401, "Incorrect API key provided.", "invalid_request_error", None, "invalid_api_key"
            ), None
        if code == 403:
            message = exc.description or "Forbidden."
            return OpenAIError(
                403, message, "invalid_request_error", None, "permission_denied"
            ), None
        if code == 404:
            return OpenAIError(
                404, "Unknown route.", "invalid_request_error", None, "not_found"
            ), None
        if code == 405:
            return OpenAIError(405, "Method not allowed.", "invalid_request_error"), None
        if code == 413:
            return OpenAIError(413, "Request body too large.", "invalid_request_error"), None
        if code >= 500:
            return OpenAIError(500, "Internal error.", "server_error"), None
        return OpenAIError(code, exc.description or exc.name, "invalid_request_error"), None
    if isinstance(exc, BadRequest):
        return OpenAIError(exc.status, exc.message, "invalid_request_error"), None
    if isinstance(exc, (RagError, EmbeddingError)):
        return invalid(str(exc)), None
    if isinstance(exc, LLMOverloaded):
        return OpenAIError(
            429, str(exc), "rate_limit_error", None, "rate_limit_exceeded"
        ), exc.retry_after
    if isinstance(exc, EmbedderBusy):
        return OpenAIError(429, str(exc), "rate_limit_error", None, "rate_limit_exceeded"), 1
    if isinstance(exc, LLMTimeout):
        return OpenAIError(504, str(exc), "server_error", None, "timeout"), None
    if isinstance(exc, LLMFailed):
        _log.error("%s", exc)
        return OpenAIError(500, "The model failed.", "server_error"), None
    if isinstance(exc, LLMCancelled):
        return OpenAIError(499, str(exc), "invalid_request_error"), None
    if isinstance(exc, CollectionUnavailable):  # e.g. a cluster's shard restarting
        return OpenAIError(503, str(exc), "server_error"), exc.retry_after
    raise NotAnApiError


def render(exc: Exception) -> tuple[Response, int]:
    error, retry_after = _classify(exc)
    response = jsonify(body(error.status, error.message, error.kind, error.param, error.code))
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response, error.status
