"""The shard actors of a cluster, and how a call to them is awaited."""

from __future__ import annotations

from typing import Any

import ray
import ray.exceptions

from flask_app.store import CollectionUnavailable


class Shards:
    """The shard actors, and how a call to them is awaited."""

    def __init__(self, actors: list[Any], timeout: float) -> None:
        self.actors = actors
        self.timeout = timeout

    def gather(self, refs: dict[int, Any], what: str) -> list[Any]:
        """The results of `refs` (by shard number), in shard order. A shard's
        own error (a conflict, a full store) is raised as it is; a shard that
        died or did not answer in time makes the collection unavailable."""
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
                raise CollectionUnavailable(
                    what,
                    f"shard {n} did not answer in {self.timeout:.0f} s (restarting, or "
                    "its node is down); retry later",
                ) from exc
            except ray.exceptions.RayError as exc:
                raise CollectionUnavailable(
                    what, f"shard {n} is unreachable: {type(exc).__name__}"
                ) from exc
        return out

    def where(self) -> list[dict[str, Any]]:
        """Where each shard runs ({"shard": n, "error": …} for one that does not answer)."""
        out = []
        for n, actor in enumerate(self.actors):
            try:
                out.append(ray.get(actor.where.remote(), timeout=min(self.timeout, 5.0)))
            except ray.exceptions.RayError as exc:
                out.append({"shard": n, "error": type(exc).__name__})
        return out
