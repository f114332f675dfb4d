"""Hybrid retrieval: dense (embedding) and lexical (BM25) rankings of a
collection fused by reciprocal rank, so that a passage naming the exact
term of the question (an option, a number, a name) is found even when its
embedding is not among the nearest.

The passages come back best first as hits whose score is their dense cosine
(computed for the ones only BM25 found).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app.rag.text import STOPWORDS, words
from flask_app.store import Collection, Hit

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
    collection: Collection,
    vector: Vector,
    question: str,
    k: int,
    *,
    metadata: Mapping[str, Any] | None = None,
    depth: int = 30,
) -> list[Hit]:
    """The k best passages by fused dense + BM25 rank, each ranking `depth` deep."""
    dense = collection.search(vector, depth, metadata=metadata)
    lexical = collection.lexical_search(lexical_words(question), depth, metadata=metadata)
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
