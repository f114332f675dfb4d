"""A collection's reads: top-k searches (exact or approximate, filtered by
metadata or an allow-list), full-text candidates, rows by id, export."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from flask_app import simcore
from flask_app.store import bm25, ranking
from flask_app.store.collection_core import CollectionCore
from flask_app.store.rows import Hit, Item, MetadataValue, Vectors, meta_key
from flask_app.store.unit import unit_rows

_log = logging.getLogger("edgerag.store")


class CollectionReads(CollectionCore):
    def matching_ids(self, metadata: Mapping[str, MetadataValue]) -> list[str]:
        """Ids whose metadata has every given key with exactly that value."""
        if not metadata:
            return [r[0] for r in self._db().execute("SELECT id FROM items")]
        parts, params = [], []
        for key, value in metadata.items():
            kind, stored = meta_key(value)
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
