"""Request bodies of the moorcheh-edge surface (shared/spec/moorcheh-edge.md §1)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from flask_app.api.http.json_types import FLOAT32_OVERFLOW, JsonInt
from flask_app.index_kinds import IndexKind

Number = Annotated[float, Strict()]  # ints accepted, strings and booleans not
# numbers, checked (with the server's own messages) by simcore: split_upload reads an upload's
# vectors from the body bytes, matrix_from_lists a parsed query's
VectorList = Annotated[
    list[Any],
    WithJsonSchema(
        {
            "type": "array",
            "items": {
                "type": "number",
                "exclusiveMinimum": -FLOAT32_OVERFLOW,
                "exclusiveMaximum": FLOAT32_OVERFLOW,
            },
            "minItems": 1,
            "maxItems": 4096,
        }
    ),
]
MetadataValue = StrictStr | StrictInt | Number | StrictBool | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


# kiosk mode needs a threshold (the server checks it; the schema says it)
KIOSK_NEEDS_THRESHOLD = ConfigDict(
    extra="ignore",
    json_schema_extra={
        "if": {"properties": {"kiosk_mode": {"const": True}}, "required": ["kiosk_mode"]},
        "then": {"properties": {"threshold": {"type": "number"}}, "required": ["threshold"]},
    },
)


ID_MAX_LENGTH = 512


class UploadItem(_Body):
    """An item without its vector: simcore reads the vectors out of the body's
    bytes into one float32 matrix before validation (`simcore.split_upload`)."""

    id: StrictStr = Field(min_length=1, max_length=ID_MAX_LENGTH)
    text: StrictStr | None = None
    original_text: StrictStr | None = None
    metadata: dict[str, MetadataValue] | None = None

    def content(self) -> str:
        return self.text if self.text is not None else (self.original_text or "")


class BulkItem(_Body):
    """One row's text and metadata in a multipart upload's `items` part."""

    text: StrictStr | None = None
    metadata: dict[str, MetadataValue] | None = None


class Upload(_Body):
    store_mode: Literal["text", "vector"]
    embedding_model: StrictStr | None = Field(default=None, max_length=200)
    items: list[UploadItem] = Field(min_length=1)


class LegacyUpload(_Body):
    """0.1.x clients: `{"vectors": [{"id", "vector", "text"?}]}` (vector mode)."""

    vectors: list[UploadItem] = Field(min_length=1)


class Search(_Body):
    model_config = KIOSK_NEEDS_THRESHOLD
    query: VectorList | StrictStr
    top_k: JsonInt = Field(default=10, ge=1, le=10_000)  # above 100: clamped to 100
    threshold: Number | None = Field(default=None, ge=0.0, le=1.0)
    kiosk_mode: StrictBool = False
    metadata: dict[str, MetadataValue] | None = None


class DeleteItems(_Body):
    ids: list[StrictStr] = Field(min_length=1, max_length=10_000)


class HistoryTurn(_Body):
    role: Literal["user", "assistant"]
    content: StrictStr = Field(min_length=1, max_length=20_000, pattern=r"\S")


class Answer(_Body):
    model_config = KIOSK_NEEDS_THRESHOLD
    query: StrictStr = Field(min_length=1, max_length=8_000, pattern=r"\S")
    query_vector: VectorList | None = None
    top_k: JsonInt = Field(default=5, ge=1, le=10_000)  # above 100: clamped to 100
    threshold: Number | None = Field(default=None, ge=0.0, le=1.0)
    kiosk_mode: StrictBool = False
    header_prompt: StrictStr | None = Field(default=None, max_length=20_000)
    footer_prompt: StrictStr | None = Field(default=None, max_length=20_000)
    chat_history: list[HistoryTurn] | None = Field(default=None, max_length=100)
    temperature: Number | None = Field(default=None, ge=0.0, le=2.0)
    metadata: dict[str, MetadataValue] | None = None


# --- response bodies (the OpenAPI document's schemas; tests validate real responses) ---


class MoorchehError(BaseModel):
    status: Literal["error", "failure"]
    message: str


class StreamMeta(BaseModel):
    """`/answer/stream`'s first event: what the answer rests on."""

    model: str
    context_count: int
    sources: list[dict[str, Any]]
    query: str


