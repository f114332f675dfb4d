"""The catalog of named namespaces, collections and files (the Engine
surface's data model), in `<data-dir>/catalog.sqlite3`.

A file row holds its original bytes until ingestion has extracted its text;
then its text and the code-point spans of its chunks (the chunks' vectors
and words live in the collection's own store under the chunk ids
`<file_id>#<n>`). Uploading to an existing path replaces that file in the
same transaction that registers the new one.

An ingestion worker claims a processing file for a lease it renews with its
progress; a file whose lease ran out (its worker's process died) is claimed
again, so with several servers on one catalog (a cluster) no file is
ingested twice at once and none is left behind.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ulid import ULID

from flask_app.store import sqlite_db
from flask_app.store.file_query import Sql

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


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._write_lock = threading.Lock()  # writers queue here, not in SQLite's busy loop
        self._sqlite = sqlite_db.Database(path, CATALOG_SCHEMA)

    def _db(self) -> sqlite3.Connection:
        return self._sqlite.connection()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock, self._sqlite.transaction() as db:
            yield db

    def close(self) -> None:
        self._sqlite.close()

    # --- namespaces --------------------------------------------------------------

    def put_namespace(self, name: str) -> tuple[NamespaceRecord, bool]:
        with self._tx() as db:
            row = db.execute("SELECT created_at FROM namespaces WHERE name = ?", (name,)).fetchone()
            if row:
                return NamespaceRecord(name, row[0]), False
            now = time.time()
            db.execute("INSERT INTO namespaces VALUES (?, ?)", (name, now))
            return NamespaceRecord(name, now), True

    def namespace(self, name: str) -> NamespaceRecord | None:
        row = (
            self._db()
            .execute("SELECT created_at FROM namespaces WHERE name = ?", (name,))
            .fetchone()
        )
        return NamespaceRecord(name, row[0]) if row else None

    def namespaces(self, limit: int) -> list[NamespaceRecord]:
        """The first `limit` namespaces by name."""
        rows = (
            self._db()
            .execute("SELECT name, created_at FROM namespaces ORDER BY name LIMIT ?", (limit,))
            .fetchall()
        )
        return [NamespaceRecord(name, created) for name, created in rows]

    def delete_namespace(self, name: str) -> bool:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM collections WHERE namespace = ?", (name,)).fetchone():
                raise NotEmpty(name)
            return db.execute("DELETE FROM namespaces WHERE name = ?", (name,)).rowcount > 0

    # --- collections -------------------------------------------------------------

    def put_collection(
        self, namespace: str, name: str, description: str | None, access_control: str | None
    ) -> tuple[CollectionRecord, bool]:
        """Create, or update the description / access control of, a collection.
        Access control cannot change once the collection has files (ValueError)."""
        with self._tx() as db:
            now = time.time()
            row = db.execute(
                "SELECT description, access_control FROM collections "
                "WHERE namespace = ? AND name = ?",
                (namespace, name),
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO collections VALUES (?, ?, ?, ?, ?, ?)",
                    (namespace, name, description or "", access_control or "open", now, now),
                )
                created = True
            else:
                wanted = access_control or row[1]
                if (
                    wanted != row[1]
                    and db.execute(
                        "SELECT 1 FROM files WHERE namespace = ? AND collection = ?",
                        (namespace, name),
                    ).fetchone()
                ):
                    raise ValueError("access_control cannot change once the collection has files")
                db.execute(
                    "UPDATE collections SET description = ?, access_control = ?, updated_at = ? "
                    "WHERE namespace = ? AND name = ?",
                    (row[0] if description is None else description, wanted, now, namespace, name),
                )
                created = False
        record = self.collection(namespace, name)
        assert record is not None
        return record, created

    def _collection(self, row: Sequence[Any]) -> CollectionRecord:
        counts = dict(
            self._db()
            .execute(
                "SELECT status, count(*) FROM files WHERE namespace = ? AND collection = ? "
                "GROUP BY status",
                (row[0], row[1]),
            )
            .fetchall()
        )
        return CollectionRecord(
            namespace=row[0],
            name=row[1],
            description=row[2],
            access_control=row[3],
            created_at=row[4],
            updated_at=row[5],
            file_count=sum(counts.values()),
            ready_file_count=counts.get(READY, 0),
            processing_file_count=counts.get(PROCESSING, 0),
            failed_file_count=counts.get(FAILED, 0),
        )

    def collection(self, namespace: str, name: str) -> CollectionRecord | None:
        row = (
            self._db()
            .execute(
                "SELECT namespace, name, description, access_control, created_at, updated_at "
                "FROM collections WHERE namespace = ? AND name = ?",
                (namespace, name),
            )
            .fetchone()
        )
        return self._collection(row) if row else None

    def collections(self, namespace: str, limit: int, after: str | None) -> list[CollectionRecord]:
        rows = (
            self._db()
            .execute(
                "SELECT namespace, name, description, access_control, created_at, updated_at "
                "FROM collections WHERE namespace = ? AND name > ? ORDER BY name LIMIT ?",
                (namespace, after or "", limit),
            )
            .fetchall()
        )
        return [self._collection(r) for r in rows]

    def delete_collection(self, namespace: str, name: str) -> list[str]:
        """Forget the collection; returns the ids of its files."""
        with self._tx() as db:
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT file_id FROM files WHERE namespace = ? AND collection = ?",
                    (namespace, name),
                )
            ]
            db.executemany("DELETE FROM chunks WHERE file_id = ?", [(i,) for i in ids])
            db.execute(
                "DELETE FROM files WHERE namespace = ? AND collection = ?", (namespace, name)
            )
            db.execute(
                "DELETE FROM collections WHERE namespace = ? AND name = ?", (namespace, name)
            )
        return ids

    # --- files -----------------------------------------------------------------

    def add_file(
        self,
        namespace: str,
        collection: str,
        path: str,
        content_type: str,
        data: bytes,
        metadata: dict[str, Any],
        principals: list[str],
    ) -> tuple[FileRecord, str | None]:
        """Register a file (processing); returns it and the id of the file it
        replaced at the same path, if any."""
        file_id = new_id("file")
        now = time.time()
        with self._tx() as db:
            old = db.execute(
                "SELECT file_id FROM files WHERE namespace = ? AND collection = ? AND path = ?",
                (namespace, collection, path),
            ).fetchone()
            if old:
                db.execute("DELETE FROM chunks WHERE file_id = ?", (old[0],))
                db.execute("DELETE FROM files WHERE file_id = ?", (old[0],))
            db.execute(
                "INSERT INTO files (file_id, namespace, collection, path, content_type, "
                "size_bytes, metadata, principals, status, data, created_at, updated_at, "
                "sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    file_id,
                    namespace,
                    collection,
                    path,
                    content_type,
                    len(data),
                    json.dumps(metadata),
                    json.dumps(principals),
                    PROCESSING,
                    data,
                    now,
                    now,
                    hashlib.sha256(data).hexdigest(),
                ),
            )
        record = self.file(file_id)
        assert record is not None
        return record, old[0] if old else None

    def file(self, file_id: str) -> FileRecord | None:
        row = (
            self._db()
            .execute(f"SELECT {_FILE_COLUMNS} FROM files WHERE file_id = ?", (file_id,))
            .fetchone()
        )
        return _file(row) if row else None

    def files(
        self, namespace: str, collection: str, limit: int | None = None, after: str | None = None
    ) -> list[FileRecord]:
        sql = (
            f"SELECT {_FILE_COLUMNS} FROM files WHERE namespace = ? AND collection = ? "
            "AND file_id > ? ORDER BY file_id"
        )
        params: list[Any] = [namespace, collection, after or ""]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_file(r) for r in self._db().execute(sql, params)]

    def files_where(
        self,
        namespace: str,
        collection: str,
        conditions: Sequence[Sql] = (),
        *,
        status: str | None = READY,
        after: str | None = None,
        limit: int | None = None,
    ) -> list[FileRecord]:
        """Files of a collection (of one status, or any) that meet every
        condition, in file id order, after `after`."""
        sql = f"SELECT {_FILE_COLUMNS} FROM files f WHERE f.namespace = ? AND f.collection = ?"
        params: list[Any] = [namespace, collection]
        if status is not None:
            sql += " AND f.status = ?"
            params.append(status)
        if after is not None:
            sql += " AND f.file_id > ?"
            params.append(after)
        for condition in conditions:
            sql += f" AND {condition.text}"
            params += condition.params
        sql += " ORDER BY f.file_id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_file(r) for r in self._db().execute(sql, params)]

    def delete_file(self, file_id: str) -> bool:
        with self._tx() as db:
            db.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))
            return db.execute("DELETE FROM files WHERE file_id = ?", (file_id,)).rowcount > 0

    def pending(self) -> list[str]:
        """Files accepted but not yet ingested, oldest first."""
        return [
            r[0]
            for r in self._db().execute(
                "SELECT file_id FROM files WHERE status = ? ORDER BY created_at", (PROCESSING,)
            )
        ]

    def claim_pending(self) -> str | None:
        """Take the oldest processing file no worker holds (for INGEST_LEASE_S)."""
        now = time.time()
        with self._tx() as db:
            row = db.execute(
                "SELECT file_id FROM files WHERE status = ? AND lease_until <= ? "
                "ORDER BY created_at LIMIT 1",
                (PROCESSING, now),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE files SET lease_until = ? WHERE file_id = ?",
                (now + INGEST_LEASE_S, row[0]),
            )
            return str(row[0])

    def release_claims(self) -> None:
        """Forget every claim (one server owns this catalog and has just started)."""
        with self._tx() as db:
            db.execute("UPDATE files SET lease_until = 0 WHERE lease_until > 0")

    def counts(self) -> tuple[int, int]:
        """(collections, files) in the catalog."""
        db = self._db()
        (collections,) = db.execute("SELECT count(*) FROM collections").fetchone()
        (files,) = db.execute("SELECT count(*) FROM files").fetchone()
        return int(collections), int(files)

    def pending_count(self) -> int:
        (n,) = (
            self._db()
            .execute("SELECT count(*) FROM files WHERE status = ?", (PROCESSING,))
            .fetchone()
        )
        return int(n)

    def data(self, file_id: str) -> bytes | None:
        row = self._db().execute("SELECT data FROM files WHERE file_id = ?", (file_id,)).fetchone()
        return bytes(row[0]) if row and row[0] is not None else None

    def text(self, file_id: str) -> str | None:
        row = self._db().execute("SELECT text FROM files WHERE file_id = ?", (file_id,)).fetchone()
        return row[0] if row else None

    def set_chunks(self, file_id: str, text: str, spans: Sequence[tuple[int, int]]) -> None:
        """Record the extracted text and chunk spans (the file stays processing)."""
        with self._tx() as db:
            db.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))
            db.executemany(
                'INSERT INTO chunks (file_id, n, start, "end") VALUES (?, ?, ?, ?)',
                [(file_id, n, lo, hi) for n, (lo, hi) in enumerate(spans)],
            )
            db.execute(
                "UPDATE files SET text = ?, chunks_total = ?, chunks_done = 0, updated_at = ? "
                "WHERE file_id = ?",
                (text, len(spans), time.time(), file_id),
            )

    def spans_of(self, file_ids: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
        """Chunk spans of several files in one query, by file id."""
        out: dict[str, list[tuple[int, int]]] = {f: [] for f in file_ids}
        wanted = list(out)
        for lo in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
            part = wanted[lo : lo + 500]
            marks = ",".join("?" * len(part))
            rows = self._db().execute(
                f'SELECT file_id, start, "end" FROM chunks WHERE file_id IN ({marks}) '
                "ORDER BY file_id, n",
                part,
            )
            for file_id, start, end in rows:
                out[file_id].append((start, end))
        return out

    def progress(self, file_id: str, done: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE files SET chunks_done = ?, updated_at = ?, lease_until = ? "
                "WHERE file_id = ?",
                (done, time.time(), time.time() + INGEST_LEASE_S, file_id),
            )

    def finish(self, file_id: str, error: dict[str, str] | None = None) -> bool:
        """Mark ready (or failed with `error`); False when the file is gone."""
        status = READY if error is None else FAILED
        reason = json.dumps(error) if error else None
        with self._tx() as db:
            return (
                db.execute(
                    "UPDATE files SET status = ?, error = ?, data = NULL, updated_at = ? "
                    "WHERE file_id = ? AND status = ?",
                    (status, reason, time.time(), file_id, PROCESSING),
                ).rowcount
                > 0
            )
