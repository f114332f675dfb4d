"""One small interface over Flask's test client and a real socket, so the same
API tests run in-process and against waitress over TCP."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import requests
from flask import Flask

from flask_app.api.http.waitress_server import make_server


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]


class Api(Protocol):
    def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply: ...


class InProcess:
    def __init__(self, app: Flask) -> None:
        self.client = app.test_client()

    def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        kwargs: dict[str, Any] = {"headers": headers or {}}
        if data is not None:
            kwargs["data"] = data
        elif json is not None:
            kwargs["json"] = json
        r = self.client.open(path, method=method, **kwargs)
        return Reply(r.status_code, r.get_json(silent=True), dict(r.headers))


class OverSocket:
    def __init__(self, base: str) -> None:
        self.base = base
        self.session = requests.Session()

    def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        r = self.session.request(
            method,
            self.base + path,
            json=json if data is None else None,
            data=data,
            headers=headers,
            timeout=30,
        )
        try:
            body = r.json()
        except ValueError:
            body = None
        return Reply(r.status_code, body, dict(r.headers))

    def close(self) -> None:
        self.session.close()


def raw_request(base: str, head: str, body: bytes = b"") -> socket.socket:
    """A request written by hand on a new connection (`head` without the
    blank line), left open for the caller to read or drop."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(head.encode() + b"\r\n\r\n" + body)
    return sock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(app: Flask, threads: int = 4) -> Iterator[str]:
    """The production WSGI server (waitress, as `edgerag serve` sets it up) on a
    free loopback port."""
    port = free_port()
    server = make_server(app, host="127.0.0.1", port=port, threads=threads)
    stopping = threading.Event()

    def run() -> None:
        try:
            server.run()
        except (OSError, ValueError):
            # closing the listening socket under the poll loop ends it this way
            if not stopping.is_set():
                raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stopping.set()
        # workers first, as waitress's own close does: a response still being
        # written pulls the trigger, which server.close() closes
        server.task_dispatcher.shutdown(timeout=2)
        server.close()
        thread.join(2)
        for channel in list(server._map.values()):  # connections still open (clients that left)
            channel.close()


class ServerFailed(RuntimeError):
    """`edgerag serve` exited or did not answer in time."""


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    base: str
    ready_s: float  # seconds from start until /health answered

    def stop(self) -> None:
        """SIGINT (a clean shutdown), SIGKILL if that takes over 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(10)


def start_server(
    args: list[str], log: Path | None = None, *, port: int | None = None, timeout: float = 90.0
) -> ServerProcess:
    """`edgerag serve ARGS` as a real process on a loopback port, once /health answers."""
    port = port or free_port()
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "flask_app.cli", "serve", "--port", str(port), *args]
    if log is None:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            requests.get(base + "/health", timeout=1)
            return ServerProcess(proc, base, time.perf_counter() - started)
        except (requests.ConnectionError, requests.Timeout):  # not up, or still opening the store
            if proc.poll() is not None or time.perf_counter() - started > timeout:
                proc.kill()
                proc.wait(10)
                detail = log.read_text() if log is not None else ""
                raise ServerFailed(f"server did not start: {' '.join(cmd)}\n{detail}") from None
            time.sleep(0.05)
