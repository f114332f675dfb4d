"""Lucidworks AI routes under /ai/ (adapter only: validation and rendering
here, the answers in `predict` and the shared pipeline)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app.api.http import auth
from flask_app.api.http import errors as http_errors
from flask_app.api.http.disconnect import client_gone_probe
from flask_app.api.http.extensions import (
    answer_config_of,
    services_of,
)
from flask_app.api.http.json_body import json_object
from flask_app.api.http.openapi import Operation, describe_path_parameters, operation
from flask_app.api.http.sse import event_stream, sse
from flask_app.api.lucidworks import embedding, errors, models
from flask_app.api.lucidworks.collection import check_collection, with_collection_documents
from flask_app.api.lucidworks.predict import Surface, predict_rag, rewrite_query
from flask_app.api.lucidworks.schemas import (
    AsyncResult,
    LucidworksError,
    PredictionDelta,
    Predictions,
    RagRequest,
    Submitted,
    TextRequest,
    Tokenization,
    parse,
    without_secrets,
)
from flask_app.errors import Kind, ServiceError
from flask_app.rag.jobs import ERROR, JobFailed, Jobs, RetryLater, retry_later

blueprint = Blueprint("lucidworks", __name__, url_prefix="/ai")
TAG = "lucidworks"

KEY = "edgerag_lucidworks"
RAG_JOB = "lucidworks-rag"


def _surface() -> Surface:
    surface: Surface = current_app.extensions[KEY]
    return surface


def _jobs() -> Jobs:
    return services_of(current_app).predictions


def _chat_model(model_id: str) -> None:
    llm = services_of(current_app).llm
    models.check_chat(model_id, llm.model_id if llm else None)


def _embedding_model(model_id: str) -> None:
    embedder = services_of(current_app).embedder
    models.check_embedding(model_id, embedder.model_id if embedder else None)


def _wants_stream() -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


@blueprint.post("/prediction/<use_case>/<model_id>")
@operation(
    summary="Predict: rag, standalone-query-rewriter or embedding",
    tag=TAG,
    # one route, a path per use case, each with its own request schema
    paths=(
        (
            "/ai/prediction/rag/{model_id}",
            Operation(
                operation_id="lucidworks.prediction.rag",
                summary="Answer each batch item from its documents (or a collection's)",
                description="`Accept: text/event-stream` streams `delta` events and one "
                "`done` whose data is the JSON body (or an `error`).",
                tag=TAG,
                body=RagRequest,
                response=Predictions,
                streams=True,
                events=(
                    ("delta", PredictionDelta),
                    ("done", Predictions),
                    ("error", LucidworksError),
                ),
                error=LucidworksError,
            ),
        ),
        (
            "/ai/prediction/standalone-query-rewriter/{model_id}",
            Operation(
                operation_id="lucidworks.prediction.standalone-query-rewriter",
                summary="Rewrite follow-up questions as standalone ones, from the memory",
                tag=TAG,
                body=RagRequest,
                response=Predictions,
                error=LucidworksError,
            ),
        ),
        (
            "/ai/prediction/embedding/{model_id}",
            Operation(
                operation_id="lucidworks.prediction.embedding",
                summary="Embed each text",
                tag=TAG,
                body=TextRequest,
                response=Predictions,
                error=LucidworksError,
            ),
        ),
    ),
)
def prediction(use_case: str, model_id: str) -> ResponseReturnValue:
    if use_case == "rag":
        _chat_model(model_id)
        rag_request = with_collection_documents(parse(RagRequest, json_object(request)))
        if _wants_stream():
            return _stream(rag_request)
        return jsonify(
            predict_rag(
                _surface(), rag_request, abandoned=client_gone_probe(), tenant=auth.tenant()
            )
        )
    if use_case == "standalone-query-rewriter":
        _chat_model(model_id)
        rewrite = parse(RagRequest, json_object(request))
        return jsonify(rewrite_query(_surface(), rewrite, tenant=auth.tenant()))
    if use_case == "embedding":
        _embedding_model(model_id)
        text_request = parse(TextRequest, json_object(request))
        return jsonify(embedding.embed(services_of(current_app).embedder, text_request))
    raise errors.NotFound(f"Unknown use case: {use_case}")


@blueprint.post("/tokenization/<model_id>")
@operation(
    summary="The embedding model's tokens of each text",
    tag=TAG,
    body=TextRequest,
    response=Tokenization,
    error=LucidworksError,
)
def tokenization(model_id: str) -> ResponseReturnValue:
    _embedding_model(model_id)
    text_request = parse(TextRequest, json_object(request))
    return jsonify(embedding.tokenize(services_of(current_app).embedder, text_request))


def _stream(rag_request: RagRequest) -> Response:
    """`delta` events ({"index", "text"}: answer text as it is generated), then
    one `done` event whose data is the JSON body; a failure is an `error` event."""
    surface = _surface()
    tenant = auth.tenant()  # read in the request; the answer runs in a thread
    events: queue.Queue[bytes | None] = queue.Queue()
    left = threading.Event()
    probe = client_gone_probe()

    def abandoned() -> bool:
        return left.is_set() or (probe is not None and probe())

    def run() -> None:
        try:
            body = predict_rag(
                surface,
                rag_request,
                on_delta=lambda i, text: events.put(sse("delta", {"index": i, "text": text})),
                abandoned=abandoned,
                tenant=tenant,
            )
            events.put(sse("done", body))
        except Exception as exc:
            events.put(sse("error", errors.stream_error(http_errors.as_service_error(exc))))
        finally:
            events.put(None)

    worker = threading.Thread(target=run, name="edgerag-lucidworks-stream", daemon=True)
    worker.start()

    def frames() -> Iterator[bytes]:
        try:
            while (frame := events.get()) is not None:
                yield frame
        finally:
            left.set()  # the client is gone (or the stream ended): stop generating

    return event_stream(frames(), left.set)


@blueprint.post("/async-prediction/<use_case>/<model_id>")
@operation(
    summary="Submit a rag prediction as a job",
    tag=TAG,
    paths=(
        (
            "/ai/async-prediction/rag/{model_id}",
            Operation(
                operation_id="lucidworks.async_prediction.rag",
                summary="Submit a rag prediction as a job",
                tag=TAG,
                body=RagRequest,
                response=Submitted,
                links=(
                    (
                        "result",
                        "lucidworks.async_result.get",
                        {"prediction_id": "$response.body#/predictionId"},
                    ),
                ),
                error=LucidworksError,
            ),
        ),
    ),
)
def async_prediction(use_case: str, model_id: str) -> ResponseReturnValue:
    if use_case != "rag":
        raise errors.NotFound(f"Unknown use case: {use_case}")
    _chat_model(model_id)
    body = json_object(request)
    check_collection(parse(RagRequest, body))  # refuse a bad request now, not in the job
    payload = {"model": model_id, "body": without_secrets(body)}
    job_id = _jobs().submit(RAG_JOB, payload, owner=auth.tenant())
    return jsonify(predictionId=job_id, status="SUBMITTED")


@blueprint.get("/async-prediction/<prediction_id>")
@operation(
    summary="A job's status and, once READY, its predictions",
    tag=TAG,
    response=AsyncResult,
    error=LucidworksError,
)
def async_result(prediction_id: str) -> ResponseReturnValue:
    job = _jobs().get(prediction_id, owner=auth.tenant())
    if job is None:
        raise errors.NotFound(f"Unknown prediction: {prediction_id}")
    out: dict[str, Any] = {"predictionId": job.id, "status": job.status}
    if job.status == ERROR:
        out["error"] = {"message": job.error}
    elif job.result is not None:
        out.update(job.result)
    return jsonify(out)


# a job failing for these fails for good: running it again cannot help
_THE_REQUESTS_FAULT = (Kind.INVALID, Kind.NOT_FOUND, Kind.CONFLICT, Kind.TOO_LARGE)


def _run_job(app: Flask, surface: Surface, jobs: Jobs, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        with app.app_context():  # a collection's passages are read through the app
            rag_request = with_collection_documents(RagRequest.model_validate(payload["body"]))
        return predict_rag(surface, rag_request, tenant=jobs.current_owner())
    except ServiceError as exc:
        if exc.kind is Kind.TIMEOUT:
            raise RetryLater(1.0) from None
        if (later := retry_later(exc)) is not None:
            raise later from None
        if exc.kind in _THE_REQUESTS_FAULT:  # e.g. a collection deleted since
            raise JobFailed(str(exc)) from None
        raise


def install(app: Flask) -> None:
    """Routes, error shape, conversation memory and the async worker."""
    services = services_of(app)
    surface = Surface(services, answer_config_of(app), services.conversations)
    app.extensions[KEY] = surface
    app.register_blueprint(blueprint)
    describe_path_parameters(
        app, "/ai/async-prediction/", {"prediction_id": {"type": "string", "format": "uuid"}}
    )
    http_errors.add_surface(app, "/ai/", errors.render)
    jobs = services.predictions
    jobs.handle(RAG_JOB, lambda payload: _run_job(app, surface, jobs, payload))
    if jobs.pending():
        jobs.start()
