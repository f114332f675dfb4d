"""The catalog's namespaces and collections (its connection and
transactions too: `Catalog` adds files and their ingestion)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask_app.store import sqlite_db
from flask_app.store.catalog_schema import (
    CATALOG_SCHEMA,
    FAILED,
    PROCESSING,
    READY,
    CollectionRecord,
    NamespaceRecord,
    NotEmpty,
)


class NamedCatalog:
    """Namespaces and collections in `catalog.sqlite3`."""

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
