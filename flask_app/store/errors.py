"""Errors of the store (kinds and statuses: flask_app.errors)."""

from __future__ import annotations

from flask_app.errors import Kind, ServiceError


class StoreError(ServiceError):
    """Base of store errors."""


class ClearedError(StoreError):
    """The collection was dropped while the request waited for it."""

    kind = Kind.CONFLICT

    def __init__(self) -> None:
        super().__init__("the store was cleared while this request was waiting; retry it")


class ConflictError(StoreError):
    """The request conflicts with the collection's fixed settings."""

    kind = Kind.CONFLICT


class CapacityError(StoreError):
    """An upload would exceed the item cap."""

    kind = Kind.CONFLICT
    code = "item_limit_exceeded"

    def __init__(self, current: int, max_items: int, requested_new: int) -> None:
        super().__init__(
            f"Item limit exceeded: max {max_items}, current {current}, "
            f"requested {requested_new} new items."
        )
        self.current = current
        self.max_items = max_items
        self.requested_new = requested_new
        self.details = {"items": current, "max_items": max_items, "requested_new": requested_new}


class VectorRejected(StoreError):
    """A vector cannot be stored (non-finite, or too close to zero to have a direction)."""


class DuplicateIds(StoreError):
    """A batch names one id twice."""

    def __init__(self, item_id: str) -> None:
        super().__init__(f"id {item_id!r} appears more than once in one batch")
        self.item_id = item_id


class DataDirLocked(StoreError):
    """Another process holds the data directory."""

    kind = Kind.UNAVAILABLE


class CollectionUnavailable(StoreError):
    """A collection's files cannot be opened (corrupt or half-written); the
    rest of the store keeps serving."""

    kind = Kind.UNAVAILABLE
    retry_after = 5  # seconds (a cluster's shard restarts in a few)

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"collection {name} is unavailable: {reason}")
        self.name = name
        self.reason = reason
