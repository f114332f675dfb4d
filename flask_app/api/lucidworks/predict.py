"""One RAG prediction request, end to end, outside any HTTP request (the
sync route, the stream and the async worker all call it): each batch item is
answered from its own documents through the shared pipeline, in input order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flask_app import rag
from flask_app.api.lucidworks import output
from flask_app.api.lucidworks.schemas import ModelConfig, RagRequest
from flask_app.inference.llm import ChatMessage, Sampling
from flask_app.rag import answer as rag_answer
from flask_app.rag import evidence
from flask_app.rag.answer import AnswerConfig, Grounding
from flask_app.rag.memory import Conversations, Turn, as_history, scoped
from flask_app.rag.retrieval import Document, RequestDocuments
from flask_app.services import Services

# Documents per item that evidence is looked for in (more are ranked first).
MAX_RANKED = 20


class InputTooLong(rag.RagError):
    code = "context_overflow"

    def __init__(self) -> None:
        super().__init__("Input exceeds the model context length")


@dataclass(frozen=True)
class Surface:
    """What a prediction needs: the models, the answer settings, the memory."""

    services: Services
    config: AnswerConfig
    conversations: Conversations


def sampling(config: ModelConfig) -> Sampling:
    # Fields left out take the local defaults (Sampling(): temperature 0.2),
    # not Lucidworks' hosted 0.7 / topP 1.0, at which the 0.5B model drifts.
    d = Sampling()
    return Sampling(
        temperature=d.temperature if config.temperature is None else float(config.temperature),
        top_p=d.top_p if config.topP is None else float(config.topP),
        top_k=d.top_k if config.topK is None else (config.topK if config.topK > 0 else None),
        presence_penalty=float(config.presencePenalty or 0.0),
        frequency_penalty=float(config.frequencyPenalty or 0.0),
    )


@dataclass(frozen=True)
class _Doc:
    body: str
    source: str
    title: str | None = None
    date: str | int | None = None


def _documents(item: Any, turns: Sequence[Turn]) -> list[_Doc]:
    """The item's documents; a follow-up sent without documents is answered
    from the conversation's earlier answers (each citing what it cited), so
    it is grounded and gated like any other answer."""
    if item.documents:
        return [_Doc(d.body, d.source, d.title, d.date) for d in item.documents]
    return [
        _Doc(f"{t.question} {t.answer}", t.sources[0] if t.sources else "", "earlier answer")
        for t in turns
        if t.sources  # a not-found turn holds no evidence
    ]


def _cited(
    parsed: output.Parsed, question: str, grounding: Grounding, documents: Sequence[Any]
) -> list[int]:
    """The documents an answer rests on, checked against the documents the
    model was shown: those named under SOURCES: that hold the answer's own
    words (the words not already in the question); when it named none of
    them, the shown documents that hold them. An answer whose words are in
    no document keeps what the model named, or else cites the document of
    the best evidence."""
    if not parsed.found:
        return []
    ids = [int(hit.id) for hit in grounding.sources]
    bodies = [documents[i].body for i in ids]
    support = [ids[j] for j in evidence.supporting(parsed.answer, question, bodies)]
    if support:
        return [i for i in parsed.indices if i in support] or support
    if parsed.indices or grounding.best is None or not ids:
        return parsed.indices
    return [ids[grounding.best.passage]]


# (batch index, answer-text delta) as the answer streams
OnDelta = Callable[[int, str], None]


def predict_rag(
    surface: Surface,
    request: RagRequest,
    *,
    on_delta: OnDelta | None = None,
    abandoned: Callable[[], bool] | None = None,
    tenant: str = "",
) -> dict[str, Any]:
    """The `{"predictions": [...]}` body for a validated RAG request; the
    conversation memory is `tenant`'s (see `auth.tenant`)."""
    llm = surface.services.llm
    if llm is None:
        raise rag.LLMNotConfigured()
    use = request.useCaseConfig
    memory = use.memoryUuid or str(uuid.uuid4())
    not_found = use.answerNotFoundMessage or output.DEFAULT_NOT_FOUND
    stored_as = scoped(memory, tenant)
    remembered = surface.conversations.turns(stored_as)
    history: list[ChatMessage] = as_history(remembered)
    config = replace(
        surface.config,
        evidence_only=use.extractRelevantContent,
        max_tokens=request.modelConfig.maxTokens or surface.config.max_tokens,
    )
    if config.max_tokens >= llm.n_ctx:
        raise InputTooLong()
    form = output.answer_form()
    draw = sampling(request.modelConfig)
    predictions: list[dict[str, Any]] = []
    turns: list[Turn] = []
    for index, item in enumerate(request.batch):
        docs = _documents(item, remembered)
        documents = [
            Document(d.body, {"title": d.title, "date": d.date, "source": d.source}) for d in docs
        ]
        question = rag.Question(
            query=item.text,
            top_k=min(len(documents), MAX_RANKED),
            chat_history=history,
            sampling=draw,
            form=form,
        )
        retriever = RequestDocuments(documents, surface.services.embedder)
        try:
            stream = rag_answer.answer(llm, retriever, question, config, abandoned=abandoned)
        except rag.ContextOverflow:
            raise InputTooLong() from None
        grounding = stream.grounding
        deltas = output.AnswerDeltas()
        parts: list[str] = []
        with stream:
            for delta in stream:
                parts.append(delta)
                if on_delta is not None and (text := deltas.feed(delta)):
                    on_delta(index, text)
        raw = "".join(parts)
        parsed = output.parse(raw, len(docs), not_found)
        cited = _cited(parsed, item.text, grounding, docs)
        if on_delta is not None and (rest := deltas.finish(parsed.answer)):
            on_delta(index, rest)
        # tokens the model really read and wrote (none when its gates declined)
        prompt_tokens = grounding.prompt.prompt_tokens if grounding.prompt else 0
        completion = 0 if stream.outcome.declined else llm.count_tokens(raw)
        if parsed.marked and not stream.outcome.declined:
            response = raw  # the model wrote the contract itself
        else:
            response = output.render(cited, parsed.answer)
        prediction: dict[str, Any] = {
            "tokensUsed": {
                "promptTokens": prompt_tokens,
                "completionTokens": completion,
                "totalTokens": prompt_tokens + completion,
            },
            "answer": parsed.answer,
            "answerFound": parsed.found,
            "sources": [u for u in output.urls(cited, [d.source for d in docs]) if u],
            "memoryUuid": memory,
            "response": response,
        }
        if not parsed.found:
            prediction["answerNotFoundMessage"] = not_found
        predictions.append(prediction)
        turns.append(Turn(item.text, response, parsed.answer, prediction["sources"]))
    surface.conversations.append(stored_as, turns)
    return {"predictions": predictions}


