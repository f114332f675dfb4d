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
import time
from collections.abc import Sequence
from typing import Any

from flask_app.store.catalog_names import NamedCatalog
from flask_app.store.catalog_schema import (
    _FILE_COLUMNS,
    CATALOG_SCHEMA,
    FAILED,
    INGEST_LEASE_S,
    PROCESSING,
    READY,
    CollectionRecord,
    FileRecord,
    NamespaceRecord,
    NotEmpty,
    _file,
    chunk_id,
    new_id,
    rfc3339,
)
from flask_app.store.file_query import Sql

__all__ = [
    "CATALOG_SCHEMA",
    "FAILED",
    "INGEST_LEASE_S",
    "PROCESSING",
    "READY",
    "Catalog",
    "CollectionRecord",
    "FileRecord",
    "NamespaceRecord",
    "NotEmpty",
    "chunk_id",
    "new_id",
    "rfc3339",
]


class Catalog(NamedCatalog):
    """Namespaces, collections, files and their ingestion queue."""

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
