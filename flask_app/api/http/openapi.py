"""The OpenAPI 3.1 document of every route, generated from the routes
themselves: each view function carries an `Operation` (`@operation(...)`)
naming its request and response models, and the document is built by walking
the app's URL map, so a route cannot exist without being documented (a test
checks it). Schemas come from the models (pydantic, or dataclasses through
pydantic's TypeAdapter), never written by hand.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Flask, Response
from pydantic import TypeAdapter

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__edgerag_operation__"
REF = "#/components/schemas/{model}"
# static files (the web page, the docs page's assets) are not API routes
UNDOCUMENTED_ENDPOINTS = frozenset({"static", "docs_page.show", "web.static"})
# open without an API key, like /health: they describe routes, not data
OPEN_PREFIXES = ("/openapi.json", "/docs")


@dataclass(frozen=True)
class Operation:
    summary: str
    tag: str
    body: Any = None  # model of the JSON request body
    response: Any = None  # model of the success body (None: no JSON body)
    status: int = 200
    media_type: str = "application/json"  # of the success body
    streams: bool = False  # may answer text/event-stream instead
    error: Any = None  # model of the error body
    # one URL rule serving several documented paths (Engine `{name}:answer`):
    # each path with its own operation
    paths: tuple[tuple[str, Operation], ...] = ()
    description: str = ""
    query: tuple[tuple[str, str], ...] = ()  # (name, description)


def operation(**kwargs: Any) -> Callable[[F], F]:
    """Attach the route's documentation to its view function."""
    documented = Operation(**kwargs)

    def mark(view: F) -> F:
        setattr(view, ATTRIBUTE, documented)
        return view

    return mark


def operation_of(app: Flask, endpoint: str) -> Operation | None:
    view = app.view_functions.get(endpoint)
    return getattr(view, ATTRIBUTE, None)


def openapi_path(rule: str) -> str:
    """`/namespaces/<ns>/files/<path:name>` → `/namespaces/{ns}/files/{name}`."""
    return re.sub(r"<(?:[a-z]+:)?([A-Za-z_][A-Za-z0-9_]*)>", r"{\1}", rule)


class _Schemas:
    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, model: Any, mode: str) -> dict[str, Any]:
        schema = TypeAdapter(model).json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
        named = schema.pop("$defs", {})
        name = getattr(model, "__name__", None)
        if name is not None:
            named[name] = schema
        for known, found in named.items():
            # two models of one name in different surfaces would share one schema
            if self.components.setdefault(known, found) != found:
                raise ValueError(f"two different models are named {known}")
        return schema if name is None else {"$ref": REF.format(model=name)}


def document(app: Flask, *, title: str, version: str) -> dict[str, Any]:
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint in UNDOCUMENTED_ENDPOINTS:
            continue
        op = operation_of(app, rule.endpoint)
        methods = sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
        routes = op.paths if op and op.paths else ((openapi_path(rule.rule), op),)
        for path, path_op in routes:
            for method in methods:
                paths.setdefault(path, {})[method.lower()] = _operation(
                    path_op, rule.endpoint, method, path, schemas
                )
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {
            "schemas": schemas.components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # keys are optional: the server may run without them
        "security": [{}, {"bearer": []}],
    }


def _operation(
    op: Operation | None, endpoint: str, method: str, path: str, schemas: _Schemas
) -> dict[str, Any]:
    if op is None:
        return {"summary": endpoint, "x-undocumented": True, "responses": {"default": {}}}
    out: dict[str, Any] = {
        "operationId": f"{endpoint}.{method.lower()}"
        + (f".{path.rsplit(':', 1)[1]}" if ":" in path else ""),
        "summary": op.summary,
        "tags": [op.tag],
    }
    if op.description:
        out["description"] = op.description
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{([^}]+)}", path)
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "description": text, "schema": {}}
        for name, text in op.query
    ]
    if parameters:
        out["parameters"] = parameters
    if op.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas.ref(op.body, "validation")}},
        }
    success: dict[str, Any] = {"description": op.summary}
    if op.response is not None:
        content: dict[str, Any] = {
            op.media_type: {"schema": schemas.ref(op.response, "serialization")}
        }
        if op.streams:
            content["text/event-stream"] = {"schema": {"type": "string"}}
        success["content"] = content
    elif op.media_type != "application/json":
        success["content"] = {op.media_type: {"schema": {"type": "string"}}}
    responses: dict[str, Any] = {str(op.status): success}
    if op.error is not None:
        responses["default"] = {
            "description": "an error in this surface's shape",
            "content": {"application/json": {"schema": schemas.ref(op.error, "serialization")}},
        }
    out["responses"] = responses
    return out


def install(app: Flask, *, version: str) -> None:
    """`/openapi.json` and the docs page at `/docs` (Swagger UI shipped in
    the flask-swagger-ui package: no CDN). Both are open like /health: they
    describe the routes, not the data."""
    from flask_swagger_ui import get_swaggerui_blueprint

    @app.get("/openapi.json")
    @operation(summary="This document (OpenAPI 3.1)", tag="operations", response=dict[str, Any])
    def openapi_json() -> Response:
        # built once: the routes cannot change after the first request
        if not built:
            built.append(app.json.dumps(document(app, title="edgerag", version=version)))
        return Response(built[0], mimetype="application/json")

    built: list[str] = []

    app.register_blueprint(
        get_swaggerui_blueprint(
            "/docs",
            "/openapi.json",
            config={"app_name": "edgerag API"},
            blueprint_name="docs_page",
        )
    )
