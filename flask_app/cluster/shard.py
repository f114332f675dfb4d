"""One shard: an ordinary store (rows in SQLite, vectors in simcore, the same
durable write protocol) under its own directory on the node it runs on,
holding its share of every collection's items. Run as a Ray actor."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flask_app.index_kinds import INDEX_KINDS
from flask_app.store import CollectionInfo, Hit, Item, MetadataValue, Store, ranking
from flask_app.store.bm25 import LexicalStats
from flask_app.store.collection import Vectors
from flask_app.store.ranking import Candidate


class LayoutMismatch(RuntimeError):
    """A shard directory was written by a cluster with another shard count."""


class Shard:
    def __init__(
        self, directory: str, number: int, shards: int, search_threads: int | None = None
    ) -> None:
        self.number = number
        self.shards = shards
        self.store = Store(Path(directory), search_threads=search_threads)
        # items are routed by hash modulo the shard count: another count
        # would look for them on the wrong shards
        layout = Path(directory) / "layout.json"
        if layout.exists():
            stored = json.loads(layout.read_text())
            if stored != {"shard": number, "shards": shards}:
                self.store.close()
                raise LayoutMismatch(
                    f"{directory} holds shard {stored['shard']} of {stored['shards']}, "
                    f"not shard {number} of {shards}: serve with --shards {stored['shards']}"
                )
        else:
            layout.write_text(json.dumps({"shard": number, "shards": shards}))

    def where(self) -> dict[str, Any]:
        """Which shard this is and where it runs (for /health and tests)."""
        return {
            "shard": self.number,
            "shards": self.shards,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "directory": str(self.store.data_dir),
        }

    def info(self, ns: str, name: str) -> CollectionInfo:
        return self.store.collection(ns, name).info()

    def index_kind(self, ns: str, name: str) -> str:
        return self.store.index_kind(ns, name)

    def set_index(self, ns: str, name: str, kind: str) -> None:
        self.store.collection(ns, name).set_index(kind)

    def upsert(
        self,
        ns: str,
        name: str,
        ids: Sequence[str],
        vectors: Vectors,
        texts: Sequence[str],
        metadata: Sequence[dict[str, Any] | None],
        mode: str,
        embedding_model: str | None,
    ) -> int:
        collection = self.store.collection(ns, name)
        return collection.upsert(
            ids, vectors, texts, metadata, mode=mode, embedding_model=embedding_model
        )

    def delete(self, ns: str, name: str, ids: Sequence[str]) -> tuple[int, list[str]]:
        return self.store.collection(ns, name).delete(ids)

    def matching_ids(self, ns: str, name: str, metadata: Mapping[str, MetadataValue]) -> list[str]:
        return self.store.collection(ns, name).matching_ids(metadata)

    def search_rescorable(
        self,
        ns: str,
        name: str,
        query: Vectors,
        k: int,
        metadata: Mapping[str, MetadataValue] | None,
        only: set[str] | None,
    ) -> tuple[int, list[Hit], list[Candidate]]:
        """(oversample, hits, candidates): the collection's oversample (1 for
        f32), the rows of its own top k (those the merge most likely keeps),
        and its candidates with their approximate and exact scores."""
        collection = self.store.collection(ns, name)
        _, oversample = INDEX_KINDS[collection.index_kind]
        found = collection.rescorable(query, k, metadata=metadata, only=only)
        top = ranking.best(found, k)
        rows = collection.items([i for i, _, _ in top])
        hits = [Hit(i, exact, rows[i].text, rows[i].metadata) for i, _, exact in top if i in rows]
        return oversample, hits, found

    def lexical_stats(self, ns: str, name: str, words: Sequence[str]) -> LexicalStats:
        return self.store.collection(ns, name).lexical_stats(words)

    def lexical_candidates(
        self,
        ns: str,
        name: str,
        words: Sequence[str],
        fetch: int,
        total: LexicalStats,
        metadata: Mapping[str, MetadataValue] | None,
        only: set[str] | None,
    ) -> list[tuple[str, float, bool]]:
        collection = self.store.collection(ns, name)
        return collection.lexical_candidates(words, fetch, total, metadata=metadata, only=only)

    def cosines_of(
        self, ns: str, name: str, ids: Sequence[str], query: Vectors
    ) -> dict[str, float]:
        return self.store.collection(ns, name).cosines(query, ids)

    def items(self, ns: str, name: str, ids: Sequence[str]) -> dict[str, Item]:
        return self.store.collection(ns, name).items(ids)

    def export(
        self, ns: str, name: str, limit: int | None, after: str | None, with_vectors: bool
    ) -> tuple[list[dict[str, Any]], str | None]:
        collection = self.store.collection(ns, name)
        return collection.export(limit=limit, after=after, with_vectors=with_vectors)

    def drop(self, ns: str, name: str) -> None:
        self.store.drop(ns, name)

    def failures(self) -> dict[str, str]:
        return self.store.failures()
