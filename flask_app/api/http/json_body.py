"""JSON in and out: orjson for speed, strict parsing, errors that name the problem."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from flask import Request
from flask.json.provider import JSONProvider
from pydantic import BaseModel, ValidationError

from flask_app.errors import Kind, ServiceError

M = TypeVar("M", bound=BaseModel)


class BadRequest(ServiceError):
    """A request the API rejects as sent: 400, 413 (too large) or 415 (not JSON)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        if status == 413:
            self.kind = Kind.TOO_LARGE
        if status == 415:
            self.code = "unsupported_media_type"


class MalformedJSON(BadRequest):
    """The body is not JSON at all (empty, or a syntax error)."""

    code = "malformed_json"


class OrjsonProvider(JSONProvider):
    """Flask JSON through orjson (compact output, as the SSE clients expect)."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return orjson.dumps(obj).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return orjson.loads(s)


def json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object; NaN, Infinity and duplicate-free nonsense are rejected."""
    return parse_object(json_bytes(request))


def json_bytes(request: Request) -> bytes:
    """The body of a JSON request, unparsed (415 for another type, 400 when empty)."""
    mimetype = request.mimetype
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise BadRequest(
            f"Content-Type must be application/json, got {request.content_type or 'none'}", 415
        )
    raw = request.get_data(cache=False)
    if not raw.strip():
        raise MalformedJSON("request body is empty; expected a JSON object")
    return raw


def parse_object(raw: bytes) -> dict[str, Any]:
    """JSON text as an object, strictly (orjson: no NaN or Infinity)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedJSON(f"invalid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def validate(model: type[M], body: dict[str, Any]) -> M:
    """Validate with pydantic; the first error becomes a message naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise BadRequest(f"{where}: {err['msg']}") from None
