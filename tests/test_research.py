"""Engine research runs (spec §8) with the scripted model: submit → queued →
running → succeeded with the `:answer` body, checks at submission, cancel
(queued and running), the time limit, ownership, and a run that outlives
the process that accepted it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_app.api.engine import research
from flask_app.api.http.extensions import services_of
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag.jobs import Jobs
from flask_app.records import LocalRecords
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store
from tests.test_engine import DEPLOY, idle

RUNS = "/namespaces/ops/collections/runbooks/research-runs"
ASK = {"query": "When are deploys frozen?"}


def build(data: Path, backend: ScriptedBackend, **options: Any) -> tuple[Flask, FlaskClient]:
    settings = Settings.load({"data_dir": data, **options}, {})
    services = assemble(
        settings, Store(settings.data_dir), LLM(backend, timeout=60), HashEmbedder()
    )
    app = create_app(settings, services)
    return app, app.test_client()


def with_runbooks(
    data: Path, backend: ScriptedBackend, headers: dict[str, str] | None = None, **options: Any
) -> tuple[Flask, FlaskClient]:
    """ops/runbooks holding deploy.md, ready."""
    app, client = build(data, backend, **options)
    assert client.put("/namespaces/ops", headers=headers).status_code == 201
    assert client.put("/namespaces/ops/collections/runbooks", headers=headers).status_code == 201
    file = {"path": "runbooks/deploy.md", "content_type": "text/markdown", "text": DEPLOY}
    r = client.post("/namespaces/ops/collections/runbooks/files", json=file, headers=headers)
    assert r.status_code == 202
    idle(app)
    return app, client


def wait_for(
    client: FlaskClient, run_id: str, done: Callable[[dict[str, Any]], bool], **kw: Any
) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        r = client.get(f"{RUNS}/{run_id}", **kw)
        assert r.status_code == 200, r.get_json()
        run: dict[str, Any] = r.get_json()
        if done(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.02)


def finished(run: dict[str, Any]) -> bool:
    return run["status"] in ("succeeded", "failed", "cancelled")


def test_a_run_is_queued_then_answers_with_the_answer_body(tmp_path: Path) -> None:
    backend = ScriptedBackend("Deploys are frozen on Fridays.")
    _, client = with_runbooks(tmp_path / "data", backend)
    r = client.post(RUNS, json={**ASK, "effort": "low"})  # effort is ignored, not validated
    assert r.status_code == 202, r.get_json()
    queued = r.get_json()
    assert set(queued) == {"request_id", "run_id", "status"} and queued["status"] == "queued"
    assert queued["run_id"].startswith("run_") and r.headers["X-Request-Id"] == queued["request_id"]

    run = wait_for(client, queued["run_id"], finished)
    assert run["status"] == "succeeded" and "error" not in run
    assert run["completed_at"] >= run["created_at"]
    result = run["result"]
    direct = client.post(
        "/namespaces/ops/collections/runbooks:answer", json={**ASK, "effort": "high"}
    )
    body = direct.get_json()
    assert result["request_id"] == queued["request_id"]
    assert result["usage"] == {"credits": research.CREDITS} and result["effort"] == "high"
    assert result["answer"] == body["answer"] and "[[SRC:0001]]" in result["answer"]
    assert result["sources"] == body["sources"]


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "message"),
    [
        (RUNS, {"query": ""}, 400, "invalid_request", "query is required."),
        (RUNS, {**ASK, "speed": 1}, 400, "invalid_request", "Unknown field: speed"),
        (
            "/namespaces/ops/collections/nothing/research-runs",
            ASK,
            404,
            "not_found",
            "Not found: collection ops/nothing",
        ),
        (
            "/namespaces/ops/collections/blank/research-runs",
            ASK,
            409,
            "collection_empty",
            "The collection has no files.",
        ),
    ],
)
def test_a_bad_run_is_refused_at_submission(
    tmp_path: Path, path: str, body: dict[str, Any], status: int, code: str, message: str
) -> None:
    backend = ScriptedBackend("x")
    _, client = with_runbooks(tmp_path / "data", backend)
    assert client.put("/namespaces/ops/collections/blank").status_code == 201
    r = client.post(path, json=body)
    assert r.status_code == status, r.get_json()
    assert r.get_json()["error"]["code"] == code and r.get_json()["error"]["message"] == message
    assert backend.prompts == []


def test_cancel_a_queued_run_and_a_running_one(tmp_path: Path) -> None:
    backend = ScriptedBackend("Deploys are frozen on Fridays " + "and so on " * 200)
    backend.token_delay = 0.01
    _, client = with_runbooks(tmp_path / "data", backend)
    first = client.post(RUNS, json=ASK).get_json()["run_id"]
    second = client.post(RUNS, json=ASK).get_json()["run_id"]
    wait_for(client, first, lambda run: run["status"] == "running")
    assert client.get(f"{RUNS}/{second}").get_json()["status"] == "queued"
    assert client.put("/namespaces/ops/collections/other").status_code == 201
    elsewhere = f"/namespaces/ops/collections/other/research-runs/{second}:cancel"
    assert client.post(elsewhere).status_code == 404  # and the run is left alone
    assert client.get(f"{RUNS}/{second}").get_json()["status"] == "queued"

    r = client.post(f"{RUNS}/{second}:cancel")
    assert r.status_code == 200 and r.get_json()["status"] == "cancelled"
    assert r.get_json()["completed_at"] is not None and "result" not in r.get_json()
    assert client.post(f"{RUNS}/{first}:cancel").get_json()["status"] in ("running", "cancelled")
    run = wait_for(client, first, finished)
    assert run["status"] == "cancelled" and backend.closed_early == 1
    assert len(backend.prompts) == 1  # the cancelled queued run never reached the model
    # a finished run is returned as it is
    assert client.post(f"{RUNS}/{first}:cancel").get_json()["status"] == "cancelled"
    assert client.post(f"{RUNS}/{first}:stop").status_code == 404
    assert client.post(f"{RUNS}/{first}").status_code == 405


def test_a_run_past_its_time_limit_fails_with_the_error_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(research, "TIME_LIMIT_S", 0.3)
    backend = ScriptedBackend("Deploys are frozen on Fridays " + "and so on " * 200)
    backend.token_delay = 0.01
    _, client = with_runbooks(tmp_path / "data", backend)
    run_id = client.post(RUNS, json=ASK).get_json()["run_id"]
    run = wait_for(client, run_id, finished)
    assert run["status"] == "failed" and "result" not in run
    assert run["error"] == {
        "code": "temporarily_unavailable",
        "message": "The research run did not complete within 15 minutes.",
        "retryable": True,
        "details": {},
    }


def test_runs_are_found_only_under_their_collection_and_with_their_key(tmp_path: Path) -> None:
    backend = ScriptedBackend("Deploys are frozen on Fridays.")
    one = {"Authorization": "Bearer k-one"}
    two = {"Authorization": "Bearer k-two"}
    _, client = with_runbooks(tmp_path / "data", backend, api_keys="k-one,k-two", headers=one)
    run_id = client.post(RUNS, json=ASK, headers=one).get_json()["run_id"]
    assert wait_for(client, run_id, finished, headers=one)["status"] == "succeeded"
    r = client.get(f"{RUNS}/{run_id}", headers=two)
    assert r.status_code == 404
    assert r.get_json()["error"]["message"] == f"Not found: research run {run_id}"
    assert client.post(f"{RUNS}/{run_id}:cancel", headers=two).status_code == 404
    assert client.put("/namespaces/ops/collections/other", headers=one).status_code == 201
    other = f"/namespaces/ops/collections/other/research-runs/{run_id}"
    assert client.get(other, headers=one).status_code == 404
    assert client.get(f"{RUNS}/run_unknown", headers=one).status_code == 404


def test_a_run_accepted_before_a_crash_runs_after_the_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    hold, generating = threading.Event(), threading.Event()

    def stuck(prompt: str) -> str:
        generating.set()
        hold.wait(20)  # the first process "dies" while its worker holds the run
        return "never"

    try:
        first, crashed = with_runbooks(data, ScriptedBackend(stuck))
        run_id = crashed.post(RUNS, json=ASK).get_json()["run_id"]
        wait_for(crashed, run_id, lambda run: run["status"] == "running")
        assert generating.wait(10)  # the model is on it
        services_of(first).store.close()  # releases the data directory, as an exit would
        backend = ScriptedBackend("Deploys are frozen on Fridays.")
        _, restarted = build(data, backend)
        run = wait_for(restarted, run_id, finished)
        assert run["status"] == "succeeded" and "Fridays" in run["result"]["answer"]
    finally:
        hold.set()


def test_only_the_owner_can_cancel_a_job(tmp_path: Path) -> None:
    hold = threading.Event()
    jobs = Jobs(LocalRecords(tmp_path).job_table("jobs", retention_s=3600.0))
    jobs.handle("k", lambda payload: (hold.wait(10), {"done": True})[1])
    running = jobs.submit("k", {}, owner="alice")
    queued = jobs.submit("k", {}, owner="alice")
    try:
        deadline = time.monotonic() + 10
        while not (job := jobs.get(running, "alice")) or not job.running:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert jobs.cancel(running, "mallory") is None and jobs.cancel(queued, "mallory") is None
        assert not jobs.cancel_requested()
        assert jobs.get(queued, "alice").status == "SUBMITTED"  # type: ignore[union-attr]
    finally:
        hold.set()
