"""Whether the client of the current request is still connected.

waitress exposes `waitress.client_disconnected` when it runs with
`channel_request_lookahead > 0` (as `edgerag serve` does); other servers
(and Flask's test client) give no such probe, and then nothing is cancelled.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import request


def client_gone_probe() -> Callable[[], bool] | None:
    probe = request.environ.get("waitress.client_disconnected")
    return probe if callable(probe) else None