REWRITE_SYSTEM = (
    "Rewrite the user's follow-up question so that it can be understood without the "
    "conversation: replace words like it, they, this and that with what they refer to. "
    "Keep it a question. Reply with the rewritten question only."
)


def rewrite_query(surface: Surface, request: RagRequest, tenant: str = "") -> dict[str, Any]:
    """Standalone versions of follow-up questions, from the conversation memory."""
    llm = surface.services.llm
    if llm is None:
        raise rag.LLMNotConfigured()
    memory = request.useCaseConfig.memoryUuid
    if memory is None:
        raise rag.RagError("useCaseConfig.memoryUuid is required")
    turns = surface.conversations.turns(scoped(memory, tenant))
    predictions = []
    for item in request.batch:
        if not turns:  # nothing to resolve against: the question stands as it is
            zero = {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0}
            predictions.append({"response": item.text, "tokensUsed": zero})
            continue
        lines = [f"User: {t.question}\nAssistant: {t.answer}" for t in turns[-4:]]
        messages: list[ChatMessage] = [
            {"role": "system", "content": REWRITE_SYSTEM},
            {
                "role": "user",
                "content": "Conversation:\n"
                + "\n".join(lines)
                + f"\n\nFollow-up question: {item.text}\nStandalone question:",
            },
        ]
        prompt_tokens = llm.count_chat_tokens(messages)
        if prompt_tokens + 64 >= llm.n_ctx:
            raise InputTooLong()
        text = llm.chat(
            messages,
            max_tokens=64,
            sampling=Sampling(temperature=0.0),
        )
        line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), item.text)
        line = line.removeprefix("Standalone question:").strip() or item.text
        completion = llm.count_tokens(text)
        predictions.append(
            {
                "response": line,
                "tokensUsed": {
                    "promptTokens": prompt_tokens,
                    "completionTokens": completion,
                    "totalTokens": prompt_tokens + completion,
                },
            }
        )
    return {"predictions": predictions}
