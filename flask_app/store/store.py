"""The store: namespaces of collections under one data directory."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import threading
import time
import weakref
from pathlib import Path

from flask_app import simcore
from flask_app.store.collection import Collection, stored_index_kind
from flask_app.store.errors import CollectionUnavailable, DataDirLocked

_log = logging.getLogger("edgerag.store")
# What opening a damaged collection can raise; anything else is a bug and propagates.
_OPEN_FAILURES = (OSError, sqlite3.DatabaseError, simcore.SimcoreValueError, ValueError)


class Store:
    """Namespaces of collections under one data directory."""

    EDGE_NAMESPACE = "_edge"
    EDGE_COLLECTION = "store"

    def __init__(
        self, data_dir: Path, *, search_threads: int | None = None, edge_index: str = ""
    ) -> None:
        self.data_dir = data_dir
        self.search_threads = search_threads
        self.edge_index = edge_index  # the edge store's index kind; "" keeps what is stored
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = lock_exclusively(data_dir / ".lock")
        # released by close(), or when the store is garbage-collected
        self._release = weakref.finalize(self, os.close, fd)
        self._collections: dict[tuple[str, str], Collection] = {}
        self._failures: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._clear_trash()

    def close(self) -> None:
        """Close every collection and release the data directory."""
        with self._lock:
            for collection in self._collections.values():
                collection.close()
            self._collections.clear()
            self._release()

    def failures(self) -> dict[str, str]:
        """Collections that could not be opened, by "namespace/name", with the reason."""
        with self._lock:
            return {f"{ns}/{name}": why for (ns, name), why in self._failures.items()}

    def _clear_trash(self) -> None:
        for trash in self.data_dir.glob(".trash-*"):
            shutil.rmtree(trash, ignore_errors=True)

    def collection(self, namespace: str, name: str) -> Collection:
        with self._lock:
            key = (namespace, name)
            if key not in self._collections:
                try:
                    self._collections[key] = Collection(
                        self.data_dir / namespace / name, search_threads=self.search_threads
                    )
                except CollectionUnavailable as exc:
                    self._failures[key] = exc.reason
                    raise
                except _OPEN_FAILURES as exc:
                    # one damaged collection is refused on its own; the rest keep serving
                    _log.error("cannot open collection %s/%s: %s", namespace, name, exc)
                    self._failures[key] = str(exc)
                    raise CollectionUnavailable(f"{namespace}/{name}", str(exc)) from exc
                self._failures.pop(key, None)
            return self._collections[key]

    def index_kind(self, namespace: str, name: str) -> str:
        """A collection's index kind; one that is not open is not opened for it."""
        with self._lock:
            collection = self._collections.get((namespace, name))
        if collection is not None:
            return collection.index_kind
        return stored_index_kind(self.data_dir / namespace / name)

    def edge(self) -> Collection:
        """The moorcheh-edge flat store (one reserved collection), scanned as
        `edge_index` says when set (a cleared store is recreated with it too)."""
        edge = self.collection(self.EDGE_NAMESPACE, self.EDGE_COLLECTION)
        if self.edge_index and edge.index_kind != self.edge_index:
            edge.set_index(self.edge_index)
        return edge

    def drop(self, namespace: str, name: str) -> None:
        """Remove a collection entirely (atomic rename, then delete)."""
        with self._lock:
            key = (namespace, name)
            collection = self._collections.pop(key, None)
            self._failures.pop(key, None)
            path = self.data_dir / namespace / name
            if collection is not None:
                with collection._writing():
                    collection.close()
                    self._move_to_trash(path)
            else:
                self._move_to_trash(path)

    def _move_to_trash(self, path: Path) -> None:
        if path.exists():
            trash = self.data_dir / f".trash-{time.monotonic_ns()}"
            path.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)


def lock_exclusively(path: Path) -> int:
    """An fd holding an exclusive lock on `path`: two servers on one data
    directory would each see a stale view and overwrite the other's files."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirLocked(
            f"data directory {path.parent} is in use by another edgerag process (pid {holder}); "
            "stop it or choose another --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd
