from __future__ import annotations

import dataclasses

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_app.api.http.extensions import services_of
from flask_app.app import create_app
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store


def test_health_reports_models(client: FlaskClient) -> None:
    body = client.get("/health").get_json()
    assert body["status"] == "ok"
    assert body["llm"]["id"] == "scripted-fake"
    assert body["llm"]["max_waiting"] == 2
    assert body["embedder"] == {"id": "hash-fake-384", "dimension": 384, "max_tokens": 512}


def test_unknown_path_is_json_404(client: FlaskClient) -> None:
    r = client.get("/no-such-thing")
    assert r.status_code == 404 and r.is_json
    assert r.get_json()["message"]


def test_wrong_method_is_json_405(client: FlaskClient) -> None:
    r = client.delete("/health")
    assert r.status_code == 405 and r.get_json()["status"] == "error"


def test_llm_overload_maps_to_503_with_retry_after(app: Flask) -> None:
    llm = services_of(app).llm
    assert llm is not None

    def ask() -> str:
        return llm.chat([{"role": "user", "content": "hi"}])

    app.add_url_rule("/_test/ask", "ask", ask)
    llm.max_waiters = 0
    held = [llm.stream([{"role": "user", "content": "hold"}]) for _ in range(llm.engine.n_seq)]
    with app.test_client() as c:
        r = c.get("/_test/ask")
    for stream in held:
        stream.close()
    assert r.status_code == 503
    assert int(r.headers["Retry-After"]) >= 1
    assert "queue is full" in r.get_json()["message"]


def test_llm_failure_maps_to_500_llm_request_failed(app: Flask) -> None:
    llm = services_of(app).llm
    assert llm is not None
    llm.backend.fail_after = 0  # type: ignore[attr-defined]
    app.add_url_rule("/_test/ask", "ask", lambda: llm.chat([{"role": "user", "content": "x"}]))
    r = app.test_client().get("/_test/ask")
    assert r.status_code == 500 and r.get_json()["message"] == "LLM request failed"


def test_health_without_models(settings: Settings) -> None:
    app = create_app(
        settings, assemble(settings, store=Store(settings.data_dir), llm=None, embedder=None)
    )
    body = app.test_client().get("/health").get_json()
    assert body["status"] == "ok"
    assert body["llm"] is None and body["embedder"] is None


def test_metrics_count_requests_and_generations(client: FlaskClient) -> None:
    client.post(
        "/upload", json={"store_mode": "text", "items": [{"id": "a", "text": "Open 9 to 5."}]}
    )
    answer = client.post("/answer", json={"query": "When are you open?"})
    assert answer.status_code == 200 and answer.headers["X-Request-Id"].startswith("req_")
    client.get("/nowhere")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'edgerag_http_requests_total{method="POST",route="/answer",status="200"} 1.0' in text
    assert 'route="unmatched",status="404"' in text
    assert "edgerag_store_items 1.0" in text
    assert "edgerag_llm_time_to_first_token_seconds_count 1.0" in text
    assert "edgerag_llm_completion_tokens_total" in text and "edgerag_llm_waiting 0.0" in text
    prompt_tokens = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("edgerag_llm_prompt_tokens_total ")
    )
    assert prompt_tokens > 10  # the /answer prompt: system rules, passage, question
    assert "edgerag_llm_queue_wait_seconds_count 1.0" in text
    assert "edgerag_ingestion_backlog 0.0" in text
    assert 'edgerag_jobs_pending{queue="research"} 0.0' in text
    assert 'edgerag_jobs_pending{queue="lucidworks"} 0.0' in text
    assert "edgerag_collections 0.0" in text and "edgerag_files 0.0" in text
    client.put("/namespaces/ops")
    client.put("/namespaces/ops/collections/docs")
    assert "edgerag_collections 1.0" in client.get("/metrics").get_data(as_text=True)


def test_services_are_built_once_and_no_surface_changes_them(settings: Settings) -> None:
    services = assemble(settings, Store(settings.data_dir), None, None)
    before = {f.name: getattr(services, f.name) for f in dataclasses.fields(services)}
    create_app(settings, services)
    for name, value in before.items():
        assert getattr(services, name) is value, f"{name} was replaced"
    with pytest.raises(dataclasses.FrozenInstanceError):
        services.llm = None  # type: ignore[misc]
