"""One error handler for the app that hands each error to the surface whose
routes the request was for, so every surface answers in its own error shape
(routing 404/405 and 413 included). Core errors say their kind, status and
public message (flask_app.errors); a surface maps them to its shape.
Surfaces register a path prefix and a function that renders any exception;
the default surface takes the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, InternalServerError

from flask_app.errors import Kind, ServiceError

_log = logging.getLogger("edgerag")

KEY = "edgerag_error_surfaces"

# Renders an exception (HTTPException, BadRequest, a core error) as a response.
Render = Callable[[Exception], tuple[Response, int]]


class NotAnApiError(Exception):
    """Raised by a surface's renderer for an exception it has no rule for:
    a server bug, answered as a logged 500."""


def log_server_fault(exc: BaseException) -> None:
    """A failed model's detail goes to the log (once, wherever the error is
    answered: a response or a stream's error event); the client reads only
    its public message."""
    if isinstance(exc, ServiceError) and exc.kind is Kind.MODEL_FAILED:
        _log.error("%s", exc)


def install(app: Flask, default: Render) -> None:
    app.extensions[KEY] = []

    @app.errorhandler(Exception)
    def any_error(exc: Exception) -> tuple[Response, int]:
        if isinstance(exc, HTTPException) and exc.code == 500:
            _log.error("unhandled error", exc_info=getattr(exc, "original_exception", None))
        log_server_fault(exc)
        render = default
        for prefix, surface in app.extensions[KEY]:
            if request.path.startswith(prefix):
                render = surface
                break
        try:
            return render(exc)
        except NotAnApiError:
            # an error the surface has no rule for is a server bug: log it, say 500
            _log.error("unhandled error", exc_info=exc)
            return render(InternalServerError())


def add_surface(app: Flask, prefix: str, render: Render) -> None:
    """Errors of requests under `prefix` are rendered by `render`."""
    app.extensions[KEY].append((prefix, render))
