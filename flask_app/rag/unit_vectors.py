"""Vectors of evidence units, remembered across questions.

Ranking evidence units by meaning embeds every unit of the retrieved passages
(12-28 per question on the evaluation sets, ~13 ms each on 2 threads): most
of the pipeline's time before the model starts. Questions about the same
documents meet the same units again, so each embedder keeps the vectors of
the last `CAPACITY` unit texts it embedded for evidence (1.5 KB each for
384 dimensions: ~6 MB at most).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from flask_app.inference.embed import Embedder, Vectors

CAPACITY = 4096


class UnitVectors:
    """A bounded least-recently-used map of text → unit-length vector."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._rows: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def embed(self, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """`embedder.embed(texts)`, embedding only the texts not remembered."""
        with self._lock:
            known = {t: self._rows[t] for t in texts if t in self._rows}
            for text in known:
                self._rows.move_to_end(text)
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            rows = embedder.embed(missing)
            with self._lock:
                for text, row in zip(missing, rows, strict=True):
                    # a copy: a view would keep its whole batch's array alive
                    known[text] = self._rows[text] = row.copy()
                    self._rows.move_to_end(text)
                while len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
        if not texts:
            return np.zeros((0, embedder.dim), dtype=np.float32)
        return np.stack([known[t] for t in texts])


_BY_EMBEDDER: weakref.WeakKeyDictionary[Embedder, UnitVectors] = weakref.WeakKeyDictionary()
_BY_EMBEDDER_LOCK = threading.Lock()


def of(embedder: Embedder) -> UnitVectors:
    """The unit vectors remembered for `embedder` (one map per embedder, so a
    text is never given another model's vector)."""
    with _BY_EMBEDDER_LOCK:
        cache = _BY_EMBEDDER.get(embedder)
        if cache is None:
            cache = _BY_EMBEDDER[embedder] = UnitVectors()
        return cache


def remember_in(embedder: Embedder, vectors: UnitVectors) -> None:
    """From now on `embedder`'s unit vectors are remembered in `vectors`
    (benches/evidence_time.py times a fresh map against a warm one)."""
    with _BY_EMBEDDER_LOCK:
        _BY_EMBEDDER[embedder] = vectors


def embed(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """`embedder.embed(texts)`, through the vectors remembered for `embedder`.
    (A map cannot hold its embedder: a WeakKeyDictionary value that refers to
    its key keeps the key alive.)"""
    return of(embedder).embed(embedder, texts)
