"""`:answer`, `:readSpans` and `/info` (spec §2, §4, §5): the shared
pipeline over the caller's visible files, citations by construction."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app import rag, simcore
from flask_app.api.engine import citations, errors, requests
from flask_app.api.engine.errors import MAX_REQUEST_BYTES, EngineError, invalid
from flask_app.api.engine.filters import filter_condition
from flask_app.api.engine.resources import collection_or_404
from flask_app.api.engine.schemas import (
    AnswerDelta,
    AnswerRequest,
    AnswerResponse,
    EngineErrorBody,
    Info,
    ReadSpansRequest,
    ReadSpansResponse,
)
from flask_app.api.http.disconnect import client_gone_probe
from flask_app.api.http.errors import as_service_error
from flask_app.api.http.extensions import (
    answer_config_of,
    collections_of,
    gate_of,
    services_of,
)
from flask_app.api.http.json_body import json_object
from flask_app.api.http.openapi import Operation, operation
from flask_app.api.http.request_ids import request_id
from flask_app.api.http.sse import event_stream, sse
from flask_app.file_collections.names import PRINCIPALS_MAX
from flask_app.inference.llm import ChatMessage
from flask_app.rag import answer as rag_answer
from flask_app.rag import evidence, prompts
from flask_app.rag.answer import AnswerStream, Grounding
from flask_app.store.catalog import CollectionRecord, FileRecord

blueprint = Blueprint("engine_answer", __name__)
TAG = "engine"

TIME_LIMIT_S = 45.0
NOT_FOUND_ANSWER = "The collection does not contain this information."
# effort → (passages retrieved, evidence units kept, credits)
EFFORT = {"medium": (12, 3, 1), "high": (24, 6, 4)}


def _label(position: int, passage_id: str, metadata: dict[str, object] | None) -> str:
    return f"Document {position + 1} ({citations.ref(position)}):"


def visible_files(
    collection: CollectionRecord, principals: list[str] | None, text_filter: str | None
) -> list[FileRecord]:
    """Ready files the caller may read and the filter (Engine syntax) keeps."""
    condition = filter_condition(collection.namespace, collection.name, text_filter)
    return collections_of(current_app).visible_files(collection, principals, condition)


def require_principals(collection: CollectionRecord, principals: list[str] | None) -> None:
    if collections_of(current_app).needs_principals(collection, principals):
        raise invalid(
            "principals is required for collections with enforced access control.", "principals"
        )


def _ready(collection: CollectionRecord) -> None:
    if collection.file_count == 0:
        raise EngineError(409, "collection_empty", "The collection has no files.")
    if collection.ready_file_count == 0:
        if collection.processing_file_count:
            raise EngineError(
                409,
                "collection_not_ready",
                "The collection is still being indexed. Retry shortly.",
                retryable=True,
            )
        raise EngineError(
            409,
            "collection_not_ready",
            "No file in the collection could be indexed. Fix the failed files and retry.",
        )


def _source(
    position: int,
    grounding: Grounding,
    files: dict[str, FileRecord],
    spans: dict[str, list[tuple[int, int]]],
    cited_by: str | None,
    question: str,
) -> dict[str, Any]:
    """A source; when cited (`cited_by` is the answer), its span is the
    sentence of the piece that holds the answer's words."""
    hit, piece = grounding.sources[position], grounding.pieces[position]
    file_id, n = hit.id.rsplit("#", 1)
    chunk_start = spans[file_id][int(n)][0]
    record = files[file_id]
    start, end = piece.focus_start, piece.focus_end
    if cited_by is not None:
        start, end = evidence.cited_sentence(cited_by, question, hit.text, piece)
    return {
        "ref": citations.ref(position),
        "span": {
            "file_id": file_id,
            "unit": "chars",
            "start": chunk_start + start,
            "end": chunk_start + end,
        },
        "path": record.path,
        "content_type": record.content_type,
        "score": round(min(1.0, max(0.0, hit.score)), 4),
        "cited": cited_by is not None,
    }


