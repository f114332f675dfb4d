"""Collections, the state every part shares: rows (id, text, metadata,
timestamps) in SQLite, vectors in a simcore index, kept consistent across
crashes.

Layout: `<data_dir>/<namespace>/<collection>/` holds `rows.sqlite` (WAL) and
`index/` (simcore). A collection's settings (mode, dimension, embedding model)
live in the `settings` table; the first upload fixes them. Its index kind
(`f32`, `int8` or `binary`: how a search scans) can change at any time.

Write protocol (every acknowledged write survives `kill -9`, nothing
half-written is ever visible, vectors are written once):
1. an upsert first commits an intent (`pending`): the ids the index is about
   to change, and the vectors the replaced ones have now (none for new ids);
2. the simcore index stages the batch on another thread: appends it to its
   files with its own fsync'd commit, not yet visible to searches, while
3. one SQLite transaction writes the rows and drops the intent; once the
   append has committed, the batch is published in the index's memory and
   the transaction commits with fsync, both under the collection's write
   lock, and the write is acknowledged.
An intent found on open (or after a failed step) means step 3 never committed:
the index is put back (the batch's ids removed, the replaced vectors
restored; the first batch's index is removed whole), so the write is as if
it never happened. A delete commits the rows' removal with a redo record of
the ids, then applies it to the index; a record found on open is applied
again. Vectors are checked and normalised before step 1, so the index refuses
no batch it was promised. Replaced and deleted rows are reclaimed by
compaction once they outnumber the live ones. Searches hold the
collection's read lock; an upsert holds its write lock only while its batch
is published and its rows commit (a delete for every step), so a search sees
a batch either entirely or not at all, and does not wait for the disk while
a batch is appended. One writer at a time holds the writer lock. A
compaction runs after the write, with only the writer lock held: searches
go on while simcore writes the new generation and wait only for the switch
to it. (Stores written before the intent hold redo records of upserts with
their vectors; they are replayed as before.)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from flask_app import simcore
from flask_app.index_kinds import DEFAULT_INDEX, INDEX_KINDS
from flask_app.store import sqlite_db
from flask_app.store.errors import (
    ClearedError,
    CollectionUnavailable,
)
from flask_app.store.rows import ROWS_SCHEMA, CollectionInfo, Vectors
from flask_app.store.rwlock import RWLock

_log = logging.getLogger("edgerag.store")


def stored_index_kind(path: Path) -> str:
    """The index kind of the collection at `path` from its settings row,
    without opening it (no index mapped, no codes built)."""
    rows = path / "rows.sqlite"
    if not rows.is_file():
        return DEFAULT_INDEX
    db = sqlite_db.peek(rows)
    try:
        row = db.execute("SELECT value FROM settings WHERE key = 'index'").fetchone()
    except sqlite3.OperationalError:  # no settings table yet
        row = None
    finally:
        db.close()
    return str(json.loads(row[0])) if row else DEFAULT_INDEX


# An upsert's index append runs on one of these threads while the batch's
# rows are written to SQLite, so that one waits for the disk while the other
# works. Two, so that writers to two collections do not queue behind one
# another. Made on first use in each process: a forked child has none.
_appends: ThreadPoolExecutor | None = None
_appends_lock = threading.Lock()


def _append_threads() -> ThreadPoolExecutor:
    global _appends
    with _appends_lock:
        if _appends is None:
            _appends = ThreadPoolExecutor(max_workers=2, thread_name_prefix="index-append")
        return _appends


def _forget_append_threads() -> None:
    global _appends, _appends_lock
    _appends, _appends_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_append_threads)

# Compaction runs once dead rows (replaced or deleted) reach the live rows and
# this many: its cost (one rewrite of the live rows) is then amortised over at
# least as many writes, and scans never read more than twice the live rows.
COMPACT_MIN_DEAD = 1024
# The WAL is checkpointed every ~8 MB (2048 pages) and cut back to this size
# after a checkpoint, so it never grows without bound.
WAL_LIMIT_BYTES = 8 << 20


class CollectionCore:
    """One collection's state, locks, settings and index, its recovery on
    open and its compaction after a write (the reads and writes are
    `CollectionReads` and `CollectionWrites`); thread-safe."""

    def __init__(self, path: Path, *, search_threads: int | None = None) -> None:
        self.path = path
        self._search_threads = search_threads
        path.mkdir(parents=True, exist_ok=True)
        self._lock = RWLock()  # searches read; a write's row changes exclude them
        self._writer = threading.Lock()  # one writer at a time, its compaction included
        self._closed = False
        self._needs_recovery = False
        self._sqlite = sqlite_db.Database(
            path / "rows.sqlite", ROWS_SCHEMA, wal_limit_bytes=WAL_LIMIT_BYTES
        )
        self._settings = self._read_settings()
        self._index: simcore.Index | None = None
        if self._settings.get("dimension") is not None:
            self._index = self._open_index(int(self._settings["dimension"]))
        self._recover()
        self._count: int = self._db().execute("SELECT count(*) FROM items").fetchone()[0]

    @property
    def _index_path(self) -> Path:
        return self.path / "index"

    def _db(self) -> sqlite3.Connection:
        return self._sqlite.connection()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        with self._lock.read():
            if self._closed:
                raise ClearedError()
            yield

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One writer at a time. Searches wait while the rows change, not while
        a compaction the write made due rewrites the index after it."""
        with self._writer:
            with self._lock.write():
                self._ready_to_write()
                yield
            self._compact_if_due()

    @contextmanager
    def _upserting(self) -> Iterator[None]:
        """One writer at a time, like `_writing`, without excluding searches:
        an upsert takes the write lock itself for the moment its batch
        becomes visible (and to undo a failed one)."""
        with self._writer:
            with self._lock.write():
                self._ready_to_write()
            yield
            self._compact_if_due()

    def _ready_to_write(self) -> None:
        """Refuse a dropped collection; finish an earlier write's undo (the write lock held)."""
        if self._closed:
            raise ClearedError()
        if self._needs_recovery:
            self._recover()

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._sqlite.transaction()

    def _read_settings(self) -> dict[str, Any]:
        rows = self._db().execute("SELECT key, value FROM settings").fetchall()
        return {k: json.loads(v) for k, v in rows}

    def _open_index(self, dim: int) -> simcore.Index:
        index = self._open_or_create_index(dim)
        if self._search_threads is not None:
            index.threads = self._search_threads
        if self.index_kind == "binary":
            index.build_binary()  # codes live in memory only: built at open
        return index

    @property
    def index_kind(self) -> str:
        """How searches scan: `f32` (exact), `int8` or `binary` (then exact rescoring)."""
        return str(self._settings.get("index", DEFAULT_INDEX))

    def set_index(self, kind: str) -> None:
        """Choose how searches scan (ValueError for an unknown kind). Binary
        codes are built here (one read of every vector) before searches use them."""
        if kind not in INDEX_KINDS:
            raise ValueError(f"index must be one of: {', '.join(INDEX_KINDS)} (got {kind!r})")
        with self._writing():
            if kind == self.index_kind:
                return
            if kind == "binary" and self._index is not None:
                self._index.build_binary()
            with self._write() as db:
                db.execute(
                    "INSERT OR REPLACE INTO settings VALUES ('index', ?)", (json.dumps(kind),)
                )
            self._settings["index"] = kind

    def _open_or_create_index(self, dim: int) -> simcore.Index:
        """The collection's index, created for the first batch. Without its
        files, rows are only recoverable when a redo record of an older
        version holds their vectors; otherwise the collection is unavailable."""
        if (self._index_path / "CURRENT").exists():
            return simcore.Index.open(self._index_path)
        orphans = (
            self._db()
            .execute(
                "SELECT count(*) FROM items WHERE id NOT IN "
                "(SELECT value FROM pending, json_each(pending.ids) WHERE op = 'upsert')"
            )
            .fetchone()[0]
        )
        if orphans:
            raise CollectionUnavailable(
                self.path.name,
                f"index/CURRENT is missing while {orphans} stored items have no redo record; "
                "the index files were removed or lost",
            )
        if self._index_path.exists():
            shutil.rmtree(self._index_path)
        return simcore.Index.create(self._index_path, dim)

    def _recover(self) -> None:
        """Undo an upsert's intent, or re-apply a redo record, to the index
        (idempotent), then drop them. The last one may or may not have
        reached the index before a crash; earlier ones are normally removed
        by the next write's transaction."""
        pending = self._db().execute("SELECT op, ids, vectors FROM pending ORDER BY seq").fetchall()
        for op, ids_json, blob in pending:
            index = self._index
            if op == "intent":
                self._undo_intent(json.loads(ids_json), blob)
            elif op == "upsert" and index is not None:  # written by an older version
                ids = json.loads(ids_json)
                vectors = np.frombuffer(blob, dtype=np.float32).reshape(len(ids), -1)
                if self._holds(index, ids, vectors):
                    continue  # applied before the crash: re-applying would append again
                try:
                    index.upsert(ids, vectors)
                except simcore.SimcoreValueError as exc:
                    self._undo_batch(index, ids, str(exc))
            elif op == "delete" and index is not None:
                index.delete(json.loads(ids_json))
        if pending:
            with self._write() as db:
                db.execute("DELETE FROM pending")
        self._needs_recovery = False

    def _undo_intent(self, intent: list[list[str]], previous: bytes | None) -> None:
        """Put the index back as it was before an upsert whose rows never
        committed: its ids removed, the vectors the replaced ones had restored.
        Before the first committed batch the index holds nothing else: it goes."""
        changed, replaced = intent
        if self._settings.get("dimension") is None:
            self._index = None
            shutil.rmtree(self._index_path, ignore_errors=True)
            return
        index = self._index
        if index is None:
            return
        index.delete(changed)
        if replaced:
            vectors = np.frombuffer(previous or b"", dtype=np.float32)
            index.upsert(replaced, vectors.reshape(len(replaced), -1))

    @staticmethod
    def _holds(index: simcore.Index, ids: Sequence[str], vectors: Vectors) -> bool:
        for i, item_id in enumerate(ids):
            stored = index.get(item_id)
            if stored is None or not np.array_equal(stored, vectors[i]):
                return False
        return True

    def _undo_batch(self, index: simcore.Index, ids: Sequence[str], reason: str) -> None:
        """Drop the rows of a redo record the index refuses (written by an older
        version that did not check vectors; its request failed, so nothing
        acknowledged is lost): the items the index lacks leave SQLite too."""
        absent = [(i,) for i in ids if i not in index]
        _log.warning(
            "%s: dropping an unapplied batch of %d items the index refuses (%s)",
            self.path,
            len(absent),
            reason,
        )
        with self._write() as db:
            db.executemany("DELETE FROM items WHERE id = ?", absent)
            db.executemany("DELETE FROM item_meta WHERE id = ?", absent)

    def _compact_if_due(self) -> None:
        """Compact once dead rows reach the live ones. The writer lock is held
        (no write can come in); searches go on while simcore rewrites the live
        rows and wait only for the switch. The write before it is committed
        whatever happens here, so a failure is logged and retried next write."""
        index = self._index
        if index is None or self._closed:
            return
        dead = index.deleted_rows
        if dead < COMPACT_MIN_DEAD or dead < index.rows - dead:
            return
        _log.info("%s: compacting %d dead of %d rows", self.path, dead, index.rows)
        started = time.perf_counter()
        try:
            done = index.compact()
        except (OSError, ValueError):
            _log.exception("%s: compaction failed; the next write retries it", self.path)
            return
        _log.info(
            "%s: compacted %d dead rows in %.0f ms%s",
            self.path,
            dead,
            (time.perf_counter() - started) * 1000,
            "" if done else " (discarded: the index changed meanwhile)",
        )

    def _apply(self, action: Callable[[], object]) -> None:
        """Apply a committed batch to the index; if that fails, the redo record
        stays and the next write (or the next start) replays it first."""
        try:
            action()
        except BaseException:
            self._needs_recovery = True
            raise

    def info(self) -> CollectionInfo:
        s = self._settings
        return CollectionInfo(
            s.get("dimension"),
            s.get("mode"),
            s.get("embedding_model"),
            self._count,
            self.index_kind,
        )

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        """Mark closed (later requests get ClearedError) and close this thread's connection."""
        self._closed = True
        self._sqlite.close()
