"""The /v1 OpenAI-compatible API, driven by the official `openai` client over
a real socket (scripted LLM, hash embedder)."""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import requests
from openai import APIError, OpenAI
from openai.types.chat import ChatCompletionMessageParam

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store
from tests.http_client import serve_in_thread


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[OpenAI, ScriptedBackend, LLM]]:
    settings = Settings.load({"data_dir": tmp_path / "data", "api_keys": "sk-local"}, {})
    backend = ScriptedBackend("Paris is the capital of France.", n_seq=1)
    llm = LLM(backend, max_waiters=0, timeout=30)
    app = create_app(settings, assemble(settings, Store(settings.data_dir), llm, HashEmbedder()))
    with serve_in_thread(app) as base:
        client = OpenAI(base_url=base + "/v1", api_key="sk-local", max_retries=0)
        yield client, backend, llm
        client.close()


def test_models_chat_and_usage(served: tuple[OpenAI, ScriptedBackend, LLM]) -> None:
    client, backend, _ = served
    ids = [m.id for m in client.models.list().data]
    assert ids == ["scripted-fake", "hash-fake-384"]
    reply = client.chat.completions.create(
        model="scripted-fake",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        temperature=0.5,
        top_p=0.9,
        max_tokens=64,
        stop=["\n\n"],
        seed=7,
    )
    assert reply.choices[0].message.content == "Paris is the capital of France."
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == 6
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 6
    drawn = backend.samplings[-1]
    assert (drawn.temperature, drawn.top_p, drawn.stop, drawn.seed) == (0.5, 0.9, ("\n\n",), 7)
    assert "<|system|>\nBe brief." in backend.prompts[-1]
    short = client.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "q"}], max_tokens=2
    )
    assert short.choices[0].finish_reason == "length"


def test_streamed_chat(served: tuple[OpenAI, ScriptedBackend, LLM]) -> None:
    client, _, _ = served
    stream = client.chat.completions.create(
        model="scripted-fake", messages=[{"role": "user", "content": "Capital?"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Paris is the capital of France."
    assert len(chunks) > 3 and chunks[-1].choices[0].finish_reason == "stop"


def test_a_model_failing_mid_stream_says_so_without_its_detail(
    served: tuple[OpenAI, ScriptedBackend, LLM], caplog: pytest.LogCaptureFixture
) -> None:
    client, backend, _ = served
    backend.fail_after = 2
    stream = client.chat.completions.create(
        model="scripted-fake", messages=[{"role": "user", "content": "Capital?"}], stream=True
    )
    with caplog.at_level(logging.ERROR, logger="edgerag"), pytest.raises(APIError) as failed:
        list(stream)
    assert failed.value.message == "The model failed."  # the detail is for the log
    assert any("scripted failure" in r.getMessage() for r in caplog.records)


def test_embeddings_float_and_base64(served: tuple[OpenAI, ScriptedBackend, LLM]) -> None:
    client, _, _ = served
    floats = client.embeddings.create(model="hash-fake-384", input=["alpha beta", "gamma"])
    assert [d.index for d in floats.data] == [0, 1] and len(floats.data[0].embedding) == 384
    assert floats.usage.prompt_tokens > 0
    raw = client.embeddings.create(
        model="hash-fake-384", input="alpha beta", encoding_format="base64"
    )
    packed = raw.data[0].embedding
    vector = (
        np.frombuffer(base64.b64decode(packed), dtype="<f4")
        if isinstance(packed, str)
        else np.array(packed)
    )
    assert np.allclose(vector, floats.data[0].embedding, atol=1e-6)


def test_errors_in_openai_shape(
    served: tuple[OpenAI, ScriptedBackend, LLM], tmp_path: Path
) -> None:
    client, backend, llm = served
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], temperature=3
        )
    assert bad.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert bad.value.body["param"] == "temperature"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], max_tokens=10_000
        )
    assert long.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    stranger = OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as denied:
        stranger.models.list()
    assert denied.value.body["code"] == "invalid_api_key"  # type: ignore[index]
    stranger.close()
    # queue full (no waiters allowed): 429 with Retry-After, which clients back off on
    backend.token_delay = 0.05
    holder = threading.Thread(
        target=lambda: client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}]
        )
    )
    holder.start()
    deadline = time.monotonic() + 5
    while not llm.slots.busy and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert limited.value.response.headers["Retry-After"].isdigit()
    holder.join(30)


