"""One error handler for the app that hands each error to the surface whose
routes the request was for, so every surface answers in its own error shape
(routing 404/405 and 413 included). Core errors say their kind, status and
public message (flask_app.errors); a surface maps them to its shape.
Surfaces register a path prefix and a function that renders a service
error (the framework's own answers and server bugs become `RoutingError`s
first); the default surface takes the rest. Streams render the same way
(`as_service_error`, then the surface's table).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from flask_app.errors import Kind, ServiceError

_log = logging.getLogger("edgerag")

KEY = "edgerag_error_surfaces"

# Renders a service error in a surface's shape.
Render = Callable[[ServiceError], tuple[Response, int]]

_ROUTING_KINDS = {404: Kind.NOT_FOUND, 413: Kind.TOO_LARGE, 500: Kind.MODEL_FAILED}


class RoutingError(ServiceError):
    """What the web framework answered before any route ran (no such route,
    method, body over the limit, no or a wrong API key), or a server bug
    (500): code `http_<status>`, each surface's table words it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = f"http_{status}"
        self.kind = _ROUTING_KINDS.get(status, Kind.INVALID)

    @classmethod
    def of(cls, exc: HTTPException) -> RoutingError:
        return cls(exc.code or 500, exc.description or exc.name)


def log_server_fault(exc: BaseException) -> None:
    """A failed model's detail goes to the log (once, wherever the error is
    answered: a response or a stream's error event); the client reads only
    its public message."""
    if isinstance(exc, ServiceError) and exc.kind is Kind.MODEL_FAILED:
        _log.error("%s", exc)


def as_service_error(exc: BaseException) -> ServiceError:
    """`exc` as the error model sees it: a service error as it is, anything
    else a server bug (logged with its traceback, answered as a 500)."""
    if isinstance(exc, ServiceError):
        log_server_fault(exc)
        return exc
    _log.error("unhandled error", exc_info=exc)
    return RoutingError(500, "internal error")


def install(app: Flask, default: Render) -> None:
    app.extensions[KEY] = []

    def render() -> Render:
        for prefix, surface in app.extensions[KEY]:
            if request.path.startswith(prefix):
                return cast(Render, surface)
        return default

    @app.errorhandler(ServiceError)
    def service_error(exc: ServiceError) -> tuple[Response, int]:
        return render()(as_service_error(exc))

    @app.errorhandler(HTTPException)
    def routing_error(exc: HTTPException) -> tuple[Response, int]:
        if exc.code == 500:
            _log.error("unhandled error", exc_info=getattr(exc, "original_exception", None))
        return render()(RoutingError.of(exc))

    @app.errorhandler(Exception)
    def server_bug(exc: Exception) -> tuple[Response, int]:
        return render()(as_service_error(exc))


def add_surface(app: Flask, prefix: str, render: Render) -> None:
    """Errors of requests under `prefix` are rendered by `render`."""
    app.extensions[KEY].append((prefix, render))
