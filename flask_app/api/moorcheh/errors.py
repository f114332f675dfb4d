"""Map core exceptions to JSON HTTP errors (never an HTML page, never a 500 for bad input)."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from flask_app.api.http.json_body import BadRequest
from flask_app.api.http.messages import capped
from flask_app.inference.embed import EmbedderBusy
from flask_app.inference.llm import LLMCancelled, LLMFailed, LLMOverloaded, LLMTimeout
from flask_app.rag import RagError
from flask_app.store import CapacityError, StoreError

_log = logging.getLogger("edgerag")


def _json(status: int, message: str) -> tuple[Response, int]:
    # moorcheh-edge uses "failure" for conflicts with the store, "error" otherwise
    word = "failure" if status == 409 else "error"
    return jsonify(status=word, message=capped(message)), status


def register(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        if exc.code == 500:
            _log.error("unhandled error", exc_info=getattr(exc, "original_exception", None))
        if exc.code == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH") or 0
            return _json(
                413, f"request body is larger than the limit of {limit} bytes (--max-body-mb)"
            )
        return _json(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(BadRequest)
    def bad_request(exc: BadRequest) -> tuple[Response, int]:
        return _json(exc.status, exc.message)

    @app.errorhandler(CapacityError)
    def capacity(exc: CapacityError) -> tuple[Response, int]:
        # Exact body moorcheh-edge clients check (`is_item_limit_exceeded`).
        return jsonify(
            status="failure",
            message=capped(str(exc)),
            items=exc.current,
            max_items=exc.max_items,
            requested_new=exc.requested_new,
        ), 409

    @app.errorhandler(StoreError)
    def store_error(exc: StoreError) -> tuple[Response, int]:
        return _json(exc.status, str(exc))

    @app.errorhandler(RagError)
    def rag_error(exc: RagError) -> tuple[Response, int]:
        return _json(400, str(exc))

    @app.errorhandler(LLMOverloaded)
    def overloaded(exc: LLMOverloaded) -> tuple[Response, int]:
        response, status = _json(503, str(exc))
        response.headers["Retry-After"] = str(exc.retry_after)
        return response, status

    @app.errorhandler(LLMTimeout)
    def timeout(exc: LLMTimeout) -> tuple[Response, int]:
        return _json(504, str(exc))

    @app.errorhandler(LLMFailed)
    def failed(exc: LLMFailed) -> tuple[Response, int]:
        # the model broke, not the request: a server error (moorcheh-edge said 400
        # because its LLM was a remote Ollama; the message is kept for its clients)
        _log.error("%s", exc)
        return _json(500, "LLM request failed")

    @app.errorhandler(LLMCancelled)
    def cancelled(exc: LLMCancelled) -> tuple[Response, int]:
        return _json(499, str(exc))  # nobody reads it: the client is gone

    @app.errorhandler(EmbedderBusy)
    def embedder_busy(exc: EmbedderBusy) -> tuple[Response, int]:
        response, status = _json(503, str(exc))
        response.headers["Retry-After"] = "1"
        return response, status
