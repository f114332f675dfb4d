"""Lucidworks AI surface with the scripted fake LLM: spec test cases T1-T9,
memory, async jobs, embeddings, streaming and the bad-input matrix."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import sseclient
from flask import Flask, current_app
from flask.testing import FlaskClient

from flask_app import simcore
from flask_app.api.http.extensions import collections_of
from flask_app.api.lucidworks.output import AnswerDeltas, parse, urls
from flask_app.app import create_app
from flask_app.inference.embed import Vectors, normalise
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag.jobs import READY, RETRIEVED, Jobs, RetryLater
from flask_app.rag.memory import Conversations, Turn
from flask_app.records import LocalRecords
from flask_app.settings import Settings
from tests import stores
from tests.http_client import serve_in_thread

RAG = "/ai/prediction/rag/llama-3-8b-instruct"
T1_OUTPUT = "SOURCES:\n- 0\nANSWER: The reason for going to Germany was to attend Oktoberfest."
GERMANY = {
    "body": "I'm off to Germany to go to the Oktoberfest!",
    "source": "http://example.com/112",
    "title": "Off to Germany!",
    "date": "2022-01-31T19:31:34Z",
}
T1 = {"batch": [{"text": "Why did I go to Germany?", "documents": [GERMANY]}]}


def build(
    tmp_path: Path,
    reply: str | Callable[[str], str] = T1_OUTPUT,
    embedder: Any = None,
    n_ctx: int = 4096,
    **options: object,
) -> tuple[Flask, ScriptedBackend]:
    settings = Settings.load({"data_dir": tmp_path / "data", **options}, {})
    backend = ScriptedBackend(reply, n_ctx=n_ctx)
    services = stores.services(
        settings, LLM(backend, max_waiters=4, timeout=30), embedder or HashEmbedder()
    )
    return create_app(settings, services), backend


@pytest.fixture
def lw(tmp_path: Path) -> tuple[FlaskClient, ScriptedBackend]:
    app, backend = build(tmp_path)
    return app.test_client(), backend


def prediction(r: Any) -> dict[str, Any]:
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert len(body["predictions"]) == 1
    p: dict[str, Any] = body["predictions"][0]
    return p


# --- T1-T4: sync answers, not found, memory, rewriter -------------------------------


def test_t1_documented_happy_path(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, backend = lw
    r = client.post(RAG, json=T1, headers={"Authorization": "Bearer TEST"})
    p = prediction(r)
    assert p["answer"] == "The reason for going to Germany was to attend Oktoberfest."
    assert p["answerFound"] is True
    assert p["sources"] == ["http://example.com/112"]
    assert p["response"] == T1_OUTPUT
    assert str(uuid.UUID(p["memoryUuid"])) == p["memoryUuid"]
    tokens = p["tokensUsed"]
    assert tokens["promptTokens"] > 0 and tokens["completionTokens"] == len(T1_OUTPUT.split())
    assert tokens["totalTokens"] == tokens["promptTokens"] + tokens["completionTokens"]
    assert "answerNotFoundMessage" not in p
    # title, date and source are shown to the model with the document's index
    prompt = backend.prompts[-1]
    assert (
        "Document 1 (title: Off to Germany!; date: 2022-01-31T19:31:34Z; "
        "source: http://example.com/112):\nI'm off to Germany to go to the Oktoberfest!" in prompt
    )
    assert "Question: Why did I go to Germany?" in prompt


def test_t2_not_found_with_a_custom_message(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "SOURCES:\nANSWER: Sorry, no idea.")
    body = {
        "batch": [{"text": "How is the weather?", "documents": [GERMANY]}],
        "useCaseConfig": {"answerNotFoundMessage": "Sorry, no idea."},
    }
    p = prediction(app.test_client().post(RAG, json=body))
    assert p["answer"] == "Sorry, no idea." and p["answerFound"] is False
    assert p["sources"] == [] and p["answerNotFoundMessage"] == "Sorry, no idea."


def test_model_says_not_found_with_evidence_present(tmp_path: Path) -> None:
    app, backend = build(
        tmp_path, "SOURCES:\n- 0\nANSWER: Not possible to answer given this content."
    )
    p = prediction(app.test_client().post(RAG, json=T1))
    assert p["answerFound"] is False and p["sources"] == []
    assert p["answerNotFoundMessage"] == "Not possible to answer given this content."
    assert len(backend.prompts) == 1


def test_t3_follow_up_uses_the_memory(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, backend = lw
    first = prediction(client.post(RAG, json=T1))
    memory = first["memoryUuid"]
    follow = {"batch": [{"text": "When is it held?"}], "useCaseConfig": {"memoryUuid": memory}}
    p = prediction(client.post(RAG, json=follow))
    assert p["memoryUuid"] == memory
    prompt = backend.prompts[-1]
    assert "Why did I go to Germany?" in prompt
    assert "The reason for going to Germany was to attend Oktoberfest." in prompt
    assert prompt.index("Why did I go") < prompt.index("When is it held?")


def test_unknown_uuid_starts_a_fresh_memory(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, backend = lw
    memory = str(uuid.uuid4())
    body = {**T1, "useCaseConfig": {"memoryUuid": memory}}
    assert prediction(client.post(RAG, json=body))["memoryUuid"] == memory
    assert "<|assistant|>\nThe reason" not in backend.prompts[-1]  # nothing remembered yet


def test_t4_standalone_query_rewriter(tmp_path: Path) -> None:
    def reply(prompt: str) -> str:
        return "Is Oktoberfest a framework?" if "Follow-up question" in prompt else T1_OUTPUT

    app, backend = build(tmp_path, reply)
    client = app.test_client()
    memory = prediction(client.post(RAG, json=T1))["memoryUuid"]
    r = client.post(
        "/ai/prediction/standalone-query-rewriter/llama-3-8b-instruct",
        json={"batch": [{"text": "Is it a framework?"}], "useCaseConfig": {"memoryUuid": memory}},
    )
    p = prediction(r)
    assert p["response"] == "Is Oktoberfest a framework?"
    assert p["tokensUsed"]["totalTokens"] > 0
    assert "User: Why did I go to Germany?" in backend.prompts[-1]
    assert "Follow-up question: Is it a framework?" in backend.prompts[-1]
    # the rewriter needs a memory
    r = client.post(
        "/ai/prediction/standalone-query-rewriter/llama-3-8b-instruct",
        json={"batch": [{"text": "Is it a framework?"}]},
    )
    assert r.status_code == 400 and "memoryUuid" in r.get_json()["message"]


def test_memory_keeps_the_newest_turns_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    memory = str(uuid.uuid4())
    store = Conversations(path, max_turns=3)
    store.append(memory, [Turn(f"q{i}", "raw", f"a{i}") for i in range(5)])
    reopened = Conversations(path, max_turns=3)
    assert [t.question for t in reopened.turns(memory)] == ["q2", "q3", "q4"]
    idle = Conversations(path, max_turns=3, ttl_s=0.05)
    time.sleep(0.1)
    assert idle.turns(memory) == []
    idle.append(str(uuid.uuid4()), [Turn("x", "raw", "y")])  # forgets idle memories
    assert Conversations(path).turns(memory) == []


# --- batches and parsing ----------------------------------------------------------


def test_batch_items_answered_from_their_own_documents_in_order(tmp_path: Path) -> None:
    def reply(prompt: str) -> str:
        question = prompt.rsplit("Question: ", 1)[1]
        if "bridge open" in question:
            return "SOURCES:\n- 1\nANSWER: It opened in 1998."
        return "SOURCES:\nANSWER: Not possible to answer given this content."

    app, backend = build(tmp_path, reply)
    body = {
        "batch": [
            {
                "text": "When did the bridge open?",
                "documents": [
                    {"body": "Tea is served at four.", "source": "http://a"},
                    {"body": "The bridge opened in 1998.", "source": "http://b"},
                ],
            },
            {
                "text": "Who painted the Harlow bridge mural?",
                "documents": [{"body": "The mural is painted blue.", "source": "http://c"}],
            },
        ]
    }
    r = app.test_client().post(RAG, json=body)
    first, second = r.get_json()["predictions"]
    assert first["answer"] == "It opened in 1998." and first["sources"] == ["http://b"]
    assert second["answerFound"] is False and second["sources"] == []
    assert first["memoryUuid"] == second["memoryUuid"]
    # each item's documents, and only those, went to the model in its own prompt
    assert len(backend.prompts) == 2 and "mural" in backend.prompts[1]
    assert "mural" not in backend.prompts[0] and "bridge opened" not in backend.prompts[1]


def test_documents_that_do_not_answer_are_read_and_declined_by_the_model(
    tmp_path: Path,
) -> None:
    """However few words the question shares with the documents, the model
    reads them; its not-found answer is answerFound false."""
    app, backend = build(tmp_path, "SOURCES:\nANSWER: Not possible to answer given this content.")
    body = {"batch": [{"text": "Who designed the tower lights?", "documents": [GERMANY]}]}
    p = prediction(app.test_client().post(RAG, json=body))
    assert p["answerFound"] is False and len(backend.prompts) == 1
    assert p["tokensUsed"]["promptTokens"] > 0
    assert p["response"] == "SOURCES:\nANSWER: Not possible to answer given this content."


def test_no_documents_answers_not_found_without_the_model(tmp_path: Path) -> None:
    app, backend = build(tmp_path, "should not be said")
    body = {"batch": [{"text": "Who designed the tower lights?", "documents": []}]}
    p = prediction(app.test_client().post(RAG, json=body))
    assert p["answerFound"] is False and backend.prompts == []
    assert p["tokensUsed"] == {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0}


@pytest.mark.parametrize(
    ("raw", "answer", "sources", "found"),
    [
        ("ANSWER: X\nSOURCES: 1, 0", "X", ["s1", "s0"], True),  # T7
        ("SOURCES:\n- 7\nANSWER: X", "X", [], True),
        ("X", "X", [], True),
        ("SOURCES:\n- 1\n- 0\n- 1\nANSWER: two\nlines", "two\nlines", ["s1", "s0"], True),
        ("SOURCES: [0]\nanswer:  lower case marker ", "lower case marker", ["s0"], True),
        ("SOURCES:\n- 0\nANSWER: not possible to answer given this content", "", [], False),
        ("ANSWER: first\nANSWER: second", "second", [], True),
    ],
)
def test_t7_tolerant_parser(raw: str, answer: str, sources: list[str], found: bool) -> None:
    parsed = parse(raw, 2, "Not possible to answer given this content.")
    assert urls(parsed.indices, ["s0", "s1"]) == sources and parsed.found is found
    if found:
        assert parsed.answer == answer


def test_t7_through_the_api(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "ANSWER: X\nSOURCES: 1, 0")
    body = {
        "batch": [
            {
                "text": "Why did I go to Germany?",
                "documents": [GERMANY, {**GERMANY, "source": "http://example.com/113"}],
            }
        ]
    }
    p = prediction(app.test_client().post(RAG, json=body))
    assert p["answer"] == "X"
    assert p["sources"] == ["http://example.com/113", "http://example.com/112"]


def test_model_config_is_honoured_and_secrets_ignored(
    lw: tuple[FlaskClient, ScriptedBackend], caplog: pytest.LogCaptureFixture
) -> None:
    client, backend = lw
    config = {
        "temperature": 0.9,
        "topP": 0.5,
        "topK": -1,
        "presencePenalty": 1.5,
        "frequencyPenalty": -0.5,
        "maxTokens": 5,
        "apiKey": "sk-secret-value",
        "azureEndpoint": "https://example.invalid",
    }
    p = prediction(client.post(RAG, json={**T1, "modelConfig": config}))
    drawn = backend.samplings[-1]
    assert (drawn.temperature, drawn.top_p, drawn.top_k) == (0.9, 0.5, None)
    assert (drawn.presence_penalty, drawn.frequency_penalty) == (1.5, -0.5)
    assert p["response"] == "SOURCES:\n- 0\nANSWER: The"  # maxTokens: 5 pieces
    assert "sk-secret-value" not in caplog.text


def test_documented_model_ids_are_aliases_and_others_404(
    lw: tuple[FlaskClient, ScriptedBackend],
) -> None:
    client, _ = lw
    for model in ("mistral-7b-instruct", "gpt-4o", "scripted-fake"):
        assert client.post(f"/ai/prediction/rag/{model}", json=T1).status_code == 200
    r = client.post("/ai/prediction/rag/no-such-model", json=T1)
    assert r.status_code == 404
    assert r.get_json() == {
        "status": 404,
        "error": "Not Found",
        "message": "Unknown model: no-such-model",
    }
    r = client.post("/ai/prediction/summarization/mistral", json=T1)
    assert r.status_code == 404 and r.get_json()["message"] == "Unknown use case: summarization"


def test_a_prompt_that_cannot_fit_is_refused_not_cut(tmp_path: Path) -> None:
    app, backend = build(tmp_path, n_ctx=256)
    long_question = "Why did I go to Germany " + "and why " * 60 + "?"
    r = app.test_client().post(
        RAG,
        json={
            "batch": [{"text": long_question, "documents": [GERMANY]}],
            "modelConfig": {"maxTokens": 200},
        },
    )
    assert r.status_code == 400
    assert r.get_json()["message"] == "Input exceeds the model context length"
    assert backend.prompts == []


def test_extract_relevant_content_sends_only_the_evidence(tmp_path: Path) -> None:
    filler = " ".join(f"Filler sentence number {i} talks about nothing." for i in range(30))
    doc = {"body": f"{filler} I'm off to Germany to go to the Oktoberfest!", "source": "s"}
    body = {"batch": [{"text": "Why did I go to Germany?", "documents": [doc]}]}
    app, backend = build(tmp_path)
    client = app.test_client()
    prediction(client.post(RAG, json={**body, "useCaseConfig": {"extractRelevantContent": False}}))
    whole = backend.prompts[-1]
    prediction(client.post(RAG, json=body))  # the default
    extract = backend.prompts[-1]
    assert "Filler sentence number 20 " in whole and "Filler sentence number 20 " not in extract
    assert "Oktoberfest" in extract and len(extract) < len(whole) / 2


# --- T5: async ------------------------------------------------------------------------


def wait_for(client: FlaskClient, prediction_id: str, seconds: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(f"/ai/async-prediction/{prediction_id}").get_json()
        if body["status"] != "SUBMITTED":
            return body
        time.sleep(0.02)
    raise AssertionError("the job did not finish")


def test_t5_async_round_trip(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, _ = lw
    r = client.post("/ai/async-prediction/rag/llama-3-8b-instruct", json=T1)
    assert r.status_code == 200
    submitted = r.get_json()
    assert submitted["status"] == "SUBMITTED" and set(submitted) == {"predictionId", "status"}
    ready = wait_for(client, submitted["predictionId"])
    assert ready["status"] == "READY" and ready["predictionId"] == submitted["predictionId"]
    assert ready["predictions"][0]["answer"].startswith("The reason for going")
    again = client.get(f"/ai/async-prediction/{submitted['predictionId']}").get_json()
    assert again["status"] == "RETRIEVED" and again["predictions"] == ready["predictions"]
    r = client.get(f"/ai/async-prediction/{uuid.uuid4()}")
    assert r.status_code == 404 and r.get_json()["status"] == 404


def test_async_rejects_bad_requests_at_once_and_never_stores_secrets(
    lw: tuple[FlaskClient, ScriptedBackend], tmp_path: Path
) -> None:
    client, _ = lw
    r = client.post("/ai/async-prediction/rag/mistral", json={"batch": []})
    assert r.status_code == 400
    body = {**T1, "modelConfig": {"apiKey": "sk-do-not-store"}}
    job = client.post("/ai/async-prediction/rag/mistral", json=body).get_json()
    wait_for(client, job["predictionId"])
    assert (
        b"sk-do-not-store"
        not in (stores.records_dir(tmp_path / "data") / "jobs.sqlite3").read_bytes()
    )


def local_jobs(data_dir: Path, yield_s: float = 30.0) -> Jobs:
    """The async-prediction jobs of a server on `data_dir` (started just now)."""
    return Jobs(LocalRecords(data_dir).job_table("jobs", retention_s=3600.0), yield_s=yield_s)


def test_an_accepted_job_runs_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    hold = threading.Event()
    crashed = local_jobs(path.parent)
    crashed.handle("k", lambda payload: (hold.wait(10), {"never": True})[1])
    job = crashed.submit("k", {"n": 1})  # the worker takes it and "dies" holding it
    deadline = time.monotonic() + 10
    while not (held := crashed.get(job)) or not held.running:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    restarted = local_jobs(path.parent)
    restarted.handle("k", lambda payload: {"n": payload["n"] + 1})
    restarted.start()
    deadline = time.monotonic() + 10
    while (found := restarted.get(job)) is not None and found.status != READY:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    hold.set()
    assert found is not None and found.result == {"n": 2}
    got = restarted.get(job)
    assert got is not None and got.status == RETRIEVED


def test_a_job_that_cannot_get_the_model_is_retried_not_failed(tmp_path: Path) -> None:
    jobs = local_jobs(tmp_path)
    calls: list[int] = []

    def run(payload: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        if len(calls) < 3:
            raise RetryLater(0.01)
        return {"ok": True}

    jobs.handle("k", run)
    job = jobs.submit("k", {})
    deadline = time.monotonic() + 10
    while (found := jobs.get(job)) is not None and found.status != READY:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert len(calls) == 3


def test_async_jobs_let_interactive_requests_go_first(tmp_path: Path) -> None:
    """A job waits while interactive requests queue for the model."""
    jobs = local_jobs(tmp_path, yield_s=0.3)
    waiting = threading.Event()
    waiting.set()
    started: list[float] = []
    jobs.yield_to(waiting.is_set)

    def run(payload: dict[str, Any]) -> dict[str, Any]:
        started.append(time.monotonic())
        return {}

    jobs.handle("k", run)
    begun = time.monotonic()
    job = jobs.submit("k", {})
    time.sleep(0.1)
    assert started == []  # still yielding
    deadline = time.monotonic() + 5
    while (found := jobs.get(job)) is not None and found.status != READY:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert started[0] - begun >= 0.3  # and then it ran: never starved forever


# --- T8: embeddings ------------------------------------------------------------------

WORKED = [0.12, -0.48, 0.33, 0.91, -0.07, 0.26]


class FixedEmbedder(HashEmbedder):
    """Every text embeds to the spec's worked example (unnormalised is fine: the
    quantizers are scale-invariant)."""

    def __init__(self) -> None:
        super().__init__(dim=6)

    def embed(self, texts: Any, ids: Any = None) -> Vectors:
        return normalise(np.array([WORKED] * len(texts), dtype=np.float32))


def test_t8_worked_quantization_example() -> None:
    assert simcore.quantize_max_scale(WORKED).tolist() == [17, -67, 46, 127, -10, 36]
    assert simcore.quantize_min_max(WORKED).tolist() == [110, 0, 149, 255, 75, 136]
    reduced = simcore.reduce_dims(WORKED, 4)
    assert simcore.quantize_max_scale(reduced).tolist() == [17, -67, 46, 127]


@pytest.mark.parametrize(
    ("config", "vector", "kind"),
    [
        ({"vectorQuantizationMethod": "max-scale"}, [17, -67, 46, 127, -10, 36], "INT8"),
        ({"vectorQuantizationMethod": "min-max"}, [110, 0, 149, 255, 75, 136], "UINT8"),
        (
            {"vectorQuantizationMethod": "max-scale", "dimReductionSize": 4},
            [17, -67, 46, 127],
            "INT8",
        ),
    ],
)
def test_t8_through_the_api(
    tmp_path: Path, config: dict[str, Any], vector: list[int], kind: str
) -> None:
    app, _ = build(tmp_path, embedder=FixedEmbedder())
    r = app.test_client().post(
        "/ai/prediction/embedding/e5-small-v2",
        json={"batch": [{"text": "query: hello"}], "modelConfig": config},
    )
    p = prediction(r)
    assert p["vector"] == vector and p["vectorType"] == kind
    assert p["tokensUsed"]["inputTokens"] > 0
    assert ("warning" in p) == ("dimReductionSize" in config)


def test_embedding_floats_and_dimension_limits(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, _ = lw
    url = "/ai/prediction/embedding/e5-small-v2"
    p = prediction(client.post(url, json={"batch": [{"text": "hello"}]}))
    assert p["vectorType"] == "FLOAT" and len(p["vector"]) == 384
    assert abs(float(np.linalg.norm(p["vector"])) - 1.0) < 1e-5
    for size in (0, 385, -1):
        r = client.post(
            url, json={"batch": [{"text": "x"}], "modelConfig": {"dimReductionSize": size}}
        )
        assert r.status_code == 400 and "dimReductionSize" in r.get_json()["message"]
    r = client.post(
        url, json={"batch": [{"text": "x"}], "modelConfig": {"vectorQuantizationMethod": "binary"}}
    )
    assert r.status_code == 400
    assert r.get_json()["message"] == "modelConfig.vectorQuantizationMethod is out of range"
    r = client.post("/ai/prediction/embedding/llama-3-8b-instruct", json={"batch": [{"text": "x"}]})
    assert r.status_code == 404


def test_tokenization(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, _ = lw
    p = prediction(
        client.post("/ai/tokenization/e5-small-v2", json={"batch": [{"text": "query: Hi there"}]})
    )
    assert p["tokens"] == ["[CLS]", "query", "hi", "there", "[SEP]"]
    assert p["tokensUsed"] == {"inputTokens": 5}


# --- T9: streaming ------------------------------------------------------------------


def test_t9_streaming_over_a_socket(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    with serve_in_thread(app) as base:
        plain = requests.post(base + RAG, json=T1, timeout=10).json()
        response = requests.post(
            base + RAG, json=T1, headers={"Accept": "text/event-stream"}, stream=True, timeout=10
        )
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = list(sseclient.SSEClient(response.iter_content(chunk_size=None)).events())
        response.close()
    names = [e.event for e in events]
    assert names.count("done") == 1 and names[-1] == "done" and names.count("delta") >= 1
    deltas = [json.loads(e.data) for e in events if e.event == "delta"]
    done = json.loads(events[-1].data)
    assert "".join(d["text"] for d in deltas) == done["predictions"][0]["answer"]
    for body in (plain, done):  # same body apart from the fresh memory
        body["predictions"][0].pop("memoryUuid")
    assert done == plain


def test_streamed_deltas_hide_the_markers() -> None:
    raw = "SOURCES:\n- 0\nANSWER: The reason for going\nis fun.\nSOURCES: 1"
    deltas = AnswerDeltas()
    out = [deltas.feed(raw[i : i + 3]) for i in range(0, len(raw), 3)]
    parsed = parse(raw, 2, "x")
    out.append(deltas.finish(parsed.answer))
    assert "".join(out) == parsed.answer == "The reason for going\nis fun."


def test_client_leaving_a_stream_stops_generation(tmp_path: Path) -> None:
    slow = "SOURCES:\n- 0\nANSWER: " + " ".join(["word"] * 200)
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    backend = ScriptedBackend(slow, token_delay=0.02)
    llm = LLM(backend, max_waiters=4, timeout=30)
    app = create_app(settings, stores.services(settings, llm, HashEmbedder()))
    with serve_in_thread(app) as base:
        response = requests.post(
            base + RAG, json=T1, headers={"Accept": "text/event-stream"}, stream=True, timeout=10
        )
        chunks = response.iter_content(chunk_size=None)
        next(chunks)
        response.close()
        deadline = time.monotonic() + 5
        while llm.slots.holders and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not llm.slots.holders and backend.closed_early == 1


# --- errors and the bad-input matrix ------------------------------------------------


BAD: list[tuple[str, Any, int, str]] = [
    ("batch missing", {}, 400, "batch must contain between 1 and 32 items"),
    ("batch empty", {"batch": []}, 400, "batch must contain between 1 and 32 items"),
    (
        "batch of 33",
        {"batch": [{"text": "q"}] * 33},
        400,
        "batch must contain between 1 and 32 items",
    ),
    ("batch not a list", {"batch": "q"}, 400, "batch must contain between 1 and 32 items"),
    ("text missing", {"batch": [{"documents": []}]}, 400, "batch[0].text is required"),
    ("text empty", {"batch": [{"text": "q"}, {"text": ""}]}, 400, "batch[1].text is required"),
    ("text blank", {"batch": [{"text": "   "}]}, 400, "batch[0].text is required"),
    ("text number", {"batch": [{"text": 5}]}, 400, "batch[0].text: Input should be a valid string"),
    (
        "missing source",
        {"batch": [{"text": "q", "documents": [{"body": "b"}]}]},
        400,
        "batch[0].documents[0].body and source are required",
    ),
    (
        "missing body",
        {"batch": [{"text": "q", "documents": [{"source": "s"}, {"body": "", "source": "s"}]}]},
        400,
        "batch[0].documents[0].body and source are required",
    ),
    (
        "temperature 3",
        {"batch": [{"text": "q"}], "modelConfig": {"temperature": 3}},
        400,
        "modelConfig.temperature is out of range",
    ),
    (
        "temperature text",
        {"batch": [{"text": "q"}], "modelConfig": {"temperature": "hot"}},
        400,
        "modelConfig.temperature is out of range",
    ),
    (
        "topP 1.5",
        {"batch": [{"text": "q"}], "modelConfig": {"topP": 1.5}},
        400,
        "modelConfig.topP is out of range",
    ),
    (
        "topK -2",
        {"batch": [{"text": "q"}], "modelConfig": {"topK": -2}},
        400,
        "modelConfig.topK is out of range",
    ),
    (
        "maxTokens 0",
        {"batch": [{"text": "q"}], "modelConfig": {"maxTokens": 0}},
        400,
        "modelConfig.maxTokens is out of range",
    ),
    (
        "penalty 3",
        {"batch": [{"text": "q"}], "modelConfig": {"presencePenalty": 3}},
        400,
        "modelConfig.presencePenalty is out of range",
    ),
    (
        "bad uuid",
        {"batch": [{"text": "q"}], "useCaseConfig": {"memoryUuid": "1234"}},
        400,
        "useCaseConfig.memoryUuid must be a UUID",
    ),
    (
        "uuid number",
        {"batch": [{"text": "q"}], "useCaseConfig": {"memoryUuid": 7}},
        400,
        "useCaseConfig.memoryUuid must be a UUID",
    ),
    (
        "not-found empty",
        {"batch": [{"text": "q"}], "useCaseConfig": {"answerNotFoundMessage": ""}},
        400,
        "useCaseConfig.answerNotFoundMessage: String should have at least 1 character",
    ),
    ("body a list", [1, 2], 400, "request body must be a JSON object, got list"),
]


@pytest.mark.parametrize(("name", "body", "status", "message"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize(
    "route", ["/ai/prediction/rag/mistral", "/ai/async-prediction/rag/mistral"]
)
def test_bad_input_matrix(
    tmp_path: Path, name: str, body: Any, status: int, message: str, route: str
) -> None:
    app, backend = build(tmp_path)
    client = app.test_client()
    r = client.post(route, json=body)
    assert r.status_code == status
    assert r.get_json() == {"status": status, "error": "Bad Request", "message": message}
    assert backend.prompts == []
    assert client.get("/ai/async-prediction/x").status_code == 404  # no job was stored
    memory = Conversations(stores.records_dir(tmp_path / "data") / "conversations.sqlite3")
    with memory._db() as db:
        assert db.execute("SELECT count(*) FROM turns").fetchone() == (0,)


def test_malformed_json_oversize_and_wrong_type(tmp_path: Path) -> None:
    app, backend = build(tmp_path, max_body_mb=0.01)
    client = app.test_client()
    r = client.post(RAG, data=b"{not json", content_type="application/json")
    assert r.get_json() == {
        "status": 400,
        "error": "Bad Request",
        "message": "Malformed JSON request body",
    }
    r = client.post(RAG, data=b"x" * 20_000, content_type="application/json")
    assert r.status_code == 413
    assert r.get_json() == {
        "status": 413,
        "error": "Payload Too Large",
        "message": "Request body too large",
    }
    r = client.post(RAG, data=b"{}", content_type="text/plain")
    assert r.status_code == 415 and r.get_json()["status"] == 415
    assert backend.prompts == []


def test_routing_errors_keep_the_shape(lw: tuple[FlaskClient, ScriptedBackend]) -> None:
    client, _ = lw
    r = client.get(RAG)
    assert r.status_code == 405 and r.get_json()["error"] == "Method Not Allowed"
    r = client.post("/ai/nothing/here")
    assert r.status_code == 404 and set(r.get_json()) == {"status", "error", "message"}
    # the other surface keeps its own shape
    assert client.get("/nothing").get_json()["status"] == "error"


def test_queue_full_is_429_with_retry_after(tmp_path: Path) -> None:
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    backend = ScriptedBackend("SOURCES:\n- 0\nANSWER: " + "w " * 100, token_delay=0.02, n_seq=1)
    llm = LLM(backend, max_waiters=0, timeout=30)
    app = create_app(settings, stores.services(settings, llm, HashEmbedder()))
    with serve_in_thread(app) as base:
        holder = threading.Thread(target=lambda: requests.post(base + RAG, json=T1, timeout=30))
        holder.start()
        deadline = time.monotonic() + 5
        while not llm.slots.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        r = requests.post(base + RAG, json=T1, timeout=30)
        holder.join(30)
    assert r.status_code == 429 and r.headers["Retry-After"].isdigit()
    assert r.json()["message"] == "Too Many Requests"


def test_t6_api_keys(tmp_path: Path) -> None:
    app, backend = build(tmp_path, api_keys="k-one,k-two")
    client = app.test_client()
    r = client.post(RAG, json=T1)
    assert r.status_code == 401
    assert r.get_json() == {"status": 401, "error": "Unauthorized", "message": "Unauthorized"}
    assert client.post(RAG, json=T1, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post(RAG, json=T1, headers={"Authorization": "Basic k-one"}).status_code == 401
    for key in ("k-one", "k-two"):
        r = client.post(RAG, json=T1, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
    # other surfaces refuse in their own shape; /health stays open
    r = client.post("/search", json={"query": "x"})
    assert r.status_code == 401 and r.get_json()["status"] == "error"
    assert client.get("/health").status_code == 200
    assert len(backend.prompts) == 2


def test_memories_and_jobs_belong_to_the_key_that_made_them(tmp_path: Path) -> None:
    """Spec §5: memory is scoped to the tenant, and a UUID from another tenant
    behaves as unknown; an async job is read only with the key that sent it."""
    app, backend = build(tmp_path, api_keys="k-one,k-two")
    client = app.test_client()
    one = {"Authorization": "Bearer k-one"}
    two = {"Authorization": "Bearer k-two"}
    memory = prediction(client.post(RAG, json=T1, headers=one))["memoryUuid"]
    follow = {"batch": [{"text": "When is it held?"}], "useCaseConfig": {"memoryUuid": memory}}

    asked = len(backend.prompts)
    other = prediction(client.post(RAG, json=follow, headers=two))
    assert other["memoryUuid"] == memory  # a fresh memory under the same name
    # k-two remembers nothing to answer from: not found, without the model
    assert other["answerFound"] is False and len(backend.prompts) == asked
    prediction(client.post(RAG, json=follow, headers=one))
    assert "Why did I go to Germany?" in backend.prompts[-1]  # the owner's memory is intact
    assert backend.prompts[-1].count("When is it held?") == 1  # k-two's turn is not in it

    job = client.post("/ai/async-prediction/rag/mistral", json=T1, headers=one).get_json()
    job_id = job["predictionId"]
    deadline = time.monotonic() + 10
    while client.get(f"/ai/async-prediction/{job_id}", headers=two).status_code == 404:
        ready = client.get(f"/ai/async-prediction/{job_id}", headers=one).get_json()
        if ready["status"] == "READY":
            break
        assert time.monotonic() < deadline
        time.sleep(0.02)
    else:
        raise AssertionError("another key read the job")
    assert ready["predictions"][0]["answer"].startswith("The reason for going")
    assert client.get(f"/ai/async-prediction/{job_id}", headers=two).status_code == 404
    # the job's turn went to k-one's memory, not to the keyless one
    job_memory = ready["predictions"][0]["memoryUuid"]
    again = {"batch": [{"text": "When is it held?"}], "useCaseConfig": {"memoryUuid": job_memory}}
    asked = len(backend.prompts)
    assert prediction(client.post(RAG, json=again, headers=one))["answerFound"] is True
    assert len(backend.prompts) == asked + 1 and "Why did I go to Germany?" in backend.prompts[-1]
    asked = len(backend.prompts)
    assert prediction(client.post(RAG, json=again, headers=two))["answerFound"] is False
    assert len(backend.prompts) == asked


def test_a_jobs_file_from_before_owners_opens_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    with sqlite3.connect(path) as db:  # the table as it was before jobs had owners
        db.execute(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, "
            "payload TEXT NOT NULL, result TEXT, error TEXT, submitted_at REAL NOT NULL, "
            "finished_at REAL)"
        )
        db.execute(
            "INSERT INTO jobs VALUES ('old', 'k', 'READY', '{}', '{\"n\": 1}', NULL, 1, ?)",
            (time.time(),),
        )
    db.close()
    jobs = local_jobs(path.parent)
    found = jobs.get("old")
    assert found is not None and found.result == {"n": 1}
    assert jobs.get("old", owner="someone") is None


DEPLOY = "# Deploys\n\nDeploys are frozen on Fridays. Hotfixes need SRE approval."
VAULT = "The vault master password rotates every Tuesday."


def engine_collections(tmp_path: Path, reply: str) -> tuple[Flask, FlaskClient, ScriptedBackend]:
    """ops/runbooks (open, deploy.md) and ops/secure (enforced, vault.md for group:sre)."""
    app, backend = build(tmp_path, reply)
    client = app.test_client()
    assert client.put("/namespaces/ops").status_code == 201
    for name, access in (("runbooks", "open"), ("secure", "enforced")):
        r = client.put(f"/namespaces/ops/collections/{name}", json={"access_control": access})
        assert r.status_code == 201
    for coll, path, text, extra in (
        ("runbooks", "runbooks/deploy.md", DEPLOY, {}),
        ("secure", "vault.md", VAULT, {"principals": ["group:sre"]}),
    ):
        body = {"path": path, "content_type": "text/markdown", "text": text, **extra}
        assert (
            client.post(f"/namespaces/ops/collections/{coll}/files", json=body).status_code == 202
        )
    with app.app_context():
        assert collections_of(current_app).ingestor.wait_idle(20)
    return app, client, backend


def test_collection_backed_rag_answers_from_an_engine_collection(tmp_path: Path) -> None:
    """Spec §10: items without documents get the collection's best passages."""
    _, client, backend = engine_collections(
        tmp_path, "SOURCES:\n- 0\nANSWER: Deploys are frozen on Fridays."
    )
    ask = {"text": "When are deploys frozen?"}
    body = {"batch": [ask], "useCaseConfig": {"collection": "ops/runbooks", "topK": 3}}
    p = prediction(client.post(RAG, json=body))
    assert p["answer"] == "Deploys are frozen on Fridays." and p["answerFound"] is True
    assert p["sources"] == ["runbooks/deploy.md"]
    assert "Deploys are frozen on Fridays." in backend.prompts[-1]
    assert "title: deploy.md" in backend.prompts[-1]

    # an item with its own documents keeps them
    own = {"text": "Why did I go to Germany?", "documents": [GERMANY]}
    both = {"batch": [own], "useCaseConfig": {"collection": "ops/runbooks"}}
    prediction(client.post(RAG, json=both))
    assert "Oktoberfest" in backend.prompts[-1] and "frozen" not in backend.prompts[-1]

    # the same through an async job
    job = client.post("/ai/async-prediction/rag/mistral", json=body).get_json()
    assert wait_for(client, job["predictionId"])["predictions"][0]["sources"] == [
        "runbooks/deploy.md"
    ]


