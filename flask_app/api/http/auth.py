"""API keys: with keys configured, every route but /health and /info needs
`Authorization: Bearer <key>`. Keys are compared in constant time and never
logged; a refusal is a 401 that each surface renders in its own error shape."""

from __future__ import annotations

import hmac

from flask import Flask, request
from werkzeug.exceptions import Unauthorized

OPEN_PATHS = frozenset({"/health", "/info"})


class MissingKey(Unauthorized):
    description = "Unauthorized: send the header Authorization: Bearer <API key>"


def _presented() -> bytes | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode()


def key_ok(presented: bytes | None, keys: tuple[bytes, ...]) -> bool:
    if presented is None:
        return False
    ok = False
    for key in keys:  # every key is compared: the time does not say which matched
        ok |= hmac.compare_digest(presented, key)
    return ok


def install(app: Flask, keys: tuple[str, ...]) -> None:
    if not keys:
        return
    encoded = tuple(k.encode() for k in keys)

    @app.before_request
    def require_key() -> None:
        if request.path in OPEN_PATHS or request.method == "OPTIONS":
            return
        if not key_ok(_presented(), encoded):
            raise MissingKey()
