"""What the surfaces need from a collection and from the store holding them.

`Collection`/`Store` (one process) and `ShardedCollection`/`ClusterStore`
(shards on Ray actors, `flask_app.cluster`) both provide it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from flask_app.store.collection import CollectionInfo, Hit, Item, MetadataValue, Vectors


class VectorCollection(Protocol):
    @property
    def index_kind(self) -> str: ...
    def set_index(self, kind: str) -> None: ...
    def info(self) -> CollectionInfo: ...
    def __len__(self) -> int: ...
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
    ) -> int: ...
    def delete(self, ids: Sequence[str]) -> tuple[int, list[str]]: ...
    def matching_ids(self, metadata: Mapping[str, MetadataValue]) -> list[str]: ...
    def search(
        self,
        query: Vectors,
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[Hit]: ...
    def lexical_search(
        self,
        words: Sequence[str],
        k: int,
        *,
        metadata: Mapping[str, MetadataValue] | None = None,
        only: AbstractSet[str] | None = None,
    ) -> list[tuple[str, float]]: ...
    def cosines(self, query: Vectors, ids: Sequence[str]) -> dict[str, float]: ...
    def items(self, ids: Sequence[str]) -> dict[str, Item]: ...
    def export(
        self, *, limit: int | None, after: str | None, with_vectors: bool
    ) -> tuple[list[dict[str, Any]], str | None]: ...


class CollectionStore(Protocol):
    EDGE_NAMESPACE: str
    EDGE_COLLECTION: str

    def collection(self, namespace: str, name: str) -> VectorCollection: ...
    def edge(self) -> VectorCollection: ...
    def drop(self, namespace: str, name: str) -> None: ...
    def index_kind(self, namespace: str, name: str) -> str: ...
    def failures(self) -> dict[str, str]: ...
    def close(self) -> None: ...
