"""Every error the core raises, met part way through a streamed answer, on
every surface's streaming route: the stream's error event is what the
surface's one table makes of it (the body its JSON route would answer
with), after the text already sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_app.api.engine import errors as engine_errors
from flask_app.api.lucidworks import errors as lucidworks_errors
from flask_app.api.moorcheh import errors as moorcheh_errors
from flask_app.api.openai import errors as openai_errors
from flask_app.app import create_app
from flask_app.errors import ServiceError
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag.answer import AnswerStream
from flask_app.settings import Settings
from tests import stores
from tests.test_error_walk import EXAMPLES
from tests.waiting import until_ready

NOTE = "The spare key is with the neighbour at number 12."


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    settings = Settings.load({"data_dir": tmp_path_factory.mktemp("walk") / "data"}, {})
    services = stores.services(
        settings, LLM(ScriptedBackend("The key is next door.")), HashEmbedder()
    )
    app = create_app(settings, services)
    client = app.test_client()
    assert (
        client.post(
            "/upload", json={"store_mode": "text", "items": [{"id": "key", "text": NOTE}]}
        ).status_code
        == 200
    )
    client.put("/namespaces/home")
    client.put("/namespaces/home/collections/notes")
    r = client.post(
        "/namespaces/home/collections/notes/files",
        json={"path": "notes.md", "content_type": "text/markdown", "text": NOTE},
    )
    assert r.status_code == 202
    until_ready(client, "/namespaces/home/collections/notes")
    return app


def failing(exc: ServiceError) -> Any:
    def iterate(self: AnswerStream) -> Iterator[str]:
        yield "The"
        raise exc

    return iterate


def sse_events(data: bytes) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        event, payload = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                payload = line[6:]
        out.append((event, payload if payload == "[DONE]" else json.loads(payload or "null")))
    return out


def streamed(client: FlaskClient, surface: str) -> list[tuple[str | None, Any]]:
    question = "Where is the spare key?"
    if surface == "moorcheh":
        r = client.post("/answer/stream", json={"query": question})
    elif surface == "lucidworks":
        r = client.post(
            "/ai/prediction/rag/llama-3-8b-instruct",
            json={"batch": [{"text": question, "documents": [{"body": NOTE, "source": "n"}]}]},
            headers={"Accept": "text/event-stream"},
        )
    elif surface == "engine":
        r = client.post(
            "/namespaces/home/collections/notes:answer",
            json={"query": question},
            headers={"Accept": "text/event-stream"},
        )
    else:
        r = client.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "stream": True,
                "messages": [{"role": "user", "content": question}],
                "rag": {"collection": "home/notes"},
            },
        )
    assert r.status_code == 200, r.data
    return sse_events(r.data)


@pytest.mark.parametrize("surface", ["moorcheh", "lucidworks", "engine", "openai"])
@pytest.mark.parametrize(
    "exc", [e for e, _ in EXAMPLES], ids=[f"{type(e).__name__}-{e.status}" for e, _ in EXAMPLES]
)
def test_a_stream_ends_with_the_surfaces_own_error_body(
    app: Flask, surface: str, exc: ServiceError, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AnswerStream, "__iter__", failing(exc))
    events = streamed(app.test_client(), surface)
    with app.test_request_context("/"):
        if surface == "moorcheh":
            assert events[-2] == ("token", {"delta": "The"})
            assert events[-1] == ("error", moorcheh_errors.stream_error(exc))
        elif surface == "lucidworks":
            assert events[-1] == ("error", lucidworks_errors.stream_error(exc))
        elif surface == "engine":
            assert events[-2] == ("delta", {"text": "The"})
            name, data = events[-1]
            expected = engine_errors.stream_error(exc, data["request_id"])
            assert (name, data) == ("error", expected)
            assert data["request_id"].startswith("req_")
        else:
            assert events[-2][1]["choices"][0]["delta"] == {"content": "The"}
            assert events[-1][1] == openai_errors.stream_error(exc)
