"""`GET /metrics` in the Prometheus text format (prometheus_client, one
registry per app) and one structured log line per request.

Requests are counted and timed by route template and status; the LLM's
queue, time to first token, generation speed and token counts, and what the
store holds are read when scraped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from flask import Flask, Response, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from flask_app.api.http.openapi import operation
from flask_app.api.http.request_ids import request_id
from flask_app.services import Services
from flask_app.store import StoreError

_log = logging.getLogger("edgerag.requests")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


def install(
    app: Flask,
    services: Services,
    backlog: Callable[[], int] | None = None,
    catalog_counts: Callable[[], tuple[int, int]] | None = None,
    jobs_pending: Mapping[str, Callable[[], int]] | None = None,
) -> None:
    registry = CollectorRegistry()
    requests_total = Counter(
        "edgerag_http_requests", "HTTP requests", ["route", "method", "status"], registry=registry
    )
    latency = Histogram(
        "edgerag_http_request_seconds",
        "HTTP request latency (to the response headers)",
        ["route"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    llm = services.llm
    if llm is not None:
        Gauge(
            "edgerag_llm_waiting", "requests waiting for the LLM", registry=registry
        ).set_function(lambda: llm.slots.waiting)
        Gauge("edgerag_llm_busy", "1 while the LLM generates", registry=registry).set_function(
            lambda: float(llm.slots.busy)
        )
        ttft = Histogram(
            "edgerag_llm_time_to_first_token_seconds",
            "from the model being taken to the first generated piece",
            buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10),
            registry=registry,
        )
        speed = Histogram(
            "edgerag_llm_tokens_per_second",
            "generated pieces per second of one generation",
            buckets=(5, 10, 20, 30, 40, 50, 60, 80, 100, 150),
            registry=registry,
        )
        completion = Counter("edgerag_llm_completion_tokens", "generated pieces", registry=registry)
        prompt = Counter(
            "edgerag_llm_prompt_tokens", "prompt tokens of generations", registry=registry
        )

        queue_wait = Histogram(
            "edgerag_llm_queue_wait_seconds",
            "time a generation waited for the model",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=registry,
        )

        def observe(
            prompt_tokens: int, waited: float, first: float | None, pieces: int, held: float
        ) -> None:
            prompt.inc(prompt_tokens)
            queue_wait.observe(waited)
            completion.inc(pieces)
            if first is not None:
                ttft.observe(first)
                if pieces > 1 and held > first:
                    speed.observe((pieces - 1) / (held - first))

        llm.observer = observe
    Gauge(
        "edgerag_store_items", "items in the moorcheh-edge store", registry=registry
    ).set_function(lambda: _stored_items(services))
    if catalog_counts is not None:
        Gauge("edgerag_collections", "Engine collections", registry=registry).set_function(
            lambda: catalog_counts()[0]
        )
        Gauge("edgerag_files", "files in Engine collections", registry=registry).set_function(
            lambda: catalog_counts()[1]
        )
    if backlog is not None:
        Gauge(
            "edgerag_ingestion_backlog", "files accepted and not yet ingested", registry=registry
        ).set_function(backlog)
    if jobs_pending:
        pending = Gauge(
            "edgerag_jobs_pending",
            "background jobs accepted and not finished (Lucidworks async, Engine research runs)",
            ["queue"],
            registry=registry,
        )
        for queue, pending_count in jobs_pending.items():
            pending.labels(queue).set_function(pending_count)

    @app.before_request
    def start_clock() -> None:
        g.started = time.perf_counter()
        request_id()

    @app.after_request
    def count(response: Response) -> Response:
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        seconds = time.perf_counter() - g.get("started", time.perf_counter())
        requests_total.labels(route, request.method, str(response.status_code)).inc()
        latency.labels(route).observe(seconds)
        rid = request_id()
        response.headers["X-Request-Id"] = rid
        _log.info(
            "request id=%s method=%s route=%s status=%d seconds=%.4f",
            rid,
            request.method,
            route,
            response.status_code,
            seconds,
        )
        return response

    @app.get("/metrics")
    @operation(
        summary="Prometheus metrics (text exposition format)",
        tag="operations",
        media_type=CONTENT_TYPE_LATEST,
    )
    def metrics() -> Response:
        return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)


def _stored_items(services: Services) -> float:
    """Items in the moorcheh-edge store; NaN while it cannot be opened (a
    scrape must not fail because one collection is damaged)."""
    try:
        return float(len(services.store.edge()))
    except StoreError:
        return float("nan")
