"""Asynchronous jobs, persisted in SQLite under the data directory.

A job is accepted (SUBMITTED) in the same transaction that stores its
payload, so a job acknowledged before a crash runs after the restart. One
worker thread runs jobs oldest first, one at a time, through the same LLM
queue as every interactive request: before each job it lets waiting
interactive requests go first (for at most `yield_s`), and a job whose model
wait was refused (queue full, deadline) is retried later instead of failing.

Status: SUBMITTED → READY | ERROR | CANCELLED; the first read of a READY
job marks it RETRIEVED (later reads still get the result). `Job.running` says
whether the worker is on it now. A cancelled job that has not started never
runs; a running one is told through `cancel_requested()` (its handler stops
the model through that) and ends CANCELLED whatever it returns. Finished
jobs are kept `retention_s` seconds, unfinished ones `max_age_s`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask_app.store.sqlite_file import transaction

_log = logging.getLogger("edgerag")

SUBMITTED, READY, ERROR, RETRIEVED = "SUBMITTED", "READY", "ERROR", "RETRIEVED"
CANCELLED = "CANCELLED"

Payload = dict[str, Any]
Result = dict[str, Any]


class RetryLater(Exception):
    """The job could not get the model now; run it again after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"retry in {delay:g} s")
        self.delay = delay


class JobFailed(Exception):
    """The job cannot succeed; its message is the job's error."""


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
    running: bool


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


