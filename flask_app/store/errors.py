"""Errors of the store; `status` suggests the HTTP status."""

from __future__ import annotations


class StoreError(Exception):
    """Base of store errors; `status` suggests the HTTP status."""

    status = 400


class ClearedError(StoreError):
    """The collection was dropped while the request waited for it."""

    status = 409

    def __init__(self) -> None:
        super().__init__("the store was cleared while this request was waiting; retry it")


class ConflictError(StoreError):
    """The request conflicts with the collection's fixed settings."""

    status = 409


class CapacityError(StoreError):
    """An upload would exceed the item cap."""

    status = 409

    def __init__(self, current: int, max_items: int, requested_new: int) -> None:
        super().__init__(
            f"Item limit exceeded: max {max_items}, current {current}, "
            f"requested {requested_new} new items."
        )
        self.current = current
        self.max_items = max_items
        self.requested_new = requested_new
