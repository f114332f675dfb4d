"""Server-sent events framing."""

from __future__ import annotations

from typing import Any

import orjson


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One `event:` + `data:` frame with compact JSON data."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
