"""The OpenAPI document: valid OpenAPI 3.1, every route in it, real responses
match its schemas, and the Engine request models accept nothing the Engine's
own checks refuse."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis_jsonschema import from_schema
from openapi_spec_validator import validate

from flask_app.api.engine import requests as engine_requests
from flask_app.api.engine import schemas as engine_schemas
from flask_app.api.engine.errors import EngineError
from flask_app.api.http.openapi import UNDOCUMENTED_ENDPOINTS, openapi_path, operation_of
from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    settings = Settings.load({"data_dir": tmp_path / "data", "api_keys": "k"}, {})
    services = assemble(
        settings,
        Store(settings.data_dir),
        LLM(ScriptedBackend("Deploys are frozen on Fridays."), timeout=30),
        HashEmbedder(),
    )
    return create_app(settings, services)


def test_the_document_is_valid_openapi_3_1_and_open_without_a_key(app: Flask) -> None:
    client = app.test_client()
    r = client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.get_json()
    assert doc["openapi"] == "3.1.0"
    validate(doc)
    page = client.get("/docs/")
    assert page.status_code == 200 and b"swagger-ui-bundle.js" in page.data
    bundle = client.get("/docs/swagger-ui-bundle.js")  # served here, no CDN
    bundle.close()
    assert bundle.status_code == 200
    assert client.get("/health").status_code == 200
    assert client.get("/v1/models").status_code == 401


def test_every_route_is_documented(app: Flask) -> None:
    doc = app.test_client().get("/openapi.json").get_json()
    documented = {
        (method.upper(), path)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if not op.get("x-undocumented")
    }
    rules = 0
    for rule in app.url_map.iter_rules():
        if rule.endpoint in UNDOCUMENTED_ENDPOINTS:
            continue
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            rules += 1
            path = openapi_path(rule.rule)
            op = operation_of(app, rule.endpoint)
            if op is not None and op.paths:  # one rule, several paths (`{name}:answer`)
                expected = {(method, documented_path) for documented_path, _ in op.paths}
                assert all("{target}" not in p for _, p in expected)
            else:
                expected = {(method, path)}
            assert expected <= documented, (rule.rule, method)
    assert rules >= 34  # the count of today, so the walk cannot silently skip routes


def _validator(doc: dict[str, Any], path: str, method: str, status: int) -> Any:
    responses = doc["paths"][path][method]["responses"]
    content = (responses.get(str(status)) or responses["default"])["content"]
    schema = content["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


def _check(
    doc: dict[str, Any],
    client: FlaskClient,
    method: str,
    url: str,
    path: str,
    error: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    response = client.open(url, method=method, headers={"Authorization": "Bearer k"}, **kw)
    body = response.get_json()
    assert (response.status_code >= 400) == error, (url, response.status_code, body)
    _validator(doc, path, method.lower(), response.status_code).validate(body)
    return dict(body)


def test_real_responses_match_the_document(app: Flask) -> None:
    client = app.test_client()
    doc = client.get("/openapi.json").get_json()
    text = "# Deploys\n\nDeploys are frozen on Fridays. Hotfixes need SRE approval."
    _check(
        doc,
        client,
        "POST",
        "/upload",
        "/upload",
        json={"store_mode": "text", "items": [{"id": "a", "text": text, "metadata": {"n": 1}}]},
    )
    _check(doc, client, "GET", "/health", "/health")
    _check(doc, client, "POST", "/search", "/search", json={"query": "deploys", "top_k": 2})
    _check(doc, client, "POST", "/answer", "/answer", json={"query": "When are deploys frozen?"})
    _check(doc, client, "GET", "/export?limit=1", "/export")
    _check(doc, client, "DELETE", "/items", "/items", json={"ids": ["a", "b"]})
    _check(doc, client, "DELETE", "/store", "/store")
    _check(doc, client, "POST", "/search", "/search", error=True, json={"query": 3})
    ns = "/namespaces/{ns}"
    _check(doc, client, "PUT", "/namespaces/ops", ns)
    _check(doc, client, "GET", "/namespaces/ops", ns)
    coll = ns + "/collections/{name}"
    _check(doc, client, "PUT", "/namespaces/ops/collections/docs", coll, json={})
    upload = _check(
        doc,
        client,
        "POST",
        "/namespaces/ops/collections/docs/files",
        coll + "/files",
        json={
            "path": "d.md",
            "content_type": "text/markdown",
            "text": text,
            "metadata": {"year": 2024, "public": True},
        },
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        file = _check(
            doc,
            client,
            "GET",
            f"/namespaces/ops/collections/docs/files/{upload['file_id']}",
            coll + "/files/{file_id}",
        )
        if file["status"] == "ready":
            break
        time.sleep(0.05)
    _check(doc, client, "GET", "/namespaces/ops/collections", ns + "/collections")
    _check(doc, client, "GET", "/namespaces/ops/collections/docs", coll)
    _check(doc, client, "GET", "/namespaces/ops/collections/docs/files", coll + "/files")
    answer = _check(
        doc,
        client,
        "POST",
        "/namespaces/ops/collections/docs:answer",
        coll + ":answer",
        json={"query": "When are deploys frozen?"},
    )
    assert answer["sources"]
    _check(
        doc,
        client,
        "POST",
        "/namespaces/ops/collections/docs:readSpans",
        coll + ":readSpans",
        json={"spans": [answer["sources"][0]["span"]]},
    )
    _check(
        doc,
        client,
        "POST",
        "/namespaces/ops/collections/nope:answer",
        coll + ":answer",
        error=True,
        json={"query": "q"},
    )
    runs = coll + "/research-runs"
    queued = _check(
        doc,
        client,
        "POST",
        "/namespaces/ops/collections/docs/research-runs",
        runs,
        json={"query": "When are deploys frozen?"},
    )
    run_url = f"/namespaces/ops/collections/docs/research-runs/{queued['run_id']}"
    deadline = time.monotonic() + 20
    while _check(doc, client, "GET", run_url, runs + "/{run_id}")["status"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _check(doc, client, "POST", run_url + ":cancel", runs + "/{run_id}:cancel")
    _check(doc, client, "GET", "/info", "/info")
    _check(
        doc,
        client,
        "POST",
        "/ai/prediction/rag/llama-3-8b-instruct",
        "/ai/prediction/rag/{model_id}",
        json={
            "batch": [
                {
                    "text": "When are deploys frozen?",
                    "documents": [{"body": text, "source": "https://x/d"}],
                }
            ]
        },
    )
    _check(
        doc,
        client,
        "POST",
        "/ai/prediction/embedding/e5-small-v2",
        "/ai/prediction/embedding/{model_id}",
        json={"batch": [{"text": "x"}]},
    )
    _check(
        doc,
        client,
        "POST",
        "/ai/tokenization/e5-small-v2",
        "/ai/tokenization/{model_id}",
        json={"batch": [{"text": "tokens"}]},
    )
    job = _check(
        doc,
        client,
        "POST",
        "/ai/async-prediction/rag/llama-3-8b-instruct",
        "/ai/async-prediction/rag/{model_id}",
        json={"batch": [{"text": "q", "documents": [{"body": text, "source": "https://x/d"}]}]},
    )
    _check(
        doc,
        client,
        "GET",
        f"/ai/async-prediction/{job['predictionId']}",
        "/ai/async-prediction/{prediction_id}",
    )
    _check(doc, client, "GET", "/v1/models", "/v1/models")
    _check(
        doc,
        client,
        "POST",
        "/v1/chat/completions",
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    _check(
        doc, client, "POST", "/v1/embeddings", "/v1/embeddings", json={"model": "m", "input": "x"}
    )
    _check(doc, client, "POST", "/v1/embeddings", "/v1/embeddings", error=True, json={"model": "m"})


def _accepted(check: Any, body: dict[str, Any]) -> None:
    try:
        check(body)
    except EngineError as exc:
        raise AssertionError(f"the model accepts {body!r}, the checks say {exc.message}") from None


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=from_schema(engine_schemas.AnswerRequest.model_json_schema()))
def test_engine_answer_model_accepts_only_what_the_checks_accept(body: dict[str, Any]) -> None:
    _accepted(engine_requests.answer_request, body)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=from_schema(engine_schemas.ReadSpansRequest.model_json_schema()))
def test_engine_read_spans_model_accepts_only_what_the_checks_accept(body: dict[str, Any]) -> None:
    # the one rule JSON Schema cannot say (it is in SpanRef's description)
    ordered = all(
        0 < s["end"] - s["start"] <= engine_requests.MAX_SPAN_CHARS for s in body["spans"]
    )
    assume(ordered)
    _accepted(engine_requests.read_spans_request, body)


def test_engine_request_models_name_the_fields_the_checks_allow() -> None:
    assert set(engine_requests.ANSWER_FIELDS) == set(engine_schemas.AnswerRequest.model_fields)
    assert set(engine_requests.READ_SPANS_FIELDS) == set(
        engine_schemas.ReadSpansRequest.model_fields
    )
