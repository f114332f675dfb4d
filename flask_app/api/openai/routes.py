"""The /v1 routes: thin adapters over the LLM queue, the answer pipeline
(grounded chat, `grounding`) and the embedder."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
from flask import Blueprint, Flask, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app.api.http import errors as http_errors
from flask_app.api.http.disconnect import client_gone_probe
from flask_app.api.http.errors import as_service_error
from flask_app.api.http.extensions import answer_config_of, services_of, settings_of
from flask_app.api.http.json_body import json_object
from flask_app.api.http.openapi import operation
from flask_app.api.http.sse import event_stream
from flask_app.api.openai import errors
from flask_app.api.openai.grounding import grounded_answer
from flask_app.api.openai.schemas import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    EmbeddingRequest,
    Embeddings,
    Models,
    OpenAIErrorBody,
    parse,
)
from flask_app.inference.llm import LLM, ChatMessage, Sampling, TokenStream
from flask_app.rag import LLMNotConfigured
from flask_app.rag.answer import AnswerStream
from flask_app.rag.prompts import is_refusal

blueprint = Blueprint("openai", __name__, url_prefix="/v1")
TAG = "openai"


def _llm() -> LLM:
    llm = services_of(current_app).llm
    if llm is None:
        raise LLMNotConfigured()
    return llm


@blueprint.get("/models")
@operation(
    summary="The chat model and the embedder", tag=TAG, response=Models, error=OpenAIErrorBody
)
def models() -> ResponseReturnValue:
    services = services_of(current_app)
    card = {"object": "model", "created": 0, "owned_by": "edgerag"}
    data = []
    if services.llm is not None:
        data.append({"id": services.llm.model_id, **card, "preset": services.llm.preset})
    if services.embedder is not None:
        data.append({"id": services.embedder.model_id, **card})
    return jsonify(object="list", data=data)


def _messages(chat: ChatRequest) -> list[ChatMessage]:
    # "developer" is OpenAI's newer name for the system role
    return [
        {"role": "system" if m.role == "developer" else m.role, "content": m.content}
        for m in chat.messages
    ]


def _sampling(chat: ChatRequest) -> Sampling:
    stops = [chat.stop] if isinstance(chat.stop, str) else list(chat.stop or [])
    if len(stops) > 4:
        raise errors.invalid("stop: at most 4 sequences", "stop")
    base = Sampling()
    return Sampling(
        temperature=base.temperature if chat.temperature is None else chat.temperature,
        top_p=base.top_p if chat.top_p is None else chat.top_p,
        stop=tuple(stops),
        seed=chat.seed,
    )


def _chunk(
    cid: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish: str | None,
    extension: dict[str, Any] | None = None,
) -> bytes:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **(extension or {}),
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


@blueprint.post("/chat/completions")
@operation(
    summary="Chat completion (stream: true for chunks); `rag` grounds it in a collection",
    tag=TAG,
    body=ChatRequest,
    response=ChatCompletion,
    streams=True,
    events=((None, ChatCompletionChunk), (None, OpenAIErrorBody), (None, "[DONE]")),
    error=OpenAIErrorBody,
)
def chat_completions() -> ResponseReturnValue:
    chat = parse(ChatRequest, json_object(request))
    llm = _llm()
    messages = _messages(chat)
    prompt_tokens = llm.count_chat_tokens(messages)
    default = settings_of(current_app).max_tokens
    limit = chat.max_completion_tokens or chat.max_tokens or default
    if prompt_tokens + limit > llm.n_ctx:
        raise errors.invalid(
            f"This model's context is {llm.n_ctx} tokens; the messages take {prompt_tokens} "
            f"and max_tokens asks for {limit}.",
            "messages",
            "context_length_exceeded",
        )
    tokens: TokenStream | AnswerStream
    sources: list[dict[str, Any]] | None = None  # grounded: the `rag.sources` extension
    if chat.rag is not None:
        config = replace(answer_config_of(current_app), max_tokens=limit)
        grounded = grounded_answer(chat, chat.rag, _sampling(chat), config)
        tokens = grounded.stream
        prompt = grounded.stream.grounding.prompt
        prompt_tokens = prompt.prompt_tokens if prompt is not None else 0
        sources = grounded.sources
    else:
        tokens = llm.stream(
            messages,
            max_tokens=limit,
            sampling=_sampling(chat),
            abandoned=client_gone_probe(),
        )

    def extension(text: str) -> dict[str, Any]:
        if sources is None:
            return {}
        answer = tokens if isinstance(tokens, AnswerStream) else None
        outcome = None if answer is None else answer.outcome
        refused = (outcome is not None and outcome.declined) or is_refusal(text)
        probability = None if outcome is None else outcome.confidence
        return {
            "rag": {
                "sources": [] if refused else sources,
                "refused": refused,
                "answerable_probability": probability,
            }
        }

    cid = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if not chat.stream:
        try:
            text = "".join(tokens)
        finally:
            tokens.close()
        completion = llm.count_tokens(text)
        return jsonify(
            id=cid,
            object="chat.completion",
            created=created,
            model=llm.model_id,
            choices=[
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length" if completion >= limit else "stop",
                }
            ],
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
            **extension(text),
        )

    def frames() -> Iterator[bytes]:
        parts: list[str] = []
        try:
            yield _chunk(cid, llm.model_id, created, {"role": "assistant", "content": ""}, None)
            for delta in tokens:
                parts.append(delta)
                yield _chunk(cid, llm.model_id, created, {"content": delta}, None)
        except Exception as exc:
            error = errors.stream_error(as_service_error(exc))
            yield b"data: " + orjson.dumps(error) + b"\n\n"
            return
        finally:
            tokens.close()
        finish = "length" if llm.count_tokens("".join(parts)) >= limit else "stop"
        yield _chunk(cid, llm.model_id, created, {}, finish, extension("".join(parts)))
        yield b"data: [DONE]\n\n"

    return event_stream(frames(), tokens.close)


@blueprint.post("/embeddings")
@operation(
    summary="Embed text", tag=TAG, body=EmbeddingRequest, response=Embeddings, error=OpenAIErrorBody
)
def embeddings() -> ResponseReturnValue:
    req = parse(EmbeddingRequest, json_object(request))
    embedder = services_of(current_app).embedder
    if embedder is None:
        raise errors.invalid("the server runs without an embedding model (--no-embedder)", "model")
    texts = [req.input] if isinstance(req.input, str) else req.input
    if len(texts) > 2048 or any(not t for t in texts):
        raise errors.invalid("input: 1 to 2048 non-empty strings", "input")
    vectors = embedder.embed(texts, [f"input[{i}]" for i in range(len(texts))])
    data = []
    for i, row in enumerate(vectors):
        value: Any
        if req.encoding_format == "base64":
            value = base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode()
        else:
            value = [float(v) for v in row]
        data.append({"object": "embedding", "index": i, "embedding": value})
    used = sum(embedder.count_tokens(t) for t in texts)
    return jsonify(
        object="list",
        data=data,
        model=embedder.model_id,
        usage={"prompt_tokens": used, "total_tokens": used},
    )


def install(app: Flask) -> None:
    app.register_blueprint(blueprint)
    http_errors.add_surface(app, "/v1/", errors.render)
