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
from flask_app.api.http.extensions import answer_config_of, collections_of, services_of
from flask_app.api.openai import errors
from flask_app.api.openai.schemas import EDGE_STORE, ChatRequest, RagOptions
from flask_app.inference.llm import ChatMessage, Sampling
from flask_app.rag import prompts
from flask_app.rag.answer import Grounding, ground
from flask_app.rag.retrieval import StoredCollection


@dataclass(frozen=True)
class GroundedQuestion:
    question: rag.Question
    grounding: Grounding
    sources: list[dict[str, Any]]  # as returned in `rag.sources`


def ground_chat(chat: ChatRequest, options: RagOptions, sampling: Sampling) -> GroundedQuestion:
    """Retrieve and select the evidence for the last user message (no model wait yet)."""
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
    config = answer_config_of(current_app)
    if options.collection == EDGE_STORE:
        store = services.store.edge()
        if store.info().dimension is None:
            return GroundedQuestion(question, Grounding.nothing(), [])
        vector = rag.query_vector(store, question, services.embedder)
        grounding = ground(
            services.llm,
            StoredCollection(store, vector, embedder=services.embedder),
            question,
            config,
        )
        sources = [
            {"id": h.id, "text": h.text, "score": round(h.score, 4), "metadata": h.metadata}
            for h in grounding.sources
        ]
        return GroundedQuestion(question, grounding, sources)
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
        return GroundedQuestion(question, Grounding.nothing(), [])
    grounding = ground(services.llm, retriever, question, config)
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
    return GroundedQuestion(question, grounding, sources)


def _pieces_by_source(grounding: Grounding) -> list[str]:
    """The evidence shown to the model from each source, in source order."""
    return [
        " … ".join(p.text for p in grounding.pieces if p.passage == i)
        for i in range(len(grounding.sources))
    ]
