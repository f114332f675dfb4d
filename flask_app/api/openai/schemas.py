"""Request bodies of the OpenAI-compatible API (unknown fields are ignored,
as OpenAI clients send many optional ones)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flask_app.api.openai.errors import invalid


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: str = Field(max_length=200_000)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[Message] = Field(min_length=1, max_length=256)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    n: int = Field(default=1, ge=1, le=1)


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    input: str | list[str] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], body: dict[str, Any]) -> M:
    """Validate; the first error names its field (`param`)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or None
        raise invalid(f"{where}: {err['msg']}" if where else err["msg"], where) from None