def test_collection_backed_rag_errors_and_access_control(tmp_path: Path) -> None:
    _, client, backend = engine_collections(tmp_path, "SOURCES:\n- 0\nANSWER: Every Tuesday.")
    ask = {"batch": [{"text": "When does the vault master password rotate?"}]}
    for use, status, message in (
        ({"collection": "ops/nothing"}, 404, "Unknown collection: ops/nothing"),
        ({"collection": "not a name"}, 404, "Unknown collection: not a name"),
        (
            {"collection": "ops/secure"},
            400,
            "useCaseConfig.principals is required for collections with enforced access control",
        ),
    ):
        for route in (RAG, "/ai/async-prediction/rag/mistral"):
            r = client.post(route, json={**ask, "useCaseConfig": use})
            assert r.status_code == status, (use, route, r.get_json())
            assert r.get_json()["message"] == message
    r = client.post(RAG, json={**ask, "useCaseConfig": {"collection": "ops/x", "topK": 0}})
    assert r.status_code == 400
    asked = len(backend.prompts)
    outsider = {"collection": "ops/secure", "principals": ["group:dev"]}
    p = prediction(client.post(RAG, json={**ask, "useCaseConfig": outsider}))
    assert p["answerFound"] is False and p["sources"] == []
    assert len(backend.prompts) == asked  # nothing readable: not found without the model
    reader = {"collection": "ops/secure", "principals": ["group:sre"]}
    p = prediction(client.post(RAG, json={**ask, "useCaseConfig": reader}))
    assert p["answerFound"] is True and p["sources"] == ["vault.md"]
    assert "rotates every Tuesday" in backend.prompts[-1]


