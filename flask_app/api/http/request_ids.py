"""One id per request (`req_<ULID>`), made on first use, sent back as
`X-Request-Id` and written in the request log."""

from __future__ import annotations

from flask import g

from flask_app.store.catalog import new_id


def request_id() -> str:
    rid: str | None = g.get("request_id")
    if rid is None:
        rid = new_id("req")
        g.request_id = rid
    return rid
