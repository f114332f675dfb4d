"""API keys: with keys configured, every route but /health, /info, the API
documents and the web page's static files needs `Authorization: Bearer <key>`. Keys are compared in
constant time and never logged; a refusal is a 401 that each surface renders
in its own error shape.

A key may be scoped to Engine namespaces (`KEY:ops+docs`): it then reaches
only those namespaces' routes (others answer 403 `permission_denied`) and no
other surface (403 in that surface's shape), since the moorcheh-edge store
and the metrics are shared by every full key. Lucidworks conversation
memories and async jobs belong to the key that made them (`tenant()`).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from flask import Flask, g, request
from werkzeug.exceptions import Forbidden, Unauthorized

OPEN_PATHS = frozenset({"/health", "/info"})
SCOPED_PREFIX = "/namespaces"


class MissingKey(Unauthorized):
    description = "Unauthorized: send the header Authorization: Bearer <API key>"


class NamespaceForbidden(Forbidden):
    description = "The API key cannot access this namespace."


class SurfaceForbidden(Forbidden):
    description = "This API key is scoped to Engine namespaces and cannot use this route."


@dataclass(frozen=True)
class Grant:
    key: bytes
    namespaces: frozenset[str] | None  # None: every namespace and every surface


def parse_grant(spec: str) -> Grant:
    """`KEY` (full access) or `KEY:ns1+ns2` (those Engine namespaces only)."""
    key, sep, scope = spec.strip().partition(":")
    if not key:
        raise ValueError("an API key must not be empty")
    if not sep:
        return Grant(key.encode(), None)
    namespaces = frozenset(ns for ns in scope.split("+") if ns)
    if not namespaces:
        raise ValueError("a scoped API key needs at least one namespace after ':'")
    return Grant(key.encode(), namespaces)


def _presented() -> bytes | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode()


def matching_grant(presented: bytes | None, grants: tuple[Grant, ...]) -> Grant | None:
    if presented is None:
        return None
    found = None
    for grant in grants:  # every key is compared: the time does not say which matched
        if hmac.compare_digest(presented, grant.key):
            found = grant
    return found


def tenant() -> str:
    """Whom the request acts for: a digest of its API key ("" without keys).
    Per-client state (conversation memories, async jobs) is kept per tenant,
    so another key's memory UUID or job id reads as unknown."""
    return str(g.get("tenant", ""))


def require_namespace(ns: str) -> None:
    """403 unless the request's key may use namespace `ns` (Engine resources
    call this after validating the body, as the spec's order wants)."""
    if not may_use_namespace(ns):
        raise NamespaceForbidden()


def may_use_namespace(ns: str) -> bool:
    """The request's key reaches namespace `ns` (every key without a scope does)."""
    scope: frozenset[str] | None = g.get("key_namespaces")
    return scope is None or ns in scope


def install(
    app: Flask,
    grants: tuple[Grant, ...],
    open_prefixes: tuple[str, ...] = (),
    open_paths: tuple[str, ...] = (),
) -> None:
    if not grants:
        return
    always_open = OPEN_PATHS | frozenset(open_paths)

    @app.before_request
    def require_key() -> None:
        if request.method == "OPTIONS" or request.path in always_open:
            return
        if open_prefixes and request.path.startswith(open_prefixes):
            return
        grant = matching_grant(_presented(), grants)
        if grant is None:
            raise MissingKey()
        g.key_namespaces = grant.namespaces
        g.tenant = hashlib.sha256(grant.key).hexdigest()[:32]
        if grant.namespaces is not None and not request.path.startswith(SCOPED_PREFIX + "/"):
            raise SurfaceForbidden()
