"""A collection: its reads and writes over the shared state (see
`collection_core` for the layout and the write protocol)."""

from __future__ import annotations

from flask_app.store.collection_core import (
    COMPACT_MIN_DEAD,
    WAL_LIMIT_BYTES,
    CollectionCore,
    stored_index_kind,
)
from flask_app.store.collection_reads import CollectionReads
from flask_app.store.collection_writes import CollectionWrites
from flask_app.store.rows import (
    ROWS_SCHEMA,
    CollectionInfo,
    Hit,
    Item,
    MetadataValue,
    Vectors,
    check_settings,
)

__all__ = [
    "COMPACT_MIN_DEAD",
    "ROWS_SCHEMA",
    "WAL_LIMIT_BYTES",
    "Collection",
    "CollectionCore",
    "CollectionInfo",
    "Hit",
    "Item",
    "MetadataValue",
    "Vectors",
    "check_settings",
    "stored_index_kind",
]


class Collection(CollectionWrites, CollectionReads):
    """One collection; thread-safe."""
