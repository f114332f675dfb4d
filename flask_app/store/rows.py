"""A collection's rows database (`rows.sqlite`): its schema and
migrations, what a row is (`Item`) and what a search returns (`Hit`), the
metadata rows filters look ids up in, the full-text rows, and the settings
check every write makes."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app.store import sqlite_db
from flask_app.store.errors import ConflictError

Vectors = npt.NDArray[np.float32]
MetadataValue = str | int | float | bool | None

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    text TEXT NOT NULL DEFAULT '',
    metadata TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
) WITHOUT ROWID;
-- One row per (item, metadata key): filters find their ids through this index
-- in time proportional to the matches, not to the collection.
CREATE TABLE IF NOT EXISTS item_meta (
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    value NOT NULL,
    id TEXT NOT NULL,
    PRIMARY KEY (key, kind, value, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS item_meta_by_id ON item_meta (id);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT);
-- Full-text index of the items' text (BM25 ranking for hybrid retrieval),
-- written in the same transactions as the rows; `fts_rows` maps an item to
-- its row there, so replacing or deleting one costs an index lookup.
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(
    text, id UNINDEXED, tokenize = 'porter unicode61'
);
CREATE TABLE IF NOT EXISTS fts_rows (id TEXT PRIMARY KEY, fts_row INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY,
    op TEXT NOT NULL,
    ids TEXT NOT NULL,
    vectors BLOB
);
"""


def _index_unindexed_text(db: sqlite3.Connection) -> None:
    """Collections written before the text index existed (no `fts` flag in
    their settings) get it once; the flag itself is retired by the schema
    version."""
    if db.execute("SELECT 1 FROM settings WHERE key = 'fts'").fetchone() is None:
        rows = db.execute("SELECT id, text FROM items").fetchall()
        index_text(db, [r[0] for r in rows], [r[1] for r in rows])
    db.execute("DELETE FROM settings WHERE key = 'fts'")


def _rows_schema_1(db: sqlite3.Connection) -> None:
    sqlite_db.script(_SCHEMA)(db)
    _index_unindexed_text(db)


# rows.sqlite; files of earlier releases are at version 0 with any of these tables
ROWS_SCHEMA = sqlite_db.Schema("collection rows", (_rows_schema_1,))


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    metadata: dict[str, Any] | None


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    text: str
    metadata: dict[str, Any] | None


@dataclass(frozen=True)
class CollectionInfo:
    dimension: int | None
    mode: str | None
    embedding_model: str | None
    items: int
    index: str = "f32"


def meta_key(value: MetadataValue) -> tuple[str, Any]:
    """(kind, value) as stored in `item_meta`: numbers compare as numbers
    (1 == 1.0), booleans and null only by kind."""
    if isinstance(value, bool):
        return ("true" if value else "false"), ""
    if value is None:
        return "null", ""
    if isinstance(value, str):
        return "text", value
    return "number", float(value)


def first_repeated(ids: Sequence[str]) -> str | None:
    if len(set(ids)) == len(ids):
        return None
    seen: set[str] = set()
    for item_id in ids:
        if item_id in seen:
            return item_id
        seen.add(item_id)
    return None


def meta_rows(
    ids: Sequence[str], metadata: Sequence[Mapping[str, Any] | None]
) -> list[tuple[Any, ...]]:
    rows = []
    for item_id, meta in zip(ids, metadata, strict=True):
        if not meta:
            continue
        for key, value in meta.items():
            kind, stored = meta_key(value)
            rows.append((key, kind, stored, item_id))
    return rows


def check_settings(
    settings: Mapping[str, Any], mode: str, dim: int, embedding_model: str | None
) -> None:
    """Refuse a batch that conflicts with a collection's fixed settings
    (`settings` empty: nothing is fixed yet)."""
    if settings.get("dimension") is None:
        return
    if settings["mode"] != mode:
        raise ConflictError(
            f"store is in {settings['mode']} mode; cannot upload {mode} items "
            "(modes cannot be mixed; clear the store to change mode)"
        )
    if settings["dimension"] != dim:
        raise ConflictError(
            f"vector dimension {dim} does not match the store's dimension "
            f"{settings['dimension']} (clear the store to change it)"
        )
    if embedding_model and settings.get("embedding_model") not in (None, embedding_model):
        raise ConflictError(
            f"embedding_model {embedding_model!r} does not match the store's "
            f"{settings['embedding_model']!r} (clear the store to change it)"
        )


def index_text(db: sqlite3.Connection, ids: Sequence[str], texts: Sequence[str]) -> None:
    """Text-index rows for `ids` (which have none) holding `texts` (empty texts get none)."""
    first = db.execute("SELECT coalesce(max(rowid), 0) + 1 FROM items_fts").fetchone()[0]
    rows = [
        (first + n, text, item_id)
        for n, (item_id, text) in enumerate(zip(ids, texts, strict=True))
        if text.strip()
    ]
    db.executemany("INSERT INTO items_fts (rowid, text, id) VALUES (?, ?, ?)", rows)
    db.executemany("INSERT INTO fts_rows VALUES (?, ?)", [(i, r) for r, _, i in rows])


def drop_text(db: sqlite3.Connection, ids: Sequence[str]) -> None:
    db.executemany(
        "DELETE FROM items_fts WHERE rowid = (SELECT fts_row FROM fts_rows WHERE id = ?)",
        [(i,) for i in ids],
    )
    db.executemany("DELETE FROM fts_rows WHERE id = ?", [(i,) for i in ids])
