"""Install the Engine surface on an app: its routes, error envelope,
request ids, body limit and research runs (the file collections it serves
are the core's)."""

from __future__ import annotations

from flask import Flask

from flask_app.api.engine import answer, errors, research, resources
from flask_app.api.http import errors as http_errors
from flask_app.api.http import openapi
from flask_app.api.http.extensions import services_of
from flask_app.file_collections.names import NAME_PATTERN

PREFIXES = ("/namespaces", "/info")


def install(app: Flask) -> None:
    services = services_of(app)
    app.register_blueprint(resources.blueprint)
    app.register_blueprint(answer.blueprint)
    research.install(app, services.research_runs)
    name = {"type": "string", "pattern": NAME_PATTERN, "maxLength": 63}
    ulid = "[0-9A-HJKMNP-TV-Z]{26}"
    openapi.describe_path_parameters(
        app,
        "/namespaces",
        {
            "ns": name,
            "name": name,
            "file_id": {"type": "string", "pattern": f"^file_{ulid}$"},
            "run_id": {"type": "string", "pattern": f"^run_{ulid}$"},
        },
    )
    for prefix in PREFIXES:
        http_errors.add_surface(app, prefix, errors.render)
    limits = app.config.setdefault("EDGERAG_BODY_LIMITS", [])
    limits.append(("/namespaces/", errors.MAX_REQUEST_BYTES))
