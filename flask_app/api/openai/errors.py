"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify

from flask_app.api.http.messages import capped
from flask_app.errors import Kind, ServiceError


class OpenAIError(ServiceError):
    """An error in OpenAI's own words: its `type`, `param` and `code`."""

    code = "openai"

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = Kind.NOT_FOUND if status == 404 else Kind.INVALID
        self.details = {"type": kind, "param": param, "code": code}


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param, code)


def body(
    status: int, message: str, kind: str, param: str | None, code: str | None
) -> dict[str, Any]:
    return {"error": {"message": capped(message), "type": kind, "param": param, "code": code}}


def _routing_error(code: int, description: str | None, name: str) -> OpenAIError:
    if code == 401:
        return OpenAIError(
            401, "Incorrect API key provided.", "invalid_request_error", None, "invalid_api_key"
        )
    if code == 403:
        message = description or "Forbidden."
        return OpenAIError(403, message, "invalid_request_error", None, "permission_denied")
    if code == 404:
        return OpenAIError(404, "Unknown route.", "invalid_request_error", None, "not_found")
    if code == 405:
        return OpenAIError(405, "Method not allowed.", "invalid_request_error")
    if code == 413:
        return OpenAIError(413, "Request body too large.", "invalid_request_error")
    if code >= 500:
        return OpenAIError(500, "Internal error.", "server_error")
    return OpenAIError(code, description or name, "invalid_request_error")


# (status, type, code) for kinds whose OpenAI shape is not (their status, invalid_request_error)
_DOCUMENTED: dict[Kind, tuple[int, str, str | None]] = {
    Kind.NOT_FOUND: (404, "invalid_request_error", "not_found"),
    Kind.BUSY: (429, "rate_limit_error", "rate_limit_exceeded"),
    Kind.UNAVAILABLE: (503, "server_error", None),
    Kind.TIMEOUT: (504, "server_error", "timeout"),
    Kind.MODEL_FAILED: (500, "server_error", None),
}


def shape(exc: ServiceError) -> tuple[int, dict[str, Any], int | None]:
    """(status, body, Retry-After) of `exc` in OpenAI's shape."""
    code = exc.error_code
    if code == "openai":
        d = exc.details
        return (
            exc.status,
            body(exc.status, exc.public_message, d["type"], d["param"], d["code"]),
            None,
        )
    if code.startswith("http_"):
        return shape(_routing_error(exc.status, exc.public_message, exc.public_message))
    message = "The model failed." if exc.kind is Kind.MODEL_FAILED else exc.public_message
    status, kind, openai_code = _DOCUMENTED.get(
        exc.kind, (exc.status, "invalid_request_error", None)
    )
    return status, body(status, message, kind, None, openai_code), exc.retry_after


def render(exc: ServiceError) -> tuple[Response, int]:
    status, payload, retry_after = shape(exc)
    response = jsonify(payload)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response, status


def stream_error(exc: ServiceError) -> dict[str, Any]:
    """A stream's error chunk: the body the request would have got."""
    return shape(exc)[1]
