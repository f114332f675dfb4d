"""Request bodies of the OpenAI-compatible API (unknown fields are ignored,
as OpenAI clients send many optional ones)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from flask_app.api.http.json_types import JsonInt, JsonNumber
from flask_app.api.openai.errors import invalid


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: str = Field(max_length=200_000)


EDGE_STORE = "moorcheh-edge"


class RagOptions(BaseModel):
    """The `rag` extension of a chat request (see `grounding`)."""

    model_config = ConfigDict(extra="forbid")
    collection: str = Field(
        description=f'"<namespace>/<collection>" (Engine) or "{EDGE_STORE}" (the flat store)'
    )
    top_k: JsonInt = Field(default=5, ge=1, le=24)
    principals: list[str] | None = Field(default=None, min_length=1, max_length=100)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[Message] = Field(min_length=1, max_length=256)
    temperature: JsonNumber | None = Field(default=None, ge=0.0, le=2.0)
    top_p: JsonNumber | None = Field(default=None, ge=0.0, le=1.0)
    max_tokens: JsonInt | None = Field(default=None, ge=1)
    max_completion_tokens: JsonInt | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: JsonInt | None = None
    stream: StrictBool = False
    n: JsonInt = Field(default=1, ge=1, le=1)
    rag: RagOptions | None = None  # extension: answer from a collection


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str
    input: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=2048)]
    )
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


# --- response bodies (the OpenAPI document's schemas; tests validate real responses) ---


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorDetail


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    preset: str | None = None  # the chat model's `--llm` name


class Models(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class RagSource(BaseModel):
    id: str
    text: str
    score: float
    file_id: str | None = None
    path: str | None = None
    metadata: dict[str, Any] | None = None


class RagResult(BaseModel):
    """The `rag` extension of a grounded completion."""

    sources: list[RagSource]
    refused: bool
    # how likely the documents hold the answer (the gate's probe, else the
    # judge's P(yes); null when neither was read)
    answerable_probability: float | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: ChatUsage
    rag: RagResult | None = None


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class Embeddings(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: Literal["stop", "length"] | None


class ChatCompletionChunk(BaseModel):
    """A streamed chunk (`stream: true`); the last one carries `rag` when grounded."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    rag: RagResult | None = None
