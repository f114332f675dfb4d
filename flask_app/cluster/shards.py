"""The shard actors of a cluster, and how a call to them is awaited."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
import ray.exceptions

from flask_app.cluster import actor_call
from flask_app.cluster.shard import Shard
from flask_app.store import CollectionUnavailable

# After a shard fails to answer, calls to it fail at once for this long
# instead of each waiting out the timeout; then one call tries it again.
DOWN_FOR_S = 15.0


class Shards:
    """The shard actors, and how a call to them is awaited."""

    def __init__(self, actors: list[Any], timeout: float) -> None:
        self.actors = actors
        self.timeout = timeout
        self._down: dict[int, tuple[float, str]] = {}  # shard -> (until, why)
        self._lock = threading.Lock()

    def down(self) -> dict[int, str]:
        """Shards that recently failed to answer, with why."""
        now = time.monotonic()
        with self._lock:
            return {n: why for n, (until, why) in self._down.items() if until > now}

    def mark_down(self, n: int, why: str) -> None:
        with self._lock:
            self._down[n] = (time.monotonic() + DOWN_FOR_S, why)

    def call(self, calls: Mapping[int, Callable[[Any], Any]], what: str) -> list[Any]:
        """Run `calls[n](actor n)` (each returns a Ray reference) and return
        their results in shard order. A shard's own error (a conflict, a full
        store) is raised as it is; a shard that died or did not answer in time
        makes the collection unavailable (503) — never a partial result."""
        down = self.down()
        for n in calls:
            if n in down:
                raise CollectionUnavailable(what, f"shard {n} {down[n]}; retry later")
        refs = {n: call(self.actors[n]) for n, call in calls.items()}
        out = []
        for n, ref in refs.items():
            try:
                out.append(ray.get(ref, timeout=self.timeout))
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
                    raise cause from None
                raise CollectionUnavailable(what, f"shard {n} failed: {exc}") from exc
            except ray.exceptions.GetTimeoutError as exc:
                why = f"did not answer in {self.timeout:.0f} s (restarting, or its node is down)"
                self.mark_down(n, why)
                raise CollectionUnavailable(what, f"shard {n} {why}; retry later") from exc
            except ray.exceptions.RayError as exc:
                why = f"is unreachable ({type(exc).__name__})"
                self.mark_down(n, why)
                raise CollectionUnavailable(what, f"shard {n} {why}; retry later") from exc
        return out

    def where(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Where each shard runs ({"shard": n, "error": …} for one that does
        not answer within `timeout`)."""
        refs = [actor_call.call(actor, Shard.where) for actor in self.actors]
        deadline = time.monotonic() + timeout
        out = []
        for n, ref in enumerate(refs):
            try:
                out.append(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())))
            except ray.exceptions.RayError as exc:
                out.append({"shard": n, "error": type(exc).__name__})
        return out
