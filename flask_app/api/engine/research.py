"""Research runs (spec §8): an `:answer` that runs as a durable background
job instead of inside the 45 s request limit.

    POST …/collections/{name}/research-runs          answer fields → 202 queued run
    GET  …/collections/{name}/research-runs/{run_id} the run (result when succeeded)
    POST …/collections/{name}/research-runs/{run_id}:cancel

A run is checked like `:answer` when it is submitted (so a bad request fails
at once), then answered with the deepest effort (`effort` is ignored) and up
to 15 minutes, one at a time behind interactive requests, on its own jobs
file (`research_runs.sqlite3`, kept 7 days): a run accepted before a crash
runs after the restart. `result` is exactly the `:answer` body (10 credits);
a failure is the error object of `:answer`'s envelope. Runs belong to the API
key that submitted them.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app.api.engine import requests
from flask_app.api.engine.answer import check_answerable, start_answer
from flask_app.api.engine.errors import EngineError, as_engine_error, not_found
from flask_app.api.engine.resources import collection_or_404
from flask_app.api.engine.schemas import (
    AnswerRequest,
    EngineErrorBody,
    ResearchRun,
    ResearchRunQueued,
)
from flask_app.api.http import auth
from flask_app.api.http.extensions import services_of
from flask_app.api.http.json_body import json_object
from flask_app.api.http.openapi import Operation, operation
from flask_app.api.http.request_ids import request_id
from flask_app.errors import Kind, ServiceError
from flask_app.rag.jobs import CANCELLED, ERROR, SUBMITTED, JobFailed, Jobs, retry_later
from flask_app.store.catalog import new_id, rfc3339

TAG = "engine"
KIND = "engine-research"
TIME_LIMIT_S = 15 * 60.0
CREDITS = 10
EFFORT = "high"  # a run reads as deep as `:answer` can

blueprint = Blueprint("engine_research", __name__)
RUNS = "/namespaces/<ns>/collections/<name>/research-runs"


def _jobs() -> Jobs:
    return services_of(current_app).research_runs


def _ask(body: dict[str, Any]) -> requests.AnswerRequest:
    fields = {k: v for k, v in body.items() if k != "effort"}  # ignored for runs
    return replace(requests.answer_request(fields), effort=EFFORT)


@blueprint.post(RUNS)
@operation(
    summary="Start a research run: an :answer that runs in the background",
    description="The body is an `:answer` request (`effort` is ignored). The run is "
    "checked like `:answer` now and answered later, with up to 15 minutes.",
    tag=TAG,
    body=AnswerRequest,
    response=ResearchRunQueued,
    status=202,
    links=tuple(
        (
            link,
            target,
            {
                "ns": "$request.path.ns",
                "name": "$request.path.name",
                "run_id": "$response.body#/run_id",
            },
        )
        for link, target in (
            ("run", "engine_research.get_run.get"),
            ("cancel", "engine_research.run_method.post.cancel"),
        )
    ),
    error=EngineErrorBody,
)
def submit(ns: str, name: str) -> ResponseReturnValue:
    body = json_object(request)
    ask = _ask(body)
    check_answerable(ns, name, ask)
    rid = request_id()
    run_id = new_id("run")
    owner = auth.tenant()
    payload = {"ns": ns, "name": name, "body": body, "request_id": rid}
    _jobs().submit(KIND, payload, owner=owner, job_id=run_id)
    return jsonify(request_id=rid, run_id=run_id, status="queued"), 202


@blueprint.get(f"{RUNS}/<run_id>")
@operation(
    summary="A research run: its status, and its result or error once finished",
    tag=TAG,
    response=ResearchRun,
    error=EngineErrorBody,
)
def get_run(ns: str, name: str, run_id: str) -> ResponseReturnValue:
    collection_or_404(ns, name)
    return jsonify(_run_body(ns, name, run_id, cancel=False))


@blueprint.post(f"{RUNS}/<target>")
@operation(
    summary="Research run methods",
    tag=TAG,
    paths=(
        (
            "/namespaces/{ns}/collections/{name}/research-runs/{run_id}:cancel",
            Operation(
                summary="Cancel a research run (a finished run is returned as it is)",
                tag=TAG,
                response=ResearchRun,
                error=EngineErrorBody,
            ),
        ),
    ),
)
def run_method(ns: str, name: str, target: str) -> ResponseReturnValue:
    run_id, sep, verb = target.partition(":")
    if not sep:
        raise EngineError(405, "method_not_allowed", "Method not allowed.")
    if verb != "cancel":
        raise EngineError(404, "not_found", f"Not found: method {verb}")
    collection_or_404(ns, name)
    return jsonify(_run_body(ns, name, run_id, cancel=True))


def _run_body(ns: str, name: str, run_id: str, *, cancel: bool) -> dict[str, Any]:
    jobs, owner = _jobs(), auth.tenant()
    job = jobs.get(run_id, owner)
    if job is None or job.kind != KIND or (job.payload["ns"], job.payload["name"]) != (ns, name):
        raise not_found(f"research run {run_id}")
    if cancel:
        job = jobs.cancel(run_id, owner) or job
    if job.running:
        status = "running"
    elif job.status == SUBMITTED:
        status = "queued"
    elif job.status == CANCELLED:
        status = "cancelled"
    elif job.status == ERROR:
        status = "failed"
    else:
        status = "succeeded"
    out: dict[str, Any] = {
        "request_id": request_id(),
        "run_id": run_id,
        "status": status,
        "created_at": rfc3339(job.submitted_at),
        "completed_at": rfc3339(job.finished_at) if job.finished_at is not None else None,
    }
    if status == "succeeded":
        out["result"] = job.result
    elif status == "failed":
        out["error"] = _error_of(job.error or "")
    return out


def _error_of(stored: str) -> dict[str, Any]:
    """The error object a failed run stored (see `_run`)."""
    try:
        error = json.loads(stored)
    except ValueError:
        error = None
    if isinstance(error, dict) and "code" in error:
        return error
    return {"code": "internal", "message": "Internal error.", "retryable": True, "details": {}}


def _run(app: Flask, jobs: Jobs, payload: dict[str, Any]) -> dict[str, Any]:
    """One run, on the jobs worker: the `:answer` body, or JobFailed with the
    error object as JSON; RetryLater while the model's queue is full."""
    started = time.monotonic()
    try:
        with app.app_context():
            ask = _ask(payload["body"])
            stream, reply = start_answer(
                payload["ns"],
                payload["name"],
                ask,
                payload["request_id"],
                deadline=started + TIME_LIMIT_S,
                abandoned=jobs.cancel_requested,
                credits=CREDITS,
            )
            with stream:
                text = "".join(stream)
            return reply.body(text, stream.outcome.declined, stream.outcome.confidence)
    except ServiceError as exc:
        if exc.kind is Kind.CANCELLED:
            raise JobFailed("cancelled") from None  # the jobs file records it as CANCELLED
        if (later := retry_later(exc)) is not None:
            raise later from None
        error = as_engine_error(exc)
        if exc.kind is Kind.TIMEOUT:
            error = EngineError(
                503,
                "temporarily_unavailable",
                "The research run did not complete within 15 minutes.",
                retryable=True,
            )
        raise JobFailed(
            json.dumps(
                {
                    "code": error.code,
                    "message": error.message,
                    "retryable": error.retryable,
                    "details": error.details,
                }
            )
        ) from None


def install(app: Flask, jobs: Jobs) -> None:
    jobs.handle(KIND, lambda payload: _run(app, jobs, payload))
    app.register_blueprint(blueprint)
    if jobs.pending():
        jobs.start()
