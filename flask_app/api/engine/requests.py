"""Validation of Engine request bodies with the exact messages of spec §3
(first failure wins, fields in the order the spec lists them)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from flask_app.api.engine.errors import invalid
from flask_app.file_collections.names import NAME, PRINCIPAL, PRINCIPAL_MAX, PRINCIPALS_MAX

EFFORTS = ("medium", "high")
SOURCES_MODES = ("all", "cited", "none")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
QUERY_MAX = 8000
INSTRUCTIONS_MAX = 8000
HISTORY_MAX = 32
HISTORY_MESSAGE_MAX = 32000
IMAGE_MAX_BYTES = 4_194_304
FILTER_MAX = 4000
MAX_SPANS = 50
MAX_SPAN_CHARS = 32000
MAX_CONTEXT_CHARS = 2000

# the fields each body may hold (the models in `schemas` list the same; a test checks)
ANSWER_FIELDS = (
    "query",
    "effort",
    "sources",
    "instructions",
    "query_image",
    "history",
    "filter",
    "principals",
)
READ_SPANS_FIELDS = ("spans", "context_chars", "include", "principals")

_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def is_base64(value: object) -> TypeGuard[str]:
    """`value` is a string of the base64 alphabet, padded: checked before
    decoding, so any other text (non-ASCII included) is a clean 400."""
    return isinstance(value, str) and bool(_BASE64.fullmatch(value)) and len(value) % 4 == 0


def check_name(kind: str, name: str) -> None:
    if not NAME.fullmatch(name):
        raise invalid(
            f"{kind} name must match ^[a-z0-9][a-z0-9-]{{0,62}}$", kind, actual=name[:100]
        )


def _unknown(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in body:
        if key not in allowed:
            raise invalid(f"Unknown field: {key}", key)


def _string(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{key} must be a string.", key)
    return value


def principals_of(body: dict[str, Any]) -> list[str] | None:
    value = body.get("principals")
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= PRINCIPALS_MAX:
        raise invalid(f"principals must be a list of 1 to {PRINCIPALS_MAX} strings.", "principals")
    for i, p in enumerate(value):
        if not isinstance(p, str) or not 1 <= len(p) <= PRINCIPAL_MAX or not PRINCIPAL.fullmatch(p):
            raise invalid(
                f"principals[{i}] must look like <kind>:<id> (1-{PRINCIPAL_MAX} characters).",
                f"principals[{i}]",
            )
    return list(value)


@dataclass(frozen=True)
class Image:
    media_type: str
    data: bytes


@dataclass(frozen=True)
class AnswerRequest:
    query: str
    effort: str = "medium"
    sources: str = "all"
    instructions: str | None = None
    image: Image | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    filter: str | None = None
    principals: list[str] | None = None


def _image(value: Any) -> Image:
    if not isinstance(value, dict):
        raise invalid("query_image must be an object with media_type and data.", "query_image")
    media_type = value.get("media_type")
    if media_type not in IMAGE_TYPES:
        raise invalid(
            "query_image.media_type must be one of: " + ", ".join(IMAGE_TYPES),
            "query_image.media_type",
        )
    data = value.get("data")
    if not is_base64(data):
        raise invalid("query_image.data must be valid base64.", "query_image.data")
    if len(data) // 4 * 3 - data.count("=") > IMAGE_MAX_BYTES:
        raise invalid(
            f"query_image.data must decode to at most {IMAGE_MAX_BYTES} bytes.",
            "query_image.data",
            limit=IMAGE_MAX_BYTES,
        )
    raw = base64.b64decode(data)
    extra = {k for k in value if k not in ("media_type", "data")}
    if extra:
        raise invalid(f"Unknown field: query_image.{sorted(extra)[0]}", "query_image")
    return Image(str(media_type), raw)


def answer_request(body: dict[str, Any]) -> AnswerRequest:
    _unknown(body, ANSWER_FIELDS)
    query = _string(body, "query")
    if query is None or not query.strip():
        raise invalid("query is required.", "query")
    query = query.strip()
    if len(query) > QUERY_MAX:
        raise invalid(
            f"query must be at most {QUERY_MAX} characters.",
            "query",
            limit=QUERY_MAX,
            actual=len(query),
        )
    effort = body.get("effort", "medium")
    if effort not in EFFORTS:
        raise invalid("effort must be one of: " + ", ".join(EFFORTS), "effort")
    sources = body.get("sources", "all")
    if sources not in SOURCES_MODES:
        raise invalid("sources must be one of: " + ", ".join(SOURCES_MODES), "sources")
    instructions = _string(body, "instructions")
    if instructions is not None and len(instructions) > INSTRUCTIONS_MAX:
        raise invalid(
            f"instructions must be at most {INSTRUCTIONS_MAX} characters.",
            "instructions",
            limit=INSTRUCTIONS_MAX,
            actual=len(instructions),
        )
    image = _image(body["query_image"]) if body.get("query_image") is not None else None
    history = body.get("history", [])
    if not isinstance(history, list):
        raise invalid("history must be a list of messages.", "history")
    if len(history) > HISTORY_MAX:
        raise invalid(
            f"history must contain at most {HISTORY_MAX} messages.",
            "history",
            limit=HISTORY_MAX,
            actual=len(history),
        )
    for i, message in enumerate(history):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(
                f"history[{i}].role must be one of: user, assistant", f"history[{i}].role"
            )
        content = message.get("content")
        if not isinstance(content, str) or not content:
            raise invalid(
                f"history[{i}].content must be a non-empty string.", f"history[{i}].content"
            )
        if len(content) > HISTORY_MESSAGE_MAX:
            raise invalid(
                f"history[{i}].content must be at most {HISTORY_MESSAGE_MAX} characters.",
                f"history[{i}].content",
                limit=HISTORY_MESSAGE_MAX,
                actual=len(content),
            )
    text_filter = _string(body, "filter")
    if text_filter is not None and len(text_filter) > FILTER_MAX:
        raise invalid(f"filter must be at most {FILTER_MAX} characters.", "filter")
    return AnswerRequest(
        query=query,
        effort=str(effort),
        sources=str(sources),
        instructions=instructions,
        image=image,
        history=[{"role": m["role"], "content": m["content"]} for m in history],
        filter=text_filter,
        principals=principals_of(body),
    )


@dataclass(frozen=True)
class SpanRequest:
    file_id: str
    start: int
    end: int


def read_spans_request(body: dict[str, Any]) -> tuple[list[SpanRequest], int, list[str] | None]:
    _unknown(body, READ_SPANS_FIELDS)
    spans = body.get("spans")
    if not isinstance(spans, list) or not 1 <= len(spans) <= MAX_SPANS:
        raise invalid(f"spans must be a list of 1 to {MAX_SPANS} spans.", "spans")
    out = []
    for i, span in enumerate(spans):
        where = f"spans[{i}]"
        if not isinstance(span, dict):
            raise invalid(f"{where} must be an object.", where)
        file_id, start, end = span.get("file_id"), span.get("start"), span.get("end")
        if span.get("unit", "chars") != "chars":
            raise invalid(f'{where}.unit must be "chars".', where)
        if not isinstance(file_id, str) or not file_id:
            raise invalid(f"{where}.file_id is required.", where)
        if (
            not isinstance(start, int)
            or not isinstance(end, int)
            or isinstance(start, bool)
            or isinstance(end, bool)
            or not 0 <= start < end
            or end - start > MAX_SPAN_CHARS
        ):
            raise invalid(
                f"{where} must have 0 <= start < end and end - start <= {MAX_SPAN_CHARS}.", where
            )
        out.append(SpanRequest(file_id, start, end))
    context = body.get("context_chars", 0)
    if not isinstance(context, int) or isinstance(context, bool) or not 0 <= context <= 2000:
        raise invalid(f"context_chars must be between 0 and {MAX_CONTEXT_CHARS}.", "context_chars")
    include = body.get("include", ["text"])
    if not isinstance(include, list) or any(v not in ("text",) for v in include):
        raise invalid('include must be a list of: "text"', "include")
    return out, context, principals_of(body)
