"""/answer and /answer/stream with the scripted fake LLM: contract, errors,
no-context rule, SSE framing over a real socket, disconnects, queueing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import sseclient
from flask import Flask

from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.client import Client, EdgeragError
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag.prompts import NO_CONTEXT_ANSWER
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store
from tests.http_client import raw_request, serve_in_thread
from tests.test_moorcheh_api import unit

DOCS = [
    {"id": "bridge", "text": "The Harlow Bridge opened in 1998. It is 412 metres long."},
    {"id": "museum", "text": "The museum is closed on Mondays."},
]


def build(
    tmp_path: Path, backend: ScriptedBackend | None, max_waiters: int = 4, **options: object
) -> Flask:
    settings = Settings.load({"data_dir": tmp_path / "data", "answer_min_score": 0, **options}, {})
    llm = LLM(backend, max_waiters=max_waiters, timeout=30) if backend else None
    services = assemble(settings, store=Store(settings.data_dir), llm=llm, embedder=HashEmbedder())
    app = create_app(settings, services)
    r = app.test_client().post("/upload", json={"store_mode": "text", "items": DOCS})
    assert r.status_code == 200
    return app


def events_of(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            lines = block.split("\n")
            name = lines[0].removeprefix("event: ")
            out.append((name, json.loads(lines[1].removeprefix("data: "))))
    return out


def test_answer_contract(tmp_path: Path) -> None:
    backend = ScriptedBackend("It opened in 1998.")
    client = build(tmp_path, backend).test_client()
    r = client.post(
        "/answer",
        json={
            "query": "When did the Harlow Bridge open?",
            "top_k": 1,
            "header_prompt": "You are a helpful assistant.",
            "footer_prompt": "Answer briefly.",
            "chat_history": [{"role": "user", "content": "Hi"}],
            "temperature": 0.3,
        },
    )
    body = r.get_json()
    assert r.status_code == 200
    assert body["answer"] == "It opened in 1998."
    assert body["model"] == "scripted-fake" and body["query"] == "When did the Harlow Bridge open?"
    assert body["context_count"] == 1
    assert body["sources"][0]["id"] == "bridge" and set(body["sources"][0]) >= {
        "id",
        "score",
        "label",
        "text",
    }
    prompt = backend.prompts[-1]
    assert prompt.startswith("<|system|>\nYou are a helpful assistant.\n<|user|>\nHi\n<|user|>\n")
    assert "Document 1:\nThe Harlow Bridge" in prompt
    assert prompt.index("Answer briefly.") < prompt.index("Question: When did")


def test_no_context_means_the_fixed_answer_and_no_llm_call(tmp_path: Path) -> None:
    backend = ScriptedBackend("should not be said")
    client = build(tmp_path, backend).test_client()
    r = client.post("/answer", json={"query": "anything", "kiosk_mode": True, "threshold": 0.99})
    assert r.get_json() == {
        "answer": NO_CONTEXT_ANSWER,
        "model": "scripted-fake",
        "query": "anything",
        "context_count": 0,
        "sources": [],
        "evidence_score": 0.0,
        "refusal_probability": None,
        "answerable_probability": None,
    }
    assert backend.prompts == []
    client.delete("/store")
    r = client.post("/answer", json={"query": "anything", "query_vector": unit(1)})
    assert r.get_json()["answer"] == NO_CONTEXT_ANSWER
    assert backend.prompts == []


def test_a_question_in_other_words_than_the_passage_reaches_the_model(tmp_path: Path) -> None:
    """A retrieved passage goes to the model however few words the question
    shares with it: moorcheh-edge answers the fixed sentence without the
    model only when nothing is retrieved, and counts what the model was given."""
    backend = ScriptedBackend("Dana Ortiz.")
    client = build(tmp_path, backend).test_client()
    body = client.post("/answer", json={"query": "Who looks after the kiosk?"}).get_json()
    assert body["answer"] == "Dana Ortiz." and len(backend.prompts) == 1
    assert body["context_count"] == len(body["sources"]) >= 1


def test_a_likely_refusal_at_the_first_token_becomes_the_fixed_sentence(tmp_path: Path) -> None:
    backend = ScriptedBackend("It opened in 1998.", refusal_probability=0.4)  # > 0.3 (default)
    client = build(tmp_path, backend).test_client()
    body = client.post("/answer", json={"query": "When did the Harlow Bridge open?"}).get_json()
    assert body["answer"] == NO_CONTEXT_ANSWER and body["refusal_probability"] == pytest.approx(0.4)
    # the model was asked: the passages it was given are reported
    assert body["context_count"] == len(body["sources"]) >= 1 and len(backend.prompts) == 1
    backend.refusal_probability = 0.01
    body = client.post("/answer", json={"query": "When did the Harlow Bridge open?"}).get_json()
    assert body["answer"] == "It opened in 1998." and body["sources"][0]["id"] == "bridge"
    # the threshold is flat: however few words a question shares with its
    # passage (evidence near 0), a model that is unlikely to refuse answers
    backend.refusal_probability = 0.15
    body = client.post("/answer", json={"query": "Who looks after the crossing?"}).get_json()
    assert body["evidence_score"] < 0.2 and body["answer"] == "It opened in 1998."


def test_a_question_about_one_product_never_reads_its_siblings_sheet(tmp_path: Path) -> None:
    """The P3's "not for swimming" is the line closest to "Can I go swimming
    with my P5?" and would read as the P5's answer: it is not shown to the model."""
    backend = ScriptedBackend("Yes.")
    app = build(tmp_path, backend)
    p3_line = "Rated IPX4: safe with sweat and rain, but not for swimming."
    p5_line = "Rated IPX7: they survive being submerged for 30 minutes."
    sheets = [
        {"id": "p3", "text": f"Pulse P3 earbuds.\n\n{p3_line}"},
        {"id": "p5", "text": f"Pulse P5 earbuds.\n\n{p5_line}"},
    ]
    client = app.test_client()
    assert client.post("/upload", json={"store_mode": "text", "items": sheets}).status_code == 200
    body = client.post("/answer", json={"query": "Can I go swimming with my P5?"}).get_json()
    assert p5_line in backend.prompts[-1] and p3_line not in backend.prompts[-1]
    assert "p3" not in [s["id"] for s in body["sources"]]
    client.post("/answer", json={"query": "Can I go swimming with my P3?"})
    assert p3_line in backend.prompts[-1] and p5_line not in backend.prompts[-1]