class StreamToken(BaseModel):
    delta: str


class StreamError(BaseModel):
    message: str


class AnswerGate(BaseModel):
    """Which gate checks answers: the preset's verifier (`verifier`), or
    none (`unverified`, with the first-token refusal threshold and the reason)."""

    kind: Literal["verifier", "unverified"]
    threshold: float | None = None  # verifier: the probability an answer must reach
    layer: int | None = None  # verifier: the hidden layer it reads
    samples: int | None = None  # verifier: sampled answers written beside the greedy one
    accept: float | None = None  # verifier: no samples when the greedy one reaches this
    floor: float | None = None  # verifier: answerability below which nothing is written
    features: list[str] | None = None  # verifier: what it combines
    file: str | None = None  # verifier: its file
    refusal_probability: float | None = None  # unverified: the first-token threshold
    reason: str | None = None  # unverified: why


class LlmState(BaseModel):
    id: str
    preset: str | None  # the named model (`--llm`); null for a `--model` file
    n_ctx: int
    busy: bool  # no request could start now: every sequence is taken, or some wait
    waiting: int
    max_waiting: int
    sequences: int  # answers written at once, decoded together
    replicas: int  # model replicas behind the queue (1 without a cluster)
    generating: int  # requests being answered now
    answer_gate: AnswerGate


class EmbedderState(BaseModel):
    id: str
    dimension: int
    max_tokens: int


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    dimension: int | None
    store_mode: Literal["text", "vector"] | None
    store_index: IndexKind | None = Field(
        description="how the store is scanned (--store-index); null while it is unavailable"
    )
    embedding_model: str | None
    items: int
    max_items: int | None
    remaining: int | None
    llm: LlmState | None
    embedder: EmbedderState | None
    unavailable: dict[str, str] | None = None


class Uploaded(BaseModel):
    status: Literal["success"]
    total: int


class SearchResult(BaseModel):
    id: str
    score: float
    label: str
    text: str
    metadata: dict[str, MetadataValue] | None = None


class SearchResults(BaseModel):
    results: list[SearchResult]
    execution_time: float


class Deleted(BaseModel):
    status: Literal["success"]
    deleted: int
    not_found_ids: list[str]


class Cleared(BaseModel):
    status: Literal["success"]
    message: str


class ExportedItem(BaseModel):
    id: str
    text: str | None = None
    metadata: dict[str, MetadataValue] | None = None
    vector: list[float] | None = None


class Export(BaseModel):
    status: Literal["ok"]
    dimension: int | None
    store_mode: Literal["text", "vector"] | None
    embedding_model: str | None
    item_count: int
    items: list[ExportedItem]
    next_cursor: str | None = None


class AnswerUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class AnswerTiming(BaseModel):
    """Seconds of an answer: reading the prompt, writing the candidates (the
    greedy one, and the sampled ones when they were written), the verifier
    reading them; how many candidates were written."""

    prefill_s: float | None
    candidates_s: float | None
    verify_s: float | None
    candidates: int


class AnswerBody(BaseModel):
    answer: str
    query: str
    model: str
    context_count: int
    sources: list[SearchResult]
    evidence_score: float  # best evidence unit: shared words and closeness in meaning, 0-1
    refusal_probability: float | None  # P(the answer's first token starts a refusal)
    # the verifier's probability that the answer is right (for a decline: that
    # the best answer written was; null when no verifier read it)
    answerable_probability: float | None = None
    usage: AnswerUsage | None = None
    timing: AnswerTiming | None = None  # where the model's time went (null: not asked)
