"""The /v1 OpenAI-compatible API, driven by the official `openai` client over
a real socket (scripted LLM, hash embedder)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from openai import OpenAI

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import Services
from flask_app.settings import Settings
from flask_app.store import Store
from tests.http_client import serve_in_thread


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[OpenAI, ScriptedBackend, LLM]]:
    settings = Settings.load({"data_dir": tmp_path / "data", "api_keys": "sk-local"}, {})
    backend = ScriptedBackend("Paris is the capital of France.")
    llm = LLM(backend, max_waiters=0, timeout=30)
    app = create_app(settings, Services(Store(settings.data_dir), llm, HashEmbedder()))
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
    assert (drawn.temperature, drawn.top_p, drawn.stop) == (0.5, 0.9, ("\n\n",))
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
    while not llm.gate.busy and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert limited.value.response.headers["Retry-After"].isdigit()
    holder.join(30)
