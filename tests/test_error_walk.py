"""Every error a request can meet, through every surface: the status and body
each API documents (../shared/spec: moorcheh-edge's error bodies, Lucidworks
§9, the Engine §3 table, OpenAI's error object).

A new ServiceError class fails `test_every_error_class_has_an_example` until
it gets a row here, so no error reaches a client unmapped.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import orjson
import pytest
from flask import Flask
from pydantic import BaseModel

import flask_app.app  # noqa: F401  (imports every surface and its errors)
from flask_app.api.engine import errors as engine_errors
from flask_app.api.engine.errors import EngineError
from flask_app.api.engine.filters import FilterError
from flask_app.api.engine.schemas import EngineErrorBody
from flask_app.api.http.errors import RoutingError, install
from flask_app.api.http.json_body import BadRequest, MalformedJSON, OrjsonProvider
from flask_app.api.http.vectors import VectorError
from flask_app.api.lucidworks import errors as lucidworks_errors
from flask_app.api.lucidworks.predict import InputTooLong
from flask_app.api.lucidworks.schemas import LucidworksError
from flask_app.api.moorcheh import errors as moorcheh_errors
from flask_app.api.moorcheh.schemas import MoorchehError
from flask_app.api.openai import errors as openai_errors
from flask_app.api.openai.errors import OpenAIError
from flask_app.api.openai.schemas import OpenAIErrorBody
from flask_app.cluster.records import RecordsUnavailable
from flask_app.cluster.store import ClusterUnusable
from flask_app.errors import ServiceError
from flask_app.inference.embed import EmbedderBusy, EmbeddingError, TextTooLong
from flask_app.inference.errors import (
    LLMCancelled,
    LLMError,
    LLMFailed,
    LLMOverloaded,
    LLMTimeout,
    ReplicaLost,
)
from flask_app.rag import ContextOverflow, RagError
from flask_app.rag.pipeline import LLMNotConfigured, QueryError
from flask_app.store import errors as store

SURFACES = ("moorcheh", "lucidworks", "engine", "openai")
RENDER = {
    "moorcheh": moorcheh_errors.render,
    "lucidworks": lucidworks_errors.render,
    "engine": engine_errors.render,
    "openai": openai_errors.render,
}
SCHEMA: dict[str, type[BaseModel]] = {
    "moorcheh": MoorchehError,
    "lucidworks": LucidworksError,
    "engine": EngineErrorBody,
    "openai": OpenAIErrorBody,
}

# (an example, its status on moorcheh, Lucidworks, the Engine, OpenAI).
# moorcheh-edge: 400 bad input, 409 "failure" store conflicts, 503 +
# Retry-After when busy. Lucidworks §9: 429 when busy, 502/504 for the model
# backend. Engine §3: 400 invalid_request (conflicts included: the table has
# no generic 409), 503 temporarily_unavailable for every passing failure and
# the 45 s limit. OpenAI: 429 rate_limit_error when busy.
EXAMPLES: list[tuple[ServiceError, tuple[int, int, int, int]]] = [
    (store.StoreError("bad collection name"), (400, 400, 400, 400)),
    (store.VectorRejected("vector 0 has no direction"), (400, 400, 400, 400)),
    (store.DuplicateIds("doc-1"), (400, 400, 400, 400)),
    (store.ClearedError(), (409, 409, 400, 409)),
    (store.ConflictError("dimension 3 does not match 384"), (409, 409, 400, 409)),
    (store.CapacityError(9994, 10000, 7), (409, 409, 400, 409)),
    (store.DataDirLocked("another server holds the data directory"), (503, 503, 503, 503)),
    (store.CollectionUnavailable("docs", "its rows cannot be read"), (503, 503, 503, 503)),
    (ClusterUnusable("no Ray cluster answers"), (503, 503, 503, 503)),
    (RecordsUnavailable("the records actor is restarting"), (503, 503, 503, 503)),
    (RagError("query is required"), (400, 400, 400, 400)),
    (LLMNotConfigured(), (400, 400, 400, 400)),
    (QueryError("vector has 3 values, the collection 384"), (400, 400, 400, 400)),
    (ContextOverflow("the question leaves no room"), (400, 400, 400, 400)),
    (InputTooLong(), (400, 400, 400, 400)),
    (lucidworks_errors.NotFound("Unknown model: gpt-9"), (404, 404, 404, 404)),
    (EmbeddingError("text 0 is empty"), (400, 400, 400, 400)),
    (TextTooLong("text 0", 600, 512, "all-MiniLM-L6-v2"), (400, 400, 400, 400)),
    (EmbedderBusy("the embedder stayed busy"), (503, 429, 503, 429)),
    (LLMError("the model is in a bad state"), (500, 502, 503, 500)),
    (LLMOverloaded("LLM queue is full (3 requests waiting)", 2), (503, 429, 503, 429)),
    (ReplicaLost("replica 1: RayActorError"), (503, 503, 503, 503)),
    (LLMTimeout("timed out waiting for the LLM"), (504, 504, 503, 504)),
    (LLMFailed("LLM request failed: secret detail"), (500, 502, 503, 500)),
    (LLMCancelled("the client left while waiting"), (499, 499, 499, 499)),
    (BadRequest("top_k must be an integer"), (400, 400, 400, 400)),
    (BadRequest("request body is larger than the limit", 413), (413, 413, 413, 413)),
    (BadRequest("Content-Type must be application/json", 415), (415, 415, 415, 415)),
    (MalformedJSON("invalid JSON: unexpected character"), (400, 400, 400, 400)),
    (VectorError("query has 3 dimensions; allowed: 8 to 4096"), (400, 400, 400, 400)),
    (RoutingError(404, "no such route"), (404, 404, 404, 404)),
    (RoutingError(405, "method not allowed"), (405, 405, 405, 405)),
    (RoutingError(500, "internal error"), (500, 500, 500, 500)),
    (EngineError(404, "not_found", "Not found: collection ops/x"), (404, 404, 404, 404)),
    (FilterError("unexpected 'AND'", 7), (400, 400, 400, 400)),
    (OpenAIError(400, "stop: at most 4 sequences", "invalid_request_error", "stop"), (400,) * 4),
]

ENGINE_CODES = {
    400: {"invalid_request"},
    404: {"not_found"},
    405: {"method_not_allowed"},
    413: {"request_too_large"},
    415: {"invalid_request"},
    499: {"cancelled"},
    500: {"internal"},
    503: {"temporarily_unavailable"},
}


@pytest.fixture(scope="module")
def app() -> Flask:
    app = Flask(__name__)
    app.json = OrjsonProvider(app)
    return app


def _render(app: Flask, surface: str, exc: ServiceError) -> tuple[int, dict[str, Any], Any]:
    with app.test_request_context("/"):
        response, status = RENDER[surface](exc)
        return status, orjson.loads(response.get_data()), response.headers


def service_error_classes() -> list[type[ServiceError]]:
    """Every ServiceError subclass imported so far, depth first."""
    found: list[type[ServiceError]] = []
    stack = list(ServiceError.__subclasses__())
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def test_every_error_class_has_an_example() -> None:
    covered = {type(exc) for exc, _ in EXAMPLES}
    missing = {cls.__qualname__ for cls in service_error_classes()} - {
        cls.__qualname__ for cls in covered
    }
    assert not missing, f"errors no surface test renders: {sorted(missing)}"


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    ("exc", "statuses"), EXAMPLES, ids=[f"{type(e).__name__}-{e.status}" for e, _ in EXAMPLES]
)
def test_each_surface_renders_each_error_as_documented(
    app: Flask, surface: str, exc: ServiceError, statuses: tuple[int, int, int, int]
) -> None:
    status, body, headers = _render(app, surface, exc)
    assert status == statuses[SURFACES.index(surface)]
    SCHEMA[surface].model_validate(body)
    text = orjson.dumps(body).decode()
    assert "secret detail" not in text  # a model failure's detail is for the log
    retry_after = headers.get("Retry-After")
    if surface == "moorcheh":
        assert body["status"] == ("failure" if status == 409 else "error")
    elif surface == "lucidworks":
        assert body["status"] == status
        if status != 499:
            assert body["error"] == (
                "Payload Too Large" if status == 413 else HTTPStatus(status).phrase
            )
    elif surface == "engine":
        assert body["error"]["code"] in ENGINE_CODES[status]
        assert body["error"]["retryable"] is (status in (500, 503))
        if status == 503:
            assert retry_after is not None
    else:
        kind = body["error"]["type"]
        if status == 429:
            assert kind == "rate_limit_error"
        elif status >= 500:
            assert kind == "server_error"
        else:
            assert kind == "invalid_request_error"
    if exc.retry_after is not None:
        assert retry_after == str(exc.retry_after)
    elif surface != "engine":
        assert retry_after is None


def test_a_failed_model_is_logged_once_with_its_detail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Flask(__name__)
    app.json = OrjsonProvider(app)
    install(app, moorcheh_errors.render)

    @app.get("/boom")
    def boom() -> str:
        raise LLMFailed("LLM request failed: CUDA-less GGML_ASSERT")

    with caplog.at_level(logging.ERROR, logger="edgerag"):
        response = app.test_client().get("/boom")
    assert response.status_code == 500
    assert response.get_json() == {"status": "error", "message": "LLM request failed"}
    logged = [r.getMessage() for r in caplog.records if "GGML_ASSERT" in r.getMessage()]
    assert len(logged) == 1


def test_a_lost_replica_is_unavailable_not_a_rate_limit() -> None:
    # it is not a full queue: Lucidworks' and OpenAI's 429 tell a client to
    # slow down, where the replica comes back by itself
    assert not isinstance(ReplicaLost("x"), LLMOverloaded)
    assert ReplicaLost("x").retry_after == 5