@blueprint.post("/namespaces/<ns>/collections/<target>")
@operation(
    summary="Collection methods",
    tag=TAG,
    paths=(
        (
            "/namespaces/{ns}/collections/{name}:answer",
            Operation(
                summary="Answer a question with citations to exact spans of the files",
                description="With `Accept: text/event-stream`: `delta` events "
                '(`{"text"}`, the model\'s text as generated, markers unchecked), then one '
                "`done` event whose data is the JSON body (checked markers, sources), or "
                "an `error` event with the error envelope.",
                tag=TAG,
                body=AnswerRequest,
                response=AnswerResponse,
                streams=True,
                events=(
                    ("delta", AnswerDelta),
                    ("done", AnswerResponse),
                    ("error", EngineErrorBody),
                ),
                error=EngineErrorBody,
            ),
        ),
        (
            "/namespaces/{ns}/collections/{name}:readSpans",
            Operation(
                summary="Read spans of files back (e.g. cited ones)",
                tag=TAG,
                body=ReadSpansRequest,
                response=ReadSpansResponse,
                error=EngineErrorBody,
            ),
        ),
    ),
)
def collection_method(ns: str, target: str) -> ResponseReturnValue:
    name, sep, verb = target.partition(":")
    if not sep:
        raise EngineError(405, "method_not_allowed", "Method not allowed.")
    if verb == "answer":
        return answer(ns, name)
    if verb == "readSpans":
        return read_spans(ns, name)
    raise EngineError(404, "not_found", f"Not found: method {verb}")


def check_answerable(
    ns: str, name: str, ask: requests.AnswerRequest
) -> tuple[CollectionRecord, list[FileRecord]]:
    """The collection and the files `ask` may read, after every check of the
    spec's order that comes before execution (404/403, principals, filter,
    409 empty / not ready, image, model)."""
    collection = collection_or_404(ns, name)
    require_principals(collection, ask.principals)
    files = visible_files(collection, ask.principals, ask.filter)
    _ready(collection)
    if ask.image is not None:
        raise invalid(
            "query_image needs a vision model and this server has none (start it with a "
            "multimodal GGUF and its projector to describe images).",
            "query_image",
        )
    if services_of(current_app).llm is None:
        raise rag.LLMNotConfigured()
    return collection, files


def answer(ns: str, name: str) -> ResponseReturnValue:
    started = time.monotonic()
    ask = requests.answer_request(json_object(request))
    stream, reply = start_answer(
        ns, name, ask, request_id(), deadline=started + TIME_LIMIT_S, abandoned=client_gone_probe()
    )
    if "text/event-stream" in request.headers.get("Accept", ""):
        return event_stream(_events(stream, reply), stream.close)
    with stream:
        text = "".join(stream)
    return jsonify(reply.body(text, stream.outcome.declined, stream.outcome.confidence))


def start_answer(
    ns: str,
    name: str,
    ask: requests.AnswerRequest,
    rid: str,
    *,
    deadline: float,
    abandoned: Callable[[], bool] | None,
    credits: int | None = None,
) -> tuple[AnswerStream, _Reply]:
    """Check, retrieve, ground and start the model on `ask` (raises what
    `check_answerable` raises, LLMOverloaded, LLMTimeout past `deadline`, a
    monotonic time); the reply turns the model's text into the body."""
    collection, files = check_answerable(ns, name, ask)
    services = services_of(current_app)
    collections = collections_of(current_app)
    depth, units, effort_credits = EFFORT[ask.effort]
    spans = collections.catalog.spans_of([f.file_id for f in files])
    style = ask.instructions if ask.instructions else prompts.DEFAULT_STYLE
    form = prompts.AnswerForm(
        system=prompts.system_prompt(style), label=_label, refusal=NOT_FOUND_ANSWER
    )
    history: list[ChatMessage] = [{"role": m["role"], "content": m["content"]} for m in ask.history]
    question = rag.Question(query=ask.query, top_k=depth, chat_history=history, form=form)
    config = replace(
        answer_config_of(current_app), evidence_units=units, piece_blocks=True, evidence_only=True
    )
    retriever = collections.retriever(collection, files, spans, question)
    stream = rag_answer.answer(
        services.llm,
        retriever,
        question,
        config,
        abandoned=abandoned,
        timeout=max(0.1, deadline - time.monotonic()),
    )
    grounding = stream.grounding
    by_id = {f.file_id: f for f in files}
    used = effort_credits if credits is None else credits
    return stream, _Reply(rid, ask, grounding, by_id, spans, used)