def test_a_likely_refusal_at_the_first_token_becomes_not_found(tmp_path: Path) -> None:
    """The same refusal gate as /answer: above it the output is replaced by
    the not-found answer."""
    app, backend = build(tmp_path)
    backend.refusal_probability = 0.9
    p = prediction(app.test_client().post(RAG, json=T1))
    assert p["answerFound"] is False and p["sources"] == []
    assert p["response"] == "SOURCES:\nANSWER: Not possible to answer given this content."
    assert len(backend.prompts) == 1
    assert p["tokensUsed"]["promptTokens"] > 0 and p["tokensUsed"]["completionTokens"] == 0
    backend.refusal_probability = 0.0
    p = prediction(app.test_client().post(RAG, json=T1))
    assert p["answerFound"] is True and p["response"] == T1_OUTPUT


KIOSK = {"body": "The kiosk's manager is Dana Ortiz.", "source": "http://kiosk"}
MUSEUM = {"body": "The museum is closed on Mondays.", "source": "http://museum"}


def test_a_prose_answer_gets_the_contract_written_from_the_evidence(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "Dana Ortiz manages the kiosk.")
    body = {"batch": [{"text": "Who manages the kiosk?", "documents": [MUSEUM, KIOSK]}]}
    p = prediction(app.test_client().post(RAG, json=body))
    assert p["answer"] == "Dana Ortiz manages the kiosk." and p["answerFound"] is True
    assert p["sources"] == ["http://kiosk"]
    assert p["response"] == "SOURCES:\n- 1\nANSWER: Dana Ortiz manages the kiosk."


