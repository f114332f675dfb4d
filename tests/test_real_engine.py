"""The Engine surface on the real default models: E1 (cited answer whose span
reads back as the supporting sentence), E3 (no markers) and E5 (filter),
with a Markdown file and a PDF; a research run; and a Lucidworks RAG
request answered from the same collection."""

from __future__ import annotations

import base64
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import current_app
from flask.testing import FlaskClient

from flask_app.api.http.extensions import collections_of
from flask_app.app import create_app
from flask_app.services import load_services
from flask_app.settings import Settings
from tests.http_client import free_port, start_server
from tests.test_engine import DEPLOY, STAGING, _pdf

pytestmark = pytest.mark.real_model

ASK = "/namespaces/ops/collections/runbooks:answer"


@pytest.fixture(scope="module")
def client(
    real_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FlaskClient]:
    settings = Settings.load(
        {
            "data_dir": tmp_path_factory.mktemp("engine") / "data",
            "model_dir": real_settings.model_dir,
        },
        {},
    )
    services = load_services(settings)
    app = create_app(settings, services)
    with app.test_client() as c:
        c.put("/namespaces/ops")
        c.put("/namespaces/ops/collections/runbooks")
        files = [
            {
                "path": "runbooks/deploy.md",
                "content_type": "text/markdown",
                "text": DEPLOY,
                "metadata": {"environment": "production"},
            },
            {
                "path": "runbooks/staging.pdf",
                "content_type": "application/pdf",
                "data": base64.b64encode(_pdf([STAGING])).decode(),
                "metadata": {"environment": "staging"},
            },
        ]
        for body in files:
            assert (
                c.post("/namespaces/ops/collections/runbooks/files", json=body).status_code == 202
            )
        with app.app_context():
            assert collections_of(current_app).ingestor.wait_idle(60)
        listed = c.get("/namespaces/ops/collections/runbooks/files").get_json()["files"]
        assert [f["status"] for f in listed] == ["ready", "ready"]
        yield c
    services.store.close()


def test_e1_answer_cites_the_supporting_sentence(client: FlaskClient) -> None:
    body = client.post(ASK, json={"query": "When are deploys frozen?"}).get_json()
    assert "Friday" in body["answer"]
    refs = re.findall(r"\[\[(SRC:\d{4})\]\]", body["answer"])
    assert refs and all(any(s["ref"] == r for s in body["sources"]) for r in refs)
    cited = [s for s in body["sources"] if s["cited"]]
    span = client.post(
        "/namespaces/ops/collections/runbooks:readSpans", json={"spans": [cited[0]["span"]]}
    ).get_json()["spans"][0]
    assert "Deploys are frozen on Fridays." in span["text"]
    assert span["path"] == "runbooks/deploy.md"


def test_e3_no_markers(client: FlaskClient) -> None:
    body = client.post(
        ASK, json={"query": "When are deploys frozen?", "sources": "none"}
    ).get_json()
    assert body["sources"] == [] and "[[SRC:" not in body["answer"] and "Friday" in body["answer"]


def test_e5_filter_keeps_to_the_pdf(client: FlaskClient) -> None:
    body = client.post(
        ASK,
        json={
            "query": "When is the staging cluster rebuilt?",
            "filter": "metadata.environment = staging",
        },
    ).get_json()
    assert "Monday" in body["answer"]
    assert body["sources"] and all(s["path"] == "runbooks/staging.pdf" for s in body["sources"])


def test_a_research_run_answers_in_the_background(client: FlaskClient) -> None:
    runs = "/namespaces/ops/collections/runbooks/research-runs"
    queued = client.post(runs, json={"query": "When are deploys frozen?"}).get_json()
    deadline = time.monotonic() + 120
    while (run := client.get(f"{runs}/{queued['run_id']}").get_json())["status"] in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert run["status"] == "succeeded", run
    assert "Friday" in run["result"]["answer"] and run["result"]["usage"] == {"credits": 10}
    assert any(s["cited"] and s["path"] == "runbooks/deploy.md" for s in run["result"]["sources"])


def test_lucidworks_rag_over_the_collection(client: FlaskClient) -> None:
    """The Lucidworks surface answering from this collection (spec §10 extension)."""
    body = {
        "batch": [{"text": "When is the staging cluster rebuilt?"}],
        "useCaseConfig": {"collection": "ops/runbooks"},
    }
    r = client.post("/ai/prediction/rag/llama-3-8b-instruct", json=body)
    assert r.status_code == 200, r.get_json()
    p = r.get_json()["predictions"][0]
    assert p["answerFound"] is True and "Monday" in p["answer"]
    assert p["sources"] == ["runbooks/staging.pdf"]


def test_a_file_being_ingested_at_kill_9_ends_ready_after_restart(
    real_settings: Settings, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    args = ["--no-llm", "--data-dir", str(data_dir), "--model-dir", str(real_settings.model_dir)]
    port = free_port()
    first = start_server(args, tmp_path / "server.log", port=port)
    base = first.base + "/namespaces/ops"
    requests.put(base, timeout=10)
    requests.put(base + "/collections/big", timeout=10)
    text = "\n\n".join(
        f"Section {i}. " + "The deploy window closes at noon. " * 12 for i in range(400)
    )
    body = {"path": "big.md", "content_type": "text/markdown", "text": text}
    file_id = requests.post(base + "/collections/big/files", json=body, timeout=30).json()[
        "file_id"
    ]
    url = f"{base}/collections/big/files/{file_id}"
    deadline = time.monotonic() + 60
    while requests.get(url, timeout=10).json().get("progress", {}).get("chunks_done", 0) == 0:
        assert time.monotonic() < deadline, "ingestion never started"
        time.sleep(0.05)
    first.proc.send_signal(signal.SIGKILL)  # in the middle of the ingestion
    first.proc.wait(10)
    second = start_server(args, tmp_path / "server.log", port=port)
    try:
        deadline = time.monotonic() + 120
        while (got := requests.get(url, timeout=10).json())["status"] == "processing":
            assert time.monotonic() < deadline, "stuck in processing after the restart"
            time.sleep(0.2)
        assert got["status"] == "ready" and got["char_count"] == len(text)
    finally:
        second.stop()