class Jobs:
    def __init__(
        self,
        path: Path,
        *,
        retention_s: float = 3600.0,
        max_age_s: float = 86_400.0,
        max_attempts: int = 50,
        yield_s: float = 30.0,
    ) -> None:
        self.path = path
        self.retention_s = retention_s
        self.max_age_s = max_age_s
        self.max_attempts = max_attempts
        self.yield_s = yield_s
        self._handlers: dict[str, Callable[[Payload], Result]] = {}
        self._busy: Callable[[], bool] = lambda: False
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._wake = threading.Event()
        self._current: str | None = None  # the job the worker is running
        self._owner = ""  # ... and whose it is
        self._cancels: set[str] = set()  # running jobs asked to stop
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
            if "owner" not in columns:  # a jobs file from before jobs had owners
                db.execute("ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT ''")

    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.path)

    def handle(self, kind: str, run: Callable[[Payload], Result]) -> None:
        """`run(payload)` computes a job of `kind`: it returns the result, or
        raises RetryLater / JobFailed (any other exception also fails the job)."""
        self._handlers[kind] = run

    def yield_to(self, busy: Callable[[], bool]) -> None:
        """While `busy()` (interactive requests waiting), the worker waits its turn."""
        self._busy = busy

    def submit(
        self, kind: str, payload: Payload, owner: str = "", job_id: str | None = None
    ) -> str:
        """Queue a job (id: `job_id` or a new UUID); only `owner` may read it."""
        if kind not in self._handlers:
            raise KeyError(kind)
        job_id = job_id or str(uuid.uuid4())
        with self._db() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, status, payload, submitted_at, owner) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, kind, SUBMITTED, json.dumps(payload), time.time(), owner),
            )
        self.start()
        return job_id

    def get(self, job_id: str, owner: str = "") -> Job | None:
        """The job (None when unknown, expired or another owner's); reading a
        READY job marks it RETRIEVED."""
        with self._db() as db:
            self._expire(db)
            row = db.execute(
                "SELECT kind, status, result, error, payload, submitted_at, finished_at "
                "FROM jobs WHERE id = ? AND owner = ?",
                (job_id, owner),
            ).fetchone()
            if row is None:
                return None
            kind, status, result, error, payload, submitted, finished = row
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
            running=status == SUBMITTED and job_id == self._current,
        )

    def cancel(self, job_id: str, owner: str = "") -> Job | None:
        """Stop a job: one not started is CANCELLED now, a running one is asked
        to stop (`cancel_requested`); a finished one is left as it is. None
        when `owner` has no such job."""
        if self.get(job_id, owner) is None:
            return None
        with self._lock:
            if job_id == self._current:
                self._cancels.add(job_id)
            else:
                with self._db() as db:
                    db.execute(
                        "UPDATE jobs SET status = ?, finished_at = ? "
                        "WHERE id = ? AND owner = ? AND status = ?",
                        (CANCELLED, time.time(), job_id, owner, SUBMITTED),
                    )
        return self.get(job_id, owner)

    def current_owner(self) -> str:
        """The owner of the job the worker is running (for its handler)."""
        return self._owner

    def cancel_requested(self) -> bool:
        """Whether the job the worker is running was cancelled (for its handler)."""
        return self._current is not None and self._current in self._cancels

    def pending(self) -> int:
        with self._db() as db:
            (n,) = db.execute("SELECT count(*) FROM jobs WHERE status = ?", (SUBMITTED,)).fetchone()
        return int(n)

    def _expire(self, db: sqlite3.Connection) -> None:
        now = time.time()
        db.execute(
            "DELETE FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ?",
            (now - self.retention_s,),
        )
        db.execute(
            "UPDATE jobs SET status = ?, error = ?, finished_at = ? "
            "WHERE status = ? AND submitted_at < ?",
            (ERROR, "the job expired before it could run", now, SUBMITTED, now - self.max_age_s),
        )

    def start(self) -> None:
        """Run pending jobs (also those accepted before a restart) on the worker."""
        with self._lock:
            self._wake.set()
            if self._worker is not None and self._worker.is_alive():
                return
            self._worker = threading.Thread(target=self._work, name="edgerag-jobs", daemon=True)
            self._worker.start()

    def _next(self) -> tuple[str, str, Payload, str] | None:
        with self._db() as db:
            self._expire(db)
            row = db.execute(
                "SELECT id, kind, payload, owner FROM jobs WHERE status = ? "
                "ORDER BY submitted_at LIMIT 1",
                (SUBMITTED,),
            ).fetchone()
        return None if row is None else (row[0], row[1], json.loads(row[2]), row[3])

    def _finish(self, job_id: str, result: Result | None, error: str | None) -> None:
        with self._lock:
            cancelled = job_id in self._cancels
            self._cancels.discard(job_id)
            self._current = None
        if cancelled:
            result, error = None, None
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET status = ?, result = ?, error = ?, finished_at = ? "
                "WHERE id = ? AND status = 'SUBMITTED'",  # a finished job stays finished
                (
                    CANCELLED if cancelled else READY if error is None else ERROR,
                    None if result is None else json.dumps(result),
                    error,
                    time.time(),
                    job_id,
                ),
            )

    def _work(self) -> None:
        attempts: dict[str, int] = {}
        while True:
            with self._lock:
                self._wake.clear()
                job = self._next()
                if job is None:
                    self._worker = None
                    return
                job_id, kind, payload, self._owner = job
                self._current = job_id
            deadline = time.monotonic() + self.yield_s
            while self._busy() and time.monotonic() < deadline:
                time.sleep(0.05)
            try:
                result = self._handlers[kind](payload)
            except RetryLater as exc:
                attempts[job_id] = attempts.get(job_id, 0) + 1
                if attempts[job_id] >= self.max_attempts or self.cancel_requested():
                    self._finish(job_id, None, f"gave up after {attempts[job_id]} attempts: {exc}")
                else:
                    with self._lock:
                        self._current = None  # queued again: a cancel now stops it at once
                    self._wake.wait(min(exc.delay, 30.0))
                continue
            except JobFailed as exc:
                self._finish(job_id, None, str(exc))
                continue
            except Exception as exc:
                _log.error("job %s failed", job_id, exc_info=exc)
                self._finish(job_id, None, f"internal error: {type(exc).__name__}")
                continue
            self._finish(job_id, result, None)
