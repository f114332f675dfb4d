"""Refuse a request from its headers, before its body is read.

A body larger than the route allows gets 413 as soon as the declared size
(Content-Length) or the received size (chunked) passes the limit; a body of a
type the route does not take gets 415 at once. The check runs in one of two
places with the same rules: inside the WSGI server's request parser (`edgerag
serve`, so nothing past the limit is ever buffered; the request then carries
`ADMITTED` in its environ) or as a Flask `before_request` hook (every other
server, and the test client). Either way the refusal is rendered by the app's
own error handlers, so each surface keeps its error shape.

Every route takes JSON up to the server's `--max-body-mb`; a surface may
give a path a smaller limit (`EDGERAG_BODY_LIMITS`) or more types
(`EDGERAG_BODY_TYPES`: the moorcheh bulk upload's multipart body).
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, request
from werkzeug.exceptions import HTTPException

from flask_app.api.http.json_body import BadRequest

JSON_TYPES = ("application/json", "+json")
# Set by edgerag's waitress server on every request its parser checked.
ADMITTED = "edgerag.admitted"


@dataclass(frozen=True)
class BodyRule:
    max_bytes: int
    content_types: tuple[str, ...]  # a mimetype, or "+suffix"; empty: any type


def body_rule(app: Flask, method: str, path: str, *, matched: bool = False) -> BodyRule | None:
    """The rule of the route `method path`; None when no route matches (the
    app then answers 404/405 itself). `matched`: the caller knows one does."""
    if not matched:
        try:
            app.url_map.bind("localhost").match(path, method=method)
        except HTTPException:
            return None
    limit = int(app.config.get("MAX_CONTENT_LENGTH") or 0)
    # a surface may set a smaller limit for its paths: (path prefix, bytes)
    for prefix, bytes_ in app.config.get("EDGERAG_BODY_LIMITS", []):
        if path.startswith(prefix):
            limit = min(limit, bytes_) if limit else bytes_
    types = JSON_TYPES
    # a route may take other types too: (method, path, types)
    for route_method, route_path, more in app.config.get("EDGERAG_BODY_TYPES", []):
        if route_method == method and route_path == path:
            types = (*types, *more)
    return BodyRule(limit, types)


def _type_ok(mimetype: str, allowed: tuple[str, ...]) -> bool:
    if not allowed:
        return True
    return any(mimetype == a or (a.startswith("+") and mimetype.endswith(a)) for a in allowed)


def refusal(
    rule: BodyRule | None, content_type: str | None, declared: int | None, chunked: bool
) -> BadRequest | None:
    """The 413/415 a request with these headers gets, or None."""
    if rule is None:
        return None
    if declared is not None and rule.max_bytes and declared > rule.max_bytes:
        return too_large(rule)
    has_body = chunked or (declared or 0) > 0
    mimetype = (content_type or "").split(";")[0].strip().lower()
    if has_body and not _type_ok(mimetype, rule.content_types):
        if rule.content_types == JSON_TYPES:
            wanted = "application/json"
        else:
            wanted = " or ".join(
                t if not t.startswith("+") else f"*/*{t}" for t in rule.content_types
            )
        return BadRequest(f"Content-Type must be {wanted}, got {content_type or 'none'}", 415)
    return None


def too_large(rule: BodyRule) -> BadRequest:
    return BadRequest(
        f"request body is larger than the limit of {rule.max_bytes} bytes (--max-body-mb)", 413
    )


def install(app: Flask) -> None:
    """The Flask side of the check (the server side is `waitress_server`)."""

    @app.before_request
    def admit() -> None:
        if request.url_rule is None or ADMITTED in request.environ:
            return  # no route (Flask answers 404/405), or the server checked it
        rule = body_rule(app, request.method, request.path, matched=True)
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        refused = refusal(rule, request.content_type, request.content_length, chunked)
        if refused is not None:
            raise refused
