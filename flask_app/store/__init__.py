"""Namespaces → collections → items: rows in SQLite, vectors in a simcore index."""

from flask_app.store.collection import Collection, CollectionInfo, Hit, Item, MetadataValue
from flask_app.store.errors import (
    CapacityError,
    ClearedError,
    CollectionUnavailable,
    ConflictError,
    DataDirLocked,
    DuplicateIds,
    StoreError,
    VectorRejected,
)
from flask_app.store.store import Store

__all__ = [
    "CapacityError",
    "ClearedError",
    "Collection",
    "CollectionInfo",
    "CollectionUnavailable",
    "ConflictError",
    "DataDirLocked",
    "DuplicateIds",
    "Hit",
    "Item",
    "MetadataValue",
    "Store",
    "StoreError",
    "VectorRejected",
]
