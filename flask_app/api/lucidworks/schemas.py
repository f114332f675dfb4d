"""Request bodies of the Lucidworks surface, validated with pydantic; a
failure becomes the exact message the spec gives for that field."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    field_validator,
)

from flask_app.api.http.json_body import BadRequest
from flask_app.file_collections.names import PRINCIPAL_MAX, PRINCIPAL_PATTERN, PRINCIPALS_MAX

# an Engine principal, as its collections' access control reads it
Principal = Annotated[
    StrictStr,
    StringConstraints(pattern=PRINCIPAL_PATTERN, min_length=1, max_length=PRINCIPAL_MAX),
]
MAX_BATCH = 32
MAX_DOCUMENTS = 100  # per batch item
MAX_TEXT_CHARS = 20_000  # a question or a text to embed

Number = StrictInt | float
M = TypeVar("M", bound=BaseModel)


class _Lenient(BaseModel):
    """Unknown keys are ignored: Lucidworks clients mix in provider fields."""

    model_config = ConfigDict(extra="ignore", strict=True)


class Document(_Lenient):
    body: StrictStr = Field(min_length=1)
    source: StrictStr = Field(min_length=1)
    title: StrictStr | None = None
    date: StrictStr | StrictInt | None = None  # ISO-8601 or epoch, passed on as given


class RagItem(_Lenient):
    text: StrictStr = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    documents: list[Document] = Field(default_factory=list, max_length=MAX_DOCUMENTS)

    @field_validator("text")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("blank")
        return value


class TextItem(_Lenient):
    text: StrictStr = Field(min_length=1, max_length=MAX_TEXT_CHARS)


def _uuid(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValueError("not a UUID") from None


class UseCaseConfig(_Lenient):
    memoryUuid: StrictStr | None = None
    answerNotFoundMessage: StrictStr | None = Field(default=None, min_length=1, max_length=500)
    # True unless sent: the evidence sentences answer better and faster than
    # whole documents (docs/answer-quality.md); false sends documents whole
    extractRelevantContent: StrictBool = True
    dataType: Literal["query", "passage"] | None = None
    # edgerag extension (spec §10): items without documents are answered from
    # the `topK` best passages of this Engine collection ("namespace/collection")
    collection: StrictStr | None = Field(default=None, min_length=3, max_length=130)
    topK: StrictInt = Field(default=5, ge=1, le=MAX_DOCUMENTS)
    principals: list[Principal] | None = Field(
        default=None, min_length=1, max_length=PRINCIPALS_MAX
    )

    @field_validator("memoryUuid")
    @classmethod
    def is_uuid(cls, value: str | None) -> str | None:
        return _uuid(value)


class ModelConfig(_Lenient):
    """Generation fields are honoured; provider fields (apiKey, azure*, google*)
    are accepted and ignored, never stored or logged."""

    temperature: Number | None = Field(default=None, ge=0.0, le=2.0)
    topP: Number | None = Field(default=None, ge=0.0, le=1.0)
    topK: StrictInt | None = Field(default=None, ge=-1, le=1000)
    presencePenalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    frequencyPenalty: Number | None = Field(default=None, ge=-2.0, le=2.0)
    maxTokens: StrictInt | None = Field(default=None, ge=1, le=4096)
    vectorQuantizationMethod: Literal["min-max", "max-scale"] | None = None
    dimReductionSize: StrictInt | None = Field(default=None, ge=1)


SECRET_FIELDS = ("apiKey", "azureDeployment", "azureEndpoint", "googleProjectId", "googleRegion")


class RagRequest(_Lenient):
    batch: list[RagItem] = Field(min_length=1, max_length=MAX_BATCH)
    useCaseConfig: UseCaseConfig = Field(default_factory=UseCaseConfig)
    modelConfig: ModelConfig = Field(default_factory=ModelConfig)


class TextRequest(_Lenient):
    batch: list[TextItem] = Field(min_length=1, max_length=MAX_BATCH)
    useCaseConfig: UseCaseConfig = Field(default_factory=UseCaseConfig)
    modelConfig: ModelConfig = Field(default_factory=ModelConfig)


def _message(err: Any) -> str:
    loc = [str(p) for p in err["loc"]]
    if not loc:
        return f"body: {err['msg']}"
    if loc[0] == "batch":
        if len(loc) == 1:
            return f"batch must contain between 1 and {MAX_BATCH} items"
        i = loc[1]
        if len(loc) >= 3 and loc[2] == "text":
            if err["type"] in ("missing", "string_too_short", "value_error"):
                return f"batch[{i}].text is required"
            return f"batch[{i}].text: {err['msg']}"
        if len(loc) >= 5 and loc[2] == "documents" and loc[4] in ("body", "source"):
            return f"batch[{i}].documents[{loc[3]}].body and source are required"
        if len(loc) >= 3 and loc[2] == "documents":
            where = f"batch[{i}].documents" + "".join(f"[{p}]" for p in loc[3:4])
            rest = ".".join(loc[4:])
            return f"{where}{'.' + rest if rest else ''}: {err['msg']}"
        return f"batch[{i}]: {err['msg']}"
    if loc[0] == "modelConfig" and len(loc) >= 2:
        return f"modelConfig.{loc[1]} is out of range"
    if loc[:2] == ["useCaseConfig", "memoryUuid"]:
        return "useCaseConfig.memoryUuid must be a UUID"
    return f"{'.'.join(loc)}: {err['msg']}"


def parse(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise BadRequest(_message(exc.errors(include_url=False)[0])) from None


def without_secrets(body: dict[str, Any]) -> dict[str, Any]:
    """The body minus provider credentials (before it is stored as a job)."""
    config = body.get("modelConfig")
    if not isinstance(config, dict):
        return body
    kept = {k: v for k, v in config.items() if k not in SECRET_FIELDS}
    return {**body, "modelConfig": kept}


# --- response bodies (the OpenAPI document's schemas; tests validate real responses) ---


class LucidworksError(BaseModel):
    status: int
    error: str
    message: str


class RagTokens(BaseModel):
    promptTokens: int
    completionTokens: int
    totalTokens: int


class RagPrediction(BaseModel):
    tokensUsed: RagTokens
    answer: str
    answerFound: bool
    sources: list[str]
    memoryUuid: str
    response: str
    answerNotFoundMessage: str | None = None


class InputTokens(BaseModel):
    inputTokens: int


class RewrittenQuery(BaseModel):
    response: str
    tokensUsed: RagTokens


class EmbeddingPrediction(BaseModel):
    tokensUsed: InputTokens
    vector: list[float]
    vectorType: Literal["FLOAT", "INT8", "UINT8"]
    warning: str | None = None


class TokenizationPrediction(BaseModel):
    tokens: list[str]
    tokensUsed: InputTokens


class Predictions(BaseModel):
    predictions: list[RagPrediction] | list[RewrittenQuery] | list[EmbeddingPrediction]


class Tokenization(BaseModel):
    predictions: list[TokenizationPrediction]


class Submitted(BaseModel):
    predictionId: str
    status: Literal["SUBMITTED"]


class JobError(BaseModel):
    message: str


class AsyncResult(BaseModel):
    predictionId: str
    status: Literal["SUBMITTED", "READY", "RETRIEVED", "ERROR"]
    predictions: list[RagPrediction] | None = None
    error: JobError | None = None


class PredictionDelta(BaseModel):
    """A streamed `delta` event of the rag use case: text of batch item `index`."""

    index: int
    text: str
