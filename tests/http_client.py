"""One small interface over Flask's test client and a real socket, so the same
API tests run in-process and against waitress over TCP."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import requests
from flask import Flask
from waitress.server import create_server


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(app: Flask) -> Iterator[str]:
    """The production WSGI server (waitress) on a free loopback port."""
    port = free_port()
    server = create_server(app, host="127.0.0.1", port=port, threads=4)
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
        server.close()
        server.task_dispatcher.shutdown(timeout=2)
        thread.join(2)
