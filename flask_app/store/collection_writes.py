"""A collection's writes: upserts (intent, staged append, rows, publish)
and deletes, by the protocol `collection_core` describes."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from flask_app import simcore
from flask_app.store.collection_core import CollectionCore, _append_threads
from flask_app.store.errors import (
    CapacityError,
    DuplicateIds,
    VectorRejected,
)
from flask_app.store.rows import (
    Vectors,
    check_settings,
    drop_text,
    first_repeated,
    index_text,
    meta_rows,
)
from flask_app.store.unit import unit_rows

_log = logging.getLogger("edgerag.store")


class CollectionWrites(CollectionCore):
    def upsert(
        self,
        ids: Sequence[str],
        vectors: Vectors,
        texts: Sequence[str],
        metadata: Sequence[dict[str, Any] | None],
        *,
        mode: str,
        embedding_model: str | None,
        max_items: int | None = None,
    ) -> int:
        """Insert or replace a batch; returns the collection's item count after it.

        `vectors` are L2-normalised here (scores are cosine similarities).
        """
        if len(ids) == 0:
            return self._count
        dim = int(vectors.shape[1])
        repeated = first_repeated(ids)  # refused before the intent, like a bad vector
        if repeated is not None:
            raise DuplicateIds(repeated)
        vectors, bad = unit_rows(vectors)
        if bad is not None:
            raise VectorRejected(
                f"vector {bad} (id {ids[bad]!r}) has a non-finite value or is too close "
                "to zero to have a direction"
            )
        now = time.time()
        with self._upserting():
            check_settings(self._settings, mode, dim, embedding_model)
            index = self._index
            replaced = [] if index is None else [i for i in ids if i in index]
            new = len(ids) - len(replaced)
            if max_items is not None and self._count + new > max_items:
                raise CapacityError(self._count, max_items, new)
            rows = [
                (i, t, json.dumps(m) if m is not None else None, now, now)
                for i, t, m in zip(ids, texts, metadata, strict=True)
            ]
            previous = None  # the vectors the replaced items have now
            if index is not None and replaced:
                previous = np.stack([v for i in replaced if (v := index.get(i)) is not None])
            with self._write() as db:
                db.execute("DELETE FROM pending")  # earlier records are applied
                db.execute(
                    "INSERT INTO pending (op, ids, vectors) VALUES ('intent', ?, ?)",
                    (
                        json.dumps([list(ids), replaced]),
                        None if previous is None else previous.tobytes(),
                    ),
                )
            first = index is None
            staging: Future[None] | None = None
            undone = False
            db = self._db()
            try:
                if index is None:
                    with self._lock.write():
                        index = self._index = self._open_index(dim)
                # the index appends the batch (fsync'd, not yet visible) on another
                # thread while the rows are written here; searches go on meanwhile
                staging = _append_threads().submit(index.stage_upsert, list(ids), vectors)
                db.execute("BEGIN IMMEDIATE")
                if first:
                    for key, value in (
                        ("mode", mode),
                        ("dimension", dim),
                        ("embedding_model", embedding_model),
                    ):
                        db.execute(
                            "INSERT OR REPLACE INTO settings VALUES (?, ?)",
                            (key, json.dumps(value)),
                        )
                db.executemany(
                    "INSERT INTO items VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                    "text = excluded.text, metadata = excluded.metadata, "
                    "updated_at = excluded.updated_at",
                    rows,
                )
                # replaced items drop their old metadata and text rows
                db.executemany("DELETE FROM item_meta WHERE id = ?", [(i,) for i in replaced])
                drop_text(db, replaced)
                index_text(db, ids, texts)
                db.executemany(
                    "INSERT OR IGNORE INTO item_meta VALUES (?, ?, ?, ?)",
                    meta_rows(ids, metadata),
                )
                staging.result()
                db.execute("DELETE FROM pending")
                # searches wait only while the batch becomes visible with its rows
                with self._lock.write():
                    try:
                        index.publish()
                        db.execute("COMMIT")
                    except BaseException:
                        undone = True  # before a search can see the batch without its rows
                        self._undo_upsert(db, index)
                        raise
                    if first:
                        self._settings.update(
                            {"mode": mode, "dimension": dim, "embedding_model": embedding_model}
                        )
                    self._count += new
                    return self._count
            except BaseException:
                if not undone:
                    if staging is not None:  # the undo must not race the append
                        with contextlib.suppress(BaseException):
                            staging.result()
                    with self._lock.write():
                        self._undo_upsert(db, index)
                raise

    def _undo_upsert(self, db: sqlite3.Connection, index: simcore.Index | None) -> None:
        """Roll back a failed upsert's rows and take its batch out of the index
        at once (the write lock held); if that fails too, the next write (or
        the next start) does."""
        if db.in_transaction:
            db.execute("ROLLBACK")
        if index is not None:  # a batch staged in the files is undone in memory too
            index.publish()
        self._needs_recovery = True
        with contextlib.suppress(Exception):
            self._recover()

    def delete(self, ids: Sequence[str]) -> tuple[int, list[str]]:
        """Delete ids; returns (deleted count, ids not found)."""
        with self._writing():
            unique = list(dict.fromkeys(ids))
            if self._index is None:
                return 0, unique
            index = self._index
            present = [i in index for i in unique]
            found = [i for i, p in zip(unique, present, strict=True) if p]
            missing = [i for i, p in zip(unique, present, strict=True) if not p]
            if found:
                with self._write() as db:
                    db.executemany("DELETE FROM items WHERE id = ?", [(i,) for i in found])
                    db.executemany("DELETE FROM item_meta WHERE id = ?", [(i,) for i in found])
                    drop_text(db, found)
                    db.execute("DELETE FROM pending")  # earlier records are applied
                    db.execute(
                        "INSERT INTO pending (op, ids) VALUES ('delete', ?)", (json.dumps(found),)
                    )
                self._apply(lambda: index.delete(found))
                self._count -= len(found)
            return len(found), missing