def test_an_answer_that_loops_is_stopped_not_run_to_max_tokens(tmp_path: Path) -> None:
    backend = ScriptedBackend("It opened in 1" + " 0" * 200)
    client = build(tmp_path, backend).test_client()
    body = client.post("/answer", json={"query": "When did the Harlow Bridge open?"}).get_json()
    assert body["answer"] == "It opened in 1" + " 0" * 12  # stopped after 12 repeats of " 0"
    assert backend.closed_early == 1
    stream = client.post("/answer/stream", json={"query": "When did the Harlow Bridge open?"})
    deltas = [d["delta"] for e, d in events_of(stream.data) if e == "token"]
    assert "".join(deltas) == events_of(stream.data)[-1][1]["answer"] == body["answer"]


def test_relevance_floor_counts_as_no_context(tmp_path: Path) -> None:
    backend = ScriptedBackend("x")
    client = build(tmp_path, backend, answer_min_score=0.99).test_client()
    r = client.post("/answer", json={"query": "quantum chromodynamics"})
    assert r.get_json()["context_count"] == 0 and backend.prompts == []


def test_llm_not_configured(tmp_path: Path) -> None:
    client = build(tmp_path, None).test_client()
    for path in ("/answer", "/answer/stream"):
        r = client.post(path, json={"query": "When did the bridge open?"})
        assert r.status_code == 400
        assert r.get_json()["message"].startswith("LLM is not configured")
        assert "--no-llm" in r.get_json()["message"]


