"""moorcheh-edge RAG answers: POST /answer (JSON) and POST /answer/stream (SSE).

Adapter only: validation here, the pipeline in `flask_app.rag`. Errors found
before streaming are plain JSON 4xx/503; once the stream has started, a failure
is an `error` event and the stream ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app import rag
from flask_app.api.http.disconnect import client_gone_probe
from flask_app.api.http.extensions import services_of, settings_of
from flask_app.api.http.json_body import json_object, validate
from flask_app.api.http.sse import sse
from flask_app.api.moorcheh.routes import kiosk_threshold, parse_vector, top_k_value
from flask_app.api.moorcheh.schemas import Answer
from flask_app.inference.llm import ChatMessage, LLMError, LLMTimeout, TokenStream
from flask_app.rag import prompts

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
        threshold=kiosk_threshold(body.kiosk_mode, body.threshold),
        metadata=body.metadata,
        header_prompt=body.header_prompt,
        footer_prompt=body.footer_prompt,
        chat_history=history,
        temperature=DEFAULT_TEMPERATURE if body.temperature is None else body.temperature,
    )


def _prepare() -> tuple[rag.Question, list[rag.Source], rag.Prompt | None]:
    """Validate, retrieve and build the prompt; None when nothing was retrieved."""
    question = _question(validate(Answer, json_object(request)))
    services = services_of(current_app)
    settings = settings_of(current_app)
    if services.llm is None:
        raise rag.LLMNotConfigured()
    collection = services.store.edge()
    if collection.info().dimension is None:
        return question, [], None
    vector = rag.query_vector(collection, question, services.embedder)
    sources = rag.retrieve(
        collection, vector, question, settings.score_mapping, settings.answer_min_score
    )
    if not sources:
        return question, [], None
    prompt = rag.build_prompt(
        services.llm,
        question,
        sources,
        answer_tokens=settings.max_tokens,
        context_tokens=settings.context_tokens,
    )
    return question, prompt.sources, prompt


def _open(question: rag.Question, sources: list[rag.Source], prompt: rag.Prompt) -> TokenStream:
    """Queue for the model, run the answerability check, start generating."""
    settings = settings_of(current_app)
    llm = services_of(current_app).llm
    assert llm is not None
    precheck = rag.answer_precheck(
        llm, question, sources, settings.answer_check, settings.context_tokens
    )
    return rag.open_stream(
        llm, prompt, question, settings.max_tokens, precheck, abandoned=client_gone_probe()
    )


@blueprint.post("/answer")
def answer() -> ResponseReturnValue:
    question, sources, prompt = _prepare()
    llm = services_of(current_app).llm
    assert llm is not None
    body: dict[str, Any] = {
        "answer": prompts.NO_CONTEXT_ANSWER,
        "model": llm.model_id,
        "query": question.query,
        "context_count": 0,
        "sources": [],
    }
    if prompt is None:
        return jsonify(body)
    with _open(question, sources, prompt) as tokens:
        text = "".join(rag.clean_stream(tokens))
    body.update(
        answer=text,
        context_count=len(sources),
        sources=[s.as_result() for s in sources],
        usage={"prompt_tokens": prompt.prompt_tokens, "completion_tokens": llm.count_tokens(text)},
        answer_check=tokens.precheck_probability,
    )
    return jsonify(body)


@blueprint.post("/answer/stream")
def answer_stream() -> ResponseReturnValue:
    question, sources, prompt = _prepare()
    llm = services_of(current_app).llm
    assert llm is not None
    # Take the model (or fail with 503) before the response starts.
    tokens = None
    if prompt is not None:
        tokens = _open(question, sources, prompt)
    meta = {
        "model": llm.model_id,
        "context_count": len(sources),
        "sources": [s.as_result() for s in sources],
        "query": question.query,
    }

    def events() -> Iterator[bytes]:
        yield sse("meta", meta)
        if tokens is None:
            yield sse("token", {"delta": prompts.NO_CONTEXT_ANSWER})
            yield sse(
                "done",
                {
                    "answer": prompts.NO_CONTEXT_ANSWER,
                    "query": question.query,
                    "model": llm.model_id,
                    "context_count": 0,
                    "sources": [],
                },
            )
            return
        parts: list[str] = []
        try:
            for delta in rag.clean_stream(tokens):
                parts.append(delta)
                yield sse("token", {"delta": delta})
        except LLMTimeout as exc:
            yield sse("error", {"message": f"LLM request failed: {exc}"})
            return
        except LLMError:
            yield sse("error", {"message": "LLM request failed"})
            return
        finally:
            tokens.close()  # also runs when the client disconnects (GeneratorExit)
        yield sse(
            "done",
            {
                "answer": "".join(parts),
                "query": question.query,
                "model": llm.model_id,
                "context_count": len(sources),
                "sources": meta["sources"],
            },
        )

    response = Response(
        events(),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    if tokens is not None:
        # the model is held from here: a response closed before the generator
        # ever ran (client gone before the first read) must still release it
        response.call_on_close(tokens.close)
    return response
