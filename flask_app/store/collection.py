"""Collections: rows (id, text, metadata, timestamps) in SQLite, vectors in a
simcore index, kept consistent across crashes.

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

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app import simcore
from flask_app.index_kinds import DEFAULT_INDEX, INDEX_KINDS
from flask_app.store import bm25, ranking, sqlite_db
from flask_app.store.errors import (
    CapacityError,
    ClearedError,
    CollectionUnavailable,
    ConflictError,
    DuplicateIds,
    VectorRejected,
)
from flask_app.store.rwlock import RWLock
from flask_app.store.unit import unit_rows

_log = logging.getLogger("edgerag.store")

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
        _index_text(db, [r[0] for r in rows], [r[1] for r in rows])
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


def _meta_key(value: MetadataValue) -> tuple[str, Any]:
    """(kind, value) as stored in `item_meta`: numbers compare as numbers
    (1 == 1.0), booleans and null only by kind."""
    if isinstance(value, bool):
        return ("true" if value else "false"), ""
    if value is None:
        return "null", ""
    if isinstance(value, str):
        return "text", value
    return "number", float(value)


def _first_repeated(ids: Sequence[str]) -> str | None:
    if len(set(ids)) == len(ids):
        return None
    seen: set[str] = set()
    for item_id in ids:
        if item_id in seen:
            return item_id
        seen.add(item_id)
    return None


def _meta_rows(
    ids: Sequence[str], metadata: Sequence[Mapping[str, Any] | None]
) -> list[tuple[Any, ...]]:
    rows = []
    for item_id, meta in zip(ids, metadata, strict=True):
        if not meta:
            continue
        for key, value in meta.items():
            kind, stored = _meta_key(value)
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


class Collection:
    """One collection; thread-safe."""

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
        repeated = _first_repeated(ids)  # refused before the intent, like a bad vector
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
                _drop_text(db, replaced)
                _index_text(db, ids, texts)
                db.executemany(
                    "INSERT OR IGNORE INTO item_meta VALUES (?, ?, ?, ?)",
                    _meta_rows(ids, metadata),
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
                    _drop_text(db, found)
                    db.execute("DELETE FROM pending")  # earlier records are applied
                    db.execute(
                        "INSERT INTO pending (op, ids) VALUES ('delete', ?)", (json.dumps(found),)
                    )
                self._apply(lambda: index.delete(found))
                self._count -= len(found)
            return len(found), missing

    def matching_ids(self, metadata: Mapping[str, MetadataValue]) -> list[str]:
        """Ids whose metadata has every given key with exactly that value."""
        if not metadata:
            return [r[0] for r in self._db().execute("SELECT id FROM items")]
        parts, params = [], []
        for key, value in metadata.items():
            kind, stored = _meta_key(value)
            parts.append("SELECT id FROM item_meta WHERE key = ? AND kind = ? AND value = ?")
            params += [key, kind, stored]
        return [r[0] for r in self._db().execute(" INTERSECT ".join(parts), params)]

    def search(
        self,
        query: Vectors,
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[Hit]:
        """Top-k by cosine similarity (raw inner product of unit vectors),
        among the items matching `metadata` and (when given) in `only`; the
        collection's index kind decides how the rows are scanned; equal
        scores are ordered by id (`ranking`)."""
        with self._reading():
            scan = self._scan(query, metadata, only)
            if scan is None:
                return []
            index, q, allow = scan
            top = ranking.top(index, q, k, self.index_kind, allow)
            rows = self._rows([i for i, _, _ in top])
        return [Hit(i, exact, rows[i].text, rows[i].metadata) for i, _, exact in top if i in rows]

    def rescorable(
        self,
        query: Vectors,
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[tuple[str, float, float]]:
        """The candidates `search` ranks, as (id, approximate score, exact
        score) in `ranking`'s order: for an int8 or binary index its best
        k × oversample before rescoring, for f32 its top k. A collection split
        over shards picks its candidates and its top k from its shards' as
        one collection does."""
        with self._reading():
            scan = self._scan(query, metadata, only)
            if scan is None:
                return []
            index, q, allow = scan
            return ranking.candidates(index, q, k, self.index_kind, allow)

    def _scan(
        self,
        query: Vectors,
        metadata: Mapping[str, MetadataValue] | None,
        only: AbstractSet[str] | None,
    ) -> tuple[simcore.Index, Vectors, list[str] | None] | None:
        """The index, the unit query and the allowed ids of a search (None:
        nothing can match)."""
        if self._index is None:
            return None
        unit, bad = unit_rows(query.reshape(1, -1))
        q = query if bad is not None else unit[0]  # float64 norm: 1e30 does not overflow
        allow = self.matching_ids(metadata) if metadata else None
        if only is not None:
            allow = sorted(only) if allow is None else [i for i in allow if i in only]
        if allow is not None and not allow:
            return None
        return self._index, q, allow

    def _allowed(
        self, metadata: Mapping[str, MetadataValue] | None, only: AbstractSet[str] | None
    ) -> set[str] | None:
        allow = set(self.matching_ids(metadata)) if metadata else None
        if only is not None:
            allow = set(only) if allow is None else allow & only
        return allow

    def lexical_search(
        self,
        words: Sequence[str],
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Up to k (id, BM25 score) pairs for items whose text holds any of
        `words` (porter-stemmed), best first (equal scores: by id); higher
        scores are better. With `metadata` or `only`, the best k × 10 are
        filtered."""
        if not words:
            return []
        match = " OR ".join(bm25.phrase(w) for w in words)
        with self._reading():
            allow = self._allowed(metadata, only)
            fetch = k if allow is None else k * 10
            rows = (
                self._db()
                .execute(
                    "SELECT id, -bm25(items_fts) FROM items_fts WHERE items_fts MATCH ? "
                    "ORDER BY bm25(items_fts), id LIMIT ?",
                    (match, fetch),
                )
                .fetchall()
            )
        hits = [(i, float(score)) for i, score in rows if allow is None or i in allow]
        return hits[:k]

    def lexical_stats(self, words: Sequence[str]) -> bm25.LexicalStats:
        """This collection's BM25 statistics for `words` (summed over shards)."""
        with self._reading():
            return bm25.stats(self._db(), words)

    def lexical_candidates(
        self,
        words: Sequence[str],
        fetch: int,
        total: bm25.LexicalStats,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[tuple[str, float, bool]]:
        """The best `fetch` (id, score, allowed) by BM25 with the statistics
        `total`, best first (equal scores: by id): what `lexical_search` ranks
        before filtering, for a collection split over shards."""
        with self._reading():
            allow = self._allowed(metadata, only)
            scored = bm25.rescored(self._db(), words, total)
        best = sorted(scored.items(), key=lambda p: (-p[1], p[0]))[:fetch]
        return [(i, s, allow is None or i in allow) for i, s in best]

    def cosines(self, query: Vectors, ids: Sequence[str]) -> dict[str, float]:
        """Cosine similarity of `query` with the stored vectors of `ids`."""
        with self._reading():
            if self._index is None:
                return {}
            norm = float(np.linalg.norm(query)) or 1.0
            out = {}
            for item_id in ids:
                stored = self._index.get(item_id)
                if stored is not None:
                    out[item_id] = float(stored @ query) / norm
            return out

    def items(self, ids: Sequence[str]) -> dict[str, Item]:
        """The stored rows of `ids` (missing ids are left out)."""
        with self._reading():
            return self._rows(ids)

    def _rows(self, ids: Sequence[str]) -> dict[str, Item]:
        out: dict[str, Item] = {}
        db = self._db()
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for i, text, meta in db.execute(
                f"SELECT id, text, metadata FROM items WHERE id IN ({marks})", chunk
            ):
                out[i] = Item(i, text, json.loads(meta) if meta else None)
        return out

    def export(
        self, *, limit: int | None, after: str | None, with_vectors: bool
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Items in id order after the cursor `after`; returns (items, next cursor)."""
        with self._reading():
            sql = "SELECT id, text, metadata FROM items"
            params: list[Any] = []
            if after is not None:
                sql += " WHERE id > ?"
                params.append(after)
            sql += " ORDER BY id"
            if limit is not None:
                sql += " LIMIT ?"
                params.append(limit + 1)
            rows = self._db().execute(sql, params).fetchall()
            more = limit is not None and len(rows) > limit
            rows = rows[:limit] if limit is not None else rows
            items = []
            for i, text, meta in rows:
                item: dict[str, Any] = {"id": i, "text": text}
                if meta:
                    item["metadata"] = json.loads(meta)
                if with_vectors and self._index is not None:
                    vector = self._index.get(i)
                    item["vector"] = vector.tolist() if vector is not None else None
                items.append(item)
        return items, (rows[-1][0] if more and rows else None)

    def close(self) -> None:
        """Mark closed (later requests get ClearedError) and close this thread's connection."""
        self._closed = True
        self._sqlite.close()


def _index_text(db: sqlite3.Connection, ids: Sequence[str], texts: Sequence[str]) -> None:
    """Text-index rows for `ids` (which have none) holding `texts` (empty texts get none)."""
    first = db.execute("SELECT coalesce(max(rowid), 0) + 1 FROM items_fts").fetchone()[0]
    rows = [
        (first + n, text, item_id)
        for n, (item_id, text) in enumerate(zip(ids, texts, strict=True))
        if text.strip()
    ]
    db.executemany("INSERT INTO items_fts (rowid, text, id) VALUES (?, ?, ?)", rows)
    db.executemany("INSERT INTO fts_rows VALUES (?, ?)", [(i, r) for r, _, i in rows])


def _drop_text(db: sqlite3.Connection, ids: Sequence[str]) -> None:
    db.executemany(
        "DELETE FROM items_fts WHERE rowid = (SELECT fts_row FROM fts_rows WHERE id = ?)",
        [(i,) for i in ids],
    )
    db.executemany("DELETE FROM fts_rows WHERE id = ?", [(i,) for i in ids])