def test_a_model_failure_is_a_server_error_llm_request_failed(tmp_path: Path) -> None:
    client = build(tmp_path, ScriptedBackend("a b c", fail_after=1)).test_client()
    r = client.post("/answer", json={"query": "When did the bridge open?"})
    assert (r.status_code, r.get_json()["message"]) == (500, "LLM request failed")


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("temperature", 2.5, "temperature"),
        ("temperature", "hot", "temperature"),
        ("chat_history", [{"role": "system", "content": "x"}], "chat_history.0.role"),
        ("chat_history", [{"role": "user", "content": "  "}], "chat_history.0.content"),
        ("chat_history", [{"role": "user"}], "chat_history.0.content"),
        ("top_k", 0, "top_k"),
        ("query", "", "query"),
        ("query_vector", ["x"], "query_vector[0] must be a number"),
        ("kiosk_mode", True, "threshold is required"),
    ],
)
def test_bad_answer_requests(tmp_path: Path, field: str, value: object, fragment: str) -> None:
    backend = ScriptedBackend("x")
    client = build(tmp_path, backend).test_client()
    body: dict[str, object] = {"query": "When?", field: value}
    for path in ("/answer", "/answer/stream"):
        r = client.post(path, json=body)
        assert r.status_code == 400 and r.is_json, (path, r.data)
        assert fragment in r.get_json()["message"]
    assert backend.prompts == []


def test_stream_events_in_order_and_deltas_join_to_the_answer(tmp_path: Path) -> None:
    client = build(tmp_path, ScriptedBackend("The bridge opened in 1998.")).test_client()
    query = "When did the bridge open, and when is the museum closed?"
    r = client.post("/answer/stream", json={"query": query, "top_k": 2})
    assert r.mimetype == "text/event-stream"
    events = events_of(r.data)
    names = [e for e, _ in events]
    assert names[0] == "meta" and names[-1] == "done" and set(names[1:-1]) == {"token"}
    meta, done = events[0][1], events[-1][1]
    assert meta["context_count"] == 2 and len(meta["sources"]) == 2 and meta["model"]
    assert "".join(d["delta"] for e, d in events if e == "token") == done["answer"]
    assert done["answer"] == "The bridge opened in 1998."
    assert {"answer", "query", "model", "context_count"} <= set(done)
    assert b'data: {"delta":"The"}' in r.data  # compact JSON, one line


def test_stream_without_context_sends_the_fixed_sentence(tmp_path: Path) -> None:
    backend = ScriptedBackend("never")
    client = build(tmp_path, backend).test_client()
    events = events_of(
        client.post(
            "/answer/stream", json={"query": "x", "kiosk_mode": True, "threshold": 1.0}
        ).data
    )
    assert events == [
        ("meta", {"model": "scripted-fake", "context_count": 0, "sources": [], "query": "x"}),
        ("token", {"delta": NO_CONTEXT_ANSWER}),
        (
            "done",
            {
                "answer": NO_CONTEXT_ANSWER,
                "query": "x",
                "model": "scripted-fake",
                "context_count": 0,
                "sources": [],
                "evidence_score": 0.0,
                "refusal_probability": None,
                "answerable_probability": None,
            },
        ),
    ]
    assert backend.prompts == []


def test_failure_mid_stream_is_an_error_event_and_no_done(tmp_path: Path) -> None:
    client = build(tmp_path, ScriptedBackend("one two three four", fail_after=2)).test_client()
    events = events_of(client.post("/answer/stream", json={"query": "bridge?"}).data)
    assert [e for e, _ in events] == ["meta", "token", "token", "error"]
    assert events[-1][1] == {"message": "LLM request failed"}


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[tuple[str, ScriptedBackend, LLM]]:
    # one sequence: one answer written at a time, two waiting
    backend = ScriptedBackend(" ".join(f"w{i}" for i in range(40)), token_delay=0.05, n_seq=1)
    app = build(tmp_path, backend, max_waiters=2)
    with serve_in_thread(app) as base:
        llm = app.extensions["edgerag"]["services"].llm
        yield base, backend, llm


def test_tokens_reach_the_client_as_generated(
    slow_server: tuple[str, ScriptedBackend, LLM],
) -> None:
    base, _, _ = slow_server
    start = time.perf_counter()
    response = requests.post(
        base + "/answer/stream", json={"query": "bridge?"}, stream=True, timeout=(5, 30)
    )
    arrivals = []
    for event in sseclient.SSEClient(response.iter_content(chunk_size=None)).events():
        arrivals.append((event.event, time.perf_counter() - start))
        if event.event in ("done", "error"):
            break
    response.close()
    first_token = next(t for e, t in arrivals if e == "token")
    done = arrivals[-1][1]
    assert arrivals[-1][0] == "done"
    assert first_token < 0.5 and done > 1.5  # 40 tokens x 50 ms: the first did not wait
    assert first_token < done / 3


