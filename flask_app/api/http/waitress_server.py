"""The production server: waitress with the app's admission rules in its
request parser, JSON error bodies, client-disconnect detection, and a
lingering close after an early refusal."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import create_server
from waitress.utilities import Error

from flask_app.api.http.admission import ADMITTED, BodyRule, body_rule, refusal, too_large
from flask_app.api.http.json_body import BadRequest


class RenderedError(Error):
    """An error response the Flask app rendered (its surface's JSON shape)."""

    def __init__(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        super().__init__(body.decode("utf-8", errors="replace"))
        self.status = status
        self.headers = headers
        self.rendered = body
        self.code = int(status.split()[0])

    def to_response(  # type: ignore[override]  # waitress encodes str bodies; ours is bytes
        self, ident: str | None = None
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        headers = [(k, v) for k, v in self.headers if k.lower() != "content-length"]
        return self.status, headers, self.rendered


def render(app: Flask, method: str, path: str, error: BadRequest) -> RenderedError:
    """`error` as the app's handlers render it for `method path`."""
    with app.test_request_context(path, method=method):
        response = app.make_response(app.handle_user_exception(error))
        return RenderedError(response.status, list(response.headers.items()), response.get_data())


def parser_for(app: Flask) -> type[HTTPRequestParser]:
    class AdmittingParser(HTTPRequestParser):
        """Checks the body rule once the headers are in, and the received size
        of a chunked body as it arrives; waitress' own errors become JSON."""

        rule: BodyRule | None = None
        checked = False

        def received(self, data: bytes) -> int:
            consumed: int = super().received(data)
            if self.error is not None:
                if self.error.code == 413:  # waitress' backstop
                    rule = self.rule or body_rule(app, *self._target())
                    if rule is not None:
                        self._refuse(too_large(rule))
                        return consumed
                if getattr(self.error, "rendered", None) is None:  # not the app's own
                    self._refuse(BadRequest(str(self.error.body), self.error.code))
                return consumed
            if self.headers_finished and not self.checked:
                self.checked = True
                self.rule = body_rule(app, *self._target())
                length = self.headers.get("CONTENT_LENGTH")
                declared = int(length) if length and length.isdigit() else None
                refused = refusal(
                    self.rule, self.headers.get("CONTENT_TYPE"), declared, self.chunked
                )
                if refused is not None:
                    self._refuse(refused)
            elif (
                self.rule is not None
                and self.rule.max_bytes
                and self.body_bytes_received > self.rule.max_bytes
            ):
                self._refuse(too_large(self.rule))
            return consumed

        def _target(self) -> tuple[str, str]:
            """(method, path) as parsed; defaults while the header is unparsed."""
            method = getattr(self, "command", None) or "GET"
            path = getattr(self, "path", None) or "/"
            return str(method), str(path)

        def _refuse(self, error: BadRequest) -> None:
            self.error = render(app, *self._target(), error)
            self.completed = True

    return AdmittingParser


# After a response that closes the connection (a 413 decided from the headers)
# the client may still be sending its body; closing with unread data makes the
# kernel send a reset, and clients that write the whole body before reading
# (urllib, http.client) see `Connection reset by peer` instead of the response.
# So, as nginx's lingering close: half-close, then read and discard, bounded.
LINGER_S = 3.0
LINGER_BYTES = 16 << 20


class LingeringChannel(HTTPChannel):
    """An HTTP channel that lingers (reads and discards) before closing, and
    reads its socket during a request only once the request asks whether its
    client has gone."""

    lingering = False
    linger_until = 0.0
    linger_left = 0
    # Reading the socket while every request runs (waitress' lookahead) put
    # ~2 ms on /search's p99 (docs/performance.md); only answers need it.
    watching = False

    def check_client_disconnected(self) -> bool:  # type: ignore[override]  # stub says None
        if not self.watching:
            self.watching = True
            self.server.pull_trigger()  # the loop asks readable() again now
        return not self.connected

    def service(self) -> None:
        try:
            super().service()
        finally:
            self.watching = False

    def handle_close(self) -> None:
        sock = self.socket
        if self.lingering or not self.connected or sock is None:
            super().handle_close()
            return
        try:
            sock.shutdown(socket.SHUT_WR)  # the response is out: FIN after it
        except OSError:
            super().handle_close()
            return
        self.lingering = True
        self.will_close = self.close_when_flushed = False
        self.linger_until = time.monotonic() + LINGER_S
        self.linger_left = LINGER_BYTES

    def readable(self) -> bool:
        if not self.lingering:
            if self.requests and not self.watching:
                return False  # as waitress without lookahead
            return bool(super().readable())
        if self.linger_left <= 0 or time.monotonic() > self.linger_until:
            self.will_close = True  # closed by handle_write on the loop's next pass
            return False
        return True

    def writable(self) -> bool:
        return bool(self.will_close) if self.lingering else bool(super().writable())

    def handle_write(self) -> None:
        if self.lingering:
            super().handle_close()
            return
        super().handle_write()

    def handle_read(self) -> None:
        if not self.lingering:
            super().handle_read()
            return
        try:
            data = self.socket.recv(1 << 16) if self.socket is not None else b""
        except OSError:
            data = b""
        if not data:  # the client closed its side, or the socket failed
            super().handle_close()
            return
        self.linger_left -= len(data)


def make_server(
    app: Flask, *, host: str, port: int, threads: int, channel_timeout: float = 150.0
) -> Any:
    """A waitress server for `app`, bound and ready to `run()`."""
    limit = int(app.config.get("MAX_CONTENT_LENGTH") or 0)

    class Channel(LingeringChannel):
        parser_class = parser_for(app)

    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "threads": threads,
        "ident": "edgerag",
        "channel_timeout": channel_timeout,
        # lets the channel read while a request runs (once it asks), so a client
        # that leaves is noticed (`waitress.client_disconnected`) and its LLM work stops
        "channel_request_lookahead": 1,
        # reads of up to 256 KB instead of waitress' 8 KB: a 4 MB upload body
        # took ~520 reads, 13 ms on its own (4.7 ms now; docs/performance.md)
        "recv_bytes": 256 * 1024,
    }
    if limit:
        options["max_request_body_size"] = limit + 1  # the app's rules refuse first
    server = create_server(_admitted(app), **options)
    server.channel_class = Channel  # type: ignore[union-attr]  # one host: never multi-socket
    return server


def _admitted(app: Flask) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    """`app`, told that the parser has applied its body rules: the same check
    as a Flask hook would cost every request ~20 µs for nothing."""

    def wsgi(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        environ[ADMITTED] = True
        return app(environ, start_response)

    return wsgi


def serve(app: Flask, *, host: str, port: int, threads: int, channel_timeout: float) -> None:
    """Serve until interrupted."""
    make_server(app, host=host, port=port, threads=threads, channel_timeout=channel_timeout).run()
