"""The one way to SQLite: every database file of the server (a collection's
rows, the file catalog, the job tables, conversation memory) is opened here,
written in transactions from here, and brought to its schema here.

- Connections are in autocommit mode (transactions are explicit), WAL,
  fsync'd commits, one per thread (sqlite3 connections are not shared).
- `Database.transaction()` is `BEGIN IMMEDIATE` … `COMMIT`; when the body
  or the COMMIT itself fails (disk full, I/O, a deferred constraint), the
  transaction is rolled back and the error raised: a connection is never
  left inside a transaction.
- A `Schema` is the file's numbered migrations: migration n takes a file
  from `PRAGMA user_version` n-1 to n, in one transaction with the version
  bump, at open, in order. Files written before numbered migrations carry
  version 0 (the catalog: 1) with some tables already there, so the first
  migrations only create what is missing. A file newer than the code is
  refused rather than guessed at.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from flask_app.store.errors import StoreError

_log = logging.getLogger("edgerag")

Migration = Callable[[sqlite3.Connection], None]


def statements(script: str) -> list[str]:
    """A SQL script's statements (triggers whole): `executescript` would
    COMMIT the transaction a migration runs in."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement: {pending.strip()[:80]}")
    return out


def script(sql: str) -> Migration:
    """A migration that runs the statements of `sql`."""
    parts = statements(sql)

    def run(db: sqlite3.Connection) -> None:
        for statement in parts:
            db.execute(statement)

    return run


def add_columns(table: str, columns: dict[str, str]) -> Migration:
    """A migration that adds the columns `table` lacks (a file may have some
    already: they were once added outside numbered migrations)."""

    def run(db: sqlite3.Connection) -> None:
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns.items():
            if name not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")

    return run


@dataclass(frozen=True)
class Schema:
    """The numbered migrations of one kind of database file."""

    name: str
    migrations: tuple[Migration, ...]

    @property
    def version(self) -> int:
        return len(self.migrations)


def connect(path: Path, *, wal_limit_bytes: int | None = None) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=True)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    if wal_limit_bytes is not None:
        db.execute(f"PRAGMA wal_autocheckpoint={wal_limit_bytes // 4096}")  # 4 KiB pages
        db.execute(f"PRAGMA journal_size_limit={wal_limit_bytes}")
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE … COMMIT on `db`; rolled back when the body or the COMMIT fails."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def user_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite3.Connection, schema: Schema, path: Path) -> int:
    """Apply `schema`'s migrations the file lacks, each in its own
    transaction (another process may be migrating the same file: the
    version is read again under the write lock). Returns how many ran."""
    ran = 0
    while True:
        with transaction(db):
            version = user_version(db)
            if version > schema.version:
                raise StoreError(
                    f"{path} has {schema.name} schema version {version}; this edgerag knows "
                    f"versions up to {schema.version}: it was written by a newer edgerag"
                )
            if version == schema.version:
                return ran
            schema.migrations[version](db)
            db.execute(f"PRAGMA user_version = {version + 1}")
        ran += 1


def peek(path: Path) -> sqlite3.Connection:
    """A connection for one read of an existing file, without migrating it
    or changing its settings (the caller closes it)."""
    return sqlite3.connect(path, timeout=30.0)


class Database:
    """One database file at its schema's version, a connection per thread."""

    def __init__(self, path: Path, schema: Schema, *, wal_limit_bytes: int | None = None) -> None:
        self.path = path
        self.schema = schema
        self._wal_limit_bytes = wal_limit_bytes
        self._local = threading.local()
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        self.migrations_run = migrate(self.connection(), schema, path)
        if existed and self.migrations_run:  # an upgrade, not a new file
            _log.info(
                "%s: %s brought to schema version %d (%d migrations)",
                path,
                schema.name,
                schema.version,
                self.migrations_run,
            )

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit: each statement alone, or
        inside `transaction()`)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = connect(self.path, wal_limit_bytes=self._wal_limit_bytes)
            self._local.db = db
        return db

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction on this thread's connection."""
        return transaction(self.connection())

    def close(self) -> None:
        """Close this thread's connection (another thread's closes with its thread)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
