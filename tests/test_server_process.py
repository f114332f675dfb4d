"""`edgerag serve` as a user runs it: a real process, real models, waitress on a socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from flask_app.settings import Settings
from tests.http_client import ServerFailed, start_server

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def server(real_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("serve") / "server.log"
    try:
        running = start_server([], log)
    except ServerFailed as exc:
        pytest.fail(str(exc))
    yield running.base
    running.stop()


def test_health_reports_both_default_models(server: str) -> None:
    r = requests.get(server + "/health", timeout=5)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["llm"]["id"] == "qwen2.5-coder-0.5b-instruct-awq:q4_0"
    assert body["llm"]["n_ctx"] == 4096
    assert body["embedder"]["id"] == "all-minilm-l6-v2:f16"
    assert body["embedder"]["dimension"] == 384
    assert r.headers["Server"] == "edgerag"


def test_errors_are_json_over_the_socket(server: str) -> None:
    r = requests.get(server + "/missing", timeout=5)
    assert r.status_code == 404
    assert r.headers["Content-Type"] == "application/json"
