"""`edgerag serve` as a user runs it: a real process, real models, waitress on a socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests

from flask_app.settings import Settings

pytestmark = pytest.mark.real_model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(real_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flask_app.cli", "serve", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited early:\n{log_path.read_text()}")
            try:
                requests.get(base + "/health", timeout=1)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail("server did not come up within 90 s")
                time.sleep(0.2)
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


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
