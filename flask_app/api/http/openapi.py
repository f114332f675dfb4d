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

from flask import Flask, Response, request
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
    # other request media types the route takes: (media type, JSON schema)
    other_bodies: tuple[tuple[str, dict[str, Any]], ...] = ()
    response: Any = None  # model of the success body (None: no JSON body)
    status: int = 200
    media_type: str = "application/json"  # of the success body
    streams: bool = False  # may answer text/event-stream instead
    error: Any = None  # model of the error body
    # one URL rule serving several documented paths (Engine `{name}:answer`):
    # each path with its own operation
    paths: tuple[tuple[str, Operation], ...] = ()
    description: str = ""
    # (name, description) or (name, description, JSON schema of the value)
    query: tuple[tuple[str, str] | tuple[str, str, dict[str, Any]], ...] = ()
    also: tuple[int, ...] = ()  # other success statuses with the same body
    # server-sent events: (event name, or None for unnamed `data:` frames;
    # the model of the frame's JSON data, or a str the data equals)
    events: tuple[tuple[str | None, Any], ...] = ()
    # OpenAPI links of the success response: (name, target operationId,
    # {parameter: runtime expression})
    links: tuple[tuple[str, str, dict[str, str]], ...] = ()
    operation_id: str = ""  # default: `endpoint.method[.verb]`


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


# a surface describes its path parameters once, for every path under a prefix
PATH_PARAMETERS = "EDGERAG_PATH_PARAMETERS"


def describe_path_parameters(app: Flask, prefix: str, schemas: dict[str, dict[str, Any]]) -> None:
    """The schema (pattern, length, enum) of each named path parameter of
    every route under `prefix`, as the server checks it."""
    app.config.setdefault(PATH_PARAMETERS, []).append((prefix, schemas))


def _path_schema(app: Flask, path: str, name: str) -> dict[str, Any]:
    for prefix, schemas in app.config.get(PATH_PARAMETERS, []):
        if path.startswith(prefix) and name in schemas:
            return dict(schemas[name])
    return {"type": "string"}


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
                    app, path_op, rule.endpoint, method, path, schemas
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


def operation_id(endpoint: str, method: str, path: str) -> str:
    """`endpoint.method`, plus the custom method of a `{name}:verb` path."""
    tail = path.rsplit("/", 1)[-1]
    return f"{endpoint}.{method.lower()}" + (f".{tail.rsplit(':', 1)[1]}" if ":" in tail else "")


def _operation(
    app: Flask,
    op: Operation | None,
    endpoint: str,
    method: str,
    path: str,
    schemas: _Schemas,
) -> dict[str, Any]:
    if op is None:
        return {"summary": endpoint, "x-undocumented": True, "responses": {"default": {}}}
    out: dict[str, Any] = {
        "operationId": op.operation_id or operation_id(endpoint, method, path),
        "summary": op.summary,
        "tags": [op.tag],
    }
    if op.description:
        out["description"] = op.description
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": _path_schema(app, path, name)}
        for name in re.findall(r"{([^}]+)}", path)
    ]
    parameters += [
        {
            "name": query[0],
            "in": "query",
            "required": False,
            "description": query[1],
            "schema": query[2] if len(query) > 2 else {},
        }
        for query in op.query
    ]
    if parameters:
        out["parameters"] = parameters
    if op.body is not None:
        bodies = {"application/json": {"schema": schemas.ref(op.body, "validation")}}
        bodies.update({media: {"schema": schema} for media, schema in op.other_bodies})
        out["requestBody"] = {"required": True, "content": bodies}
    success: dict[str, Any] = {"description": op.summary}
    if op.response is not None:
        content: dict[str, Any] = {
            op.media_type: {"schema": schemas.ref(op.response, "serialization")}
        }
        if op.streams:
            content["text/event-stream"] = {"schema": _events_schema(op.events, schemas)}
        success["content"] = content
    elif op.media_type == "text/event-stream":
        success["content"] = {op.media_type: {"schema": _events_schema(op.events, schemas)}}
    elif op.media_type != "application/json":
        success["content"] = {op.media_type: {"schema": {"type": "string"}}}
    if op.links:
        success["links"] = {
            name: {"operationId": target, "parameters": parameters}
            for name, target, parameters in op.links
        }
    responses: dict[str, Any] = {str(status): success for status in (op.status, *op.also)}
    if op.error is not None:
        responses["default"] = {
            "description": "an error in this surface's shape",
            "content": {"application/json": {"schema": schemas.ref(op.error, "serialization")}},
        }
    out["responses"] = responses
    return out


def _events_schema(events: tuple[tuple[str | None, Any], ...], schemas: _Schemas) -> dict[str, Any]:
    """One event of a stream (OpenAPI 3.1: the SSE media type's schema is
    each event's): its name, and its `data` as JSON text of a model."""
    if not events:
        return {"type": "object"}
    kinds = []
    for name, data in events:
        if isinstance(data, str):
            data_schema: dict[str, Any] = {"const": data}
        else:
            data_schema = {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": schemas.ref(data, "serialization"),
            }
        event: dict[str, Any] = {"type": "object", "properties": {"data": data_schema}}
        event["required"] = ["data"]
        if name is not None:
            event["properties"]["event"] = {"const": name}
            event["required"] = ["event", "data"]
        kinds.append(event)
    return kinds[0] if len(kinds) == 1 else {"anyOf": kinds}


def _allow_table(doc: dict[str, Any]) -> list[tuple[re.Pattern[str], str]]:
    """(path pattern, Allow header) per documented path, the most literal
    first (`{name}:answer` before `{name}`)."""
    table = []
    for template, ops in doc["paths"].items():
        parts = re.split(r"({[^}]+})", template)
        pattern = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
        methods = {m.upper() for m, op in ops.items() if not op.get("x-undocumented")}
        if "GET" in methods:
            methods.add("HEAD")
        literal = sum(len(p) for p in parts if not p.startswith("{"))
        table.append((literal, re.compile(pattern), ", ".join(sorted(methods | {"OPTIONS"}))))
    table.sort(key=lambda row: -row[0])
    return [(pattern, allow) for _, pattern, allow in table]


def install(app: Flask, *, version: str) -> None:
    """`/openapi.json` and the docs page at `/docs` (Swagger UI shipped in
    the flask-swagger-ui package: no CDN). Both are open like /health: they
    describe the routes, not the data."""
    from flask_swagger_ui import get_swaggerui_blueprint

    built: list[tuple[str, list[tuple[re.Pattern[str], str]]]] = []

    def cached() -> tuple[str, list[tuple[re.Pattern[str], str]]]:
        # built once: the routes cannot change after the first request
        if not built:
            doc = document(app, title="edgerag", version=version)
            built.append((app.json.dumps(doc), _allow_table(doc)))
        return built[0]

    @app.get("/openapi.json")
    @operation(summary="This document (OpenAPI 3.1)", tag="operations", response=dict[str, Any])
    def openapi_json() -> Response:
        return Response(cached()[0], mimetype="application/json")

    @app.after_request
    def allow_documented_methods(response: Response) -> Response:
        """`Allow` (on OPTIONS and 405) lists the methods the document has
        for the path: one URL rule may serve several documented paths."""
        if request.method == "OPTIONS" or response.status_code == 405:
            for pattern, allow in cached()[1]:
                if pattern.fullmatch(request.path):
                    response.headers["Allow"] = allow
                    break
        return response

    app.register_blueprint(
        get_swaggerui_blueprint(
            "/docs",
            "/openapi.json",
            config={"app_name": "edgerag API"},
            blueprint_name="docs_page",
        )
    )
