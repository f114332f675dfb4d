"""Servers of one cluster keep no records of their own: the file catalog,
conversation memory, async predictions and research runs one server writes
are read through another (and after a restart), a job whose server died is
taken over, and the records outlive their actor being killed."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from flask import Flask, current_app
from flask.testing import FlaskClient

from flask_app.api.http.extensions import collections_of, services_of
from flask_app.app import create_app
from flask_app.cluster.records import ClusterRecords, RecordsHost
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag import jobs as jobs_module
from flask_app.rag.jobs import READY, Jobs
from flask_app.settings import Settings
from tests import stores

RAG = "/ai/prediction/rag/llama-3-8b-instruct"
ASYNC = "/ai/async-prediction/rag/llama-3-8b-instruct"
GERMANY_ANSWER = "SOURCES:\n- 0\nANSWER: The reason for going to Germany was to attend Oktoberfest."
GERMANY = {"body": "I'm off to Germany to go to the Oktoberfest!", "source": "http://e.com/1"}
DEPLOY = "# Deploys\n\nDeploys are frozen on Fridays. Hotfixes need SRE approval."


def reply(prompt: str) -> str:
    return GERMANY_ANSWER if "Germany" in prompt else "Deploys are frozen on Fridays."


@pytest.fixture
def front(tmp_path: Path) -> Iterator[Any]:
    """`front(name)`: a server (app, client, backend) joined to the test cluster."""
    stores.use("cluster")

    def start(name: str) -> tuple[Flask, FlaskClient, ScriptedBackend]:
        settings = Settings.load({"data_dir": tmp_path / name}, {})
        backend = ScriptedBackend(reply)
        services = stores.services(
            settings, LLM(backend, max_waiters=4, timeout=30), HashEmbedder()
        )
        app = create_app(settings, services)
        return app, app.test_client(), backend

    try:
        yield start
    finally:
        stores.wipe()
        stores.use("local")


def until(check: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return found


def test_a_second_server_reads_what_the_first_wrote(front: Any) -> None:
    a, client_a, _ = front("a")
    _, client_b, backend_b = front("b")
    # the file catalog: a collection made and a file ingested through A
    assert client_a.put("/namespaces/ops").status_code == 201
    assert client_a.put("/namespaces/ops/collections/runbooks").status_code == 201
    file = {"path": "deploy.md", "content_type": "text/markdown", "text": DEPLOY}
    assert client_a.post("/namespaces/ops/collections/runbooks/files", json=file).status_code == 202
    with a.app_context():
        assert collections_of(current_app).ingestor.wait_idle(30)
    files = client_b.get("/namespaces/ops/collections/runbooks/files").get_json()
    assert [(f["path"], f["status"]) for f in files["files"]] == [("deploy.md", "ready")]
    # a research run started on A is read, and finishes, through B
    run = client_a.post(
        "/namespaces/ops/collections/runbooks/research-runs",
        json={"query": "When are deploys frozen?"},
    ).get_json()
    url = f"/namespaces/ops/collections/runbooks/research-runs/{run['run_id']}"
    done = until(lambda: (r := client_b.get(url).get_json())["status"] == "succeeded" and r)
    assert "Fridays" in done["result"]["answer"]
    # conversation memory: a follow-up through B sees the turn asked through A
    first = client_a.post(RAG, json={"batch": [{"text": "Why Germany?", "documents": [GERMANY]}]})
    memory = first.get_json()["predictions"][0]["memoryUuid"]
    follow = {"batch": [{"text": "When is it held?"}], "useCaseConfig": {"memoryUuid": memory}}
    assert client_b.post(RAG, json=follow).status_code == 200
    assert "Why Germany?" in backend_b.prompts[-1]
    # an async prediction accepted by A is read through B
    job = client_a.post(ASYNC, json={"batch": [{"text": "Why?", "documents": [GERMANY]}]})
    job_id = job.get_json()["predictionId"]
    ready = until(
        lambda: (
            (r := client_b.get(f"/ai/async-prediction/{job_id}").get_json())["status"]
            != "SUBMITTED"
            and r
        )
    )
    assert ready["status"] == "READY"
    assert ready["predictions"][0]["answer"].startswith("The reason for going")


def test_records_outlive_a_server_restart_and_their_actor_being_killed(
    front: Any, tmp_path: Path
) -> None:
    a, client_a, _ = front("a")
    assert client_a.put("/namespaces/kept").status_code == 201
    first = client_a.post(RAG, json={"batch": [{"text": "Why Germany?", "documents": [GERMANY]}]})
    memory = first.get_json()["predictions"][0]["memoryUuid"]
    services_of(a).store.close()  # A exits
    records = ClusterRecords.connect(tmp_path / "unused", timeout=60)
    pid = ray.get(records.actor.where.remote(), timeout=60)["pid"]
    os.kill(pid, signal.SIGKILL)  # Ray restarts it on its node; calls wait for it
    _, client_c, backend_c = front("c")  # a new server, another data directory
    assert client_c.get("/namespaces/kept").status_code == 200
    follow = {"batch": [{"text": "When is it held?"}], "useCaseConfig": {"memoryUuid": memory}}
    assert client_c.post(RAG, json=follow).status_code == 200
    assert "Why Germany?" in backend_c.prompts[-1]
    assert ray.get(records.actor.where.remote(), timeout=60)["pid"] != pid


def test_a_job_whose_server_died_is_taken_over(front: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_module, "LEASE_S", 1.0)
    front("a")  # starts the records actor
    records = ClusterRecords.connect(Path("unused"), timeout=60)
    table = records.job_table("takeover", retention_s=3600.0)
    hold = threading.Event()
    dying = Jobs(table, poll_s=0.1)
    dying.handle("k", lambda payload: (hold.wait(30), {"by": "dying"})[1])
    job = dying.submit("k", {"n": 1})
    until(lambda: (j := dying.get(job)) and j.running)

    class Lost:  # the dying server's calls no longer reach the table: its lease runs out
        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: None

    dying.table = Lost()  # type: ignore[assignment]
    taker = Jobs(records.job_table("takeover", retention_s=3600.0), poll_s=0.1)
    taker.handle("k", lambda payload: {"by": "taker", "n": payload["n"]})
    try:
        taker.start()  # nothing it can claim yet: it watches the held job
        found = until(lambda: (j := taker.get(job)) and j.status == READY and j, seconds=20)
        assert found.result == {"by": "taker", "n": 1}
    finally:
        hold.set()


def test_the_records_host_opens_each_record_once_per_options(tmp_path: Path) -> None:
    host = RecordsHost(str(tmp_path))
    host.call("jobs", {"name": "j", "retention_s": 60.0}, "pending", (), {})
    host.call("jobs", {"name": "j", "retention_s": 60.0}, "pending", (), {})
    host.call("conversations", {"max_turns": 3, "ttl_s": 60.0}, "turns", ("m",), {})
    assert len(host._open) == 2
    assert (tmp_path / "j.sqlite3").is_file() and (tmp_path / "conversations.sqlite3").is_file()


def test_records_gone_for_good_answer_503_and_health_says_so(front: Any) -> None:
    _, client, _ = front("a")
    assert client.put("/namespaces/ops").status_code == 201
    records = ClusterRecords.connect(Path("unused"), timeout=60)
    ray.kill(records.actor, no_restart=True)  # as if its node never came back
    until(records.failures)  # ray.kill returns before the actor is gone
    r = client.get("/namespaces/ops")
    assert r.status_code == 503 and int(r.headers["Retry-After"]) > 0
    r = client.post(RAG, json={"batch": [{"text": "Why Germany?", "documents": [GERMANY]}]})
    assert r.status_code == 503, r.get_json()
    health = client.get("/health").get_json()
    assert health["status"] == "degraded" and "records" in health["unavailable"]
