"""Grounded chat: `POST /v1/chat/completions` with the extension field
`rag` (the openai client sends it with `extra_body={"rag": {...}}`) answers
the last user message from a collection through the shared pipeline (same
retrieval, evidence, refusal gates as `/answer`), and returns the passages the
answer rests on in the extension field `rag.sources` of the completion (and
of the last chunk when streamed).

    "rag": {"collection": "ops/runbooks" | "moorcheh-edge", "top_k": 5,
            "principals": ["group:sre"]}  # principals: enforced collections
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import current_app

from flask_app import rag
from flask_app.api.http.disconnect import client_gone_probe
from flask_app.api.http.extensions import collections_of, services_of
from flask_app.api.openai import errors
from flask_app.api.openai.schemas import EDGE_STORE, ChatRequest, RagOptions
from flask_app.inference.llm import ChatMessage, Sampling
from flask_app.rag import answer as rag_answer
from flask_app.rag import prompts
from flask_app.rag.answer import AnswerConfig, AnswerStream, Grounding
from flask_app.rag.retrieval import Retriever, StoredCollection


@dataclass(frozen=True)
class GroundedAnswer:
    question: rag.Question
    stream: AnswerStream
    sources: list[dict[str, Any]]  # as returned in `rag.sources`


def grounded_answer(
    chat: ChatRequest, options: RagOptions, sampling: Sampling, config: AnswerConfig
) -> GroundedAnswer:
    """The last user message through the one answer path, over the collection
    `options` name, with the sources the `rag` extension reports."""
    messages = chat.messages
    if messages[-1].role != "user":
        raise errors.invalid("messages: a grounded chat ends with a user message", "messages")
    styles = [m.content for m in messages if m.role in ("system", "developer")]
    history: list[ChatMessage] = [
        {"role": "user" if m.role == "user" else "assistant", "content": m.content}
        for m in messages[:-1]
        if m.role in ("user", "assistant")
    ]
    form = prompts.AnswerForm(
        system=prompts.system_prompt(" ".join(styles) if styles else prompts.DEFAULT_STYLE)
    )
    question = rag.Question(
        query=messages[-1].content,
        top_k=options.top_k,
        chat_history=history,
        sampling=sampling,
        form=form,
    )
    services = services_of(current_app)

    def start(retriever: Retriever | None) -> AnswerStream:
        return rag_answer.answer(
            services.llm, retriever, question, config, abandoned=client_gone_probe()
        )

    if options.collection == EDGE_STORE:
        store = services.store.edge()
        if store.info().dimension is None:
            return GroundedAnswer(question, start(None), [])
        vector = rag.query_vector(store, question, services.embedder)
        stream = start(StoredCollection(store, vector, embedder=services.embedder))
        grounding = stream.grounding
        sources = [
            {"id": h.id, "text": h.text, "score": round(h.score, 4), "metadata": h.metadata}
            for h in grounding.sources
        ]
        return GroundedAnswer(question, stream, sources)
    collections = collections_of(current_app)
    record = collections.find(options.collection)
    if record is None:
        raise errors.OpenAIError(
            404,
            f"rag.collection: no collection {options.collection!r} "
            f'(use "<namespace>/<collection>" or "{EDGE_STORE}")',
            "invalid_request_error",
            "rag.collection",
            "not_found",
        )
    if collections.needs_principals(record, options.principals):
        raise errors.invalid(
            "rag.principals is required for collections with enforced access control",
            "rag.principals",
        )
    files = collections.visible_files(record, options.principals)
    spans = collections.catalog.spans_of([f.file_id for f in files])
    retriever = collections.retriever(record, files, spans, question)
    if retriever is None:
        return GroundedAnswer(question, start(None), [])
    stream = start(retriever)
    grounding = stream.grounding
    by_id = {f.file_id: f for f in files}
    sources = []
    for hit, piece in zip(grounding.sources, _pieces_by_source(grounding), strict=True):
        file_id = str((hit.metadata or {}).get("file_id", ""))
        record_of = by_id.get(file_id)
        sources.append(
            {
                "id": hit.id,
                "text": piece,
                "score": round(hit.score, 4),
                "file_id": file_id,
                "path": record_of.path if record_of else None,
            }
        )
    return GroundedAnswer(question, stream, sources)


def _pieces_by_source(grounding: Grounding) -> list[str]:
    """The evidence shown to the model from each source, in source order."""
    return [
        " … ".join(p.text for p in grounding.pieces if p.passage == i)
        for i in range(len(grounding.sources))
    ]
