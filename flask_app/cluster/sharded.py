"""A collection split over shard actors: writes routed by a stable hash of
the item id, reads scattered to every shard and merged exactly.

Merging: every shard returns its own best k, so the best k of their union
are the collection's best k — the same ids and scores as one node. Items with
exactly equal scores on different shards are ordered by id (one node orders
them by insertion). BM25 scores are computed with the whole collection's
statistics (`flask_app.store.bm25`), so hybrid rankings equal one node's.
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from flask_app.cluster import actor_call
from flask_app.cluster.shard import Shard
from flask_app.cluster.shards import Shards
from flask_app.store import (
    CapacityError,
    CollectionInfo,
    Hit,
    Item,
    MetadataValue,
    VectorRejected,
    ranking,
)
from flask_app.store.collection import Vectors, check_settings
from flask_app.store.ranking import Candidate
from flask_app.store.unit import unit_rows

P = ParamSpec("P")
R = TypeVar("R")


def _invoke(method: Callable[..., Any], args: tuple[Any, ...], actor: Any) -> Any:
    """`method` of the `Shard` class, run by the shard's actor. Calls name the
    method itself (`Shard.info`), so mypy checks that it exists and, through
    `_all` and `_by_shard`, its arguments and its result."""
    return actor_call.call(actor, method, *args)


def shard_of(item_id: str, shards: int) -> int:
    """The shard holding `item_id`: stable across processes and restarts
    (Python's hash() is salted per process)."""
    digest = hashlib.blake2b(item_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


class ShardedCollection:
    """One collection over the cluster's shards; the same methods as `Collection`."""

    def __init__(self, shards: Shards, namespace: str, name: str) -> None:
        self.shards = shards
        self.namespace = namespace
        self.name = name

    def _run(self, method: Callable[..., Any], args: Mapping[int, tuple[Any, ...]]) -> list[Any]:
        """`method(namespace, name, *args[n])` on each shard n of `args`."""
        calls = {
            n: functools.partial(_invoke, method, (self.namespace, self.name, *shard_args))
            for n, shard_args in args.items()
        }
        return self.shards.call(calls, f"{self.namespace}/{self.name}")

    def _all(
        self,
        method: Callable[Concatenate[Shard, str, str, P], R],
        *args: P.args,
        **no_keywords: P.kwargs,
    ) -> list[R]:
        """`method(namespace, name, *args)` on every shard."""
        return self._run(method, dict.fromkeys(range(len(self.shards.actors)), args))

    def _split(self, ids: Sequence[str]) -> dict[int, list[int]]:
        """Positions of `ids` by the shard holding each."""
        parts: dict[int, list[int]] = {}
        count = len(self.shards.actors)
        for pos, item_id in enumerate(ids):
            parts.setdefault(shard_of(item_id, count), []).append(pos)
        return parts

    def _by_shard(
        self,
        ids: Sequence[str],
        method: Callable[Concatenate[Shard, str, str, Sequence[str], P], R],
        *args: P.args,
        **no_keywords: P.kwargs,
    ) -> list[R]:
        """`method(ns, name, <the shard's ids>, *args)` on each shard holding some of `ids`."""
        parts = self._split(ids)
        return self._run(method, {n: ([ids[p] for p in ps], *args) for n, ps in parts.items()})

    @property
    def index_kind(self) -> str:
        return self._all(Shard.index_kind)[0]

    def set_index(self, kind: str) -> None:
        self._all(Shard.set_index, kind)

    def info(self) -> CollectionInfo:
        return self._merged(self._all(Shard.info))

    @staticmethod
    def _merged(infos: list[CollectionInfo]) -> CollectionInfo:
        """The collection's info from its shards' (in shard order)."""
        fixed = next((i for i in infos if i.dimension is not None), infos[0])
        return CollectionInfo(
            fixed.dimension,
            fixed.mode,
            fixed.embedding_model,
            sum(i.items for i in infos),
            infos[0].index,
        )

    def __len__(self) -> int:
        return self.info().items

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
        """Insert or replace a batch; acknowledged once every shard holding a
        part of it has committed that part. A batch that fails may be applied
        on some shards: retrying it (an upsert replaces) makes it whole."""
        if len(ids) == 0:
            return len(self)
        # refused here as a whole: a shard refusing its part would leave the others'
        _, bad = unit_rows(vectors)
        if bad is not None:
            raise VectorRejected(
                f"vector {bad} (id {ids[bad]!r}) has a non-finite value or is too close "
                "to zero to have a direction"
            )
        per_shard = self._all(Shard.info)
        info = self._merged(per_shard)
        settings = {"dimension": info.dimension, "mode": info.mode}
        settings["embedding_model"] = info.embedding_model
        check_settings(settings, mode, int(vectors.shape[1]), embedding_model)
        if max_items is not None:
            present = len(self.items(list(dict.fromkeys(ids))))
            new = len(set(ids)) - present
            if info.items + new > max_items:
                raise CapacityError(info.items, max_items, new)
        parts = {
            n: (
                [ids[p] for p in positions],
                np.ascontiguousarray(vectors[positions]),
                [texts[p] for p in positions],
                [metadata[p] for p in positions],
                mode,
                embedding_model,
            )
            for n, positions in self._split(ids).items()
        }
        # each shard written answers its new count: the total needs no further round
        counts = dict(zip(parts, self._run(Shard.upsert, parts), strict=True))
        return sum(counts.get(n, i.items) for n, i in enumerate(per_shard))

    def delete(self, ids: Sequence[str]) -> tuple[int, list[str]]:
        unique = list(dict.fromkeys(ids))
        results = self._by_shard(unique, Shard.delete)
        missing = {i for _, gone in results for i in gone}
        return sum(n for n, _ in results), [i for i in unique if i in missing]

    def matching_ids(self, metadata: Mapping[str, MetadataValue]) -> list[str]:
        parts = self._all(Shard.matching_ids, dict(metadata))
        return sorted(i for part in parts for i in part)

    def _scatter(
        self,
        method: Callable[..., Any],
        only: AbstractSet[str] | None,
        *args: Any,
        every_shard: bool = False,
    ) -> list[Any]:
        """`method` on every shard that may hold a result (`every_shard`: on
        all), each given its share of `only`."""
        count = len(self.shards.actors)
        shares: dict[int, set[str] | None] = dict.fromkeys(range(count))
        if only is not None:
            shares = {n: set() for n in range(count)}
            for item_id in only:
                shares[shard_of(item_id, count)].add(item_id)  # type: ignore[union-attr]
            if not every_shard:
                shares = {n: s for n, s in shares.items() if s}
        return self._run(method, {n: (*args, share) for n, share in shares.items()})

    def search(
        self,
        query: Vectors,
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[Hit]:
        parts: list[tuple[int, list[Hit], list[Candidate]]] = self._scatter(
            Shard.search_rescorable, only, query, k, dict(metadata) if metadata else None
        )
        if not parts:
            return []
        # as one collection ranks (`ranking`): its best k × oversample by the
        # approximate score are among its shards' own, then the best k of
        # those by the exact score
        oversample = max(part[0] for part in parts)
        found = {h.id: h for _, hits, _ in parts for h in hits}
        every = [c for _, _, part in parts for c in part]
        top = ranking.best(ranking.cut(every, k * oversample), k)
        missing = [i for i, _, _ in top if i not in found]
        if missing:  # kept by the merge, though not among its own shard's top k
            found.update(
                {i: Hit(i, 0.0, r.text, r.metadata) for i, r in self.items(missing).items()}
            )
        return [
            Hit(i, exact, found[i].text, found[i].metadata) for i, _, exact in top if i in found
        ]

    def lexical_search(
        self,
        words: Sequence[str],
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[tuple[str, float]]:
        """BM25 with the whole collection's statistics (two rounds: every
        shard's statistics summed, then every shard's best rows rescored with
        them), filtered as `Collection.lexical_search` filters."""
        if not words:
            return []
        words = list(words)
        parts = self._all(Shard.lexical_stats, words)
        total = functools.reduce(operator.add, parts)
        if total.rows == 0:
            return []
        fetch = k if not metadata and only is None else k * 10
        # every shard, even one holding none of `only`: its rows take places
        # among the best `fetch` as they would in one collection
        candidates: list[list[tuple[str, float, bool]]] = self._scatter(
            Shard.lexical_candidates,
            only,
            words,
            fetch,
            total,
            dict(metadata) if metadata else None,
            every_shard=True,
        )
        best = sorted((c for part in candidates for c in part), key=lambda c: (-c[1], c[0]))
        return [(i, s) for i, s, allowed in best[:fetch] if allowed][:k]

    def cosines(self, query: Vectors, ids: Sequence[str]) -> dict[str, float]:
        parts = self._by_shard(ids, Shard.cosines_of, query)
        return {i: s for part in parts for i, s in part.items()}

    def items(self, ids: Sequence[str]) -> dict[str, Item]:
        parts = self._by_shard(ids, Shard.items)
        return {i: item for part in parts for i, item in part.items()}

    def export(
        self, *, limit: int | None, after: str | None, with_vectors: bool
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Items in id order after `after`: each shard's first `limit` after
        it hold the collection's first `limit`."""
        parts = self._all(Shard.export, limit, after, with_vectors)
        merged = sorted((item for items, _ in parts for item in items), key=lambda i: i["id"])
        if limit is None:
            return merged, None
        more = len(merged) > limit or any(cursor is not None for _, cursor in parts)
        page = merged[:limit]
        return page, (page[-1]["id"] if more and page else None)
