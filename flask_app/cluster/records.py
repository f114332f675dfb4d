"""The records every server of a cluster shares — the file catalog,
conversation memory, async-prediction jobs and research runs — held by one
actor (`records`, detached, on the first edgerag node) in SQLite files in its
directory there. Ray restarts it on that node when its process dies and
retries the calls it had not answered; a server reaches a record through a
`Remote`, which has the record's own methods."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import ray
import ray.exceptions

from flask_app.cluster import actor_call
from flask_app.cluster.store import ClusterUnusable, detached_on, node_numbers
from flask_app.rag.memory import Conversations
from flask_app.store import CollectionUnavailable
from flask_app.store.catalog import Catalog
from flask_app.store.job_table import JobTable

_log = logging.getLogger("edgerag.cluster")

ACTOR_NAME = "records"
# how often a server's workers look again while other servers hold work (a
# job or a file whose server died is taken over once its lease runs out)
POLL_S = 5.0

_OPENERS: dict[str, Callable[..., Any]] = {
    "catalog": lambda d: Catalog(d / "catalog.sqlite3"),
    "conversations": lambda d, **o: Conversations(d / "conversations.sqlite3", **o),
    "jobs": lambda d, name, **o: JobTable(d / f"{name}.sqlite3", **o),
}


class RecordsUnavailable(CollectionUnavailable):
    """The records actor does not answer (restarting, or its node is down)."""

    def __init__(self, reason: str) -> None:
        super().__init__("records", reason)


class RecordsHost:
    """The actor: opens each record on first use (again after a restart)
    and runs the calls servers make on it."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._open: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
        self._lock = threading.Lock()

    def call(
        self,
        kind: str,
        options: dict[str, Any],
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if method not in METHODS[kind]:
            raise AttributeError(f"{kind} records have no method {method!r}")
        key = (kind, tuple(sorted(options.items())))
        with self._lock:
            record = self._open.get(key)
            if record is None:
                record = self._open[key] = _OPENERS[kind](self.directory, **options)
        return getattr(record, method)(*args, **kwargs)

    def where(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid(), "directory": str(self.directory)}


class Remote:
    """One record the actor holds, called as if it were here: a record's own
    error is raised as it is; an actor that does not answer in `timeout`
    raises RecordsUnavailable (503). Its methods are those of the record's
    class, made once at import (`_proxy`): a name the class lacks is an
    AttributeError here, not a failed call on the cluster."""

    def __init__(self, actor: Any, kind: str, options: dict[str, Any], timeout: float) -> None:
        self._actor = actor
        self._kind = kind
        self._options = options
        self._timeout = timeout

    def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        ref = actor_call.call(
            self._actor, RecordsHost.call, self._kind, self._options, method, args, kwargs
        )
        try:
            return ray.get(ref, timeout=self._timeout)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
                raise cause from None
            raise RecordsUnavailable(f"the records actor failed: {exc}") from exc
        except ray.exceptions.RayError as exc:
            raise RecordsUnavailable(
                f"the records actor did not answer ({type(exc).__name__}): restarting, "
                "or its node is down; retry later"
            ) from exc


def public_methods(cls: type) -> frozenset[str]:
    """The methods a server may call on a record of `cls`."""
    return frozenset(
        name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))
    )


def _forward(method: str) -> Callable[..., Any]:
    def call(self: Remote, *args: Any, **kwargs: Any) -> Any:
        return self._call(method, args, kwargs)

    call.__name__ = method
    return call


def _proxy(cls: type) -> type[Remote]:
    methods = {name: _forward(name) for name in public_methods(cls)}
    return type(f"Remote{cls.__name__}", (Remote,), methods)


# the records the actor holds: each one's class, and its proxy here
RECORDS: dict[str, type] = {"catalog": Catalog, "conversations": Conversations, "jobs": JobTable}
PROXIES: dict[str, type[Remote]] = {kind: _proxy(cls) for kind, cls in RECORDS.items()}
METHODS: dict[str, frozenset[str]] = {kind: public_methods(cls) for kind, cls in RECORDS.items()}


class ClusterRecords:
    """The cluster's shared records (see `flask_app.records.Records`)."""

    poll_s: float | None = POLL_S

    def __init__(self, actor: Any, timeout: float) -> None:
        self.actor = actor
        self.timeout = timeout

    @classmethod
    def connect(cls, directory: Path, *, timeout: float) -> ClusterRecords:
        """Reach (or start, keeping its files in `directory` on the first
        edgerag node) the records actor; Ray must be initialised."""
        nodes = node_numbers()
        if not nodes:
            raise ClusterUnusable("no node of this Ray cluster offers edgerag records")
        options = detached_on(
            nodes[0], ACTOR_NAME, max_task_retries=-1, max_concurrency=8, num_cpus=0
        )
        actor: Any = ray.remote(RecordsHost).options(**options).remote(str(directory))
        try:
            where: dict[str, Any] = ray.get(
                actor_call.call(actor, RecordsHost.where), timeout=max(timeout, 120.0)
            )
        except ray.exceptions.RayError as exc:
            raise ClusterUnusable(f"the records actor did not start: {exc}") from None
        _log.info("cluster records in %s on %s", where["directory"], where["host"])
        return cls(actor, timeout)

    def failures(self) -> dict[str, str]:
        try:
            ray.get(actor_call.call(self.actor, RecordsHost.where), timeout=min(self.timeout, 5.0))
        except ray.exceptions.RayError as exc:
            return {"records": f"do not answer ({type(exc).__name__}): restarting, or node down"}
        return {}

    def _remote(self, kind: str, **options: Any) -> Any:
        return PROXIES[kind](self.actor, kind, options, self.timeout)

    def catalog(self) -> Catalog:
        return cast(Catalog, self._remote("catalog"))

    def conversations(self, *, max_turns: int, ttl_s: float) -> Conversations:
        return cast(Conversations, self._remote("conversations", max_turns=max_turns, ttl_s=ttl_s))

    def job_table(self, name: str, *, retention_s: float) -> JobTable:
        return cast(JobTable, self._remote("jobs", name=name, retention_s=retention_s))