@dataclass(frozen=True)
class _Reply:
    """What the response body is made of once the model's text is known."""

    request_id: str
    ask: requests.AnswerRequest
    grounding: Grounding
    files: dict[str, FileRecord]
    spans: dict[str, list[tuple[int, int]]]
    credits: int

    def body(
        self, text: str, refused: bool, answerable_probability: float | None = None
    ) -> dict[str, Any]:
        """The response: `answerable_probability` is the gate's (probe or judge)
        probability that the documents hold the answer, null when not read."""
        ask, grounding = self.ask, self.grounding
        refused = refused or prompts.is_refusal(text)
        if refused:
            text = NOT_FOUND_ANSWER
        passages = len(grounding.sources)

        def supported() -> list[int]:
            holding = evidence.supporting(text, ask.query, [p.text for p in grounding.pieces])
            if holding:
                return holding[:2]
            top = grounding.best
            best = next(
                (
                    i
                    for i, p in enumerate(grounding.pieces)
                    if top is not None and p.passage == top.passage and p.start <= top.start < p.end
                ),
                0,
            )
            return [best] if passages else []

        mode = "none" if refused else ask.sources
        text, cited = citations.finalize(text, passages, mode if passages else "none", supported)
        said = citations.without_markers(text)
        listed: list[int] = []
        if ask.sources != "none":
            listed = list(cited)
            if ask.sources == "all":
                listed += [i for i in range(passages) if i not in cited]
        return {
            "request_id": self.request_id,
            "answer": text,
            "effort": ask.effort,
            "sources": [
                _source(
                    i, grounding, self.files, self.spans, said if i in cited else None, ask.query
                )
                for i in listed
            ],
            "image_description": None,
            "answerable_probability": answerable_probability,
            "usage": {"credits": self.credits},
        }


def _events(stream: AnswerStream, reply: _Reply) -> Iterator[bytes]:
    """`delta` events with the model's text as it comes (markers unchecked),
    then `done` with the response body (checked markers, sources), or `error`
    with the error envelope."""
    parts: list[str] = []
    try:
        for delta in stream:
            parts.append(delta)
            yield sse("delta", {"text": delta})
    except Exception as exc:
        yield sse("error", errors.stream_error(as_service_error(exc), reply.request_id))
        return
    finally:
        stream.close()
    yield sse(
        "done",
        reply.body("".join(parts), stream.outcome.declined, stream.outcome.confidence),
    )


def read_spans(ns: str, name: str) -> ResponseReturnValue:
    spans, context, principals = requests.read_spans_request(json_object(request))
    collection = collection_or_404(ns, name)
    require_principals(collection, principals)
    visible = {f.file_id: f for f in visible_files(collection, principals, None)}
    out = []
    for i, span in enumerate(spans):
        record = visible.get(span.file_id)
        if record is None:
            raise EngineError(404, "not_found", f"Not found: file {span.file_id}")
        text = collections_of(current_app).catalog.text(span.file_id) or ""
        if span.end > len(text):
            raise invalid(
                f"spans[{i}] ends after the file's {len(text)} characters.", f"spans[{i}]"
            )
        out.append(
            {
                "file_id": span.file_id,
                "unit": "chars",
                "start": span.start,
                "end": span.end,
                "path": record.path,
                "content_type": record.content_type,
                "text": text[span.start : span.end],
                "context_before": text[max(0, span.start - context) : span.start],
                "context_after": text[span.end : span.end + context],
            }
        )
    return jsonify({"request_id": request_id(), "spans": out, "usage": {"credits": 0}})


@blueprint.get("/info")
@operation(summary="Efforts, limits and the filter language", tag=TAG, response=Info)
def info() -> Response:
    services = services_of(current_app)
    llm, embedder = services.llm, services.embedder
    return jsonify(
        {
            "doc_version": "0.1.0-preview",
            "models": {
                "llm": None
                if llm is None
                else {
                    "id": llm.model_id,
                    "preset": llm.preset,
                    "answer_gate": gate_of(current_app),
                },
                "embedder": None if embedder is None else {"id": embedder.model_id},
            },
            "answer": {
                "efforts": list(requests.EFFORTS),
                "default_effort": "medium",
                "sources_modes": list(requests.SOURCES_MODES),
                "default_sources": "all",
                "time_limit_seconds": int(TIME_LIMIT_S),
                "limits": {
                    "max_request_bytes": MAX_REQUEST_BYTES,
                    "query_max_chars": requests.QUERY_MAX,
                    "instructions_max_chars": requests.INSTRUCTIONS_MAX,
                    "history_max_messages": requests.HISTORY_MAX,
                    "history_message_max_chars": requests.HISTORY_MESSAGE_MAX,
                    "query_image_max_bytes": requests.IMAGE_MAX_BYTES,
                    "query_image_media_types": list(requests.IMAGE_TYPES),
                    "filter_max_chars": requests.FILTER_MAX,
                    "principals_max": PRINCIPALS_MAX,
                },
            },
            "search": {"simd_level": simcore.simd_level(), "popcount": simcore.popcount_kernel()},
            "read_spans": {
                "max_spans": requests.MAX_SPANS,
                "max_span_chars": requests.MAX_SPAN_CHARS,
                "max_context_chars": requests.MAX_CONTEXT_CHARS,
            },
            "filter": {
                "fields": ["path", "content_type", "file_id", "metadata.<key>"],
                "operators": ["=", "!=", "<", "<=", ">", ">=", "IN"],
                "logical": ["AND", "OR", "NOT"],
            },
        }
    )
