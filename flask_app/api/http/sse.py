"""Server-sent events framing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
from flask import Response


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One `event:` + `data:` frame with compact JSON data."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def event_stream(frames: Iterator[bytes], on_close: Callable[[], None]) -> Response:
    """A streamed SSE response; `on_close` runs when the response is closed,
    also when the client left before the first frame was read (the generator
    then never runs, so its own cleanup would not)."""
    response = Response(
        frames,
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    response.call_on_close(on_close)
    return response
