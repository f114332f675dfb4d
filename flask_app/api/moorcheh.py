"""moorcheh-edge HTTP surface (spec: shared/spec/moorcheh-edge.md)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from flask_app.extensions import services_of

blueprint = Blueprint("moorcheh", __name__)


@blueprint.get("/health")
def health() -> ResponseReturnValue:
    services = services_of(current_app)
    llm: dict[str, Any] | None = None
    if services.llm is not None:
        llm = {
            "id": services.llm.model_id,
            "n_ctx": services.llm.n_ctx,
            "busy": services.llm.gate.busy,
            "waiting": services.llm.gate.waiting,
            "max_waiting": services.llm.gate.max_waiters,
        }
    embedder: dict[str, Any] | None = None
    if services.embedder is not None:
        embedder = {
            "id": services.embedder.model_id,
            "dimension": services.embedder.dim,
            "max_tokens": services.embedder.max_tokens,
        }
    return jsonify(status="ok", llm=llm, embedder=embedder)