def test_client_disconnect_stops_generation_and_frees_the_queue(
    slow_server: tuple[str, ScriptedBackend, LLM],
) -> None:
    base, backend, llm = slow_server
    response = requests.post(
        base + "/answer/stream", json={"query": "bridge?"}, stream=True, timeout=(5, 30)
    )
    events = sseclient.SSEClient(response.iter_content(chunk_size=None)).events()
    assert next(events).event == "meta"
    assert next(events).event == "token"
    response.close()  # the client goes away mid-answer
    closed_at = time.perf_counter()
    while (llm.slots.busy or backend.closed_early == 0) and time.perf_counter() - closed_at < 3:
        time.sleep(0.02)
    assert backend.closed_early == 1
    assert not llm.slots.busy
    assert time.perf_counter() - closed_at < 1.0


def test_a_client_leaving_a_whole_answer_stops_generation(
    slow_server: tuple[str, ScriptedBackend, LLM],
) -> None:
    """No token is written before a whole answer ends, so only reading the
    socket while the request runs can notice the client has gone."""
    base, backend, llm = slow_server
    body = b'{"query": "When did the bridge open?"}'
    head = (
        "POST /answer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}"
    )
    with raw_request(base, head, body):
        deadline = time.perf_counter() + 3
        while not llm.slots.busy and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert llm.slots.busy
    closed_at = time.perf_counter()  # 40 tokens x 50 ms would take 2 s
    while (llm.slots.busy or backend.closed_early == 0) and time.perf_counter() - closed_at < 3:
        time.sleep(0.02)
    assert backend.closed_early == 1
    assert not llm.slots.busy
    assert time.perf_counter() - closed_at < 1.0


def test_concurrent_answers_queue_in_order_and_overflow_gets_503(
    slow_server: tuple[str, ScriptedBackend, LLM],
) -> None:
    base, _, llm = slow_server  # one generating + 2 waiting allowed
    results: dict[int, tuple[int, float]] = {}
    start = time.perf_counter()

    def ask(i: int) -> None:
        r = requests.post(base + "/answer", json={"query": "When did the bridge open?"}, timeout=60)
        results[i] = (r.status_code, time.perf_counter() - start)
        if r.status_code == 503:
            assert int(r.headers["Retry-After"]) >= 1

    threads = []
    for i in range(5):
        t = threading.Thread(target=ask, args=(i,))
        t.start()
        threads.append(t)
        # start the next request once this one holds or waits for the model (a
        # busy host can take seconds to get it there: sooner, the next may overtake
        # it); `busy` is no count: it is also true while request 0 waits alone
        deadline = time.perf_counter() + 15
        while (
            i < 3
            and llm.slots.waiting + llm.slots.holders < i + 1
            and time.perf_counter() < deadline
        ):
            time.sleep(0.01)
    for t in threads:
        t.join(60)
    statuses = {i: s for i, (s, _) in results.items()}
    assert statuses == {0: 200, 1: 200, 2: 200, 3: 503, 4: 503}
    finished = sorted((results[i][1], i) for i in (0, 1, 2))
    assert [i for _, i in finished] == [0, 1, 2]  # FIFO
    assert results[3][1] < results[0][1]  # the overflow was refused at once


def test_python_client_answers(slow_server: tuple[str, ScriptedBackend, LLM]) -> None:
    base, _, _ = slow_server
    with Client(base) as client:
        body = client.answer_text("When did the bridge open?", top_k=1)
        assert body["context_count"] == 1 and body["answer"].startswith("w0 w1")
        events = list(client.answer_stream("When did the bridge open?"))
        assert events[0][0] == "meta" and events[-1][0] == "done"
        assert "".join(d["delta"] for e, d in events if e == "token") == events[-1][1]["answer"]
        with pytest.raises(EdgeragError) as info:
            list(client.answer_stream("x", temperature=9))
        assert info.value.status_code == 400


@pytest.mark.parametrize(("llm", "alone"), [("qwen2.5-coder-0.5b", 15), ("qwen2.5-coder-1.5b", 15)])
def test_each_preset_shapes_its_evidence_as_its_probe_was_collected(
    tmp_path: Path, llm: str, alone: int | None
) -> None:
    app = build(tmp_path, ScriptedBackend("x"), llm=llm)
    with app.app_context():
        assert answer_config_of(app).evidence_alone_words == alone
