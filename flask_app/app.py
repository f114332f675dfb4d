"""The Flask application factory."""

from __future__ import annotations

from importlib.metadata import version

from flask import Flask

from flask_app import web
from flask_app.api.engine import routes as engine
from flask_app.api.http import admission, auth, errors, extensions, metrics, openapi
from flask_app.api.http.json_body import OrjsonProvider
from flask_app.api.lucidworks import routes as lucidworks
from flask_app.api.moorcheh import answer as moorcheh_answer
from flask_app.api.moorcheh import errors as moorcheh_errors
from flask_app.api.moorcheh import routes as moorcheh
from flask_app.api.openai import routes as openai
from flask_app.services import Services, load_services
from flask_app.settings import Settings


def create_app(settings: Settings, services: Services | None = None) -> Flask:
    """Build the app; `services` defaults to the real models named by `settings`."""
    app = Flask("edgerag")
    app.json = OrjsonProvider(app)
    app.config["MAX_CONTENT_LENGTH"] = int(settings.max_body_mb * 1024 * 1024)
    extensions.install(app, settings, services if services is not None else load_services(settings))
    app.register_blueprint(moorcheh.blueprint)
    app.register_blueprint(moorcheh_answer.blueprint)
    errors.install(app, moorcheh_errors.render)
    lucidworks.install(app)
    engine.install(app)
    openai.install(app)
    services = extensions.services_of(app)
    catalog = extensions.collections_of(app).catalog
    queues = {
        "research": services.research_runs.pending,
        "lucidworks": services.predictions.pending,
    }
    metrics.install(app, services, catalog.pending_count, catalog.counts, queues)
    openapi.install(app, version=version("edgerag"))
    web.install(app)
    grants = tuple(auth.parse_grant(k) for k in settings.api_key_specs())
    # before admission: strangers learn nothing
    auth.install(
        app,
        grants,
        open_prefixes=openapi.OPEN_PREFIXES + web.OPEN_PREFIXES,
        open_paths=web.OPEN_PATHS,
    )
    admission.install(app)
    return app
