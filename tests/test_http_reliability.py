"""HTTP defects found by a black-box run against a live server, reproduced over
a real socket through the production server setup (waitress as `edgerag
serve` configures it): client mistakes that gave 500, a saturated LLM that
starved every route, abandoned requests that kept the model busy, bodies read
whole before refusal, a leaked model slot, echoed input."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from flask import Flask, request

from flask_app.api.http import admission
from flask_app.api.http.json_body import BadRequest
from flask_app.api.http.waitress_server import LINGER_BYTES
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import Services, assemble
from flask_app.settings import Settings
from flask_app.store import Store
from tests.http_client import free_port, raw_request, serve_in_thread, start_server


def make(
    tmp_path: Path, backend: ScriptedBackend | None = None, **options: object
) -> tuple[Flask, Settings, Services]:
    settings = Settings.load({"data_dir": tmp_path / "data", "answer_min_score": 0, **options}, {})
    services = assemble(
        settings,
        store=Store(settings.data_dir),
        llm=LLM(backend or ScriptedBackend(), max_waiters=settings.queue_size, timeout=60),
        embedder=HashEmbedder(dim=384),
    )
    return create_app(settings, services), settings, services


@pytest.fixture
def texts_app(tmp_path: Path) -> Iterator[tuple[str, ScriptedBackend, Services]]:
    """A served app holding two text passages, with a slow scripted model (~5 s/answer)
    writing one answer at a time."""
    backend = ScriptedBackend(" ".join(["word"] * 100), token_delay=0.05, n_seq=1)
    app, settings, services = make(tmp_path, backend)
    docs = [{"id": "a", "text": "The bridge opened in 1998."}, {"id": "b", "text": "Dogs bark."}]
    assert (
        app.test_client().post("/upload", json={"store_mode": "text", "items": docs}).status_code
        == 200
    )
    with serve_in_thread(app, threads=settings.http_threads) as base:
        yield base, backend, services


def read_reply(sock: socket.socket, timeout: float) -> tuple[int, str]:
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head else 0
    return status, body.decode(errors="replace")


# --- 3. a text query against another model's vectors is a client mistake ---------


def test_a_text_query_on_a_store_of_other_dimensions_is_a_400(tmp_path: Path) -> None:
    app, _, _ = make(tmp_path)
    rng = np.random.default_rng(0)
    items = [{"id": f"i{k}", "vector": rng.standard_normal(768).tolist()} for k in range(3)]
    assert (
        app.test_client().post("/upload", json={"store_mode": "vector", "items": items}).status_code
        == 200
    )
    with serve_in_thread(app) as base:
        for path in ("/search", "/answer", "/answer/stream"):
            r = requests.post(base + path, json={"query": "which bridge?"}, timeout=10)
            assert r.status_code == 400, (path, r.status_code, r.text)
            message = r.json()["message"]
            assert "768-dimensional" in message and "384-dimensional" in message, message


def test_a_text_query_on_client_vectors_of_an_unknown_model_is_a_400(tmp_path: Path) -> None:
    app, _, _ = make(tmp_path)
    rng = np.random.default_rng(0)
    items = [{"id": f"i{k}", "vector": rng.standard_normal(384).tolist()} for k in range(3)]
    client = app.test_client()
    assert client.post("/upload", json={"store_mode": "vector", "items": items}).status_code == 200
    r = client.post("/search", json={"query": "which bridge?"})
    assert r.status_code == 400 and "unknown model" in r.get_json()["message"]
    # declared as the server's embedder's vectors, text queries work
    declared = {"store_mode": "vector", "embedding_model": "hash-fake-384", "items": items}
    client.delete("/store")
    assert client.post("/upload", json=declared).status_code == 200
    assert client.post("/search", json={"query": "which bridge?"}).status_code == 200


# --- 5. a saturated LLM does not starve the other routes ------------------------------


def test_health_stays_fast_and_overflow_gets_503_at_once_while_the_llm_is_saturated(
    texts_app: tuple[str, ScriptedBackend, Services],
) -> None:
    base, _, services = texts_app
    assert services.llm is not None
    clients = 14  # more than the 8 waiters + 1 generating the defaults allow

    def ask(_: int) -> tuple[int, float, str | None]:
        started = time.perf_counter()
        r = requests.post(base + "/answer", json={"query": "When did the bridge open?"}, timeout=90)
        return r.status_code, time.perf_counter() - started, r.headers.get("Retry-After")

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(ask, i) for i in range(clients)]
        deadline = time.monotonic() + 10
        while services.llm.slots.waiting < services.llm.slots.max_waiters:
            assert time.monotonic() < deadline, "the queue never filled"
            time.sleep(0.05)
        health = []
        for _ in range(10):
            started = time.perf_counter()
            assert requests.get(base + "/health", timeout=10).ok
            health.append(time.perf_counter() - started)
        search = requests.post(base + "/search", json={"query": "bridge"}, timeout=10)
        assert search.ok
        for f in futures:
            f.cancel()
        results = [f.result() for f in futures if not f.cancelled()]
    assert max(health) < 1.0, health  # was 13-38 s
    refused = [(s, t, ra) for s, t, ra in results if s == 503]
    assert len(refused) >= clients - 9, results
    assert all(t < 2.0 and ra is not None for _, t, ra in refused), refused


# --- 6. abandoned requests free the model ---------------------------------------------


def test_clients_that_leave_stop_their_generation_and_give_up_their_place(
    texts_app: tuple[str, ScriptedBackend, Services],
) -> None:
    base, backend, _ = texts_app
    body = b'{"query": "When did the bridge open?"}'
    head = (
        "POST /answer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}"
    )
    socks = [raw_request(base, head, body) for _ in range(3)]
    time.sleep(1.0)
    for s in socks:
        s.close()
    started = time.perf_counter()
    backend._reply = "It opened in 1998."
    r = requests.post(base + "/answer", json={"query": "When did the bridge open?"}, timeout=60)
    elapsed = time.perf_counter() - started
    assert r.ok and r.json()["answer"] == "It opened in 1998."
    assert elapsed < 4.0, elapsed  # three 5 s answers generated for nobody: ~15 s
    assert backend.closed_early >= 1


# --- 7. oversized and mistyped bodies are refused from their headers ------------------


def test_an_oversized_body_is_refused_from_its_declared_length(
    texts_app: tuple[str, ScriptedBackend, Services],
) -> None:
    base, _, _ = texts_app
    started = time.perf_counter()
    sock = raw_request(
        base,
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {200 << 20}",
        b"{" + b" " * 1000,
    )
    status, body = read_reply(sock, 5)
    sock.close()
    assert status == 413 and '"status":"error"' in body and "larger than the limit" in body
    assert time.perf_counter() - started < 2.0


def test_a_chunked_body_is_refused_once_it_passes_the_limit(tmp_path: Path) -> None:
    app, _, _ = make(tmp_path, max_body_mb=1)
    with serve_in_thread(app) as base:
        sock = raw_request(
            base,
            "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked",
        )
        chunk = b" " * (256 << 10)
        sent = 0
        try:
            for _ in range(320):  # 80 MiB at most; the old server read all of it
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, body = read_reply(sock, 5)
        sock.close()
    assert status == 413 and "larger than the limit" in body, (status, body)
    # refused soon after 1 MiB; then at most LINGER_BYTES are read and dropped
    # so the client can read its 413, and the rest sat in the kernel's buffers
    assert sent <= (1 << 20) + LINGER_BYTES + (12 << 20), sent


def test_a_wrong_content_type_is_refused_before_the_body(
    texts_app: tuple[str, ScriptedBackend, Services],
) -> None:
    base, _, _ = texts_app
    started = time.perf_counter()
    sock = raw_request(
        base,
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {50 << 20}",
    )
    status, body = read_reply(sock, 5)
    sock.close()
    assert status == 415 and "Content-Type must be application/json" in body
    assert time.perf_counter() - started < 2.0


def test_the_apps_hook_leaves_to_the_server_what_its_parser_checked() -> None:
    """Under edgerag's server the parser applies the body rules, so the app's
    hook does not check them again; under any other server (here the test
    client) the hook refuses as before."""
    app = Flask(__name__)
    admission.install(app)
    app.register_error_handler(BadRequest, lambda e: (e.message, e.status))

    @app.post("/echo")
    def echo() -> str:
        return str(admission.ADMITTED in request.environ)

    wrong = {"data": b"x", "content_type": "text/plain"}
    assert app.test_client().post("/echo", **wrong).status_code == 415
    told = app.test_client().post("/echo", environ_overrides={admission.ADMITTED: True}, **wrong)
    assert told.status_code == 200
    with serve_in_thread(app) as base:
        served = requests.post(f"{base}/echo", json={}, timeout=10)
        assert served.text == "True"
        plain = {"Content-Type": "text/plain"}
        refused = requests.post(f"{base}/echo", data=b"x", headers=plain, timeout=10)
        assert refused.status_code == 415


# --- 9. a stream closed before it started releases the model --------------------------


def test_a_stream_closed_before_its_first_read_releases_the_model(tmp_path: Path) -> None:
    app, _, services = make(tmp_path)
    client = app.test_client()
    docs = [{"id": "a", "text": "The bridge opened in 1998."}]
    assert client.post("/upload", json={"store_mode": "text", "items": docs}).status_code == 200
    assert services.llm is not None
    environ: dict[str, Any] = {}
    with app.test_request_context(
        "/answer/stream", method="POST", json={"query": "When did the bridge open?"}
    ) as ctx:
        environ = ctx.request.environ
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc: Any = None) -> Any:
        statuses.append(status)
        return lambda data: None

    body = app.wsgi_app(environ, start_response)
    assert statuses == ["200 OK"] and services.llm.slots.holders == 1
    body.close()  # type: ignore[attr-defined]  # the server gives up before iterating
    assert services.llm.slots.holders == 0


# --- 11. error messages do not echo unbounded input ----------------------------------


def test_error_messages_do_not_echo_megabytes_of_input(tmp_path: Path) -> None:
    app, _, _ = make(tmp_path)
    client = app.test_client()
    items = [{"id": "a", "text": "t"}]
    assert client.post("/upload", json={"store_mode": "text", "items": items}).status_code == 200
    big = "x" * 1_000_000
    for method, path, body in [
        ("POST", "/upload", {"store_mode": "text", "embedding_model": big, "items": items}),
        ("GET", "/export?limit=" + "9" * 100_000, None),
    ]:
        r = client.open(path, method=method, json=body)
        assert 400 <= r.status_code < 500, (path, r.status_code)
        assert len(r.data) < 2000, (path, len(r.data))


def test_binding_a_public_address_without_keys_refuses_to_start(tmp_path: Path) -> None:
    base = ["--no-llm", "--no-embedder", "--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0"]
    cmd = [sys.executable, "-m", "flask_app.cli", "serve", "--port", str(free_port()), *base]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "refusing to serve 0.0.0.0 without an API key" in refused.stderr
    assert "--insecure" in refused.stderr

    log = tmp_path / "insecure.log"
    server = start_server([*base, "--insecure"], log, timeout=30)
    server.stop()
    assert "Warning: --insecure: 0.0.0.0 exposes every route" in log.read_text()

    log = tmp_path / "keyed.log"
    server = start_server([*base, "--api-key", "k-public-1"], log, timeout=30)
    try:
        assert requests.get(server.base + "/health", timeout=5).status_code == 200
        assert requests.get(server.base + "/export", timeout=5).status_code == 401
    finally:
        server.stop()
    assert "Warning" not in log.read_text()
    assert "k-public-1" not in log.read_text()


def test_settings_keep_http_threads_free_of_llm_waiters(tmp_path: Path) -> None:
    from flask_app.settings import SettingsError

    with pytest.raises(SettingsError, match="http_threads"):
        Settings.load({"data_dir": tmp_path, "http_threads": 8, "queue_size": 8}, {})
    Settings.load({"data_dir": tmp_path, "http_threads": 13, "queue_size": 8}, {})


def test_threads_are_a_shared_budget_not_all_cores_each(tmp_path: Path) -> None:
    settings = Settings.load({"data_dir": tmp_path}, {})
    assert settings.embed_threads <= max(1, settings.llm_threads // 2)
    store = Store(tmp_path / "d", search_threads=1)
    c = store.edge()
    c.upsert(["a"], np.ones((1, 8), np.float32), ["t"], [None], mode="vector", embedding_model=None)
    assert c._index is not None and c._index.threads == 1
    store.close()


def test_a_blocked_thread_does_not_hang_the_waiter_lock() -> None:
    # a waiter for the model polls its client, never waits unbounded
    from flask_app.inference.errors import LLMCancelled

    llm = LLM(ScriptedBackend("x", n_seq=1), max_waiters=4)
    held = llm.stream([{"role": "user", "content": "hold"}])
    gone = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            llm.stream([{"role": "user", "content": "wait"}], timeout=30, abandoned=gone.is_set)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    started = time.perf_counter()
    gone.set()
    t.join(5)
    assert isinstance(errors[0], LLMCancelled) and time.perf_counter() - started < 1.0
    assert llm.slots.waiting == 0
    held.close()


# --- 8. every client reads the early refusal (lingering close) -------------------------


def test_urllib_reads_the_413_of_an_over_limit_body(tmp_path: Path) -> None:
    """The client is still sending when the 413 is decided; the server reads
    and discards the rest (bounded) before closing, so the standard library's
    client sees the response instead of `Connection reset by peer`."""
    import json as json_module
    import urllib.error
    import urllib.request

    app, _, _ = make(tmp_path, max_body_mb=1)
    body = b'{"items": "' + b"x" * (8 << 20) + b'"}'
    with serve_in_thread(app) as base:
        for _ in range(3):  # a reset is a race: one lucky pass proves little
            request = urllib.request.Request(
                base + "/upload", data=body, headers={"Content-Type": "application/json"}
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=20)
            assert refused.value.code == 413
            payload = json_module.loads(refused.value.read())
            assert payload["status"] == "error" and "larger than the limit" in payload["message"]


def test_http_client_reads_the_413_of_an_over_limit_body(tmp_path: Path) -> None:
    import http.client
    import json as json_module

    app, _, _ = make(tmp_path, max_body_mb=1)
    body = b"[" + b"0," * (4 << 20) + b"0]"
    with serve_in_thread(app) as base:
        host, port = base.removeprefix("http://").split(":")
        for _ in range(3):
            connection = http.client.HTTPConnection(host, int(port), timeout=20)
            try:
                connection.request(
                    "POST", "/search", body=body, headers={"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                assert response.status == 413
                assert "larger than the limit" in json_module.loads(response.read())["message"]
            finally:
                connection.close()


def test_a_client_that_keeps_sending_is_cut_off_after_the_linger(tmp_path: Path) -> None:
    """The lingering read is bounded: a client streaming without end is closed
    within seconds, having read its 413."""
    app, _, _ = make(tmp_path, max_body_mb=1)
    with serve_in_thread(app) as base:
        sock = raw_request(
            base,
            "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {1 << 30}",
        )
        started = time.perf_counter()
        chunk = b" " * (64 << 10)
        closed = False
        while time.perf_counter() - started < 20:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        elapsed = time.perf_counter() - started
        sock.close()
    assert closed and elapsed < 10, elapsed
