"""The store: namespaces of collections under one data directory."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from flask_app.store.collection import Collection


class Store:
    """Namespaces of collections under one data directory."""

    EDGE_NAMESPACE = "_edge"
    EDGE_COLLECTION = "store"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self._collections: dict[tuple[str, str], Collection] = {}
        self._lock = threading.Lock()
        self._clear_trash()

    def _clear_trash(self) -> None:
        for trash in self.data_dir.glob(".trash-*"):
            shutil.rmtree(trash, ignore_errors=True)

    def collection(self, namespace: str, name: str) -> Collection:
        with self._lock:
            key = (namespace, name)
            if key not in self._collections:
                self._collections[key] = Collection(self.data_dir / namespace / name)
            return self._collections[key]

    def edge(self) -> Collection:
        """The moorcheh-edge flat store (one reserved collection)."""
        return self.collection(self.EDGE_NAMESPACE, self.EDGE_COLLECTION)

    def drop(self, namespace: str, name: str) -> None:
        """Remove a collection entirely (atomic rename, then delete)."""
        with self._lock:
            key = (namespace, name)
            collection = self._collections.pop(key, None)
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
