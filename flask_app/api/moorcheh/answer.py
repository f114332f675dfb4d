"""moorcheh-edge RAG answers: POST /answer (JSON) and POST /answer/stream (SSE).

Adapter only: validation here, the pipeline in `flask_app.rag`. Errors found
before streaming are plain JSON 4xx/503; once the stream has started, a failure
is an `error` event and the stream ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app import rag
from flask_app.api.http.disconnect import client_gone_probe
from flask_app.api.http.errors import as_service_error
from flask_app.api.http.extensions import answer_config_of, services_of, settings_of
from flask_app.api.http.json_body import json_object, validate
from flask_app.api.http.openapi import operation
from flask_app.api.http.sse import event_stream, sse
from flask_app.api.moorcheh import errors, scores
from flask_app.api.moorcheh.routes import kiosk_floor, parse_vector, top_k_value
from flask_app.api.moorcheh.schemas import (
    Answer,
    AnswerBody,
    MoorchehError,
    StreamError,
    StreamMeta,
    StreamToken,
)
from flask_app.inference.llm import LLM, ChatMessage, Sampling
from flask_app.rag import answer as rag_answer
from flask_app.rag.answer import AnswerStream, Grounding
from flask_app.rag.retrieval import StoredCollection

blueprint = Blueprint("moorcheh_answer", __name__)

DEFAULT_TEMPERATURE = 0.2


def _question(body: Answer) -> rag.Question:
    vector = None
    if body.query_vector is not None:
        vector = parse_vector(body.query_vector, "query_vector")
    history: list[ChatMessage] = [
        {"role": t.role, "content": t.content} for t in body.chat_history or []
    ]
    return rag.Question(
        query=body.query,
        query_vector=vector,
        top_k=top_k_value(body.top_k),
        min_cosine=kiosk_floor(body.kiosk_mode, body.threshold),
        metadata=body.metadata,
        header_prompt=body.header_prompt,
        footer_prompt=body.footer_prompt,
        chat_history=history,
        sampling=Sampling(
            temperature=DEFAULT_TEMPERATURE if body.temperature is None else body.temperature
        ),
    )


def _start() -> tuple[rag.Question, AnswerStream]:
    """Validate, then the one answer path: retrieval, evidence, a place at
    the model (503 when the queue is full) and the answer's start."""
    question = _question(validate(Answer, json_object(request)))
    services = services_of(current_app)
    if services.llm is None:
        raise rag.LLMNotConfigured()
    collection = services.store.edge()
    retriever = None
    if collection.info().dimension is not None:
        vector = rag.query_vector(collection, question, services.embedder)
        retriever = StoredCollection(
            collection, vector, question.metadata, embedder=services.embedder
        )
    stream = rag_answer.answer(
        services.llm,
        retriever,
        question,
        answer_config_of(current_app),
        abandoned=client_gone_probe(),
    )
    return question, stream


def _sources(grounding: Grounding) -> list[dict[str, Any]]:
    mapping = settings_of(current_app).score_mapping
    return [scores.result(hit, mapping) for hit in grounding.sources]


def _result(
    llm: LLM,
    question: rag.Question,
    grounding: Grounding,
    sources: list[dict[str, Any]],
    answer: AnswerStream,
    text: str,
) -> dict[str, Any]:
    """The answer body (also the stream's `done` data, built after the request
    context is gone: `sources` come rendered). `context_count` and `sources`
    are the passages the model was given, also when it declined; they are 0
    and [] only when nothing was retrieved and the model was not asked."""
    body: dict[str, Any] = {
        "answer": text,
        "query": question.query,
        "model": llm.model_id,
        "context_count": len(sources),
        "sources": sources,
        "evidence_score": round(grounding.evidence_score, 4),
        "refusal_probability": answer.outcome.refusal_probability,
        "answerable_probability": answer.outcome.confidence,
    }
    if grounding.prompt is not None:
        body["usage"] = {
            "prompt_tokens": grounding.prompt.prompt_tokens,
            "completion_tokens": llm.count_tokens(text),
        }
        outcome = answer.outcome
        body["timing"] = {
            "prefill_s": _rounded(outcome.prefill_s),
            "candidates_s": _rounded(outcome.candidates_s),
            "verify_s": _rounded(outcome.verify_s),
            "candidates": outcome.candidates,
        }
    return body


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


@blueprint.post("/answer")
@operation(
    summary="Answer a question from the stored items",
    tag="moorcheh-edge",
    body=Answer,
    response=AnswerBody,
    error=MoorchehError,
)
def answer() -> ResponseReturnValue:
    question, stream = _start()
    llm = services_of(current_app).llm
    assert llm is not None
    with stream:
        text = "".join(stream)
    grounding = stream.grounding
    return jsonify(_result(llm, question, grounding, _sources(grounding), stream, text))


@blueprint.post("/answer/stream")
@operation(
    summary="The answer as server-sent events: meta, token…, done (or error)",
    tag="moorcheh-edge",
    body=Answer,
    media_type="text/event-stream",
    events=(
        ("meta", StreamMeta),
        ("token", StreamToken),
        ("done", AnswerBody),
        ("error", StreamError),
    ),
    error=MoorchehError,
)
def answer_stream() -> ResponseReturnValue:
    # the model taken (or a 503) before the response starts
    question, stream = _start()
    llm = services_of(current_app).llm
    assert llm is not None
    grounding = stream.grounding
    sources = _sources(grounding)
    meta = {
        "model": llm.model_id,
        "context_count": len(grounding.sources),
        "sources": sources,
        "query": question.query,
    }

    def events() -> Iterator[bytes]:
        yield sse("meta", meta)
        parts: list[str] = []
        try:
            for delta in stream:
                parts.append(delta)
                yield sse("token", {"delta": delta})
        except Exception as exc:
            yield sse("error", errors.stream_error(as_service_error(exc)))
            return
        finally:
            stream.close()  # also runs when the client disconnects (GeneratorExit)
        yield sse("done", _result(llm, question, grounding, sources, stream, "".join(parts)))

    # the model is held from here: closing the response releases it
    return event_stream(events(), stream.close)