def test_a_cited_document_without_the_answer_is_replaced(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "SOURCES:\n- 0\nANSWER: Dana Ortiz.")
    body = {"batch": [{"text": "Who manages the kiosk?", "documents": [MUSEUM, KIOSK]}]}
    p = prediction(app.test_client().post(RAG, json=body))
    assert (
        p["sources"] == ["http://kiosk"] and p["response"] == "SOURCES:\n- 0\nANSWER: Dana Ortiz."
    )


def test_the_models_own_refusal_is_not_found_in_stream_and_body(tmp_path: Path) -> None:
    app, _ = build(tmp_path, "I don't have enough information to answer that question.")
    body = {
        "batch": [{"text": "Who manages the kiosk?", "documents": [KIOSK]}],
        "useCaseConfig": {"answerNotFoundMessage": "No idea."},
    }
    client = app.test_client()
    p = prediction(client.post(RAG, json=body))
    assert p["answerFound"] is False and p["answer"] == "No idea." and p["sources"] == []
    assert p["response"] == "SOURCES:\nANSWER: No idea."
    r = client.post(RAG, json=body, headers={"Accept": "text/event-stream"})
    events = [
        (block.split("\n")[0][7:], json.loads(block.split("\n")[1][6:]))
        for block in r.get_data(as_text=True).split("\n\n")
        if block.strip()
    ]
    deltas = "".join(data["text"] for name, data in events if name == "delta")
    assert deltas == "No idea." and events[-1][0] == "done"


def test_prose_streams_as_it_comes() -> None:
    deltas = AnswerDeltas()
    assert deltas.feed("Dana") == "Dana" and deltas.feed(" Ortiz.") == " Ortiz."
    assert deltas.finish("Dana Ortiz.") == ""
    held = AnswerDeltas()
    assert held.feed("I don't") == ""  # could still be the refusal sentence
    assert held.feed(" like it.") == "I don't like it."
