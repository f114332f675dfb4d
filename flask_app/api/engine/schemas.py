"""The Engine surface's bodies as models, for the OpenAPI document: requests
(the limits are `requests`' own constants; `requests` keeps the hand-written
checks because spec §3 fixes their messages and order, and a test checks that
every body these models accept, the checks accept too) and responses (a test
validates real responses against them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flask_app.api.engine import requests as limits
from flask_app.file_collections import names
from flask_app.index_kinds import IndexKind
from flask_app.ingest.extract import CONTENT_TYPES

MetadataValue = str | float | bool
Principal = Annotated[
    str,
    Field(min_length=1, max_length=names.PRINCIPAL_MAX, pattern=names.PRINCIPAL_PATTERN),
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueryImage(_Request):
    media_type: Literal["image/png", "image/jpeg", "image/webp", "image/gif"]
    data: str = Field(
        description=f"base64 of at most {limits.IMAGE_MAX_BYTES} bytes",
        pattern=r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        max_length=(limits.IMAGE_MAX_BYTES + 2) // 3 * 4,
    )


class HistoryMessage(_Request):
    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=limits.HISTORY_MESSAGE_MAX)


class AnswerRequest(_Request):
    query: str = Field(min_length=1, max_length=limits.QUERY_MAX, pattern=r"\S")
    effort: Literal["medium", "high"] = "medium"
    sources: Literal["all", "cited", "none"] = "all"
    instructions: str | None = Field(default=None, max_length=limits.INSTRUCTIONS_MAX)
    query_image: QueryImage | None = None
    history: list[HistoryMessage] = Field(default=[], max_length=limits.HISTORY_MAX)
    filter: str | None = Field(default=None, max_length=limits.FILTER_MAX)
    principals: list[Principal] | None = Field(
        default=None, min_length=1, max_length=names.PRINCIPALS_MAX
    )


class SpanRef(_Request):
    """`start` < `end` and `end` - `start` <= 32000 (code points)."""

    file_id: str = Field(min_length=1)
    unit: Literal["chars"] = "chars"
    start: int = Field(ge=0)
    end: int = Field(ge=1)


class ReadSpansRequest(_Request):
    spans: list[SpanRef] = Field(min_length=1, max_length=limits.MAX_SPANS)
    context_chars: int = Field(default=0, ge=0, le=limits.MAX_CONTEXT_CHARS)
    include: list[Literal["text"]] = ["text"]
    principals: list[Principal] | None = Field(
        default=None, min_length=1, max_length=names.PRINCIPALS_MAX
    )


class CollectionRequest(_Request):
    description: str | None = Field(default=None, max_length=1000)
    access_control: Literal["open", "enforced"] | None = None
    index: IndexKind | None = Field(
        default=None,
        description="edgerag extension: how the chunks are scanned — f32 (exact, the default), "
        "int8 or binary (sign bits), the last two rescored exactly; changeable at any time",
    )


class FileUpload(_Request):
    path: str = Field(min_length=1, max_length=1024)
    content_type: str = Field(json_schema_extra={"enum": list(CONTENT_TYPES)})
    text: str | None = Field(default=None, description="for text types")
    data: str | None = Field(default=None, description="base64, for application/pdf")
    metadata: dict[str, MetadataValue] = Field(default={}, max_length=64)
    principals: list[Principal] = Field(default=[], max_length=names.PRINCIPALS_MAX)


# --- responses ------------------------------------------------------------------------


class EngineErrorDetail(BaseModel):
    code: str
    message: str
    retryable: bool
    details: dict[str, Any]


class EngineErrorBody(BaseModel):
    request_id: str
    error: EngineErrorDetail


class NamespaceSummary(BaseModel):
    name: str
    created_at: str


class Namespace(NamespaceSummary):
    request_id: str


class Namespaces(BaseModel):
    request_id: str
    namespaces: list[NamespaceSummary]


class Collection(BaseModel):
    namespace: str
    name: str
    description: str
    access_control: Literal["open", "enforced"]
    status: Literal["empty", "indexing", "ready"]
    file_count: int
    ready_file_count: int
    processing_file_count: int
    failed_file_count: int
    created_at: str
    updated_at: str
    index: IndexKind = Field(description="edgerag extension: how the chunks are scanned")


class CollectionBody(Collection):
    request_id: str


class Collections(BaseModel):
    request_id: str
    collections: list[Collection]
    next_page_token: str | None


class Progress(BaseModel):
    chunks_done: int
    chunks_total: int


class FileError(BaseModel):
    code: str
    message: str


class File(BaseModel):
    file_id: str
    path: str
    content_type: str
    size_bytes: int
    char_count: int | None
    metadata: dict[str, MetadataValue]
    principals: list[str]
    status: Literal["processing", "ready", "failed"]
    created_at: str
    # edgerag's: sha256 of the uploaded bytes (null for files stored before it
    # was kept), what `edgerag add` compares to skip unchanged files
    sha256: str | None = None
    chunk_count: int = 0  # edgerag's: chunks indexed (known once ready)
    progress: Progress | None = None
    error: FileError | None = None


class FileBody(File):
    request_id: str


class Files(BaseModel):
    request_id: str
    files: list[File]
    next_page_token: str | None


class Span(BaseModel):
    file_id: str
    unit: Literal["chars"]
    start: int
    end: int


class Source(BaseModel):
    ref: str
    span: Span
    path: str
    content_type: str
    score: float
    cited: bool


class Credits(BaseModel):
    credits: int


class AnswerResponse(BaseModel):
    request_id: str
    answer: str
    effort: Literal["medium", "high"]
    sources: list[Source]
    image_description: str | None
    # edgerag's: how likely the documents hold the answer (the gate's probe,
    # else the judge's P(yes); null when neither was read)
    answerable_probability: float | None = None
    usage: Credits


class ResearchRunQueued(BaseModel):
    request_id: str
    run_id: str
    status: Literal["queued"]


class ResearchRun(BaseModel):
    request_id: str
    run_id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    created_at: str
    completed_at: str | None
    result: AnswerResponse | None = None  # when succeeded
    error: EngineErrorDetail | None = None  # when failed


class SpanText(Span):
    path: str
    content_type: str
    text: str
    context_before: str
    context_after: str


class ReadSpansResponse(BaseModel):
    request_id: str
    spans: list[SpanText]
    usage: Credits


class Info(BaseModel):
    doc_version: str
    models: dict[str, Any]
    answer: dict[str, Any]
    search: dict[str, str]  # edgerag's: simcore's SIMD level and popcount kernel
    read_spans: dict[str, int]
    filter: dict[str, list[str]]


class AnswerDelta(BaseModel):
    """A streamed `delta` event of `:answer`: the model's text as generated."""

    text: str
