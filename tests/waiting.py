"""Waiting for a file collection's ingestion, bounded in time (a busy host
can take seconds; a loop bounded only in count can end before it is done)."""

from __future__ import annotations

import time

from flask.testing import FlaskClient


def until_ready(client: FlaskClient, collection: str, seconds: float = 30.0) -> None:
    """Poll `collection` (its URL path) until its status is "ready"."""
    deadline = time.monotonic() + seconds
    status = None
    while time.monotonic() < deadline:
        status = client.get(collection).get_json()["status"]
        if status == "ready":
            return
        time.sleep(0.02)
    raise AssertionError(f"{collection} not ready after {seconds} s (last: {status})")
