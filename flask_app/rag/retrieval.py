"""Where passages come from: a `Retriever` gives the k best for a question.

Two kinds: `StoredCollection` (hybrid retrieval: dense and BM25 rankings of a
collection fused by reciprocal rank, so that a passage naming the exact term
of the question (an option, a number, a name) is found even when its
embedding is not among the nearest) and `RequestDocuments` (the documents one
request carries: embedded by the server's embedder, ranked by
`simcore.top_k` fused with term overlap, never stored).

Passages come back best first as hits whose score is their dense cosine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from flask_app import simcore
from flask_app.inference.embed import Embedder
from flask_app.rag import unit_vectors
from flask_app.rag.pipeline import cut_to_tokens
from flask_app.rag.text import STOPWORDS, term_set, terms, words
from flask_app.store import Hit
from flask_app.store.protocols import VectorCollection

Vector = npt.NDArray[np.float32]

# Reciprocal-rank fusion constant (the usual 60: ranks beyond a few dozen weigh little).
RRF_K = 60


def lexical_words(question: str) -> list[str]:
    """The question's content words as BM25 terms."""
    out: list[str] = []
    for w in words(question):
        if w not in STOPWORDS and w not in out:
            out.append(w)
    return out


def hybrid(
    collection: VectorCollection,
    vector: Vector,
    question: str,
    k: int,
    *,
    metadata: Mapping[str, Any] | None = None,
    only: AbstractSet[str] | None = None,
    depth: int = 30,
) -> list[Hit]:
    """The k best passages by fused dense + BM25 rank, each ranking `depth`
    deep, among the items matching `metadata` and in `only` (when given)."""
    dense = collection.search(vector, depth, metadata=metadata, only=only)
    lexical = collection.lexical_search(
        lexical_words(question), depth, metadata=metadata, only=only
    )
    fused: dict[str, float] = {}
    for rank, hit in enumerate(dense):
        fused[hit.id] = fused.get(hit.id, 0.0) + 1.0 / (RRF_K + rank + 1)
    for rank, (item_id, _) in enumerate(lexical):
        fused[item_id] = fused.get(item_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    best = sorted(fused, key=lambda i: -fused[i])[:k]
    by_id = {h.id: h for h in dense}
    missing = [i for i in best if i not in by_id]  # found by BM25 only
    rows = collection.items(missing) if missing else {}
    cosines = collection.cosines(vector, missing) if missing else {}
    out = []
    for item_id in best:
        if item_id in by_id:
            out.append(by_id[item_id])
        elif item_id in rows:
            row = rows[item_id]
            out.append(Hit(item_id, cosines.get(item_id, 0.0), row.text, row.metadata))
    return out


class Retriever(Protocol):
    def passages(self, question: str, k: int) -> list[Hit]:
        """The k best passages for `question`, best first."""
        ...

    def closeness(self, question: str, texts: Sequence[str]) -> list[float] | None:
        """The cosine of `question` and each text by the embedding model (None
        when this retriever cannot embed texts comparably)."""
        ...


def _cosines(embedder: Embedder, vector: Vector, texts: Sequence[str]) -> list[float]:
    limit = embedder.max_tokens - 2
    fitted = [cut_to_tokens(t, limit, embedder.count_tokens) or t[:200] for t in texts]
    rows = unit_vectors.embed(embedder, fitted)
    return [float(c) for c in rows @ vector]


@dataclass(frozen=True)
class StoredCollection:
    """A stored collection, searched with the question's vector."""

    collection: VectorCollection
    vector: Vector
    metadata: Mapping[str, Any] | None = None
    only: AbstractSet[str] | None = None  # item ids the caller may see (None: all)
    # the server's embedder, when it made the collection's vectors
    embedder: Embedder | None = None

    def passages(self, question: str, k: int) -> list[Hit]:
        if self.collection.info().dimension is None or (self.only is not None and not self.only):
            return []
        return hybrid(
            self.collection, self.vector, question, k, metadata=self.metadata, only=self.only
        )

    def closeness(self, question: str, texts: Sequence[str]) -> list[float] | None:
        embedder = self.embedder
        if embedder is None or self.collection.info().embedding_model != embedder.model_id:
            return None
        return _cosines(embedder, self.vector, texts)


@dataclass(frozen=True)
class Document:
    text: str
    metadata: dict[str, Any] | None = None


def _fuse(*rankings: Sequence[int]) -> list[int]:
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, i in enumerate(ranking):
            fused[i] = fused.get(i, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(fused, key=lambda i: (-fused[i], i))


class RequestDocuments:
    """The documents of one request; hit ids are their positions ("0", "1", ...).

    When all of them are wanted they come back in their own order without
    being embedded (score 0); otherwise dense ranking (each document embedded
    up to the embedder's token limit) is fused with term overlap.
    """

    def __init__(self, documents: Sequence[Document], embedder: Embedder | None) -> None:
        self.documents = list(documents)
        self.embedder = embedder
        self._query: tuple[str, Vector] | None = None

    def _vector(self, embedder: Embedder, question: str) -> Vector:
        if self._query is None or self._query[0] != question:
            self._query = (question, embedder.embed([question])[0])
        return self._query[1]

    def closeness(self, question: str, texts: Sequence[str]) -> list[float] | None:
        if self.embedder is None:
            return None
        return _cosines(self.embedder, self._vector(self.embedder, question), texts)

    def _hit(self, i: int, score: float) -> Hit:
        doc = self.documents[i]
        return Hit(str(i), score, doc.text, doc.metadata)

    def passages(self, question: str, k: int) -> list[Hit]:
        n = len(self.documents)
        if k >= n:
            return [self._hit(i, 0.0) for i in range(n)]
        wanted = set(terms(question)) - STOPWORDS
        overlap = [len(wanted & term_set(d.text)) for d in self.documents]
        lexical = sorted(range(n), key=lambda i: (-overlap[i], i))
        if self.embedder is None:
            return [self._hit(i, 0.0) for i in lexical[:k]]
        embedder = self.embedder
        limit = embedder.max_tokens - 2  # room for the model's [CLS] and [SEP]
        texts = [
            cut_to_tokens(d.text, limit, embedder.count_tokens) or d.text[:200]
            for d in self.documents
        ]
        rows = embedder.embed(texts)
        query = self._vector(embedder, question)
        order, cosines = simcore.top_k(rows, query, n)
        dense = [int(i) for i in order]
        score = {int(i): float(c) for i, c in zip(order, cosines, strict=True)}
        return [self._hit(i, score[i]) for i in _fuse(dense, lexical)[:k]]
