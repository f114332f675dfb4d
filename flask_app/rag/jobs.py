"""Asynchronous jobs: a worker that runs the jobs of a `JobTable`.

A job acknowledged before a crash runs after the restart (the table is
durable, and a restarted server takes its table's jobs back). One worker
thread runs jobs oldest first, one at a time, through the same LLM queue as
every interactive request: before each job it lets waiting interactive
requests go first (for at most `yield_s`), and a job whose model wait was
refused (queue full, deadline) is given back and retried later instead of
failing. With a shared table (servers of one cluster) every server's worker
takes jobs from it; while jobs other servers hold remain, it looks again
every `poll_s` seconds, so a job whose server died is taken over once its
lease has run out (by a server that has work, or that starts).

A cancelled job that has not started never runs; a running one is told
through `cancel_requested()` (its handler stops the model through that) and
ends CANCELLED whatever it returns.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from flask_app.errors import ServiceError
from flask_app.store.job_table import (
    CANCELLED,
    ERROR,
    READY,
    RETRIEVED,
    SUBMITTED,
    Claimed,
    Job,
    JobTable,
    Payload,
    Result,
)

__all__ = [
    "CANCELLED",
    "ERROR",
    "READY",
    "RETRIEVED",
    "SUBMITTED",
    "Job",
    "JobFailed",
    "JobTable",
    "Jobs",
    "RetryLater",
]

_log = logging.getLogger("edgerag")

LEASE_S = 30.0  # a job whose worker stopped renewing for this long is taken over
_CANCEL_CHECK_S = 0.25  # how stale the handler's view of a cancel may be


class RetryLater(Exception):
    """The job could not get the model now; run it again after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"retry in {delay:g} s")
        self.delay = delay


def retry_later(exc: BaseException) -> RetryLater | None:
    """RetryLater for an error that passes with time (a full queue, a replica
    or shard restarting), None for any other."""
    if isinstance(exc, ServiceError) and exc.retry_after is not None:
        return RetryLater(exc.retry_after)
    return None


class JobFailed(Exception):
    """The job cannot succeed; its message is the job's error."""


def runner_name() -> str:
    """This worker's name in claims (unique per process and worker)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Jobs:
    def __init__(
        self,
        table: JobTable,
        *,
        max_attempts: int = 50,
        yield_s: float = 30.0,
        poll_s: float | None = None,
    ) -> None:
        self.table = table
        self.max_attempts = max_attempts
        self.yield_s = yield_s
        self.poll_s = poll_s  # None: the worker stops when it can claim nothing
        self.runner = runner_name()
        self._handlers: dict[str, Callable[[Payload], Result]] = {}
        self._busy: Callable[[], bool] = lambda: False
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._wake = threading.Event()
        self._current: Claimed | None = None  # the job the worker is running
        self._cancel = (0.0, False)  # (checked at, asked to stop) for the current job

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
        self.table.add(job_id, kind, payload, owner)
        self.start()
        return job_id

    def get(self, job_id: str, owner: str = "") -> Job | None:
        """The job (None when unknown, expired or another owner's); reading a
        READY job marks it RETRIEVED."""
        return self.table.read(job_id, owner)

    def cancel(self, job_id: str, owner: str = "") -> Job | None:
        """Stop a job: one not started is CANCELLED now, a running one is asked
        to stop (`cancel_requested`); a finished one is left as it is. None
        when `owner` has no such job."""
        return self.table.cancel(job_id, owner)

    def current_owner(self) -> str:
        """The owner of the job the worker is running (for its handler)."""
        current = self._current
        return current.owner if current is not None else ""

    def cancel_requested(self) -> bool:
        """Whether the job the worker is running was cancelled (for its handler)."""
        current = self._current
        if current is None:
            return False
        checked, asked = self._cancel
        if not asked and time.monotonic() - checked > _CANCEL_CHECK_S:
            # a read, not the lease's fsync'd renewal: handlers ask per token
            asked = self.table.cancel_asked(current.id)
            self._cancel = (time.monotonic(), asked)
        return asked

    def pending(self) -> int:
        return self.table.pending()

    def start(self) -> None:
        """Run pending jobs (also those accepted before a restart) on the worker."""
        with self._lock:
            self._wake.set()
            if self._worker is not None and self._worker.is_alive():
                return
            self._worker = threading.Thread(target=self._work, name="edgerag-jobs", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        attempts: dict[str, int] = {}
        while True:
            with self._lock:
                self._wake.clear()
                try:
                    job = self.table.claim(self.runner, LEASE_S)
                    # others hold the jobs left: wait for them to finish or be left
                    watch = job is None and self.poll_s is not None and self.table.pending() > 0
                except Exception as exc:  # the table is unreachable: the next submit retries
                    _log.warning("looking for jobs: %s", exc)
                    job, watch = None, False
                if job is None and not watch:
                    self._worker = None
                    return
            if job is None:
                assert self.poll_s is not None
                self._wake.wait(self.poll_s)
                continue
            delay = self._run(job, attempts)
            if delay is not None:
                self._wake.wait(min(delay, 30.0))

    def _run(self, job: Claimed, attempts: dict[str, int]) -> float | None:
        """Run one claimed job; the delay before retrying it when given back."""
        self._current, self._cancel = job, (time.monotonic(), False)
        stop = threading.Event()
        keeper = threading.Thread(target=self._keep_lease, args=(job.id, stop), daemon=True)
        keeper.start()
        try:
            deadline = time.monotonic() + self.yield_s
            while self._busy() and time.monotonic() < deadline:
                time.sleep(0.05)
            try:
                result = self._handlers[job.kind](job.payload)
            except RetryLater as exc:
                attempts[job.id] = attempts.get(job.id, 0) + 1
                if attempts[job.id] >= self.max_attempts or self.cancel_requested():
                    error = f"gave up after {attempts[job.id]} attempts: {exc}"
                    self.table.finish(job.id, None, error)
                    return None
                self.table.release(job.id, self.runner)  # a cancel now stops it at once
                return exc.delay
            except JobFailed as exc:
                self.table.finish(job.id, None, str(exc))
            except Exception as exc:
                _log.error("job %s failed", job.id, exc_info=exc)
                self.table.finish(job.id, None, f"internal error: {type(exc).__name__}")
            else:
                self.table.finish(job.id, result, None)
            return None
        finally:
            stop.set()
            self._current = None

    def _keep_lease(self, job_id: str, stop: threading.Event) -> None:
        """Renew the running job's lease until it ends (another server takes
        over a job whose lease runs out)."""
        while not stop.wait(LEASE_S / 6):
            try:
                asked = self.table.renew(job_id, self.runner, LEASE_S)
                current = self._current
                if asked and current is not None and current.id == job_id:
                    self._cancel = (time.monotonic(), True)
            except Exception as exc:  # the table is unreachable: the job goes on
                _log.warning("renewing job %s: %s", job_id, exc)
