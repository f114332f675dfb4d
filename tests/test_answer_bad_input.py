"""Odd questions on every answer route, verified as served (the scripted
model and a scripted verifier): an empty question is the surface's own 400,
a 2,000-word one is answered or refused naming the limit, a store of one
passage and a question in another language are answered; never a 500, and
nothing stored changes."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag.verifier import Gate
from flask_app.settings import Settings
from tests import stores
from tests.verifiers import scripted_verifier
from tests.waiting import until_ready

NOTE = "The spare key is with the neighbour at number 12."
LUCID = "/ai/prediction/rag/llama-3-8b-instruct"
ENGINE = "/namespaces/home/collections/notes:answer"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> FlaskClient:
    settings = Settings.load({"data_dir": tmp_path_factory.mktemp("odd") / "data"}, {})
    backend = ScriptedBackend(
        "The key is with the neighbour at number 12.",
        answer_state=lambda prompt, answer: [1.0 if "12" in answer else -1.0],
    )
    gate = Gate(scripted_verifier(samples=1), threshold=0.5)
    services = stores.services(settings, LLM(backend, timeout=30), HashEmbedder(), gate=gate)
    client = create_app(settings, services).test_client()
    items = [{"id": "key", "text": NOTE}]  # a store of one passage
    assert client.post("/upload", json={"store_mode": "text", "items": items}).status_code == 200
    client.put("/namespaces/home")
    client.put("/namespaces/home/collections/notes")
    r = client.post(
        "/namespaces/home/collections/notes/files",
        json={"path": "notes.md", "content_type": "text/markdown", "text": NOTE},
    )
    assert r.status_code == 202
    until_ready(client, "/namespaces/home/collections/notes")
    return client


def ask(client: FlaskClient, surface: str, question: str) -> tuple[int, Any]:
    if surface == "moorcheh":
        r = client.post("/answer", json={"query": question})
    elif surface == "lucidworks":
        docs = [{"body": NOTE, "source": "http://notes"}]
        r = client.post(LUCID, json={"batch": [{"text": question, "documents": docs}]})
    elif surface == "engine":
        r = client.post(ENGINE, json={"query": question})
    else:
        r = client.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": question}],
                "rag": {"collection": "home/notes"},
            },
        )
    return r.status_code, r.get_json()


def stored(client: FlaskClient) -> Any:
    return (
        client.get("/export").get_json(),
        client.get("/namespaces/home/collections/notes/files").get_json()["files"],
    )


SURFACES = ["moorcheh", "lucidworks", "engine", "openai"]


@pytest.mark.parametrize("surface", SURFACES)
def test_an_empty_question_is_the_surfaces_own_400(client: FlaskClient, surface: str) -> None:
    before = stored(client)
    status, body = ask(client, surface, "")
    assert status == 400, body
    if surface == "moorcheh":
        assert body["status"] == "error"
    elif surface == "lucidworks":
        assert body["status"] == 400 and body["error"] == "Bad Request"
    elif surface == "engine":
        assert body["error"]["code"] == "invalid_request"
    else:
        assert body["error"]["type"] == "invalid_request_error"
    assert stored(client) == before


@pytest.mark.parametrize("surface", SURFACES)
def test_a_2000_word_question_is_answered_or_refused_naming_its_limit(
    client: FlaskClient, surface: str
) -> None:
    before = stored(client)
    question = " ".join(["where"] * 1999 + ["key?"])
    status, body = ask(client, surface, question)
    assert status in (200, 400, 413), body
    if status != 200:
        text = str(body).lower()
        assert any(
            word in text for word in ("context", "char", "long", "limit", "large", "max", "at most")
        ), body
    assert stored(client) == before


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "question", ["Where is the spare key?", "¿Dónde está la llave de repuesto?", "备用钥匙在哪里?"]
)
def test_odd_but_fair_questions_over_one_passage_are_answered(
    client: FlaskClient, surface: str, question: str
) -> None:
    before = stored(client)
    status, body = ask(client, surface, question)
    assert status == 200, body
    assert stored(client) == before
