"""The catalog's schema and migrations, and the records it returns:
namespaces, collections and files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ulid import ULID

from flask_app.store import sqlite_db

PROCESSING, READY, FAILED = "processing", "ready", "failed"

INGEST_LEASE_S = 120.0  # a claimed file with no progress for this long is claimed again

# the filter kind of a metadata value from its JSON type (json_each's `type`)
_KIND = (
    "CASE {type} WHEN 'text' THEN 'string' WHEN 'true' THEN 'bool' WHEN 'false' THEN 'bool' "
    "ELSE 'number' END"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS namespaces (
    name TEXT PRIMARY KEY,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS collections (
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    access_control TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS files (
    file_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    content_type TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    principals TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    data BLOB,
    text TEXT,
    chunks_done INTEGER NOT NULL DEFAULT 0,
    chunks_total INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS files_path ON files (namespace, collection, path);
CREATE INDEX IF NOT EXISTS files_status ON files (status, created_at);
-- the metadata and principals of each file as indexed rows, kept by triggers
-- (filters look matching files up instead of reading every file's JSON)
CREATE TABLE IF NOT EXISTS file_metadata (
    file_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    value,
    PRIMARY KEY (file_id, key)
);
CREATE INDEX IF NOT EXISTS file_metadata_value
    ON file_metadata (namespace, collection, key, kind, value);
CREATE TABLE IF NOT EXISTS file_principals (
    file_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    collection TEXT NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (file_id, principal)
);
CREATE INDEX IF NOT EXISTS file_principals_principal
    ON file_principals (namespace, collection, principal);
CREATE TRIGGER IF NOT EXISTS files_indexed AFTER INSERT ON files BEGIN
    INSERT INTO file_metadata SELECT new.file_id, new.namespace, new.collection, key,
        {kind}, value FROM json_each(new.metadata);
    INSERT OR IGNORE INTO file_principals SELECT new.file_id, new.namespace, new.collection, value
    FROM json_each(new.principals);
END;
CREATE TRIGGER IF NOT EXISTS files_unindexed AFTER DELETE ON files BEGIN
    DELETE FROM file_metadata WHERE file_id = old.file_id;
    DELETE FROM file_principals WHERE file_id = old.file_id;
END;
CREATE TABLE IF NOT EXISTS chunks (
    file_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    PRIMARY KEY (file_id, n)
);
""".replace("{kind}", _KIND.format(type="type"))


def _index_existing_files(db: sqlite3.Connection) -> None:
    """Catalogs written before the metadata index: index their files once."""
    db.execute("DELETE FROM file_metadata")
    db.execute("DELETE FROM file_principals")
    db.execute(
        "INSERT INTO file_metadata SELECT f.file_id, f.namespace, f.collection, j.key, "
        f"{_KIND.format(type='j.type')}, j.value FROM files f, json_each(f.metadata) j"
    )
    db.execute(
        "INSERT OR IGNORE INTO file_principals SELECT f.file_id, f.namespace, "
        "f.collection, j.value FROM files f, json_each(f.principals) j"
    )


def _catalog_1(db: sqlite3.Connection) -> None:
    sqlite_db.script(_SCHEMA)(db)
    _index_existing_files(db)


# Version 1 is the metadata index (catalogs got it before migrations were
# numbered); 2 creates any table an older catalog lacks; 3 adds ingestion
# claims' lease column (catalogs of the last unnumbered release have it);
# 4 the sha256 of each file's uploaded bytes (NULL for files stored before:
# their bytes are gone once ingested).
CATALOG_SCHEMA = sqlite_db.Schema(
    "catalog",
    (
        _catalog_1,
        sqlite_db.script(_SCHEMA),
        sqlite_db.add_columns("files", {"lease_until": "REAL NOT NULL DEFAULT 0"}),
        sqlite_db.add_columns("files", {"sha256": "TEXT"}),
    ),
)


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_id(prefix: str) -> str:
    return f"{prefix}_{ULID()}"


def chunk_id(file_id: str, n: int) -> str:
    return f"{file_id}#{n}"


@dataclass(frozen=True)
class NamespaceRecord:
    name: str
    created_at: float


@dataclass(frozen=True)
class CollectionRecord:
    namespace: str
    name: str
    description: str
    access_control: str
    created_at: float
    updated_at: float
    file_count: int = 0
    ready_file_count: int = 0
    processing_file_count: int = 0
    failed_file_count: int = 0

    @property
    def status(self) -> str:
        if self.file_count == 0:
            return "empty"
        return "ready" if self.ready_file_count else "indexing"


@dataclass(frozen=True)
class FileRecord:
    file_id: str
    namespace: str
    collection: str
    path: str
    content_type: str
    size_bytes: int
    metadata: dict[str, Any]
    principals: list[str]
    status: str
    error: dict[str, str] | None
    chunks_done: int
    chunks_total: int
    created_at: float
    char_count: int | None
    sha256: str | None = None  # of the uploaded bytes (None: stored before it was kept)


class NotEmpty(Exception):
    """A namespace that still holds collections."""


_FILE_COLUMNS = (
    "file_id, namespace, collection, path, content_type, size_bytes, metadata, principals, "
    "status, error, chunks_done, chunks_total, created_at, length(text), sha256"
)


def _file(row: Sequence[Any]) -> FileRecord:
    return FileRecord(
        file_id=row[0],
        namespace=row[1],
        collection=row[2],
        path=row[3],
        content_type=row[4],
        size_bytes=row[5],
        metadata=json.loads(row[6]),
        principals=json.loads(row[7]),
        status=row[8],
        error=json.loads(row[9]) if row[9] else None,
        chunks_done=row[10],
        chunks_total=row[11],
        created_at=row[12],
        char_count=row[13],
        sha256=row[14],
    )
