"""A collection that cannot be reached now (a cluster's shard or records
restarting) is a retryable 503 on every surface, never a 500."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask, Response

from flask_app.api.engine import errors as engine
from flask_app.api.lucidworks import errors as lucidworks
from flask_app.api.moorcheh import errors as moorcheh
from flask_app.api.openai import errors as openai
from flask_app.cluster.records import RecordsUnavailable
from flask_app.errors import ServiceError
from flask_app.store import CollectionUnavailable

RENDERERS: dict[str, Callable[[ServiceError], tuple[Response, int]]] = {
    "moorcheh": moorcheh.render,
    "lucidworks": lucidworks.render,
    "engine": engine.render,
    "openai": openai.render,
}


@pytest.mark.parametrize("surface", RENDERERS)
@pytest.mark.parametrize(
    "exc",
    [CollectionUnavailable("docs", "shard 1 did not answer"), RecordsUnavailable("restarting")],
)
def test_unavailable_is_a_retryable_503(surface: str, exc: ServiceError) -> None:
    with Flask(__name__).test_request_context("/"):
        response, status = RENDERERS[surface](exc)
    assert status == 503
    assert int(response.headers["Retry-After"]) > 0