def _engine_collection(base: str, access: str = "open") -> None:
    key = {"Authorization": "Bearer sk-local"}
    requests.put(f"{base}/namespaces/ops", headers=key, timeout=10)
    requests.put(
        f"{base}/namespaces/ops/collections/docs",
        json={"access_control": access},
        headers=key,
        timeout=10,
    )
    r = requests.post(
        f"{base}/namespaces/ops/collections/docs/files",
        json={
            "path": "geo/france.md",
            "content_type": "text/markdown",
            "text": "# France\n\nThe capital of France is Paris, on the Seine.\n\n"
            "# Spain\n\nThe capital of Spain is Madrid.",
            "principals": ["group:geo"],
        },
        headers=key,
        timeout=10,
    )
    assert r.status_code == 202
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        files = requests.get(
            f"{base}/namespaces/ops/collections/docs/files", headers=key, timeout=10
        ).json()["files"]
        if files[0]["status"] == "ready":
            return
        time.sleep(0.05)
    raise AssertionError("file not ready")


def test_grounded_chat_answers_from_a_collection(
    served: tuple[OpenAI, ScriptedBackend, LLM],
) -> None:
    client, backend, _ = served
    base = str(client.base_url).removesuffix("/v1/").removesuffix("/v1")
    _engine_collection(base)
    question: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What is the capital of France?"}
    ]
    reply = client.chat.completions.create(
        model="m", messages=question, extra_body={"rag": {"collection": "ops/docs", "top_k": 3}}
    )
    assert reply.choices[0].message.content == "Paris is the capital of France."
    assert "The capital of France is Paris" in backend.prompts[-1]  # the evidence was given
    extension = (reply.model_extra or {})["rag"]
    assert extension["refused"] is False
    assert extension["sources"][0]["path"] == "geo/france.md"
    assert "Paris" in extension["sources"][0]["text"]
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    # streamed: the last chunk carries the extension
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=question,
            stream=True,
            extra_body={"rag": {"collection": "ops/docs"}},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == (
        "Paris is the capital of France."
    )
    assert (chunks[-1].model_extra or {})["rag"]["sources"][0]["path"] == "geo/france.md"
    # the moorcheh-edge store is a collection too
    r = requests.post(
        f"{base}/upload",
        json={
            "store_mode": "text",
            "items": [{"id": "fr", "text": "The capital of France is Paris."}],
        },
        headers={"Authorization": "Bearer sk-local"},
        timeout=10,
    )
    assert r.status_code == 200
    edge = client.chat.completions.create(
        model="m", messages=question, extra_body={"rag": {"collection": "moorcheh-edge"}}
    )
    assert [s["id"] for s in (edge.model_extra or {})["rag"]["sources"]] == ["fr"]
    # an unknown collection and a bad option are errors in OpenAI's shape
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(
            model="m", messages=question, extra_body={"rag": {"collection": "ops/nope"}}
        )
    assert missing.value.body["param"] == "rag.collection"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="m", messages=question, extra_body={"rag": {"collection": "ops/docs", "top_k": 0}}
        )


def test_grounded_chat_respects_access_control_and_refuses_without_evidence(
    served: tuple[OpenAI, ScriptedBackend, LLM],
) -> None:
    client, backend, _ = served
    base = str(client.base_url).removesuffix("/v1/").removesuffix("/v1")
    _engine_collection(base, access="enforced")
    question: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What is the capital of France?"}
    ]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="m", messages=question, extra_body={"rag": {"collection": "ops/docs"}}
        )
    assert bad.value.body["param"] == "rag.principals"  # type: ignore[index]
    prompts = len(backend.prompts)
    stranger = client.chat.completions.create(
        model="m",
        messages=question,
        extra_body={"rag": {"collection": "ops/docs", "principals": ["group:other"]}},
    )
    # nothing readable: the fixed sentence, no model call, no sources
    assert len(backend.prompts) == prompts
    rag = (stranger.model_extra or {})["rag"]
    assert rag == {"sources": [], "refused": True, "answerable_probability": None}
    assert "Paris" not in (stranger.choices[0].message.content or "")
    member = client.chat.completions.create(
        model="m",
        messages=question,
        extra_body={"rag": {"collection": "ops/docs", "principals": ["group:geo"]}},
    )
    assert (member.model_extra or {})["rag"]["sources"][0]["path"] == "geo/france.md"


def test_grounded_chat_marks_the_models_own_refusal(tmp_path: Path) -> None:
    from flask_app.rag.prompts import NO_CONTEXT_ANSWER

    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    backend = ScriptedBackend(NO_CONTEXT_ANSWER)
    app = create_app(
        settings, assemble(settings, Store(settings.data_dir), LLM(backend), HashEmbedder())
    )
    client = app.test_client()
    client.post(
        "/upload",
        json={
            "store_mode": "text",
            "items": [{"id": "fr", "text": "The capital of France is Paris."}],
        },
    )
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "rag": {"collection": "moorcheh-edge"},
    }
    reply = client.post("/v1/chat/completions", json=body).get_json()
    assert len(backend.prompts) == 1  # the model was asked, and declined
    assert reply["choices"][0]["message"]["content"] == NO_CONTEXT_ANSWER
    assert reply["rag"] == {"sources": [], "refused": True, "answerable_probability": None}
