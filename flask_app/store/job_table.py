"""The table of asynchronous jobs, in SQLite: what was asked, by whom, who
runs it now and what came of it.

A job is accepted (SUBMITTED) in the same transaction that stores its
payload. A worker claims the oldest unclaimed job for a lease it renews while
it runs; a job whose lease ran out (its worker's process died) is claimed
again by the next worker that asks, so with several servers on one table
(a cluster) a job survives the server that took it. Cancelling a job not
claimed ends it at once; a claimed one is flagged, and its worker stops.

Status: SUBMITTED → READY | ERROR | CANCELLED; the first read of a READY
job marks it RETRIEVED (later reads still get the result). Finished jobs are
kept `retention_s` seconds, unfinished ones `max_age_s`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask_app.store import sqlite_db

SUBMITTED, READY, ERROR, RETRIEVED = "SUBMITTED", "READY", "ERROR", "RETRIEVED"
CANCELLED = "CANCELLED"

Payload = dict[str, Any]
Result = dict[str, Any]


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    status: str
    result: Result | None
    error: str | None
    payload: Payload
    submitted_at: float
    finished_at: float | None
    running: bool  # a worker holds it now


@dataclass(frozen=True)
class Claimed:
    """A job a worker took: what to run and for whom."""

    id: str
    kind: str
    payload: Payload
    owner: str


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    payload TEXT NOT NULL,
    result TEXT,
    error TEXT,
    submitted_at REAL NOT NULL,
    finished_at REAL,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, submitted_at);
"""

_COLUMNS_ADDED_LATER = {
    "owner": "TEXT NOT NULL DEFAULT ''",
    "runner": "TEXT NOT NULL DEFAULT ''",
    "lease_until": "REAL NOT NULL DEFAULT 0",
    "cancel": "INTEGER NOT NULL DEFAULT 0",
}


def _jobs_1(db: sqlite3.Connection) -> None:
    sqlite_db.script(_SCHEMA)(db)
    sqlite_db.add_columns("jobs", _COLUMNS_ADDED_LATER)(db)


# Version 1: the table with every column it has had (tables written before
# numbered migrations are at version 0 and may lack the later columns).
JOBS_SCHEMA = sqlite_db.Schema("job table", (_jobs_1,))


class JobTable:
    def __init__(self, path: Path, *, retention_s: float = 3600.0, max_age_s: float = 86_400.0):
        self.path = path
        self.retention_s = retention_s
        self.max_age_s = max_age_s
        self._sqlite = sqlite_db.Database(path, JOBS_SCHEMA)

    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE: two workers never take the same job)."""
        return self._sqlite.transaction()

    def add(self, job_id: str, kind: str, payload: Payload, owner: str) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, status, payload, submitted_at, owner) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, kind, SUBMITTED, json.dumps(payload), time.time(), owner),
            )

    def read(self, job_id: str, owner: str) -> Job | None:
        """The job (None when unknown, expired or another owner's); reading a
        READY job marks it RETRIEVED."""
        now = time.time()
        with self._db() as db:
            self._expire(db, now)
            row = db.execute(
                "SELECT kind, status, result, error, payload, submitted_at, finished_at, "
                "runner != '' AND lease_until > ? FROM jobs WHERE id = ? AND owner = ?",
                (now, job_id, owner),
            ).fetchone()
            if row is None:
                return None
            kind, status, result, error, payload, submitted, finished, held = row
            if status == READY:
                db.execute("UPDATE jobs SET status = ? WHERE id = ?", (RETRIEVED, job_id))
        return Job(
            job_id,
            kind,
            status,
            json.loads(result) if result else None,
            error,
            json.loads(payload),
            submitted,
            finished,
            running=status == SUBMITTED and bool(held),
        )

    def cancel(self, job_id: str, owner: str) -> Job | None:
        """An unclaimed job ends CANCELLED now; a claimed one is flagged for
        its worker; a finished one stays as it is. None when `owner` has no
        such job."""
        now = time.time()
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET status = CASE WHEN runner != '' AND lease_until > ? "
                "THEN status ELSE ? END, cancel = 1, "
                "finished_at = CASE WHEN runner != '' AND lease_until > ? THEN finished_at "
                "ELSE ? END WHERE id = ? AND owner = ? AND status = ?",
                (now, CANCELLED, now, now, job_id, owner, SUBMITTED),
            )
        return self.read(job_id, owner)

    def claim(self, runner: str, lease_s: float) -> Claimed | None:
        """Take the oldest job nobody holds, for `lease_s` seconds."""
        now = time.time()
        with self._db() as db:
            self._expire(db, now)
            row = db.execute(
                "SELECT id, kind, payload, owner FROM jobs WHERE status = ? "
                "AND (runner = '' OR lease_until <= ?) ORDER BY submitted_at LIMIT 1",
                (SUBMITTED, now),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE jobs SET runner = ?, lease_until = ? WHERE id = ?",
                (runner, now + lease_s, row[0]),
            )
        return Claimed(row[0], row[1], json.loads(row[2]), row[3])

    def renew(self, job_id: str, runner: str, lease_s: float) -> bool:
        """Extend `runner`'s lease; whether the job was asked to stop."""
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET lease_until = ? WHERE id = ? AND runner = ?",
                (time.time() + lease_s, job_id, runner),
            )
            row = db.execute("SELECT cancel FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

    def cancel_asked(self, job_id: str) -> bool:
        """Whether the job was asked to stop (a read: its worker asks often)."""
        with self._db() as db:
            row = db.execute("SELECT cancel FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row[0])

    def release(self, job_id: str, runner: str) -> None:
        """Give a claimed job back to run later (CANCELLED if it was asked to stop)."""
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET runner = '', lease_until = 0, "
                "status = CASE cancel WHEN 1 THEN ? ELSE status END, "
                "finished_at = CASE cancel WHEN 1 THEN ? ELSE finished_at END "
                "WHERE id = ? AND runner = ? AND status = ?",
                (CANCELLED, time.time(), job_id, runner, SUBMITTED),
            )

    def release_all(self) -> None:
        """Forget every claim (one server owns this table and has just started)."""
        with self._db() as db:
            db.execute("UPDATE jobs SET runner = '', lease_until = 0 WHERE runner != ''")

    def finish(self, job_id: str, result: Result | None, error: str | None) -> None:
        """Record the outcome (CANCELLED instead when the job was asked to
        stop); a finished job stays finished."""
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET status = CASE cancel WHEN 1 THEN ? ELSE ? END, "
                "result = CASE cancel WHEN 1 THEN NULL ELSE ? END, "
                "error = CASE cancel WHEN 1 THEN NULL ELSE ? END, "
                "finished_at = ?, runner = '', lease_until = 0 WHERE id = ? AND status = ?",
                (
                    CANCELLED,
                    READY if error is None else ERROR,
                    None if result is None else json.dumps(result),
                    error,
                    time.time(),
                    job_id,
                    SUBMITTED,
                ),
            )

    def pending(self) -> int:
        with self._db() as db:
            (n,) = db.execute("SELECT count(*) FROM jobs WHERE status = ?", (SUBMITTED,)).fetchone()
        return int(n)

    def _expire(self, db: sqlite3.Connection, now: float) -> None:
        db.execute(
            "DELETE FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ?",
            (now - self.retention_s,),
        )
        db.execute(
            "UPDATE jobs SET status = ?, error = ?, finished_at = ? "
            "WHERE status = ? AND submitted_at < ? AND (runner = '' OR lease_until <= ?)",
            (
                ERROR,
                "the job expired before it could run",
                now,
                SUBMITTED,
                now - self.max_age_s,
                now,
            ),
        )
